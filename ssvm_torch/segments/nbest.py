"""The n best segmentations of every row: the semi-Markov max-plus recursion with a list of the n best partial
scores per (end position, label) instead of one (the k-best Viterbi of Nilsson & Goldberger 2001 on segments),
as batched torch ops on the scores' device.

alpha[e, k] holds the n best scores of segmentations of positions 0..e whose last segment ends at e with label
k; its candidates are every (length l+1, previous label k', rank r) with

    S[e - l, l, k] + trans[k, k'] + alpha[e - l - 1, k'][r]       (first[k] + S[0, e, k] for the first segment),

written as one recursion by a start state: a label K before position 0 whose list holds the single score 0 and
whose "transition" into k is first[k]. Each step keeps the top n of L (K + 1) n candidates per (row, label) with
its flat index as the back pointer; distinct (l, k', r) choices give distinct segmentations, so the n lists
hold n different segmentations each. O(T L K^2 n) work and O(T K n) memory per row.
"""
from __future__ import annotations

import torch


def nbest(S: torch.Tensor, first: torch.Tensor, last: torch.Tensor, trans: torch.Tensor, lengths: torch.Tensor,
          n: int):
    """(segments (B, n, T) int64, scores (B, n)) of the n best segmentations of every row in non-increasing score
    order (ties in any order); a rank beyond a row's number of finite-score segmentations is all -1 with score
    -inf. An empty row's one segmentation (nothing) scores 0. No gradient."""
    S, first, last, trans = (x.detach() for x in (S, first, last, trans))
    B, T, L, K = S.shape
    dev, neg = S.device, float("-inf")
    if B == 0:
        return torch.full((0, n, T), -1, dtype=torch.int64, device=dev), S.new_zeros(0, n)
    alpha = S.new_full((B, T + 1, K + 1, n), neg)            # alpha[:, e + 1]: segmentations of 0..e
    alpha[:, 0, K, 0] = 0.0                                  # the start state
    into = torch.cat([trans, first[:, None]], 1)             # (K, K + 1): trans[k, k'], first[k] from the start
    back = torch.zeros(B, T, K, n, dtype=torch.int64, device=dev)
    ls = torch.arange(L, device=dev)
    for e in range(T):
        s = e - ls                                           # the segments' first positions; s < 0: no segment
        ok = s >= 0
        seg = S[:, s.clamp(min=0), ls, :].masked_fill(~ok[None, :, None], neg)       # (B, L, K)
        prev = alpha[:, s.clamp(min=0)]                                             # (B, L, K + 1, n)
        cand = seg.permute(0, 2, 1)[:, :, :, None, None] + into[None, :, None, :, None] + prev[:, None]
        top = cand.reshape(B, K, -1).topk(n, dim=2)                                # (B, K, n) of L (K+1) n
        alpha[:, e + 1, :K] = top.values
        back[:, e] = top.indices
    final = alpha[torch.arange(B, device=dev), lengths, :K] + last[None, :, None]  # (B, K, n)
    scores, pick = final.reshape(B, -1).topk(n, dim=1)                         # of K n >= n candidates
    empty = lengths == 0
    scores = torch.where(empty[:, None], torch.where(torch.arange(n, device=dev) == 0, 0.0, neg).to(S.dtype),
                         scores)
    alive = torch.isfinite(scores) & ~empty[:, None]
    e = (lengths[:, None] - 1).expand(B, n).clone()
    k, r = pick // n, pick % n
    segments = torch.full((B, n, T), -1, dtype=torch.int64, device=dev)
    rows = torch.arange(B, device=dev)[:, None].expand(B, n)
    ranks = torch.arange(n, device=dev)[None, :].expand(B, n)
    for _ in range(T):                                       # one segment per step, from each row's end
        if not bool(alive.any()):
            break
        idx = back[rows, e.clamp(min=0), k.clamp(max=K - 1), r]
        l, rest = idx // ((K + 1) * n), idx % ((K + 1) * n)
        start = e - l
        segments[rows[alive], ranks[alive], start[alive]] = k[alive]
        k, r, e = rest // n, rest % n, start - 1
        alive = alive & (k < K)
    return segments, scores
