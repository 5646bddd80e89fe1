"""Compiled exact samples of the projective first-order tree CRF on the CPU: Eisner's inside charts once per
sentence (the real-space pass on row-shifted potentials of :mod:`ssvm_torch.trees.numba_eisner`, its log-space pass
where that underflows), then each sample's derivation read top-down
with an explicit stack, every item on it drawing its split point by inverting the cumulative distribution of its
splits' inside weights (inside(left) inside(right) / their sum over the splits, the module docstring of
:mod:`ssvm_torch.trees.sampling`): O(n^3) per sentence and O(n^2) per sample, against the torch path's O(n^3) per
sample. The uniforms come from the caller (torch's generator), at most :func:`draws_per_sample` per sample.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched
from .numba_eisner import NEG_INF, REAL_MIN, _inside_real, _shifted_arcs, log_inside

_CR, _CL, _IR, _IL = 0, 1, 2, 3


def draws_per_sample(N: int) -> int:
    """Uniforms one sample of a row of N positions (n = N - 1 words) may use: the root's child, each word's
    incomplete item and the two complete items each of those opens (3n + 1)."""
    return 3 * max(N - 1, 0) + 1


@nb.njit(cache=True, nogil=True)
def pick_log(values, lo, hi, u):
    """k in [lo, hi) drawn with probability exp(values[k]) / sum_k' exp(values[k']) (log weights, -inf for none)
    by the inverse CDF at u; rounding that leaves the cumulative sum short of u takes the last k of positive
    weight."""
    top = NEG_INF
    for k in range(lo, hi):
        top = max(top, values[k])
    total = 0.0
    for k in range(lo, hi):
        if values[k] != NEG_INF:
            total += math.exp(values[k] - top)
    target = u * total
    acc = 0.0
    last = lo
    for k in range(lo, hi):
        if values[k] == NEG_INF:
            continue
        acc += math.exp(values[k] - top)
        last = k
        if acc > target:
            return k
    return last


@nb.njit(cache=True, nogil=True)
def _log(v):
    return math.log(v) if v > 0.0 else NEG_INF


@nb.njit(cache=True, nogil=True)
def log_charts(S, n, multiroot):
    """(CR, CL, IR, IL, root, log Z): log charts (n+1, n+1) by [start, end] and the single root's log weights root[r] =
    log s(0 -> r) CL[1, r] CR[r, n] (r = 1..n), each up to a constant per item (the ratios inside an item are
    what the sampler reads): the real-space inside pass on the row-shifted potentials
    (:func:`ssvm_torch.trees.numba_eisner.inside_outside`'s), or the log-space one where that underflows."""
    N1 = n + 1
    CRl, CLl = np.full((N1, N1), NEG_INF), np.full((N1, N1), NEG_INF)
    IRl, ILl = np.full((N1, N1), NEG_INF), np.full((N1, N1), NEG_INF)
    root = np.full(N1, NEG_INF)
    AR, AL = np.zeros((N1, N1)), np.zeros((N1, N1))
    shift = _shifted_arcs(S, n, AR, AL)
    CR, CL, IR, IL = np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1))
    z = _inside_real(AR, AL, n, multiroot, CR, CL, IR, IL, np.zeros(N1)) if shift != NEG_INF else 0.0
    if z >= REAL_MIN and z < np.inf:
        for w in range(n + 1):
            for i in range(n + 1 - w):
                CRl[i, i + w], CLl[i, i + w] = _log(CR[w, i]), _log(CL[w, i])
                IRl[i, i + w], ILl[i, i + w] = _log(IR[w, i]), _log(IL[w, i])
        if not multiroot:
            for r in range(1, n + 1):
                root[r] = _log(AR[r, 0]) + CLl[1, r] + CRl[r, n]
        return CRl, CLl, IRl, ILl, root, shift + math.log(z)
    CR, _, CL, _, IR, ILt, logz = log_inside(S, n, multiroot)
    if not multiroot:
        for r in range(1, n + 1):
            root[r] = S[r, 0] + CL[1, r] + CR[r, n]
    return CR, CL, IR, ILt.T.copy(), root, logz


@nb.njit(cache=True, nogil=True)
def sample_sentence(S, n, multiroot, U, heads):
    """Fills heads (k, >= n+1) with k exact samples of one sentence's projective tree CRF from the uniforms
    U (k, >= 3n + 1); heads[:, 0] = -1. Returns log Z (0 for n = 0; -inf, and nothing drawn, without a tree)."""
    if n == 0:
        return 0.0
    CR, CL, IR, IL, root, logz = log_charts(S, n, multiroot)
    if logz == NEG_INF:
        return logz
    vals = np.empty(n + 2)
    stack = np.empty((4 * n + 4, 3), dtype=np.int64)     # pending items: fewer than all items (<= 4n + 2)
    for s in range(U.shape[0]):
        heads[s, 0] = -1
        top = 0
        d = 0
        if multiroot:
            stack[0, 0], stack[0, 1], stack[0, 2] = _CR, 0, n
            top = 1
        else:
            r = pick_log(root, 1, n + 1, U[s, d])
            d += 1
            heads[s, r] = 0
            stack[0, 0], stack[0, 1], stack[0, 2] = _CL, 1, r
            stack[1, 0], stack[1, 1], stack[1, 2] = _CR, r, n
            top = 2
        while top > 0:
            top -= 1
            kind, i, j = stack[top, 0], stack[top, 1], stack[top, 2]
            if i == j:
                continue
            if kind == _CR:                         # IR[i, k] CR[k, j], k = i+1..j
                for k in range(i + 1, j + 1):
                    vals[k] = IR[i, k] + CR[k, j]
                k = pick_log(vals, i + 1, j + 1, U[s, d])
                stack[top, 0], stack[top, 1], stack[top, 2] = _IR, i, k
                stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = _CR, k, j
            elif kind == _CL:                       # CL[i, k] IL[k, j], k = i..j-1
                for k in range(i, j):
                    vals[k] = CL[i, k] + IL[k, j]
                k = pick_log(vals, i, j, U[s, d])
                stack[top, 0], stack[top, 1], stack[top, 2] = _CL, i, k
                stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = _IL, k, j
            else:                                   # the arc, then CR[i, k] CL[k+1, j], k = i..j-1
                if kind == _IR:
                    heads[s, j] = i
                else:
                    heads[s, i] = j
                for k in range(i, j):
                    vals[k] = CR[i, k] + CL[k + 1, j]
                k = pick_log(vals, i, j, U[s, d])
                stack[top, 0], stack[top, 1], stack[top, 2] = _CR, i, k
                stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = _CL, k + 1, j
            d += 1
            top += 2
    return logz


@nb.njit(cache=True, nogil=True)
def sample_batch(S, lengths, multiroot, U, heads, logz):
    """:func:`sample_sentence` of every row of a padded batch: S (B, N, N), U (B, k, D), heads (B, k, N) (-1 past
    each row's length), logz (B,)."""
    heads[:] = -1
    for b in range(S.shape[0]):
        logz[b] = sample_sentence(S[b], lengths[b], multiroot, U[b], heads[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sample_batch_parallel(S, lengths, multiroot, U, heads, logz):
    """:func:`sample_batch` with the sentences spread over numba's threads."""
    heads[:] = -1
    for b in nb.prange(S.shape[0]):
        logz[b] = sample_sentence(S[b], lengths[b], multiroot, U[b], heads[b])
