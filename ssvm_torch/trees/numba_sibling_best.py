"""The compiled second-order (adjacent-sibling) projective best tree: the max-plus pass over the items of
:mod:`ssvm_torch.trees.numba_sibling` (the same spans, visited by right end, and the same packed left sibling
rows, which that module's docstring explains), then a backtrack; single- and multi-root, float32 or float64
scores, per sentence or a padded batch (spread over numba's threads or not)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .numba_eisner import MAXES
from .numba_sibling import NEG_INF, _offsets, _pack_left


@nb.njit(cache=True, nogil=True, fastmath=MAXES, inline="always")
def _max2(init, a, ao, b, bo, lo, hi):
    """max(init, max_{lo <= k < hi} a[ao + k] + b[bo + k]), four running maxima: numba's max-reductions do not
    vectorize, and four independent chains run about four times faster than one."""
    m0 = m1 = m2 = init
    m3 = init
    k = lo
    while k + 4 <= hi:
        m0 = max(m0, a[ao + k] + b[bo + k])
        m1 = max(m1, a[ao + k + 1] + b[bo + k + 1])
        m2 = max(m2, a[ao + k + 2] + b[bo + k + 2])
        m3 = max(m3, a[ao + k + 3] + b[bo + k + 3])
        k += 4
    while k < hi:
        m0 = max(m0, a[ao + k] + b[bo + k])
        k += 1
    return max(max(m0, m1), max(m2, m3))


@nb.njit(cache=True, nogil=True, fastmath=MAXES, inline="always")
def _max3(init, a, b, c, co, lo, hi):
    """max(init, max_{lo <= k < hi} a[k] + b[k] + c[co + k]) (:func:`_max2`'s four chains; the sums in the order
    the backtrack recomputes them)."""
    m0 = m1 = m2 = init
    m3 = init
    k = lo
    while k + 4 <= hi:
        m0 = max(m0, a[k] + b[k] + c[co + k])
        m1 = max(m1, a[k + 1] + b[k + 1] + c[co + k + 1])
        m2 = max(m2, a[k + 2] + b[k + 2] + c[co + k + 2])
        m3 = max(m3, a[k + 3] + b[k + 3] + c[co + k + 3])
        k += 4
    while k < hi:
        m0 = max(m0, a[k] + b[k] + c[co + k])
        k += 1
    return max(max(m0, m1), max(m2, m3))


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def _best_inside(S, SB, SL, off, n, multiroot, first_child, CR, CRt, CL, CLt, IR, ILt, JR, JLt, X, Xt):
    """The max-plus inside pass (no shift: max-plus needs none) in the inside order: the items' best values,
    JR / JLt the incomplete items' values before their arc score; the left sibling scores packed in SL
    (:func:`_pack_left`); ``first_child``: a head's nearest dependent m on each side scores SB[m, h, h]
    (:func:`sibling_best`). Every inner loop is a max-reduction over contiguous rows (it vectorizes); the
    backtrack finds the kept candidates again (:func:`sibling_best`)."""
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[i, i] = 0.0
        CRt[i, i] = 0.0
        CL[i, i] = 0.0
        CLt[i, i] = 0.0
    for j in range(start + 1, n + 1):
        xt, ilt, crt, clt, jlt = Xt[j], ILt[j], CRt[j], CLt[j], JLt[j]
        for i in range(j - 1, start - 1, -1):
            o = off[j, i] - i - 1
            cr, ir, cl = CR[i], IR[i], CL[i]
            best = _max2(NEG_INF, cr, 0, clt, 1, i, j)
            X[i, j] = best
            xt[i] = best
            near = CL[i + 1, j] + SB[j, i, i] if first_child else CL[i + 1, j]
            best = _max3(near, ir, xt, SB[j, i], 0, i + 1, j)              # first: j, i's nearest right dependent
            JR[i, j] = best
            IR[i, j] = best + S[j, i]
            if i > 0:
                near = CR[i, j - 1] + SB[i, j, j] if first_child else CR[i, j - 1]
                best = _max3(near, X[i], ilt, SL, o, i + 1, j)              # first: i, j's nearest left dependent
                jlt[i] = best
                ilt[i] = best + S[i, j]
            best = _max2(NEG_INF, ir, 0, crt, 0, i + 1, j + 1)
            CR[i, j] = best
            crt[i] = best
            best = _max2(NEG_INF, cl, 0, ilt, 0, i, j)
            CL[i, j] = best
            clt[i] = best


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def sibling_best(S, SB, n, multiroot, heads, first_child=False):
    """The best second-order projective tree of one sentence: heads[m] for m = 1..n (heads[0] = -1) and its score;
    -inf (heads undefined) when no tree exists. ``first_child``: the dependent m nearest its head h on its side (the
    root's one child too, single-root) scores SB[m, h, h] besides its arc, McDonald & Pereira 2006's s(h, -, m)
    (SuPar's convention, the default, gives it nothing and never reads s = h). Max-plus on the inside items of the
    module docstring, then a backtrack that takes, for each item on the best derivation, its first candidate
    attaining the item's value (the same sums in the same order, so the equality is exact; each scan stops at its
    last candidate whatever happens). Ties: in the order nearest dependent, then the siblings k = i+1 .. j-1
    (incomplete items), the split points left to right (the others); single-root, the leftmost root child."""
    heads[0] = -1
    if n == 0:
        return 0.0
    N1 = n + 1
    off = _offsets(n)
    SL = np.empty(off[n + 1, 0], dtype=SB.dtype)
    _pack_left(SB, n, off, SL)
    C = np.full((10, N1, N1), NEG_INF)
    CR, CRt, CL, CLt, IR, ILt, JR, JLt, X, Xt = C[0], C[1], C[2], C[3], C[4], C[5], C[6], C[7], C[8], C[9]
    _best_inside(S, SB, SL, off, n, multiroot, first_child, CR, CRt, CL, CLt, IR, ILt, JR, JLt, X, Xt)
    # backtrack with an explicit stack of (item, i, j); item 0 = CR, 1 = CL, 2 = IR, 3 = IL, 4 = X
    stack = np.empty((4 * N1 + 8, 3), dtype=np.int64)
    if multiroot:
        best = CR[0, n]
        stack[0, 0], stack[0, 1], stack[0, 2] = 0, 0, n
        top = 1
    else:
        best, root = NEG_INF, 1
        for r in range(1, n + 1):
            v = S[r, 0] + CL[1, r] + CR[r, n]
            if first_child:
                v += SB[r, 0, 0]
            if v > best:
                best, root = v, r
        heads[root] = 0
        stack[0, 0], stack[0, 1], stack[0, 2] = 1, 1, root
        stack[1, 0], stack[1, 1], stack[1, 2] = 0, root, n
        top = 2
    if best == NEG_INF:
        return NEG_INF
    while top > 0:
        top -= 1
        item, i, j = stack[top, 0], stack[top, 1], stack[top, 2]
        if i == j:
            continue
        if item == 0:
            k = i + 1
            while k < j and IR[i, k] + CRt[j, k] != CR[i, j]:
                k += 1
            a0, a1, a2, b0, b1, b2 = 2, i, k, 0, k, j
        elif item == 1:
            k = i
            while k < j - 1 and CL[i, k] + ILt[j, k] != CL[i, j]:
                k += 1
            a0, a1, a2, b0, b1, b2 = 1, i, k, 3, k, j
        elif item == 2:
            heads[j] = i
            v = JR[i, j]
            if (CL[i + 1, j] + SB[j, i, i] if first_child else CL[i + 1, j]) == v:
                stack[top, 0], stack[top, 1], stack[top, 2] = 1, i + 1, j
                top += 1
                continue
            k = i + 1
            while k < j - 1 and IR[i, k] + Xt[j, k] + SB[j, i, k] != v:
                k += 1
            a0, a1, a2, b0, b1, b2 = 2, i, k, 4, k, j
        elif item == 3:
            heads[i] = j
            v = JLt[j, i]
            if (CR[i, j - 1] + SB[i, j, j] if first_child else CR[i, j - 1]) == v:
                stack[top, 0], stack[top, 1], stack[top, 2] = 0, i, j - 1
                top += 1
                continue
            k = i + 1
            o = off[j, i] - i - 1
            while k < j - 1 and X[i, k] + ILt[j, k] + SL[o + k] != v:
                k += 1
            a0, a1, a2, b0, b1, b2 = 4, i, k, 3, k, j
        else:
            r = i
            while r < j - 1 and CR[i, r] + CLt[j, r + 1] != X[i, j]:
                r += 1
            a0, a1, a2, b0, b1, b2 = 0, i, r, 1, r + 1, j
        stack[top, 0], stack[top, 1], stack[top, 2] = a0, a1, a2
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = b0, b1, b2
        top += 2
    return best


@nb.njit(cache=True, nogil=True)
def sibling_best_batch(S, SB, lengths, multiroot, heads, scores):
    """:func:`sibling_best` of every sentence of a padded batch S (B, N, N), SB (B, N, N, N), lengths (B,):
    heads (B, N) (-1 at 0 and beyond the length), scores (B,)."""
    for b in range(S.shape[0]):
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = sibling_best(S[b], SB[b], lengths[b], multiroot, heads[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_best_batch_parallel(S, SB, lengths, multiroot, heads, scores):
    """:func:`sibling_best_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = sibling_best(S[b], SB[b], lengths[b], multiroot, heads[b])


