"""Compiled second-order (adjacent-sibling) projective dependency kernels: log Z, the arc marginals and the
sibling marginals (inside-outside), single- and multi-root (the best tree: :mod:`ssvm_torch.trees.numba_sibling_best`), on one sentence of the
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
the best tree is far below the per-word maxima, as a trained parser's are on long sentences) the sentence is
redone by the compiled log-space pass (:mod:`ssvm_torch.trees.numba_sibling_log`). The outside pass writes d log Z / d S
(the arc marginals) and d log Z / d SB (the sibling marginals) directly: no autograd graph goes through the
recursion.

Memory order. Every sum over k reads rows that are contiguous in memory: the charts are kept in both
orientations (``CRt[j, i] = CR[i, j]`` ...), so the inner loops are dot products and axpys. The spans are
visited by their right end j, then their left end i downwards (the inside pass; the outside pass in reverse),
so the sibling rows of span (i, j) -- SB[j, i, i+1:j] for the arc i -> j, SB[i, j, i+1:j] for j -> i -- are
read block by block: the right ones lie in SB's block j already; the left ones (one per block i, scattered
across all of SB: a cache miss each, which made a batch of sentences three times slower than one sentence
reused) are first gathered in SB's own order into a packed array keyed by (j, i) (:func:`_offsets`), and
the factors and the left sibling marginals go through packed arrays the same way.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched
from .numba_eisner import MAXES, REAL_MIN, SUMS
from .numba_sibling_log import sibling_inside_outside_log

__all__ = ["sibling_inside_outside", "sibling_inside_outside_batch", "sibling_inside_outside_batch_parallel"]

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def _offsets(n):
    """off[j, i] (i < j): where the j - i - 1 sibling entries k = i+1 .. j-1 of span (i, j) start in a packed
    array ordered by j, then i (sum_j j (j - 1) / 2 = n (n + 1) (n - 1) / 6 entries in all); off[n + 1, 0]
    is the total."""
    off = np.zeros((n + 2, n + 1), dtype=np.int64)
    at = 0
    for j in range(n + 1):
        for i in range(j):
            off[j, i] = at
            at += j - i - 1
    off[n + 1, 0] = at
    return off


@nb.njit(cache=True, nogil=True)
def _pack_left(SB, n, off, P):
    """P[off[j, i] + k - i - 1] = SB[i, j, k] for i < k < j (the left sibling rows, m = i < h = j), read in
    SB's own order."""
    for m in range(1, n + 1):
        for h in range(m + 2, n + 1):
            row, o = SB[m, h], off[h, m] - m - 1
            for k in range(m + 1, h):
                P[o + k] = row[k]


@nb.njit(cache=True, nogil=True, fastmath=MAXES, inline="always")
def _max1(init, a, lo, hi):
    """max(init, max_{lo <= k < hi} a[k]) (:func:`_max2`'s four chains)."""
    m0 = m1 = m2 = init
    m3 = init
    k = lo
    while k + 4 <= hi:
        m0 = max(m0, a[k])
        m1 = max(m1, a[k + 1])
        m2 = max(m2, a[k + 2])
        m3 = max(m3, a[k + 3])
        k += 4
    while k < hi:
        m0 = max(m0, a[k])
        k += 1
    return max(max(m0, m1), max(m2, m3))


@nb.njit(cache=True, nogil=True)
def _factors(S, SB, n, off, A, E0, BR, BL):
    """The shifted factors (module docstring): A[m, h] (arcs), E0[m, h] (nearest dependent) and the sibling
    factors, packed: BR[off[j, i] + k - i - 1] for the arc i -> j (SB[j, i, k]), BL likewise for j -> i
    (SB[i, j, k]). Returns sum_m c_m, or -inf when a word has no allowed head. SB is read in its own order."""
    total = 0.0
    for m in range(1, n + 1):
        cm = NEG_INF
        for h in range(n + 1):
            if h == m:
                continue
            lo, hi = (h + 1, m) if h < m else (m + 1, h)
            c = _max1(0.0, SB[m, h], lo, hi)
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
            row = SB[m, h]
            if h < m:
                o = off[m, h] - h - 1
                for s in range(h + 1, m):
                    BR[o + s] = math.exp(row[s] - c)
            else:
                o = off[h, m] - m - 1
                for s in range(m + 1, h):
                    BL[o + s] = math.exp(row[s] - c)
    return total


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _inside(A, E0, BR, BL, off, n, multiroot, CR, CRt, CL, CLt, IR, ILt, X, Xt):
    """Sum-product inside pass on the shifted factors (module docstring), spans by right end, then left end
    downwards; returns Z'."""
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[i, i] = 1.0
        CRt[i, i] = 1.0
        CL[i, i] = 1.0
        CLt[i, i] = 1.0
    for j in range(start + 1, n + 1):
        xt, ilt, crt, clt = Xt[j], ILt[j], CRt[j], CLt[j]
        for i in range(j - 1, start - 1, -1):
            o = off[j, i] - i - 1
            x = 0.0
            cr = CR[i]
            for r in range(i, j):
                x += cr[r] * clt[r + 1]
            X[i, j] = x
            xt[i] = x
            v = 0.0
            ir = IR[i]
            for k in range(i + 1, j):
                v += ir[k] * xt[k] * BR[o + k]
            IR[i, j] = A[j, i] * (E0[j, i] * CL[i + 1, j] + v)
            if i > 0:                                    # the root is nobody's dependent
                v = 0.0
                xr = X[i]
                for k in range(i + 1, j):
                    v += xr[k] * ilt[k] * BL[o + k]
                ilt[i] = A[i, j] * (E0[i, j] * CR[i, j - 1] + v)
            else:
                ilt[i] = 0.0
            c = 0.0
            for k in range(i + 1, j + 1):
                c += ir[k] * crt[k]
            CR[i, j] = c
            crt[i] = c
            c = 0.0
            cl = CL[i]
            for k in range(i, j):
                c += cl[k] * ilt[k]
            CL[i, j] = c
            clt[i] = c
    if multiroot:
        return CR[0, n]
    z = 0.0
    for r in range(1, n + 1):
        z += A[r, 0] * E0[r, 0] * CL[1, r] * CR[r, n]
    return z


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _outside(A, E0, BR, BL, off, n, multiroot, Z, CR, CRt, CL, CLt, IR, ILt, X, Xt, O, M, MS, ML):
    """The outside pass: M[m, h] = mu(h -> m) = d log Z / d S[m, h] and the sibling marginals d log Z / d SB:
    MS[j, i, k] for the arcs i -> j, packed ML[off[j, i] + k - i - 1] for j -> i (the caller scatters them).
    ``O`` (8, n+1, n+1) holds the adjoints d Z' / d item, each item's adjoint split over a row-wise and a
    column-wise array so that every update is a contiguous axpy. Spans in the reverse of the inside order;
    within a span the complete items first (they feed the incomplete items of the same span), then the
    incomplete ones, then the sibling item."""
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
    for j in range(n, start, -1):
        ocrc, oclc, oilt, oxc = OCRc[j], OCLc[j], OILt[j], OXc[j]
        crt, clt, ilt, xt = CRt[j], CLt[j], ILt[j], Xt[j]
        for i in range(start, j):
            o = off[j, i] - i - 1
            g = OCRr[i, j] + ocrc[i]
            if g != 0.0:
                oir, ir = OIR[i], IR[i]
                for k in range(i + 1, j + 1):
                    oir[k] += g * crt[k]
                    ocrc[k] += g * ir[k]
            g = OCLr[i, j] + oclc[i]
            if g != 0.0:
                oclr, cl = OCLr[i], CL[i]
                for k in range(i, j):
                    oclr[k] += g * ilt[k]
                    oilt[k] += g * cl[k]
            g = OIR[i, j]
            M[j, i] = g * IR[i, j] * inv
            g *= A[j, i]
            if g != 0.0:
                OCLr[i + 1, j] += g * E0[j, i]
                oir, ir, ms = OIR[i], IR[i], MS[j, i]
                for k in range(i + 1, j):
                    t = g * BR[o + k]
                    oir[k] += t * xt[k]
                    oxc[k] += t * ir[k]
                    ms[k] = t * ir[k] * xt[k] * inv
            if i > 0:
                g = oilt[i]
                M[i, j] = g * ilt[i] * inv
                g *= A[i, j]
                if g != 0.0:
                    OCRr[i, j - 1] += g * E0[i, j]
                    oxr, xr = OXr[i], X[i]
                    for k in range(i + 1, j):
                        t = g * BL[o + k]
                        oxr[k] += t * ilt[k]
                        oilt[k] += t * xr[k]
                        ML[o + k] = t * xr[k] * ilt[k] * inv
            g = OXr[i, j] + oxc[i]
            if g != 0.0:
                ocrr, cr = OCRr[i], CR[i]
                for r in range(i, j):
                    ocrr[r] += g * clt[r + 1]
                    oclc[r + 1] += g * cr[r]


@nb.njit(cache=True, nogil=True)
def _real_space_inside(S, SB, n, multiroot):
    """The real-space inside pass of one sentence (n >= 1) on the shifted factors: (shift, Z', the factors
    A, E0, BR, BL, the offsets, the charts C (8, n+1, n+1)); shift -inf (and Z' 0) when no tree exists."""
    N1 = n + 1
    off = _offsets(n)
    total = off[n + 1, 0]
    A = np.zeros((N1, N1))
    E0 = np.zeros((N1, N1))
    BR = np.empty(total)
    BL = np.empty(total)
    C = np.zeros((8, N1, N1))
    shift = _factors(S, SB, n, off, A, E0, BR, BL)
    if shift == NEG_INF:
        return shift, 0.0, A, E0, BR, BL, off, C
    z = _inside(A, E0, BR, BL, off, n, multiroot, C[0], C[1], C[2], C[3], C[4], C[5], C[6], C[7])
    return shift, z, A, E0, BR, BL, off, C


@nb.njit(cache=True, nogil=True)
def real_space_partition(S, SB, n, multiroot):
    """Z' = Z exp(-shift) of one sentence as the real-space pass computes it (module docstring): below ``REAL_MIN``
    (or not finite) it has underflowed (overflowed), and :func:`sibling_inside_outside` redoes the sentence in log
    space. 0 when no tree exists, 1 for n = 0."""
    if n == 0:
        return 1.0
    return _real_space_inside(S, SB, n, multiroot)[1]


@nb.njit(cache=True, nogil=True)
def sibling_inside_outside(S, SB, n, multiroot, want_marginals, M, MS):
    """log Z of one sentence (S (>= n+1, >= n+1), SB (>= n+1,) * 3, float32 or float64) and, if
    ``want_marginals``, the arc marginals into M (n+1, n+1) and the sibling marginals into MS (n+1,) * 3
    (entries written only for s strictly between h and m; the caller zero-fills). -inf when no tree exists.
    Real space on the shifted factors, the log-space pass where that underflows (module docstring)."""
    if n == 0:
        return 0.0
    N1 = n + 1
    shift, z, A, E0, BR, BL, off, C = _real_space_inside(S, SB, n, multiroot)
    if shift == NEG_INF:
        return NEG_INF
    total = off[n + 1, 0]
    if not (z >= REAL_MIN and z < np.inf):
        return sibling_inside_outside_log(S, SB, n, multiroot, want_marginals, M, MS)
    if want_marginals:
        ML = np.zeros(total)           # entries the outside pass skips (a zero adjoint) stay 0, as in MS
        _outside(A, E0, BR, BL, off, n, multiroot, z, C[0], C[1], C[2], C[3], C[4], C[5], C[6], C[7],
                 np.empty((8, N1, N1)), M, MS, ML)
        for m in range(1, n + 1):                     # the left sibling marginals, written in MS's own order
            for h in range(m + 2, n + 1):
                row, o = MS[m, h], off[h, m] - m - 1
                for k in range(m + 1, h):
                    row[k] = ML[o + k]
    return shift + math.log(z)


@nb.njit(cache=True, nogil=True)
def sibling_inside_outside_batch(S, SB, lengths, multiroot, want_marginals, logz, M, MS):
    """:func:`sibling_inside_outside` of every sentence of a padded batch: logz (B,), M (B, N, N) and MS
    (B, N, N, N) zero-filled by the caller (written only when ``want_marginals``)."""
    for b in range(S.shape[0]):
        logz[b] = sibling_inside_outside(S[b], SB[b], lengths[b], multiroot, want_marginals, M[b], MS[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_inside_outside_batch_parallel(S, SB, lengths, multiroot, want_marginals, logz, M, MS):
    """:func:`sibling_inside_outside_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        logz[b] = sibling_inside_outside(S[b], SB[b], lengths[b], multiroot, want_marginals, M[b], MS[b])
