"""Compiled k best binary trees: Huang & Chiang 2005's lazy k-best ("Better k-best parsing", Algorithm 3) on the
CKY chart of :func:`ssvm_torch.spans.numba_cky.cky_best`, the span package's counterpart of
:mod:`ssvm_torch.trees.numba_kbest` (read that module first: the same lazy scheme on one item type).

A span (w, i) of two or more words has the derivations (split u, rank a of (u, i), rank b of (w - u, i + u)),
scoring S[i, i + w] + left + right; a one-word span has one. The max-plus pass (vectorized over a width's
starts, ties to the smallest split as cky_best) gives every span its best; a span's j-th best is made when asked
for: its heap is seeded with the best (0, 0) of its k best other splits, each request pushes the successors
(a, b+1), and (a+1, 0) when b = 0, of its last derivation -- asking the children for their next entries on an
explicit request stack -- and pops the best. A binary tree has one derivation, so the k best derivations are k
different trees. Rank 0 is dense; the heaps and ranks 1..k-1 live in pool slots handed out on first use (a run
that needs more slots than the first pool holds restarts its lazy part with one per span).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..trees.numba_kbest import heap_pop, heap_push, keep_best

NEG_INF = -np.inf
#: max-reductions vectorize once NaN is ruled out (the scores are checked first), as in numba_cky
MAXES = {"nnan", "nsz"}


@nb.njit(cache=True, nogil=True, inline="always")
def _value(k, V0, LV, slot, r, cell):
    """The r-th best score of a span's list."""
    if r == 0:
        return V0[cell]
    return LV[slot[cell] * (k - 1) + r - 1]


@nb.njit(cache=True, nogil=True, inline="always")
def _derivation(k, D0, LD, LA, LB, slot, cell, r):
    """(u, a, b) of a span's r-th best derivation."""
    if r == 0:
        return D0[cell], 0, 0
    at = slot[cell] * (k - 1) + r - 1
    return LD[at], LA[at], LB[at]


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def _best_pass(S, n, N1, V0, D0):
    """Every span's best score and split (the smallest of the best), by [width, start] as cky_best."""
    for i in range(n):
        V0[N1 + i] = S[i, i + 1]
    for w in range(2, n + 1):
        hi, base = n + 1 - w, w * N1
        v0, d0 = V0[base:base + N1], D0[base:base + N1]
        for u in range(1, w):
            a, b = V0[u * N1:], V0[(w - u) * N1 + u:]
            for i in range(hi):
                v = a[i] + b[i]
                if v > v0[i]:
                    v0[i], d0[i] = v, u
        for i in range(hi):
            v0[i] += S[i, i + w]


@nb.njit(cache=True, nogil=True)
def _ensure(S, N1, k, V0, D0, C, done, slot, hsize, HS, HD, HA, HB, LV, LD, LA, LB, free, top_v, top_d, stack,
            cell0, j0):
    """1 when span cell0 has a j0-th best derivation, making the lists up to it as needed (module docstring), 0
    when it has none, -1 when the pool is full. Requests run on a stack of (cell, rank, phase) as in
    :func:`ssvm_torch.trees.numba_kbest._ensure`."""
    stack[0, 0], stack[0, 1], stack[0, 2] = cell0, j0, 0
    sp, result = 1, 0
    while sp > 0:
        cell, j, phase = stack[sp - 1, 0], stack[sp - 1, 1], stack[sp - 1, 2]
        w, i = cell // N1, cell % N1
        if phase == 0:
            if C[cell] > j:
                result, sp = 1, sp - 1
                continue
            if done[cell]:
                result, sp = 0, sp - 1
                continue
            if slot[cell] < 0:                         # seed: the k best splits other than the best one
                s = free[0]
                if (s + 1) * (2 * k + 2) > HS.shape[0]:
                    return -1
                free[0] = s + 1
                slot[cell] = s
                m = 0
                for u in range(1, w):
                    if u == D0[cell]:
                        continue
                    v = V0[u * N1 + i] + V0[(w - u) * N1 + i + u] + S[i, i + w]   # the max-plus pass's order
                    if v > NEG_INF:
                        m = keep_best(top_v, top_d, m, k, v, u)
                base = s * (2 * k + 2)
                for t in range(m):                     # descending: already a max-heap
                    HS[base + t], HD[base + t], HA[base + t], HB[base + t] = top_v[t], top_d[t], 0, 0
                hsize[cell] = m
        u, a, b = _derivation(k, D0, LD, LA, LB, slot, cell, C[cell] - 1)       # the last one made
        left, right = u * N1 + i, (w - u) * N1 + i + u
        if phase == 0:
            stack[sp - 1, 2] = 1
            stack[sp, 0], stack[sp, 1], stack[sp, 2] = right, b + 1, 0
            sp += 1
            continue
        if result < 0:
            return -1
        base = slot[cell] * (2 * k + 2)
        if phase == 1:
            if result:
                hsize[cell] = heap_push(HS, HD, HA, HB, base, hsize[cell], _value(k, V0, LV, slot, a, left)
                                    + _value(k, V0, LV, slot, b + 1, right) + S[i, i + w], u, a, b + 1)
            if b == 0:
                stack[sp - 1, 2] = 2
                stack[sp, 0], stack[sp, 1], stack[sp, 2] = left, a + 1, 0
                sp += 1
                continue
        elif result:
            hsize[cell] = heap_push(HS, HD, HA, HB, base, hsize[cell], _value(k, V0, LV, slot, a + 1, left)
                                + _value(k, V0, LV, slot, 0, right) + S[i, i + w], u, a + 1, 0)
        if hsize[cell] == 0:                           # no derivation left
            done[cell] = True
            result, sp = 0, sp - 1
            continue
        r = C[cell]
        at = slot[cell] * (k - 1) + r - 1
        LV[at], LD[at], LA[at], LB[at] = HS[base], HD[base], HA[base], HB[base]
        hsize[cell] = heap_pop(HS, HD, HA, HB, base, hsize[cell])
        C[cell] = r + 1
        if r + 1 == k:
            done[cell] = True                          # no rank past k is ever asked for
        stack[sp - 1, 2] = 0                           # and again, until rank j exists
    return result


@nb.njit(cache=True, nogil=True)
def cky_kbest(S, n, k, charts, scores, slots=0):
    """The k best binary trees of one sentence: charts[r] (M, M) bool set on the 2n - 1 spans of the r-th best
    (all False on entry), scores[r]; ranks past the sentence's number of trees of finite score keep an empty
    chart and score -inf. Returns how many ranks were filled. ``slots``: the pool slots to allocate first (0:
    64 k (n + 1) + 16, at most one per span)."""
    for r in range(k):
        scores[r] = NEG_INF
    if n == 0:
        scores[0] = 0.0
        return 1
    N1 = n + 1
    V0 = np.full(N1 * N1, NEG_INF)
    D0 = np.ones(N1 * N1, dtype=np.int64)
    _best_pass(S, n, N1, V0, D0)
    top = n * N1
    every = N1 * N1
    slots = min(every, 64 * k * N1 + 16) if slots <= 0 else slots
    while True:
        C = np.zeros(N1 * N1, dtype=np.int64)
        done = np.zeros(N1 * N1, dtype=np.bool_)
        for cell in range(N1 * N1):
            if V0[cell] > NEG_INF:
                C[cell] = 1
            else:
                done[cell] = True
        for i in range(N1):
            done[N1 + i] = True                        # a one-word span has one derivation
        slot, hsize = np.full(N1 * N1, -1, dtype=np.int64), np.zeros(N1 * N1, dtype=np.int64)
        h, q = slots * (2 * k + 2), slots * (k - 1)
        HS, HD, HA = np.empty(h), np.empty(h, dtype=np.int64), np.empty(h, dtype=np.int64)
        HB = np.empty(h, dtype=np.int64)
        LV, LD, LA = np.empty(q), np.empty(q, dtype=np.int64), np.empty(q, dtype=np.int64)
        LB = np.empty(q, dtype=np.int64)
        free = np.zeros(1, dtype=np.int64)
        top_v, top_d = np.empty(k), np.empty(k, dtype=np.int64)
        stack = np.empty((4 * N1 + 16, 3), dtype=np.int64)
        got, full = 0, False
        for r in range(k):
            ok = _ensure(S, N1, k, V0, D0, C, done, slot, hsize, HS, HD, HA, HB, LV, LD, LA, LB, free, top_v, top_d,
                         stack, top, r)
            if ok < 0:
                full = True
                break
            if ok == 0:
                break
            got = r + 1
        if not full:
            break
        slots = every
    spans = np.empty((2 * N1, 3), dtype=np.int64)      # (width, start, rank) still to expand
    for r in range(got):
        scores[r] = _value(k, V0, LV, slot, r, top)
        spans[0, 0], spans[0, 1], spans[0, 2] = n, 0, r
        sp = 1
        while sp > 0:
            sp -= 1
            w, i, rank = spans[sp, 0], spans[sp, 1], spans[sp, 2]
            charts[r, i, i + w] = True
            if w > 1:
                u, a, b = _derivation(k, D0, LD, LA, LB, slot, w * N1 + i, rank)
                spans[sp, 0], spans[sp, 1], spans[sp, 2] = u, i, a
                spans[sp + 1, 0], spans[sp + 1, 1], spans[sp + 1, 2] = w - u, i + u, b
                sp += 2
    return got


@nb.njit(cache=True, nogil=True)
def kbest_batch(S, lengths, k, charts, scores):
    """:func:`cky_kbest` of every row of S (B, N+1, N+1): charts (B, k, N+1, N+1) all False on entry, scores
    (B, k)."""
    for b in range(S.shape[0]):
        cky_kbest(S[b], lengths[b], k, charts[b], scores[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def kbest_batch_parallel(S, lengths, k, charts, scores):
    """:func:`kbest_batch` with the rows spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        cky_kbest(S[b], lengths[b], k, charts[b], scores[b])
