"""The torch backend of :mod:`ssvm_torch.chain.edge_chain` (any device; the reference of its compiled kernels):
scans over the positions of the potentials phi (B, N-1, K, K) [position, next, previous], rows past their length
carrying their state unchanged, log-sum-exp by the chain package's NaN-free :func:`~ssvm_torch.chain.information.lse`
(a -inf move has a zero gradient, not 0 / 0). Arguments are checked by the caller."""
from __future__ import annotations

import torch

from .information import lse

NEG_INF = float("-inf")


def log_partition_scan(edges: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z by a log-space scan over the positions (any device, differentiable by autograd): alpha_{n+1}[a] =
    logsumexp_b alpha_n[b] + phi[n, a, b], rows past their length keeping their alpha (and reading 0, not their
    potentials, so that their -inf moves leave no NaN in the gradient)."""
    B, N1, K, _ = edges.shape
    alpha = edges.new_zeros(B, K)
    for n in range(N1):
        live = (n + 1 < lengths)[:, None]
        step = lse(alpha[:, None, :] + torch.where(live[..., None], edges[:, n], torch.zeros_like(edges[:, n])))
        alpha = torch.where(live, step, alpha)
    logz = lse(alpha)
    return torch.where(lengths > 0, logz, torch.zeros_like(logz))


def decode_scan(edges: torch.Tensor, lengths: torch.Tensor):
    B, N1, K, _ = edges.shape
    delta = edges.new_zeros(B, K)
    back = []
    for n in range(N1):
        best, arg = (delta[:, None, :] + edges[:, n]).max(-1)        # max over prev: the first maximum on ties
        live = (n + 1 < lengths)[:, None]
        delta = torch.where(live, best, delta)
        back.append(torch.where(live, arg, torch.arange(K, device=edges.device)[None, :]))
    score, last = delta.max(-1)
    tags = [last]
    for arg in reversed(back):
        tags.append(arg.gather(1, tags[-1][:, None])[:, 0])
    tags = torch.stack(tags[::-1], 1)                                # (B, N); the identity moves repeat the last
    inside = torch.arange(N1 + 1, device=edges.device)[None, :] < lengths[:, None]
    tags = torch.where(inside, tags, torch.full_like(tags, -1))
    return tags, torch.where(lengths > 0, score, torch.zeros_like(score))


def nbest_scan(edges: torch.Tensor, lengths: torch.Tensor, n: int):
    B, N1, K, _ = edges.shape
    dev = edges.device
    D = edges.new_full((B, K, n), NEG_INF)
    D[:, :, 0] = 0.0
    stay = (torch.arange(K, device=dev)[:, None] * n + torch.arange(n, device=dev)[None, :]).expand(B, K, n)
    back = []
    for m in range(N1):
        cand = (D[:, None, :, :] + edges[:, m, :, :, None]).reshape(B, K, K * n)   # [next, (prev, rank)]
        vals, idx = cand.topk(min(n, K * n), -1)
        if vals.shape[-1] < n:
            vals = torch.cat([vals, vals.new_full((B, K, n - vals.shape[-1]), NEG_INF)], -1)
            idx = torch.cat([idx, idx.new_zeros(B, K, n - idx.shape[-1])], -1)
        live = (m + 1 < lengths)[:, None, None]
        D = torch.where(live, vals, D)
        back.append(torch.where(live, idx, stay))              # rows past their end keep (label, rank)
    scores, flat = D.reshape(B, K * n).topk(min(n, K * n), -1)
    if scores.shape[-1] < n:
        scores = torch.cat([scores, scores.new_full((B, n - scores.shape[-1]), NEG_INF)], -1)
        flat = torch.cat([flat, flat.new_zeros(B, n - flat.shape[-1])], -1)
    tags = [flat // n]
    for idx in reversed(back):
        flat = idx.reshape(B, K * n).gather(1, flat)
        tags.append(flat // n)
    tags = torch.stack(tags[::-1], 2)                            # (B, n, N)
    inside = torch.arange(N1 + 1, device=dev)[None, None, :] < lengths[:, None, None]
    tags = torch.where(inside & torch.isfinite(scores)[..., None], tags, torch.full_like(tags, -1))
    empty = (lengths == 0)[:, None] & (torch.arange(n, device=dev)[None, :] == 0)
    scores = torch.where(lengths[:, None] == 0, torch.where(empty, 0.0, NEG_INF), scores)
    return tags, scores


def sample_scan(phi: torch.Tensor, lengths: torch.Tensor, n: int, generator=None):
    """(draws (B, n, N) int64, -1 beyond each row's length; log Z (B,)): forward messages alpha_n in log space, then
    z_{L-1} drawn from alpha_{L-1} and each z_n from alpha_n[c] + phi[n, z_{n+1}, c], by Gumbel-max on float64
    uniforms of ``torch.rand(generator=generator)``. A row whose log Z is -inf draws arbitrary labels: the caller
    refuses it."""
    B, N1, K, _ = phi.shape
    alpha = [phi.new_zeros(B, K)]
    for m in range(N1):
        step = lse(alpha[-1][:, None, :] + phi[:, m])
        alpha.append(torch.where((m + 1 < lengths)[:, None], step, alpha[-1]))
    logz = torch.where(lengths > 0, lse(alpha[-1]), torch.zeros(B, dtype=phi.dtype, device=phi.device))
    rows = torch.arange(B, device=phi.device).repeat_interleave(n)
    L = lengths[rows]
    out = torch.full((B * n, N1 + 1), -1, dtype=torch.int64, device=phi.device)
    nxt = torch.zeros(B * n, dtype=torch.int64, device=phi.device)
    for m in range(N1, -1, -1):
        logits = alpha[m][rows]
        if m < N1:                                                  # the move into the label drawn at m + 1
            into = phi[rows, m].gather(1, nxt[:, None, None].expand(-1, 1, K))[:, 0]
            logits = torch.where((m < L - 1)[:, None], logits + into, logits)
        u = torch.rand(logits.shape, dtype=torch.float64, device=phi.device, generator=generator)
        tag = (logits - torch.log(-torch.log(u))).argmax(1)
        take = m < L
        out[:, m] = torch.where(take, tag, out[:, m])
        nxt = torch.where(take, tag, nxt)
    return out.view(B, n, N1 + 1), logz
