"""Compiled CKY kernels for binary constituency trees (the package's convention, :mod:`ssvm_torch.spans`):
the best tree (max-plus CKY with split back-pointers), log Z (the inside pass) and the span marginals (a top-down
pass in probability space), one sentence of n words at a time, ``S[i, j]`` the score
of the span of words i..j-1 (fenceposts 0 <= i < j <= n).

A binary tree over n words holds 2n - 1 spans: the n one-word spans, the whole sentence and every split of
a span (i, j) into (i, k) and (k, j). The inside recursion (Baker 1979; Stern et al. 2017's chart parser and
Zhang et al. 2020's TreeCRF score a tree the same way, as the sum of its span scores):

    I[i, i+1] = S[i, i+1],     I[i, j] = S[i, j] + (+)_{k=i+1}^{j-1} (I[i, k] (x) I[k, j])

with (+, x) = (logaddexp, +) for log Z = I[0, n] and (max, +) for the best tree. The charts are kept by
[width, start] (``I[w, i]`` = the span (i, i + w)), so for one width and one split offset u the reads
I[u, i] and I[w - u, i + u] are contiguous in i and the loops over the start vectorize.

log Z is computed in real space: the n one-word spans are in every tree, so their scores leave the sum as one
constant, and the n - 1 others are shifted by their row maximum c, P[w, i] = exp(S[i, i + w] - c) <= 1, so that
Z = exp(sum of the one-word scores + (n - 1) c) Z' with Z' <= the number of trees (< 4^n) and the split sums
are plain multiply-adds that vectorize (no exp per split: the pass costs what the max-plus one costs). Where Z'
is small enough that an underflowed sub-span could matter, the row is redone in log space (:func:`inside_log`).

The marginals run top-down from mu(0, n) = 1: a span's mass goes to its split u with probability
exp(I[u, i] + I[w - u, i + u] + S[i, i + w] - I[w, i]) (the split's share of the span's inside sum), and
each split hands it to both children, so mu(i, j) = P(span (i, j) in the tree) = d log Z / d S[i, j]
without a log-space outside chart (no logaddexp per split) and without an autograd graph.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched

NEG_INF = -np.inf
#: LLVM may reorder the real-space sums (a reduction vectorizes only if reassociated): the values then depend
#: on the vector width in the last bits, never on the data's order
SUMS = {"reassoc", "contract", "nsz"}
#: a sub-span whose inside value underflowed (< 1e-308) loses at most 1e-308 x 4^n of Z' (its outside mass is at
#: most the number of trees); Z' >= exp(LOG_REAL_MIN) 4^n keeps that below 1e-16 of Z', else the row is redone
#: in log space
LOG_REAL_MIN = math.log(1e-292)
#: past this many words 4^n overflows the bound above: log space only
REAL_MAX_WORDS = 450
#: max-reductions vectorize once NaN is ruled out (scores are checked for NaN before any kernel runs)
MAXES = {"nnan", "nsz"}


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def inside_real(S, n, I, X):
    """The inside pass in real space on shifted potentials (module docstring): I[w, i] = P[w, i] X[w, i] with
    X[w, i] = sum_u I[u, i] I[w - u, i + u] the split sum, I[1, i] = 1. Returns (log Z, Z'), Z' = I[n, 0];
    log Z = -inf when every tree has a -inf span. For n >= 2."""
    leaves = 0.0
    for i in range(n):
        leaves += S[i, i + 1]
        I[1, i] = 1.0
    c = NEG_INF
    for w in range(2, n + 1):
        for i in range(n + 1 - w):
            if S[i, i + w] > c:
                c = S[i, i + w]
    if c == NEG_INF or leaves == NEG_INF:
        return NEG_INF, 0.0
    for w in range(2, n + 1):
        hi = n + 1 - w
        for i in range(hi):
            X[w, i] = 0.0
        for u in range(1, w):
            for i in range(hi):
                X[w, i] += I[u, i] * I[w - u, i + u]
        for i in range(hi):
            I[w, i] = math.exp(S[i, i + w] - c) * X[w, i]
    Z = I[n, 0]
    return (leaves + (n - 1) * c + math.log(Z), Z) if Z > 0.0 else (0.0, 0.0)


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def marginals_real(n, I, X, M):
    """M[i, j] = the marginal of span (i, j) from the real-space charts of :func:`inside_real`: the top-down
    pass, each split's share I[u, i] I[w - u, i + u] / X[w, i] of its span's mass."""
    mu = np.zeros((n + 1, n + 1))            # mu[w, i]: the span (i, i + w)
    r = np.empty(n)
    mu[n, 0] = 1.0
    for w in range(n, 1, -1):
        hi = n + 1 - w
        for i in range(hi):
            r[i] = mu[w, i] / X[w, i] if X[w, i] > 0.0 else 0.0
        for u in range(1, w):
            for i in range(hi):
                p = r[i] * I[u, i] * I[w - u, i + u]
                mu[u, i] += p
                mu[w - u, i + u] += p
    for w in range(1, n + 1):
        for i in range(n + 1 - w):
            M[i, i + w] = mu[w, i]


@nb.njit(cache=True, nogil=True)
def inside_log(S, n, I):
    """Fills the log-space inside chart I[w, i] (w = 1..n) of one sentence; returns log Z = I[n, 0]
    (0 for an empty sentence; -inf when every tree has a -inf span)."""
    if n == 0:
        return 0.0
    mx = np.empty(n)
    acc = np.empty(n)
    for i in range(n):
        I[1, i] = S[i, i + 1]
    for w in range(2, n + 1):
        hi = n + 1 - w
        for i in range(hi):
            mx[i] = NEG_INF
        for u in range(1, w):
            for i in range(hi):
                v = I[u, i] + I[w - u, i + u]
                if v > mx[i]:
                    mx[i] = v
        for i in range(hi):
            acc[i] = 0.0
        for u in range(1, w):
            for i in range(hi):
                if mx[i] > NEG_INF:
                    acc[i] += math.exp(I[u, i] + I[w - u, i + u] - mx[i])
        for i in range(hi):
            I[w, i] = S[i, i + w] + mx[i] + math.log(acc[i]) if mx[i] > NEG_INF else NEG_INF
    return I[n, 0]


@nb.njit(cache=True, nogil=True)
def marginals_log(S, n, I, M):
    """M[i, j] = the marginal of span (i, j) (module docstring) from a filled inside chart with a finite
    log Z; entries off the sentence's spans are left as they are."""
    mu = np.zeros((n + 1, n + 1))            # mu[w, i]: the span (i, i + w)
    mu[n, 0] = 1.0
    for w in range(n, 1, -1):
        for u in range(1, w):
            for i in range(n + 1 - w):
                if mu[w, i] > 0.0:
                    p = mu[w, i] * math.exp(I[u, i] + I[w - u, i + u] + S[i, i + w] - I[w, i])
                    mu[u, i] += p
                    mu[w - u, i + u] += p
    for w in range(1, n + 1):
        for i in range(n + 1 - w):
            M[i, i + w] = mu[w, i]


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def cky_best(S, n, chart):
    """The best binary tree of one sentence: sets chart[i, j] = True on its 2n - 1 spans (the chart must
    come in all False) and returns its score (-inf when every tree has a -inf span; ties go to the
    smallest split)."""
    if n == 0:
        return 0.0
    V = np.empty((n + 1, n + 1))
    split = np.zeros((n + 1, n + 1), dtype=np.int64)
    best = np.empty(n)
    for i in range(n):
        V[1, i] = S[i, i + 1]
    for w in range(2, n + 1):
        hi = n + 1 - w
        for i in range(hi):
            best[i] = NEG_INF
            split[w, i] = 1
        for u in range(1, w):
            for i in range(hi):
                v = V[u, i] + V[w - u, i + u]
                if v > best[i]:
                    best[i] = v
                    split[w, i] = u
        for i in range(hi):
            V[w, i] = S[i, i + w] + best[i]
    stack = np.empty((2 * n, 2), dtype=np.int64)         # (width, start) of the spans still to expand
    top = 0
    stack[0, 0], stack[0, 1] = n, 0
    top = 1
    while top > 0:
        top -= 1
        w, i = stack[top, 0], stack[top, 1]
        chart[i, i + w] = True
        if w > 1:
            u = split[w, i]
            stack[top, 0], stack[top, 1] = u, i
            stack[top + 1, 0], stack[top + 1, 1] = w - u, i + u
            top += 2
    return V[n, 0]


@nb.njit(cache=True, nogil=True)
def _log_partition_row(S, n, want_marginals, M):
    """log Z of one row (and its marginals into M): real space unless Z' is small enough that an underflowed
    sub-span could matter (:data:`LOG_REAL_MIN`), then log space."""
    if n == 0:
        return 0.0
    if n == 1:
        if want_marginals and S[0, 1] > NEG_INF:
            M[0, 1] = 1.0
        return S[0, 1]
    I = np.empty((n + 1, n))
    X = np.empty((n + 1, n))
    if n <= REAL_MAX_WORDS:
        logz, Z = inside_real(S, n, I, X)
        if logz == NEG_INF:
            return logz
        if Z > 0.0 and math.log(Z) >= LOG_REAL_MIN + n * math.log(4.0):
            if want_marginals:
                marginals_real(n, I, X, M)
            return logz
    logz = inside_log(S, n, I)
    if want_marginals and logz > NEG_INF:
        marginals_log(S, n, I, M)
    return logz


@nb.njit(cache=True, nogil=True)
def log_partition_batch(S, lengths, want_marginals, logz, M):
    """log Z (and, with ``want_marginals``, the span marginals into M (B, N+1, N+1), zero-initialized by the
    caller) of every row of S (B, N+1, N+1)."""
    for b in range(S.shape[0]):
        logz[b] = _log_partition_row(S[b], lengths[b], want_marginals, M[b] if want_marginals else M[0])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def log_partition_batch_parallel(S, lengths, want_marginals, logz, M):
    """:func:`log_partition_batch` with the rows spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        logz[b] = _log_partition_row(S[b], lengths[b], want_marginals, M[b] if want_marginals else M[0])


@nb.njit(cache=True, nogil=True)
def best_batch(S, lengths, charts, scores):
    """The best tree of every row: ``charts`` (B, N+1, N+1) bool, all False on entry; ``scores`` (B,)."""
    for b in range(S.shape[0]):
        scores[b] = cky_best(S[b], lengths[b], charts[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def best_batch_parallel(S, lengths, charts, scores):
    """:func:`best_batch` with the rows spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        scores[b] = cky_best(S[b], lengths[b], charts[b])
