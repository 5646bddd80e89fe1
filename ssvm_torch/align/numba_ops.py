"""Compiled (numba) kernels of the alignment recursions (ssvm_torch/align/ops.py) for CPU tensors: the forward
recursion cell by cell, one row of the batch per thread, in float64 whatever the scores' precision, keeping each
move's share of every cell's logsumexp (two exponentials and one logarithm per cell), and its reverse-mode pass
(the "outside" adjoints: d log Z / d a(i, j) flows back to the cells each move came from, times that move's share;
no exponential there), so log Z and its gradient (the marginals) cost two O(N M) sweeps; the best path is the max
recursion with its moves kept and followed back.

Scores are clamped to ``NEG`` (ops.py) as the torch path does, so unreachable cells keep finite values."""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched

NEG = -1e30


@nb.njit(cache=True, inline="always")
def _score(S, b, i, j, k):
    return max(S[b, i, j, k], NEG)


@nb.njit(cache=True, inline="always")
def _lse3_weights(x, c, e, w, b, i, j):
    """log(exp(x) + exp(c) + exp(e)) with two exponentials (the largest term's is 1), and each term's share of
    the sum into w[b, i, j, :] (the move posteriors the reverse pass multiplies by, with no exponential there)."""
    if x >= c and x >= e:
        hi, r0, r1, r2 = x, 1.0, math.exp(c - x), math.exp(e - x)
    elif c >= e:
        hi, r0, r1, r2 = c, math.exp(x - c), 1.0, math.exp(e - c)
    else:
        hi, r0, r1, r2 = e, math.exp(x - e), math.exp(c - e), 1.0
    total = r0 + r1 + r2
    w[b, i, j, 0], w[b, i, j, 1], w[b, i, j, 2] = r0 / total, r1 / total, r2 / total
    return hi + math.log(total)


@nb.njit(cache=True, inline="always")
def _lse2(a, c):
    hi = max(a, c)
    return hi + math.log(math.exp(a - hi) + math.exp(c - hi))


@nb.njit(cache=True, inline="always")
def _logz_cell(S, b, i, j, local, alpha, weights):
    """a(i, j) of the logsumexp recursion (and its moves' shares) from the cells left, above and diagonally above."""
    right = alpha[b, i, j - 1] + _score(S, b, i, j, 0) if j > 0 else NEG
    down = alpha[b, i - 1, j] + _score(S, b, i, j, 2) if i > 0 else NEG
    prev = alpha[b, i - 1, j - 1] if (i > 0 and j > 0) else NEG
    if local:
        prev = _lse2(prev, 0.0)
    elif i == 0 and j == 0:
        prev = 0.0
    alpha[b, i, j] = _lse3_weights(right, prev + _score(S, b, i, j, 1), down, weights, b, i, j)


@launched
@nb.njit(cache=True, parallel=True)
def forward_logz(S, n, m, local, alpha, weights, out):
    """alpha[b, i, j] = a(i, j) of the logsumexp recursion, weights[b, i, j, move] = the move's share of a(i, j),
    and out[b] = log Z (the last cell's, or for a local path the logsumexp of every cell and the empty path's 0).
    Rows of the grid go in pairs, the lower one a cell behind: cells (i, j) and (i + 1, j - 1) do not depend on each
    other, so the processor overlaps their exponentials and logarithms, where one row's cells wait each for the
    one before (1.5x: benchmarks/bench_alignment_commits.py); the values are the cell-by-cell ones bit for bit."""
    B, N, M, _ = S.shape
    for b in nb.prange(B):
        nb_, mb = n[b], m[b]
        i = 0
        while i + 1 < nb_:
            _logz_cell(S, b, i, 0, local, alpha, weights)
            for j in range(1, mb):
                _logz_cell(S, b, i, j, local, alpha, weights)
                _logz_cell(S, b, i + 1, j - 1, local, alpha, weights)
            _logz_cell(S, b, i + 1, mb - 1, local, alpha, weights)
            i += 2
        if i < nb_:
            for j in range(mb):
                _logz_cell(S, b, i, j, local, alpha, weights)
        if local:
            # log(exp(0) + sum_ij exp(a(i, j))), 0 for the empty path, shifted by the largest term: independent
            # exponentials and one logarithm, where a running logsumexp chained two per cell
            hi = 0.0
            for i in range(nb_):
                for j in range(mb):
                    hi = max(hi, alpha[b, i, j])
            total = math.exp(-hi)
            for i in range(nb_):
                for j in range(mb):
                    total += math.exp(alpha[b, i, j] - hi)
            out[b] = hi + math.log(total)
        else:
            out[b] = alpha[b, nb_ - 1, mb - 1]


@launched
@nb.njit(cache=True, parallel=True)
def backward_logz(n, m, local, alpha, weights, logz, grad_out, adj, grad):
    """grad[b, i, j, move] = grad_out[b] * d log Z / d s(i, j, move) (the marginals times the incoming gradient,
    0 outside the row's grid), by the adjoints adj[b, i, j] = d log Z / d a(i, j), cells in reverse order: a cell's
    adjoint flows to the cell each move came from, times the move's share (the forward pass's weights)."""
    B, N, M, _ = grad.shape
    for b in nb.prange(B):
        nb_, mb = n[b], m[b]
        for i in range(N):
            for j in range(M):
                inside = i < nb_ and j < mb
                adj[b, i, j] = math.exp(alpha[b, i, j] - logz[b]) if (local and inside) else 0.0
                if not inside:
                    grad[b, i, j, 0], grad[b, i, j, 1], grad[b, i, j, 2] = 0.0, 0.0, 0.0
        if not local:
            adj[b, nb_ - 1, mb - 1] = 1.0
        for i in range(nb_ - 1, -1, -1):
            for j in range(mb - 1, -1, -1):
                g = adj[b, i, j]
                w0, w1, w2 = g * weights[b, i, j, 0], g * weights[b, i, j, 1], g * weights[b, i, j, 2]
                grad[b, i, j, 0], grad[b, i, j, 1], grad[b, i, j, 2] = grad_out[b] * w0, grad_out[b] * w1, \
                    grad_out[b] * w2
                if j > 0:
                    adj[b, i, j - 1] += w0
                if i > 0:
                    adj[b, i - 1, j] += w2
                if i > 0 and j > 0:
                    if local:                              # the share that continued a path, not a fresh start
                        prev = alpha[b, i - 1, j - 1]
                        w1 *= math.exp(prev - _lse2(prev, 0.0))
                    adj[b, i - 1, j - 1] += w1


@launched
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
                right = a[i, j - 1] + _score(S, b, i, j, 0) if j > 0 else NEG
                down = a[i - 1, j] + _score(S, b, i, j, 2) if i > 0 else NEG
                prev = a[i - 1, j - 1] if (i > 0 and j > 0) else NEG
                if local:
                    prev = max(prev, 0.0)
                elif i == 0 and j == 0:
                    prev = 0.0
                diag = prev + _score(S, b, i, j, 1)
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
        if value[b] < NEG / 2:
            continue                                   # no finite path (refused by the caller): nothing to follow
        i, j = bi, bj
        while i >= 0 and j >= 0:
            mv = move[b, i, j]
            path[b, i, j] = mv
            if mv == 1 and (i == 0 or j == 0 or (local and a[i - 1, j - 1] <= 0.0)):
                break                                  # the path's first cell
            if mv != 0:
                i -= 1
            if mv != 2:
                j -= 1


@nb.njit(cache=True)
def sample_paths(n, m, local, alpha, weights, logz, uniforms, path):
    """Exact samples of the path distribution p(P) = exp(s(P) - log Z) from the forward pass's values and move
    shares: backward sampling from the last cell (global) or from a cell drawn with probability
    exp(a(i, j) - log Z) (local; the empty path with exp(-log Z)), each step's move drawn by its share, a local
    diagonal entry drawn between continuing and starting afresh by their shares. ``uniforms`` (S, B, N + M + 1)
    in [0, 1); path (S, B, N, M) is filled (-1 off the path)."""
    S, B = uniforms.shape[0], uniforms.shape[1]
    for s in range(S):
        for b in range(B):
            nb_, mb = n[b], m[b]
            u = uniforms[s, b]
            k = 0
            if local:
                r, acc = u[k], math.exp(-logz[b])      # the empty path first
                k += 1
                i, j, li, lj = -1, -1, -1, -1
                if r >= acc:
                    for ci in range(nb_):
                        for cj in range(mb):
                            p = math.exp(alpha[b, ci, cj] - logz[b])
                            acc += p
                            if p > 0.0:
                                li, lj = ci, cj
                            if i < 0 and r < acc:
                                i, j = ci, cj
                    if i < 0:                          # rounding past the total: the last possible cell
                        i, j = li, lj
            else:
                i, j = nb_ - 1, mb - 1
            while i >= 0:
                r = u[k]
                k += 1
                w0, w1, w2 = weights[b, i, j, 0], weights[b, i, j, 1], weights[b, i, j, 2]
                mv = 0 if r < w0 else (1 if r < w0 + w1 else 2)
                if mv == 2 and w2 == 0.0:              # rounding past the shares' sum
                    mv = 1 if w1 > 0.0 else 0
                path[s, b, i, j] = mv
                if mv == 1:
                    if i == 0 or j == 0:
                        break
                    if local:
                        prev = alpha[b, i - 1, j - 1]
                        if u[k] >= math.exp(prev - _lse2(prev, 0.0)):     # started afresh here
                            break
                        k += 1
                if mv != 0:
                    i -= 1
                if mv != 2:
                    j -= 1


@nb.njit(cache=True, inline="always")
def _has_successor(path, b, i, j, N, M):
    return ((j + 1 < M and path[b, i, j + 1] == 0) or (i + 1 < N and j + 1 < M and path[b, i + 1, j + 1] == 1)
            or (i + 1 < N and path[b, i + 1, j] == 2))


@launched
@nb.njit(cache=True, parallel=True)
def path_faults(path, n, m, local, out):
    """out[b] = 1 where row b of ``path`` (B, N, M) is not one monotone path of its (n_b, m_b) grid (the rules of
    paths.check_path), else 0: one pass over the cells (values, lengths, the cells on the path, the last cell),
    then the path followed back from its last cell, which must reach every cell on it and end entering its first
    cell diagonally ((0, 0) for a global path). The moves strictly decrease i + j, so a walk that counts every
    visited cell has met each once and every visited cell is left to at most one."""
    B, N, M = path.shape
    for b in nb.prange(B):
        out[b] = 0
        count, ends, ei, ej = 0, 0, -1, -1
        for i in range(N):
            for j in range(M):
                v = path[b, i, j]
                if v == -1:
                    continue
                if v < -1 or v > 2 or i >= n[b] or j >= m[b]:
                    out[b] = 1
                count += 1
                if local and not _has_successor(path, b, i, j, N, M):
                    ends += 1
                    ei, ej = i, j
        if out[b] == 1:
            continue
        if count == 0:
            out[b] = 0 if local else 1
            continue
        if local:
            if ends != 1:
                out[b] = 1
                continue
            i, j = ei, ej
        else:
            i, j = n[b] - 1, m[b] - 1
            if path[b, i, j] < 0:
                out[b] = 1
                continue
        steps = 0
        while True:
            steps += 1
            v = path[b, i, j]
            pi, pj = (i, j - 1) if v == 0 else ((i - 1, j - 1) if v == 1 else (i - 1, j))
            if pi < 0 or pj < 0 or path[b, pi, pj] < 0:          # the first cell: entered from outside the path
                if v != 1 or (not local and (i != 0 or j != 0)):
                    out[b] = 1
                break
            i, j = pi, pj
        if steps != count:
            out[b] = 1
