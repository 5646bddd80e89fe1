"""The compiled n best segmentations (CPU; float64 charts): the recursion of :mod:`ssvm_torch.segments.nbest`
row by row, one row per thread.

alpha[e + 1, k] keeps the n best scores of segmentations of positions 0..e whose last segment ends at e with label
k, sorted, -inf where fewer exist; alpha[0] is the start state (label K, one score 0) whose transition into k is
first[k]. A (length, previous label) pair's candidates S[e-l, l, k] + into[k, k'] + alpha[e-l, k'][r] come in
non-increasing order of r, so their scan stops at the first one that cannot enter the current list: with the
lists sorted, most pairs cost one comparison. Back pointers are the flat index (l, k', r) of
:mod:`ssvm_torch.segments.nbest`, so both backends read their lists back the same way.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched


@nb.njit(cache=True, nogil=True)
def _insert(vals, idxs, v, i):
    """Put (v, i) into the descending list vals / idxs (its last entry dropped); v > vals[-1]."""
    j = vals.shape[0] - 1
    while j > 0 and vals[j - 1] < v:
        vals[j] = vals[j - 1]
        idxs[j] = idxs[j - 1]
        j -= 1
    vals[j] = v
    idxs[j] = i


@nb.njit(cache=True, nogil=True)
def nbest_row(S, first, last, trans, length, n, segments, scores):
    """The n best segmentations of one row of ``length`` positions into ``segments`` (n, T) (pre-filled -1) and
    ``scores`` (n,) (pre-filled -inf)."""
    L, K = S.shape[1], S.shape[2]
    if length == 0:
        scores[0] = 0.0
        return
    alpha = np.full((length + 1, K + 1, n), -np.inf)
    alpha[0, K, 0] = 0.0
    back = np.zeros((length, K, n), dtype=np.int64)
    vals = np.empty(n)
    idxs = np.empty(n, dtype=np.int64)
    for e in range(length):
        for k in range(K):
            vals[:] = -np.inf
            idxs[:] = 0
            for l in range(min(L, e + 1)):
                s = e - l
                seg = S[s, l, k]
                if seg == -np.inf:
                    continue
                for kp in range(K + 1):
                    base = seg + (first[k] if kp == K else trans[k, kp])
                    if base == -np.inf:
                        continue
                    for r in range(n):
                        v = base + alpha[s, kp, r]
                        if not v > vals[n - 1]:
                            break                      # the rest of this list scores no more
                        _insert(vals, idxs, v, (l * (K + 1) + kp) * n + r)
            alpha[e + 1, k] = vals
            back[e, k] = idxs
    vals[:] = -np.inf
    for k in range(K):
        for r in range(n):
            v = alpha[length, k, r] + last[k]
            if not v > vals[n - 1]:
                break
            _insert(vals, idxs, v, k * n + r)
    for j in range(n):
        if vals[j] == -np.inf:
            break
        scores[j] = vals[j]
        e, k, r = length - 1, idxs[j] // n, idxs[j] % n
        while True:
            i = back[e, k, r]
            l, rest = i // ((K + 1) * n), i % ((K + 1) * n)
            segments[j, e - l] = k
            if rest // n == K:
                break
            e, k, r = e - l - 1, rest // n, rest % n


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def _nbest_rows(S, first, last, trans, lengths, n, segments, scores):
    for b in nb.prange(S.shape[0]):
        nbest_row(S[b], first, last, trans, lengths[b], n, segments[b], scores[b])


def nbest_batch(S, first, last, trans, lengths, n: int):
    """(segments (B, n, T) int64, scores (B, n) float64) of numpy float scores, ``lengths`` (B,)."""
    B, T = S.shape[0], S.shape[1]
    segments = np.full((B, n, T), -1, dtype=np.int64)
    scores = np.full((B, n), -np.inf)
    _nbest_rows(S.astype(np.float64), first.astype(np.float64), last.astype(np.float64), trans.astype(np.float64),
                lengths.astype(np.int64), n, segments, scores)
    return segments, scores
