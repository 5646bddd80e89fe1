"""Compiled (numba) kernels of the alignment recursions (ssvm_torch/align/ops.py) for CPU tensors: the forward
recursion cell by cell, one row of the batch per thread, in float64 whatever the scores' precision, and its
reverse-mode pass (the "outside" adjoints: d log Z / d a(i, j) flows back to the cells each move came from, times the
move's posterior weight exp(a(prev) + s(i, j, move) - a(i, j))), so log Z and its gradient (the marginals) cost two
O(N M) sweeps; the best path is the max recursion with its moves kept and followed back.

Scores are clamped to ``NEG`` (ops.py) as the torch path does, so unreachable cells keep finite values."""
from __future__ import annotations

import math

import numba as nb
import numpy as np

NEG = -1e30


@nb.njit(cache=True, inline="always")
def _score(S, b, i, j, k, n, m):
    return max(S[b, i, j, k], NEG) if i < n and j < m else NEG


@nb.njit(cache=True, inline="always")
def _lse2(a, c):
    hi = max(a, c)
    return hi + math.log(math.exp(a - hi) + math.exp(c - hi))


@nb.njit(cache=True, parallel=True)
def forward_logz(S, n, m, local, alpha, out):
    """alpha[b, i, j] = a(i, j) of the logsumexp recursion and out[b] = log Z (the last cell's, or for a local
    path the logsumexp of every cell and the empty path's 0)."""
    B, N, M, _ = S.shape
    for b in nb.prange(B):
        nb_, mb = n[b], m[b]
        for i in range(nb_):
            for j in range(mb):
                right = alpha[b, i, j - 1] + _score(S, b, i, j, 0, nb_, mb) if j > 0 else NEG
                down = alpha[b, i - 1, j] + _score(S, b, i, j, 2, nb_, mb) if i > 0 else NEG
                prev = alpha[b, i - 1, j - 1] if (i > 0 and j > 0) else NEG
                if local:
                    prev = _lse2(prev, 0.0)
                elif i == 0 and j == 0:
                    prev = 0.0
                diag = prev + _score(S, b, i, j, 1, nb_, mb)
                hi = max(right, max(diag, down))
                alpha[b, i, j] = hi + math.log(math.exp(right - hi) + math.exp(diag - hi) + math.exp(down - hi))
        if local:
            total = 0.0                                    # the empty path
            for i in range(nb_):
                for j in range(mb):
                    total = _lse2(total, alpha[b, i, j])
            out[b] = total
        else:
            out[b] = alpha[b, nb_ - 1, mb - 1]


@nb.njit(cache=True, parallel=True)
def backward_logz(S, n, m, local, alpha, logz, grad_out, adj, grad):
    """grad[b, i, j, move] = grad_out[b] * d log Z / d s(i, j, move) (the marginals times the incoming gradient),
    by the adjoints adj[b, i, j] = d log Z / d a(i, j), cells in reverse order."""
    B, N, M, _ = S.shape
    for b in nb.prange(B):
        nb_, mb = n[b], m[b]
        for i in range(nb_):
            for j in range(mb):
                adj[b, i, j] = math.exp(alpha[b, i, j] - logz[b]) if local else 0.0
        if not local:
            adj[b, nb_ - 1, mb - 1] = 1.0
        for i in range(nb_ - 1, -1, -1):
            for j in range(mb - 1, -1, -1):
                g = adj[b, i, j]
                a = alpha[b, i, j]
                if j > 0:
                    w = g * math.exp(alpha[b, i, j - 1] + _score(S, b, i, j, 0, nb_, mb) - a)
                    grad[b, i, j, 0] = grad_out[b] * w
                    adj[b, i, j - 1] += w
                if i > 0:
                    w = g * math.exp(alpha[b, i - 1, j] + _score(S, b, i, j, 2, nb_, mb) - a)
                    grad[b, i, j, 2] = grad_out[b] * w
                    adj[b, i - 1, j] += w
                prev = alpha[b, i - 1, j - 1] if (i > 0 and j > 0) else NEG
                from_prev = prev
                if local:
                    from_prev = _lse2(prev, 0.0)
                elif i == 0 and j == 0:
                    from_prev = 0.0
                w = g * math.exp(from_prev + _score(S, b, i, j, 1, nb_, mb) - a)
                grad[b, i, j, 1] = grad_out[b] * w
                if i > 0 and j > 0:
                    adj[b, i - 1, j - 1] += w * math.exp(prev - from_prev)     # the share that continued a path


@nb.njit(cache=True, parallel=True)
def best_paths(S, n, m, local, value, move, path):
    """The max recursion (ties to the lowest move, a local path's fresh start on a tie, the first best cell in
    row-major order, the empty path unless a path scores above 0): value[b] and path[b] (moves, -1 off it)."""
    B, N, M, _ = S.shape
    for b in nb.prange(B):
        nb_, mb = n[b], m[b]
        a = np.empty((nb_, mb))
        for i in range(nb_):
            for j in range(mb):
                right = a[i, j - 1] + _score(S, b, i, j, 0, nb_, mb) if j > 0 else NEG
                down = a[i - 1, j] + _score(S, b, i, j, 2, nb_, mb) if i > 0 else NEG
                prev = a[i - 1, j - 1] if (i > 0 and j > 0) else NEG
                if local:
                    prev = max(prev, 0.0)
                elif i == 0 and j == 0:
                    prev = 0.0
                diag = prev + _score(S, b, i, j, 1, nb_, mb)
                best, arg = right, 0
                if diag > best:
                    best, arg = diag, 1
                if down > best:
                    best, arg = down, 2
                a[i, j] = best
                move[b, i, j] = arg
        if local:
            bi, bj, top = -1, -1, 0.0
            for i in range(nb_):
                for j in range(mb):
                    if a[i, j] > top:
                        bi, bj, top = i, j, a[i, j]
            value[b] = top
        else:
            bi, bj = nb_ - 1, mb - 1
            value[b] = a[bi, bj]
        i, j = bi, bj
        while i >= 0:
            mv = move[b, i, j]
            path[b, i, j] = mv
            if mv == 1 and (i == 0 or j == 0 or (local and a[i - 1, j - 1] <= 0.0)):
                break                                  # the path's first cell
            if mv != 0:
                i -= 1
            if mv != 2:
                j -= 1
