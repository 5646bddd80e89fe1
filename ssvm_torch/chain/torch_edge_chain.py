"""The torch backend of :mod:`ssvm_torch.chain.edge_chain` (any device; the reference of its compiled kernels):
scans over the positions of the potentials phi (B, N-1, K, K) [position, next, previous] for log Z, the best and
the n best labelings, rows past their length carrying their state unchanged, log-sum-exp by the chain package's
NaN-free :func:`~ssvm_torch.chain.information.lse` (a -inf move has a zero gradient, not 0 / 0). Samples, entropy
and KL come from :mod:`ssvm_torch.chain.information` with the edges as per-position moves. Arguments are checked by
the caller."""
from __future__ import annotations

import torch

from .information import lse

NEG_INF = float("-inf")


def log_partition_scan(edges: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z (B,) by a log-space scan (differentiable by autograd; 0 for an empty row): alpha_{n+1}[a] =
    logsumexp_b alpha_n[b] + phi[n, a, b], alpha_0 = 0; rows past their length keep their alpha (and read 0, not
    their potentials, so that their -inf moves leave no NaN in the gradient)."""
    B, N1, K, _ = edges.shape
    alpha = edges.new_zeros(B, K)
    for n in range(N1):
        live = (n + 1 < lengths)[:, None]
        step = lse(alpha[:, None, :] + torch.where(live[..., None], edges[:, n], torch.zeros_like(edges[:, n])))
        alpha = torch.where(live, step, alpha)
    logz = lse(alpha)
    return torch.where(lengths > 0, logz, torch.zeros_like(logz))


def decode_scan(edges: torch.Tensor, lengths: torch.Tensor):
    """(tags (B, N), -1 past each row's length; best scores (B,)): max-sum over the positions, then the labels read
    back; rows past their end move by the identity, so their last label repeats (and is masked)."""
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
    """(tags (B, n, N), scores (B, n)): the n best labelings by the n-best recursion, each label's n best
    (previous label, rank) extensions by ``topk``; -1 / -inf for the ranks a row lacks."""
    B, N1, K, _ = edges.shape
    dev = edges.device
    D = edges.new_full((B, K, n), NEG_INF)
    D[:, :, 0] = 0.0
    stay = (torch.arange(K, device=dev)[:, None] * n + torch.arange(n, device=dev)[None, :]).expand(B, K, n)
    back = []
    for m in range(N1):
        cand = (D[:, None, :, :] + edges[:, m, :, :, None]).reshape(B, K, K * n)   # [next, (prev, rank)]
        vals, idx = cand.topk(n, -1)                                   # K n >= n candidates; -inf where fewer
        live = (m + 1 < lengths)[:, None, None]
        D = torch.where(live, vals, D)
        back.append(torch.where(live, idx, stay))              # rows past their end keep (label, rank)
    scores, flat = D.reshape(B, K * n).topk(n, -1)
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
