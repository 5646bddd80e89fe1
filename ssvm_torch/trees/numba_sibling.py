"""Compiled second-order (adjacent-sibling) projective dependency kernels: the best tree (max-plus), log Z, the
arc marginals and the sibling marginals (inside-outside), single- and multi-root, on one sentence of the
package's convention (:mod:`ssvm_torch.trees.sibling`): ``S[m, h]`` the score of word m taking head h,
``SB[m, h, s]`` the score of m and s being adjacent dependents of h on the same side, s between h and m.

The items of Eisner's algorithm with McDonald & Pereira (2006)'s sibling items, as in Zhang et al. (2020)'s
second-order TreeCRF, over spans i < j of positions 0..n (CR / CL complete, head at the left / right end;
IR / IL incomplete, the arc i -> j / j -> i; X the sibling item):

    X[i, j]  = sum_{i <= r < j} CR[i, r] CL[r+1, j]
    IR[i, j] = s(i -> j) * ( CL[i+1, j] + sum_{i < k < j} IR[i, k] X[k, j] sib(j, i, k) )
    IL[i, j] = s(j -> i) * ( CR[i, j-1] + sum_{i < k < j} X[i, k] IL[k, j] sib(i, j, k) )
    CR[i, j] = sum_{i < k <= j} IR[i, k] CR[k, j],     CL[i, j] = sum_{i <= k < j} CL[i, k] IL[k, j]

The first term of IR / IL is the dependent nearest its head (no sibling factor), the sum its adjacent sibling k
(the previous dependent of the same head on that side). Multi-root: Z = CR[0, n] (the root's children are
siblings like any head's). Single-root: the chart runs over the words only and
Z = sum_r s(0 -> r) CL[1, r] CR[r, n] (one root child, never with a sibling), SuPar's ``Dependency2oCRF``.

Z is computed in real space on shifted factors that keep every chart entry <= its number of sub-derivations:
with c_mh = max(0, max_s SB[m, h, s]) and c_m = max_h (S[m, h] + c_mh), the arc factor is
exp(S[m, h] + c_mh - c_m), the sibling factor exp(SB[m, h, s] - c_mh) and the nearest dependent's factor
exp(-c_mh) (all <= 1; log Z moves by sum_m c_m). Where Z' underflows (< ``REAL_MIN``, scores so large that
the best tree is far below the per-word maxima) the batch functions return NaN for that row and the caller
redoes it in the log semiring (:mod:`ssvm_torch.trees.torch_sibling`). Every sum over k reads rows that are
contiguous in memory: the charts are kept in both orientations (``CRt[j, i] = CR[i, j]`` ...), so the inner
loops are dot products and axpys. The outside pass writes d log Z / d S (the arc marginals) and
d log Z / d SB (the sibling marginals) directly: no autograd graph goes through the recursion.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from .numba_eisner import MAXES, REAL_MIN, SUMS

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def _factors(S, SB, n, A, E0, B3):
    """The shifted factors (module docstring): A[m, h] (arcs), E0[m, h] (nearest dependent), B3[m, h, s]
    (siblings, for s strictly between h and m). Returns sum_m c_m, or -inf when a word has no allowed head."""
    total = 0.0
    for m in range(1, n + 1):
        cm = NEG_INF
        for h in range(n + 1):
            if h == m:
                continue
            lo, hi = (h + 1, m) if h < m else (m + 1, h)
            c = 0.0
            for s in range(lo, hi):
                if SB[m, h, s] > c:
                    c = SB[m, h, s]
            E0[m, h] = c
            if S[m, h] + c > cm:
                cm = S[m, h] + c
        if cm == NEG_INF:
            return NEG_INF
        total += cm
        for h in range(n + 1):
            if h == m:
                continue
            c = E0[m, h]
            A[m, h] = math.exp(S[m, h] + c - cm)
            E0[m, h] = math.exp(-c)
            lo, hi = (h + 1, m) if h < m else (m + 1, h)
            row = B3[m, h]
            for s in range(lo, hi):
                row[s] = math.exp(SB[m, h, s] - c)
    return total


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _inside(A, E0, B3, n, multiroot, CR, CRt, CL, CLt, IR, ILt, X, Xt):
    """Sum-product inside pass on the shifted factors (module docstring); returns Z'."""
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[i, i] = 1.0
        CRt[i, i] = 1.0
        CL[i, i] = 1.0
        CLt[i, i] = 1.0
    for w in range(1, n + 1 - start):
        for i in range(start, n + 1 - w):
            j = i + w
            x = 0.0
            cr, clt = CR[i], CLt[j]
            for r in range(i, j):
                x += cr[r] * clt[r + 1]
            X[i, j] = x
            Xt[j, i] = x
            v = 0.0
            ir, xt, b = IR[i], Xt[j], B3[j, i]
            for k in range(i + 1, j):
                v += ir[k] * xt[k] * b[k]
            IR[i, j] = A[j, i] * (E0[j, i] * CL[i + 1, j] + v)
            if i > 0:                                    # the root is nobody's dependent
                v = 0.0
                xr, ilt, b = X[i], ILt[j], B3[i, j]
                for k in range(i + 1, j):
                    v += xr[k] * ilt[k] * b[k]
                ILt[j, i] = A[i, j] * (E0[i, j] * CR[i, j - 1] + v)
            else:
                ILt[j, i] = 0.0
            c = 0.0
            crt = CRt[j]
            for k in range(i + 1, j + 1):
                c += ir[k] * crt[k]
            CR[i, j] = c
            CRt[j, i] = c
            c = 0.0
            cl, ilt = CL[i], ILt[j]
            for k in range(i, j):
                c += cl[k] * ilt[k]
            CL[i, j] = c
            CLt[j, i] = c
    if multiroot:
        return CR[0, n]
    z = 0.0
    for r in range(1, n + 1):
        z += A[r, 0] * E0[r, 0] * CL[1, r] * CR[r, n]
    return z


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _outside(A, E0, B3, n, multiroot, Z, CR, CRt, CL, CLt, IR, ILt, X, Xt, O, M, MS):
    """The outside pass: M[m, h] = mu(h -> m) = d log Z / d S[m, h] and MS[m, h, s] = d log Z / d SB[m, h, s].
    ``O`` (8, n+1, n+1) holds the adjoints d Z' / d item, each item's adjoint split over a row-wise and a
    column-wise array so that every update is a contiguous axpy. Spans from the widest down; within a span
    the complete items first (they feed the incomplete items of the same span), then the incomplete ones,
    then the sibling item."""
    OCRr, OCRc, OCLr, OCLc, OIR, OILt, OXr, OXc = O[0], O[1], O[2], O[3], O[4], O[5], O[6], O[7]
    O[:] = 0.0
    start = 0 if multiroot else 1
    inv = 1.0 / Z
    if multiroot:
        OCRr[0, n] = 1.0
    else:
        for r in range(1, n + 1):
            f = A[r, 0] * E0[r, 0]
            OCLr[1, r] += f * CR[r, n]
            OCRr[r, n] += f * CL[1, r]
            M[r, 0] = f * CL[1, r] * CR[r, n] * inv
    for w in range(n - start, 0, -1):
        for i in range(start, n + 1 - w):
            j = i + w
            o = OCRr[i, j] + OCRc[j, i]
            if o != 0.0:
                oir, ocrc, crt, ir = OIR[i], OCRc[j], CRt[j], IR[i]
                for k in range(i + 1, j + 1):
                    oir[k] += o * crt[k]
                    ocrc[k] += o * ir[k]
            o = OCLr[i, j] + OCLc[j, i]
            if o != 0.0:
                oclr, oilt, ilt, cl = OCLr[i], OILt[j], ILt[j], CL[i]
                for k in range(i, j):
                    oclr[k] += o * ilt[k]
                    oilt[k] += o * cl[k]
            o = OIR[i, j]
            M[j, i] = o * IR[i, j] * inv
            g = o * A[j, i]
            if g != 0.0:
                OCLr[i + 1, j] += g * E0[j, i]
                oir, oxc, xt, ir, b, ms = OIR[i], OXc[j], Xt[j], IR[i], B3[j, i], MS[j, i]
                for k in range(i + 1, j):
                    t = g * b[k]
                    oir[k] += t * xt[k]
                    oxc[k] += t * ir[k]
                    ms[k] = t * ir[k] * xt[k] * inv
            if i > 0:
                o = OILt[j, i]
                M[i, j] = o * ILt[j, i] * inv
                g = o * A[i, j]
                if g != 0.0:
                    OCRr[i, j - 1] += g * E0[i, j]
                    oxr, oilt, ilt, xr, b, ms = OXr[i], OILt[j], ILt[j], X[i], B3[i, j], MS[i, j]
                    for k in range(i + 1, j):
                        t = g * b[k]
                        oxr[k] += t * ilt[k]
                        oilt[k] += t * xr[k]
                        ms[k] = t * xr[k] * ilt[k] * inv
            o = OXr[i, j] + OXc[j, i]
            if o != 0.0:
                ocrr, oclc, clt, cr = OCRr[i], OCLc[j], CLt[j], CR[i]
                for r in range(i, j):
                    ocrr[r] += o * clt[r + 1]
                    oclc[r + 1] += o * cr[r]


@nb.njit(cache=True, nogil=True)
def sibling_inside_outside(S, SB, n, multiroot, want_marginals, M, MS):
    """log Z of one sentence (S (>= n+1, >= n+1), SB (>= n+1,) * 3, float32 or float64) and, if
    ``want_marginals``, the arc marginals into M (n+1, n+1) and the sibling marginals into MS (n+1,) * 3
    (entries written only for s strictly between h and m; the caller zero-fills). -inf when no tree exists;
    NaN when the real-space pass underflows (the caller redoes the row in the log semiring)."""
    if n == 0:
        return 0.0
    N1 = n + 1
    A = np.zeros((N1, N1))
    E0 = np.zeros((N1, N1))
    B3 = np.zeros((N1, N1, N1))
    shift = _factors(S, SB, n, A, E0, B3)
    if shift == NEG_INF:
        return NEG_INF
    C = np.zeros((8, N1, N1))
    z = _inside(A, E0, B3, n, multiroot, C[0], C[1], C[2], C[3], C[4], C[5], C[6], C[7])
    if not (z >= REAL_MIN and z < np.inf):
        return np.nan
    if want_marginals:
        _outside(A, E0, B3, n, multiroot, z, C[0], C[1], C[2], C[3], C[4], C[5], C[6], C[7],
                 np.empty((8, N1, N1)), M, MS)
    return shift + math.log(z)


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def sibling_best(S, SB, n, multiroot, heads):
    """The best second-order projective tree of one sentence: heads[m] for m = 1..n (heads[0] = -1) and its
    score; -inf (heads undefined) when no tree exists. Max-plus on the inside items of the module docstring.
    Ties: each item keeps its first candidate attaining the max, in the order nearest dependent, then the
    siblings k = i+1 .. j-1 (incomplete items), the split points left to right (the others); single-root,
    the leftmost root child."""
    heads[0] = -1
    if n == 0:
        return 0.0
    N1 = n + 1
    CR = np.full((N1, N1), NEG_INF)
    CRt = np.full((N1, N1), NEG_INF)
    CL = np.full((N1, N1), NEG_INF)
    CLt = np.full((N1, N1), NEG_INF)
    IR = np.full((N1, N1), NEG_INF)
    ILt = np.full((N1, N1), NEG_INF)
    X = np.full((N1, N1), NEG_INF)
    Xt = np.full((N1, N1), NEG_INF)
    K = np.zeros((5, N1, N1), dtype=np.int64)         # kept splits: X, IR, IL, CR, CL
    start = 0 if multiroot else 1
    for i in range(N1):
        CR[i, i] = 0.0
        CRt[i, i] = 0.0
        CL[i, i] = 0.0
        CLt[i, i] = 0.0
    for w in range(1, n + 1 - start):
        for i in range(start, n + 1 - w):
            j = i + w
            best, arg = NEG_INF, i
            cr, clt = CR[i], CLt[j]
            for r in range(i, j):
                v = cr[r] + clt[r + 1]
                if v > best:
                    best, arg = v, r
            X[i, j] = best
            Xt[j, i] = best
            K[0, i, j] = arg
            best, arg = CL[i + 1, j], i                 # k = i: j is i's nearest right dependent
            ir, xt, b = IR[i], Xt[j], SB[j, i]
            for k in range(i + 1, j):
                v = ir[k] + xt[k] + b[k]
                if v > best:
                    best, arg = v, k
            IR[i, j] = best + S[j, i]
            K[1, i, j] = arg
            if i > 0:
                best, arg = CR[i, j - 1], j             # k = j: i is j's nearest left dependent
                xr, ilt, b = X[i], ILt[j], SB[i, j]
                for k in range(i + 1, j):
                    v = xr[k] + ilt[k] + b[k]
                    if v > best:
                        best, arg = v, k
                ILt[j, i] = best + S[i, j]
                K[2, i, j] = arg
            best, arg = NEG_INF, i + 1
            crt = CRt[j]
            for k in range(i + 1, j + 1):
                v = ir[k] + crt[k]
                if v > best:
                    best, arg = v, k
            CR[i, j] = best
            CRt[j, i] = best
            K[3, i, j] = arg
            best, arg = NEG_INF, i
            cl, ilt = CL[i], ILt[j]
            for k in range(i, j):
                v = cl[k] + ilt[k]
                if v > best:
                    best, arg = v, k
            CL[i, j] = best
            CLt[j, i] = best
            K[4, i, j] = arg
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
            k = K[3, i, j]
            a0, a1, a2, b0, b1, b2 = 2, i, k, 0, k, j
        elif item == 1:
            k = K[4, i, j]
            a0, a1, a2, b0, b1, b2 = 1, i, k, 3, k, j
        elif item == 2:
            heads[j] = i
            k = K[1, i, j]
            if k == i:
                stack[top, 0], stack[top, 1], stack[top, 2] = 1, i + 1, j
                top += 1
                continue
            a0, a1, a2, b0, b1, b2 = 2, i, k, 4, k, j
        elif item == 3:
            heads[i] = j
            k = K[2, i, j]
            if k == j:
                stack[top, 0], stack[top, 1], stack[top, 2] = 0, i, j - 1
                top += 1
                continue
            a0, a1, a2, b0, b1, b2 = 4, i, k, 3, k, j
        else:
            r = K[0, i, j]
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


@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_best_batch_parallel(S, SB, lengths, multiroot, heads, scores):
    """:func:`sibling_best_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = sibling_best(S[b], SB[b], lengths[b], multiroot, heads[b])


@nb.njit(cache=True, nogil=True)
def sibling_inside_outside_batch(S, SB, lengths, multiroot, want_marginals, logz, M, MS):
    """:func:`sibling_inside_outside` of every sentence of a padded batch: logz (B,), M (B, N, N) and MS
    (B, N, N, N) zero-filled by the caller (written only when ``want_marginals``)."""
    for b in range(S.shape[0]):
        logz[b] = sibling_inside_outside(S[b], SB[b], lengths[b], multiroot, want_marginals, M[b], MS[b])


@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_inside_outside_batch_parallel(S, SB, lengths, multiroot, want_marginals, logz, M, MS):
    """:func:`sibling_inside_outside_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        logz[b] = sibling_inside_outside(S[b], SB[b], lengths[b], multiroot, want_marginals, M[b], MS[b])
