"""Compiled exact samples of the second-order (adjacent-sibling) projective tree CRF: the log-space inside chart of
:mod:`ssvm_torch.trees.numba_sibling_log` once per sentence (items CR, CL, IR, IL and the sibling item X of
McDonald & Pereira 2006 in Eisner's chart), then each sample's derivation read top-down with a stack, every item on
it choosing one of its terms with probability term / item (:func:`ssvm_torch.trees.numba_sampling.pick_log`):

    CR[i, j] -> IR[i, k] CR[k, j],    CL[i, j] -> CL[i, k] IL[k, j],    X[i, j] -> CR[i, r] CL[r+1, j],
    IR[i, j] -> CL[i+1, j] (j the dependent nearest i)  or  IR[i, k] X[k, j] sib(j, i, k)  (k j's adjacent sibling),
    IL[i, j] -> CR[i, j-1]  or  X[i, k] IL[k, j] sib(i, j, k),

an incomplete item drawing its arc's head. O(n^3) per sentence, O(n^2) per sample; the uniforms come from the
caller (torch's generator), at most :func:`draws_per_sample` per sample. Single root: the root's one child r drawn
first from s(0 -> r) CL[1, r] CR[r, n].
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .numba_sampling import pick_log
from .numba_sibling_log import NEG_INF, log_charts

_CR, _CL, _IR, _IL, _X = 0, 1, 2, 3, 4


def draws_per_sample(N: int) -> int:
    """Uniforms one sample of a row of N positions (n = N - 1 words) may use: the root's child, each word's
    incomplete item, at most one sibling item per word and the complete items they open (5n + 2)."""
    return 5 * max(N - 1, 0) + 2


@nb.njit(cache=True, nogil=True)
def _push(stack, top, kind, i, j):
    stack[top, 0], stack[top, 1], stack[top, 2] = kind, i, j
    return top + 1


@nb.njit(cache=True, nogil=True)
def sibling_sample_sentence(S, SB, n, multiroot, U, heads):
    """Fills heads (k, >= n+1) with k exact samples of one sentence's second-order CRF from the uniforms U (k,
    >= 5n + 2); returns log Z (0 for n = 0; -inf, and nothing drawn, without a tree)."""
    if n == 0:
        return 0.0
    N1 = n + 1
    C, logz = log_charts(S, SB, n, multiroot)
    if logz == NEG_INF:
        return logz
    CR, CL, IR, IL, X = C[0], C[1], C[2], C[3], C[4]
    root = np.full(N1, NEG_INF)
    if not multiroot:
        for r in range(1, N1):
            root[r] = S[r, 0] + CL[1, r] + CR[r, n]
    vals = np.empty(n + 2)
    stack = np.empty((6 * n + 6, 3), dtype=np.int64)
    for s in range(U.shape[0]):
        heads[s, 0] = -1
        d = 0
        if multiroot:
            top = _push(stack, 0, _CR, 0, n)
        else:
            r = pick_log(root, 1, N1, U[s, d])
            d += 1
            heads[s, r] = 0
            top = _push(stack, _push(stack, 0, _CL, 1, r), _CR, r, n)
        while top > 0:
            top -= 1
            kind, i, j = stack[top, 0], stack[top, 1], stack[top, 2]
            if i == j:
                continue
            if kind == _CR:
                for k in range(i + 1, j + 1):
                    vals[k] = IR[i, k] + CR[k, j]
                k = pick_log(vals, i + 1, j + 1, U[s, d])
                top = _push(stack, _push(stack, top, _IR, i, k), _CR, k, j)
            elif kind == _CL:
                for k in range(i, j):
                    vals[k] = CL[i, k] + IL[k, j]
                k = pick_log(vals, i, j, U[s, d])
                top = _push(stack, _push(stack, top, _CL, i, k), _IL, k, j)
            elif kind == _X:
                for r in range(i, j):
                    vals[r] = CR[i, r] + CL[r + 1, j]
                r = pick_log(vals, i, j, U[s, d])
                top = _push(stack, _push(stack, top, _CR, i, r), _CL, r + 1, j)
            elif kind == _IR:                      # i -> j; vals[i]: j nearest, vals[k]: sibling k
                heads[s, j] = i
                vals[i] = CL[i + 1, j]
                for k in range(i + 1, j):
                    vals[k] = IR[i, k] + X[k, j] + SB[j, i, k]
                k = pick_log(vals, i, j, U[s, d])
                if k == i:
                    top = _push(stack, top, _CL, i + 1, j)
                else:
                    top = _push(stack, _push(stack, top, _IR, i, k), _X, k, j)
            else:                                  # j -> i; vals[i]: i nearest, vals[k]: sibling k
                heads[s, i] = j
                vals[i] = CR[i, j - 1]
                for k in range(i + 1, j):
                    vals[k] = X[i, k] + IL[k, j] + SB[i, j, k]
                k = pick_log(vals, i, j, U[s, d])
                if k == i:
                    top = _push(stack, top, _CR, i, j - 1)
                else:
                    top = _push(stack, _push(stack, top, _X, i, k), _IL, k, j)
            d += 1
    return logz


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_sample_batch(S, SB, lengths, multiroot, U, heads, logz):
    """:func:`sibling_sample_sentence` of every row of a padded batch (heads (B, k, N), -1 past each row's length;
    logz (B,)), spread over numba's threads."""
    heads[:] = -1
    for b in nb.prange(S.shape[0]):
        logz[b] = sibling_sample_sentence(S[b], SB[b], lengths[b], multiroot, U[b], heads[b])
