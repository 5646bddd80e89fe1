"""The numba n-best Viterbi of the chain package (CPU, float64 inside): the n highest-scoring labelings
of every row of a padded batch under a mask, conventions of :mod:`ssvm_torch.chain`.

The recursion keeps, for every position s and tag k, the n best scores of the prefixes ending in k
(sorted, -inf where fewer exist) with a back-pointer (previous tag, its rank) each: the n best
extensions into k are the n best of {D[s-1, j, r] + trans[k, j]} over (j, r), found by an n-step
merge of the K sorted lists (O(n K) per (s, k), so O(L K^2 n) per row). Distinct (tag, rank)
pointers give distinct labelings; a labeling with a -inf score (forbidden by a constraint) is never
returned, so a row with fewer than n allowed labelings gets fewer. Ties go to the lower tag.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .numba_masked import masked_positions


@nb.njit(cache=True, nogil=True)
def merge_best(D, s, n, add, ptr, K):
    """The best remaining (score, tag j) of D[s, j, ptr[j]] + add[j] over the K sorted lists of
    position s (tag -1 when every list is spent or only -inf is left)."""
    best = -np.inf
    bj = -1
    for j in range(K):
        p = ptr[j]
        if p < n:
            v = D[s, j, p] + add[j]
            if v > best:
                best = v
                bj = j
    return best, bj


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_nbest(E, mask, start, end, trans, n, out, scores):
    """The n best labelings of every row of E (B, T, K) under ``mask``: out (B, n, T) gets the tags at
    the masked-on positions (the caller fills it with -1), scores (B, n) their scores in
    non-increasing order (the caller fills it with -inf; an empty row has one labeling, of score 0).
    start / end (K,) and trans (K, K) [next, prev] are float64 and hold any constraint penalties."""
    B, T, K = E.shape
    for b in nb.prange(B):
        pos = np.empty(T, dtype=np.int64)
        L = masked_positions(mask, b, pos)
        if L == 0:
            scores[b, 0] = 0.0
            continue
        D = np.full((L, K, n), -np.inf)
        SP = np.zeros((L, K, n), dtype=np.int64)
        SR = np.zeros((L, K, n), dtype=np.int64)
        ptr = np.empty(K, dtype=np.int64)
        for k in range(K):
            D[0, k, 0] = E[b, pos[0], k] + start[k]
        for s in range(1, L):
            for k in range(K):
                ptr[:] = 0
                u = E[b, pos[s], k]
                for r in range(n):
                    best, bj = merge_best(D, s - 1, n, trans[k], ptr, K)
                    if bj < 0:
                        break
                    D[s, k, r] = best + u
                    SP[s, k, r] = bj
                    SR[s, k, r] = ptr[bj]
                    ptr[bj] += 1
        ptr[:] = 0
        for r in range(n):
            best, bk = merge_best(D, L - 1, n, end, ptr, K)
            if bk < 0:
                break
            scores[b, r] = best
            k, rank = bk, ptr[bk]
            ptr[bk] += 1
            for s in range(L - 1, -1, -1):
                out[b, r, pos[s]] = k
                if s > 0:
                    k, rank = SP[s, k, rank], SR[s, k, rank]
