"""Compiled Hessian-vector products of log Z over binary span trees: CKY's inside-outside in the first-order
expectation semiring (Li & Eisner 2009, Table 1), the backward of the span-tree entropy and KL divergence
(:mod:`ssvm_torch.spans.information`) on the CPU. The convention of :mod:`ssvm_torch.spans`: S[i, j] the score of
the span of words i..j-1, fenceposts 0..n.

Each span carries its inside weight and the expectation of v summed over the spans below it (itself included);
the outside pass the same for the rest of the tree. For a span a, E[<phi, v> | a] = e_out + e_in and

    (Hess v)_a = mu_a (E[<phi, v> | a] - E[<phi, v>]).

In real space every score is shifted by the row's largest (each tree has 2n - 1 spans, so log Z moves by
(2n - 1) times the shift) and the pairs (z, r = z E[v]) are multiplied and added without a transcendental in the
loops; a row whose shifted Z leaves float64's range (below ``REAL_MIN``, or past n ~ 500 words, where the
Catalan number of trees overflows) takes the log-space pass.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched
from ..trees.numba_eisner import REAL_MIN
from ..trees.numba_expectation import expect_add

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def hessian_vector_log(S, V, n, out):
    """out[:n+1, :n+1] = Hess V for one row in log space; returns False without a tree of finite score."""
    M = n + 1
    I, eI = np.full((M, M), NEG_INF), np.zeros((M, M))
    for i in range(n):
        I[i, i + 1], eI[i, i + 1] = S[i, i + 1], V[i, i + 1]
    for w in range(2, n + 1):
        for i in range(0, n + 1 - w):
            j = i + w
            x, ex = NEG_INF, 0.0
            for k in range(i + 1, j):
                if I[i, k] != NEG_INF and I[k, j] != NEG_INF:
                    x, ex = expect_add(x, ex, I[i, k] + I[k, j], eI[i, k] + eI[k, j])
            if x != NEG_INF and S[i, j] != NEG_INF:
                I[i, j], eI[i, j] = x + S[i, j], ex + V[i, j]
    logz, ev = I[0, n], eI[0, n]
    if logz == NEG_INF:
        return False
    O, eO = np.full((M, M), NEG_INF), np.zeros((M, M))
    O[0, n] = 0.0
    for w in range(n, 0, -1):
        for i in range(0, n + 1 - w):
            j = i + w
            if O[i, j] == NEG_INF or I[i, j] == NEG_INF:
                continue
            out[i, j] = math.exp(O[i, j] + I[i, j] - logz) * (eO[i, j] + eI[i, j] - ev)
            ox, eox = O[i, j] + S[i, j], eO[i, j] + V[i, j]
            for k in range(i + 1, j):
                if I[i, k] != NEG_INF and I[k, j] != NEG_INF:
                    O[i, k], eO[i, k] = expect_add(O[i, k], eO[i, k], ox + I[k, j], eox + eI[k, j])
                    O[k, j], eO[k, j] = expect_add(O[k, j], eO[k, j], ox + I[i, k], eox + eI[i, k])
    return True


@nb.njit(cache=True, nogil=True)
def hessian_vector_real(S, V, n, out):
    """The same in real space (module docstring); returns False, out untouched, where it cannot hold the row."""
    M = n + 1
    c = NEG_INF
    for i in range(n):
        for j in range(i + 1, M):
            if S[i, j] > c:
                c = S[i, j]
    if c == NEG_INF:
        return False
    A = np.zeros((M, M))
    for i in range(n):
        for j in range(i + 1, M):
            A[i, j] = math.exp(S[i, j] - c)
    I, rI = np.zeros((M, M)), np.zeros((M, M))
    for i in range(n):
        I[i, i + 1], rI[i, i + 1] = A[i, i + 1], A[i, i + 1] * V[i, i + 1] if A[i, i + 1] > 0.0 else 0.0
    for w in range(2, n + 1):
        for i in range(0, n + 1 - w):
            j = i + w
            a = A[i, j]
            if a == 0.0:
                continue
            x, rx = 0.0, 0.0
            for k in range(i + 1, j):
                x += I[i, k] * I[k, j]
                rx += rI[i, k] * I[k, j] + I[i, k] * rI[k, j]
            I[i, j], rI[i, j] = x * a, (rx + x * V[i, j]) * a
    z = I[0, n]
    if not (z >= REAL_MIN and z < np.inf):
        return False
    ev = rI[0, n] / z
    O, rO = np.zeros((M, M)), np.zeros((M, M))
    O[0, n] = 1.0
    for w in range(n, 0, -1):
        for i in range(0, n + 1 - w):
            j = i + w
            o = O[i, j]
            if o == 0.0 or I[i, j] == 0.0:
                continue
            out[i, j] = (rO[i, j] * I[i, j] + o * rI[i, j]) / z - o * I[i, j] / z * ev
            a = A[i, j]
            ox, rox = o * a, (rO[i, j] + o * V[i, j]) * a
            for k in range(i + 1, j):
                O[i, k] += ox * I[k, j]
                rO[i, k] += rox * I[k, j] + ox * rI[k, j]
                O[k, j] += ox * I[i, k]
                rO[k, j] += rox * I[i, k] + ox * rI[i, k]
    return True


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def hessian_vector_batch(S, V, lengths, out):
    """out[b] = Hess_b V[b] for every row (zeros off its spans; an empty row, or one without a tree, zeros)."""
    for b in nb.prange(S.shape[0]):
        n = lengths[b]
        for i in range(out.shape[1]):
            for j in range(out.shape[2]):
                out[b, i, j] = 0.0
        if n > 0 and not hessian_vector_real(S[b], V[b], n, out[b]):
            for i in range(out.shape[1]):
                for j in range(out.shape[2]):
                    out[b, i, j] = 0.0
            hessian_vector_log(S[b], V[b], n, out[b])
