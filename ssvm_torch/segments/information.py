"""Entropy, KL divergence and exact samples of the semi-Markov CRF of segment scores (torch, any device,
differentiable by autograd), the recursion of :mod:`ssvm_torch.segments.torch_semimarkov` read backwards.

With alpha[e, k] the log-sum over segmentations of positions 0..e-1 whose last segment has label k and enter[s, k]
the log-sum over those whose next segment (label k) starts at s (enter[0] = first), the posterior is a chain of
backward choices: the last label k ~ W(k) = exp(alpha[n, k] + last[k] - log Z); the segment ending before e with
label k has length l + 1 ~ u(l | e, k) = exp(enter[e-l-1, k] + S[e-l-1, l, k] - alpha[e, k]); a segment of label k
starting at s > 0 follows label k' ~ v(k' | s, k) = exp(alpha[s, k'] + trans[k, k'] - enter[s, k]). So -log p(y)
is a sum of one term per choice and the entropy is one forward recursion of expected prefix terms (the normalized
entropy semiring, as :mod:`ssvm_torch.chain.information` for tags):

    He[0, k] = 0,   Ha[e, k] = sum_l u (He[e-l-1, k] - log u),   He[s, k] = sum_k' v (Ha[s, k'] - log v),
    H = sum_k W(k) (Ha[n, k] - log W(k));

KL(p || q) sums E_p[log p-choice - log q-choice] the same way with q's own messages; :func:`sample_rows` makes the
same choices at random from the end of each row. Choices of zero weight contribute exactly 0 (no NaN from -inf
scores: the log-sums of :func:`ssvm_torch.segments.torch_semimarkov.logsumexp`); a KL made +inf by what q forbids
keeps a finite gradient (:func:`ssvm_torch.chain.information.expect_divergence`).
"""
from __future__ import annotations

import torch

from ..chain.information import expect_divergence
from .torch_semimarkov import end_indexed, logsumexp


def _choice(z: torch.Tensor, dim: int):
    """(the log-sum over ``dim``, the log weights of the choices, the weights): 0 weight where z is -inf."""
    a = logsumexp(z, dim)
    shift = torch.where(torch.isfinite(a), a, torch.zeros_like(a)).unsqueeze(dim)
    logw = z - shift
    return a, logw, torch.exp(logw)


def _expect(w: torch.Tensor, term: torch.Tensor, dim: int) -> torch.Tensor:
    """sum over ``dim`` of w * term, a zero weight contributing 0 whatever its term."""
    return (w * torch.where(w > 0, term, torch.zeros_like(term))).sum(dim)


def _messages(S, first, trans, lengths):
    """The forward pass: per end e = 1..T the length choice (log-sum alpha[e], log u, u: (B, m, K)) and per start
    s = 0..T-1 the label choice into it (enter[s], log v, v: (B, K, K) [next, prev]; None at s = 0)."""
    B, T, L, K = S.shape
    E = end_indexed(S, lengths)
    enters, label_choices, length_choices = [first.expand(B, K)], [None], []
    for e in range(1, T + 1):
        m = min(L, e)
        alpha, logu, u = _choice(torch.stack(enters[e - 1::-1][:m], 1) + E[:, e - 1, :m], 1)
        length_choices.append((alpha, logu, u))
        if e < T:
            enter, logv, v = _choice(alpha[:, None, :] + trans[None], 2)
            enters.append(enter)
            label_choices.append((enter, logv, v))
    return length_choices, label_choices


def _final_choice(length_choices, last, lengths):
    alpha = torch.stack([c[0] for c in length_choices], 1)                   # (B, T, K)
    K = alpha.shape[2]
    at_end = alpha.gather(1, (lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, K))[:, 0]
    return _choice(at_end + last, 1)


def information_rows(S, first, last, trans, lengths, other=None):
    """(entropy H(p) (B,), KL(p || q) (B,) or None) of each row's semi-Markov CRF (0 for an empty row; NaN for a
    row without a segmentation, which the callers refuse by name), differentiable. ``other`` = (S_q, first, last,
    trans) of q on the same rows. Conventions of :mod:`ssvm_torch.segments` (trans [next, prev])."""
    B, T, L, K = S.shape
    if T == 0:
        zero = S.new_zeros(B)
        return zero, (zero if other is not None else None)
    p_len, p_lab = _messages(S, first, trans, lengths)
    q_len, q_lab = _messages(other[0], other[1], other[3], lengths) if other is not None else (None, None)
    He, De = [S.new_zeros(B, K)], [S.new_zeros(B, K)]
    Ha, Da = [], []
    for e in range(1, T + 1):
        m = min(L, e)
        _, logu, u = p_len[e - 1]
        prev_h = torch.stack(He[e - 1::-1][:m], 1)                            # He[e-l-1] for l = 0..m-1
        Ha.append(_expect(u, prev_h - logu, 1))
        if other is not None:
            Da.append(expect_divergence(u, torch.stack(De[e - 1::-1][:m], 1) + logu - q_len[e - 1][1], 1))
        if e < T:
            _, logv, v = p_lab[e]
            He.append(_expect(v, Ha[-1][:, None, :] - logv, 2))
            if other is not None:
                De.append(expect_divergence(v, Da[-1][:, None, :] + logv - q_lab[e][1], 2))
    logz, logW, W = _final_choice(p_len, last, lengths)
    pick = lambda xs: torch.stack(xs, 1).gather(                               # noqa: E731
        1, (lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, K))[:, 0]
    nan = torch.full_like(logz, float("nan"))
    empty, some = lengths == 0, torch.isfinite(logz)
    H = torch.where(empty, torch.zeros_like(nan), torch.where(some, _expect(W, pick(Ha) - logW, 1), nan))
    if other is None:
        return H, None
    _, logWq, _ = _final_choice(q_len, other[2], lengths)
    D = torch.where(empty, torch.zeros_like(nan), torch.where(some, expect_divergence(W, pick(Da) + logW - logWq, 1),
                                                               nan))
    return H, D


@torch.no_grad()
def sample_rows(S, first, last, trans, lengths, n: int, generator=None):
    """(segmentations (B, n, T) int64: the label at each drawn segment's first position, -1 elsewhere; log Z (B,)):
    n exact samples of each row's semi-Markov CRF, the backward choices of the module docstring drawn by Gumbel-max
    (uniforms from ``torch.rand(generator=generator)``, float64). A row whose log Z is -inf has no segmentation and
    draws nothing meaningful: the callers refuse it."""
    B, T, L, K = S.shape
    dev = S.device
    out = torch.full((B * n, T + 1), -1, dtype=torch.int64, device=dev)      # column T takes finished rows' writes
    if T == 0:
        return out[:, :T].view(B, n, T), S.new_zeros(B)
    length_choices, label_choices = _messages(S.detach(), first.detach(), trans.detach(), lengths)
    logz, logW, _ = _final_choice(length_choices, last.detach(), lengths)
    rows = torch.arange(B, device=dev).repeat_interleave(n)
    logu_all = torch.full((B, T, L, K), float("-inf"), dtype=torch.float64, device=dev)
    for e, (_, logu, _) in enumerate(length_choices):
        logu_all[:, e, :logu.shape[1]] = logu
    logv_all = torch.stack([c[1] if c is not None else torch.zeros(B, K, K, device=dev, dtype=S.dtype)
                            for c in label_choices], 1).to(torch.float64)     # (B, T, K, K) [start, next, prev]

    def draw(logits):
        u = torch.rand(logits.shape, dtype=torch.float64, device=dev, generator=generator)
        return (logits - torch.log(-torch.log(u))).argmax(-1)

    k = draw(logW[rows].to(torch.float64))
    pos = lengths[rows].clone()                                              # the current segment ends before pos
    active = pos > 0
    for _ in range(int(lengths.max()) if B else 0):
        l = draw(logu_all[rows, (pos - 1).clamp(min=0), :, k])                 # (B n, L) over lengths
        start = (pos - l - 1).clamp(min=0)
        out[torch.arange(B * n, device=dev), torch.where(active, start, T)] = torch.where(active, k, -1)
        k = torch.where(active & (start > 0), draw(logv_all[rows, start, k]), k)
        active = active & (start > 0)
        pos = start
    return out[:, :T].view(B, n, T), torch.where(lengths > 0, logz, torch.zeros_like(logz))
