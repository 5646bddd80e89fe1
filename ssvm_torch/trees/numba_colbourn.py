"""Compiled exact samples of the first-order tree CRF over every tree (non-projective) on the CPU: Colbourn's
sequential algorithm with Sherman-Morrison updates of the inverse Laplacian, as the torch path of
:mod:`ssvm_torch.trees.sampling` states it (its module docstring), one sentence at a time: the Laplacian of the
row-shifted potentials inverted once per sentence (Gauss-Jordan with partial pivoting, O(n^3)), then every sample
O(n^2) per word. A sample whose check fails at word m (its conditionals not a distribution, a Sherman-Morrison
denominator at or below the tolerance, a singular Laplacian, or scores spanning ``span_max`` or more) stops there
with ``fail[s] = m``: the caller draws its words m.. from the matrix-tree marginals
(:func:`ssvm_torch.trees.sampling.continue_exactly`). The uniforms come from the caller (torch's generator).
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def _inverse(L, X):
    """X = L^-1 by Gauss-Jordan elimination with partial pivoting; False when L is singular to working precision."""
    n = L.shape[0]
    W = L.copy()
    for i in range(n):
        for j in range(n):
            X[i, j] = 1.0 if i == j else 0.0
    scale = 0.0
    for i in range(n):
        for j in range(n):
            scale = max(scale, abs(W[i, j]))
    for c in range(n):
        p = c
        for r in range(c + 1, n):
            if abs(W[r, c]) > abs(W[p, c]):
                p = r
        if not abs(W[p, c]) > 1e-13 * scale:
            return False
        if p != c:
            for j in range(n):
                W[c, j], W[p, j] = W[p, j], W[c, j]
                X[c, j], X[p, j] = X[p, j], X[c, j]
        inv = 1.0 / W[c, c]
        for j in range(n):
            W[c, j] *= inv
            X[c, j] *= inv
        for r in range(n):
            if r != c and W[r, c] != 0.0:
                f = W[r, c]
                for j in range(n):
                    W[r, j] -= f * W[c, j]
                    X[r, j] -= f * X[c, j]
    return True


@nb.njit(cache=True, nogil=True)
def _column(a, r, n, multiroot, col):
    """Column r = m - 1 of Koo et al.'s Laplacian for the potentials a (n+1,) of the arcs into word m (a[0] the
    root's): -a[h] at row h - 1, their sum (the root's too when ``multiroot``) on the diagonal, and for single-root
    trees a[0] in row 0 (which holds the root arcs). As :func:`ssvm_torch.trees.sampling._laplacian_column`."""
    total = 0.0
    for h in range(1, n + 1):
        col[h - 1] = -a[h]
        total += a[h]
    col[r] = total + (a[0] if multiroot else 0.0)
    if not multiroot:
        col[0] = a[0]


@nb.njit(cache=True, nogil=True)
def colbourn_sentence(S, n, multiroot, span_max, tol, U, heads, fail):
    """Samples of one sentence (S (>= n+1, >= n+1) [modifier, head]) into heads (k, >= n+1) from the uniforms
    U (k, >= n); fail[s] = the first word left undrawn by a failed check, n + 1 when none (module docstring)."""
    k = U.shape[0]
    for s in range(k):
        heads[s, :] = -1
        fail[s] = n + 1
    if n == 0:
        return
    A = np.zeros((n + 1, n + 1))
    hi, lo = NEG_INF, np.inf
    for m in range(1, n + 1):
        mx = NEG_INF
        for h in range(n + 1):
            if h != m and S[m, h] > mx:
                mx = S[m, h]
        for h in range(n + 1):
            if h != m and S[m, h] > NEG_INF:
                A[m, h] = math.exp(S[m, h] - mx)
                hi, lo = max(hi, S[m, h]), min(lo, S[m, h])
    Lap = np.zeros((n, n))
    col = np.empty(n)
    for m in range(1, n + 1):
        _column(A[m], m - 1, n, multiroot, col)
        Lap[:, m - 1] = col
    X0 = np.empty((n, n))
    if not (hi - lo < span_max) or not _inverse(Lap, X0):
        fail[:] = 1
        return
    p = np.empty(n + 1)
    dropped = np.empty(n + 1)
    Xu = np.empty(n)
    for s in range(k):
        X = X0.copy()
        for m in range(1, n + 1):
            r = m - 1
            own = X[r, r]
            p[0] = A[m, 0] * (own if multiroot else X[r, 0])
            for h in range(1, n + 1):
                if multiroot:
                    p[h] = A[m, h] * (own - X[r, h - 1])
                else:
                    p[h] = A[m, h] * ((own if r > 0 else 0.0) - (X[r, h - 1] if h > 1 else 0.0))
            total = 0.0
            ok = True
            for h in range(n + 1):
                if not (p[h] >= -tol) or not math.isfinite(p[h]):
                    ok = False
                total += max(p[h], 0.0)
            if not ok or not abs(total - 1.0) <= tol:
                fail[s] = m
                break
            t = (1.0 - U[s, r]) * total                       # in (0, total]: never a zero-probability head
            acc = 0.0
            pick = -1
            for h in range(n + 1):
                if p[h] > 0.0:
                    acc += p[h]
                    pick = h
                    if acc >= t:
                        break
            heads[s, m] = pick
            if m == n:
                break
            for h in range(n + 1):
                dropped[h] = 0.0 if h == pick else A[m, h]
            _column(dropped, r, n, multiroot, col)               # L's column r changes by -col
            for i in range(n):
                acc = 0.0
                for j in range(n):
                    acc -= X[i, j] * col[j]
                Xu[i] = acc
            denom = 1.0 + Xu[r]                                   # det L_new / det L = P(pick -> m | drawn)
            if not denom > tol:
                fail[s] = m + 1
                break
            row = X[r].copy()
            for i in range(n):
                f = Xu[i] / denom
                for j in range(n):
                    X[i, j] -= f * row[j]


@nb.njit(cache=True, nogil=True)
def colbourn_batch(S, lengths, multiroot, span_max, tol, U, heads, fail):
    """:func:`colbourn_sentence` of every row: S (B, N, N), U (B, k, N), heads (B, k, N), fail (B, k)."""
    for b in range(S.shape[0]):
        colbourn_sentence(S[b], lengths[b], multiroot, span_max, tol, U[b], heads[b], fail[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def colbourn_batch_parallel(S, lengths, multiroot, span_max, tol, U, heads, fail):
    """:func:`colbourn_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        colbourn_sentence(S[b], lengths[b], multiroot, span_max, tol, U[b], heads[b], fail[b])
