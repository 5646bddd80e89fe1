"""Compiled first-order projective dependency kernels (Eisner 1996, 2000): the best tree (max-plus),
log Z and the arc marginals (inside-outside), single- and multi-root, on one sentence of the package's
convention (:mod:`ssvm_torch.trees`): ``S[m, h]`` the score of word m taking head h, position 0 the
root, words 1..n.

Charts over spans i < j of positions 0..n (Eisner's "complete" and "incomplete" items):

    IR[i, j] = s(i -> j) * X[i, j],    IL[i, j] = s(j -> i) * X[i, j],   X[i, j] = sum_{k=i}^{j-1} CR[i, k] CL[k+1, j]
    CR[i, j] = sum_{k=i+1}^{j} IR[i, k] CR[k, j],     CL[i, j] = sum_{k=i}^{j-1} CL[i, k] IL[k, j]

(CR: complete span headed at its left end, CL: at its right end; CR[i, i] = CL[i, i] = 1), in the sum-product
semiring for Z and the max-plus semiring for the best tree. Multi-root: Z = CR[0, n] (the root may take any
number of children). Single-root: the root takes exactly one child r, so the chart runs over the words only
and Z = sum_r s(0 -> r) CL[1, r] CR[r, n].

Every sum over k reads two rows that are contiguous in memory: the charts are kept in both orientations
(``CRt[j, i] = CR[i, j]``, ``CLt``, ``ILt``), so the inner loops are dot products (or max-reductions) that
the compiler vectorizes. Z is computed in real space after shifting each word's scores by their maximum
over heads (exact: every tree gives each word one head, so log Z moves by the sum of the shifts), which
keeps every chart entry <= the number of sub-trees (no overflow for n < 500 in float64); where a tree is
so far below the row maxima that Z underflows (Z' < ``REAL_MIN``), the sentence is redone in log space
(:func:`inside_outside_log`). Inputs may be float32 or float64; the charts are float64.

The outside pass writes d log Z / d S[m, h] = the arc marginal mu(h -> m) directly (the CRF's gradient), so
no autograd graph is built through the recursion.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched

#: below this rescaled partition function the real-space pass can have lost mass to underflow (a span
#: below the float64 minimum contributes < 1e-308 * 4^n * n^2 in absolute terms): redo in log space
REAL_MIN = 1e-200

NEG_INF = -np.inf
#: LLVM may reorder the chart sums (a reduction vectorizes only if reassociated): the real-space passes'
#: values then depend on the vector width in the last bits, never on the data's order
SUMS = {"reassoc", "contract", "nsz"}
#: max-reductions vectorize once NaN is ruled out (scores are checked for NaN before any kernel runs);
#: -inf (an absent arc) stays allowed, so no "ninf"
MAXES = {"nnan", "nsz"}


@nb.njit(cache=True, nogil=True)
def _shifted_arcs(S, n, AR, AL):
    """The arc potentials by width after the row shift: AR[w, i] = exp(S[i+w, i] - c_{i+w}) (arc
    i -> i+w), AL[w, i] = exp(S[i, i+w] - c_i) (arc i+w -> i; 0 for i = 0: the root takes no head),
    c_m = max_h S[m, h]. Returns sum_m c_m, or -inf when a word has no allowed head (no tree)."""
    total = 0.0
    for m in range(1, n + 1):
        mx = NEG_INF
        for h in range(n + 1):
            if h != m and S[m, h] > mx:
                mx = S[m, h]
        if mx == NEG_INF:
            return NEG_INF
        total += mx
        for h in range(m):
            AR[m - h, h] = math.exp(S[m, h] - mx)
        for h in range(m + 1, n + 1):
            AL[h - m, m] = math.exp(S[m, h] - mx)
    for w in range(1, n + 1):
        AL[w, 0] = 0.0
    return total


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _inside_real(AR, AL, n, multiroot, CR, CL, IR, IL, x):
    """Sum-product inside pass on the shifted potentials, charts by [width, start]; returns Z' (module
    docstring). For one width and one split offset d every chart read is a contiguous row slice, so the
    loops over the span's start vectorize with no reduction across them."""
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[0, i] = 1.0
        CL[0, i] = 1.0
    for w in range(1, n + 1 - start):
        hi = n + 1 - w
        for i in range(start, hi):
            x[i] = 0.0
        for d in range(w):
            a, b = CR[d], CL[w - 1 - d, d + 1:]
            for i in range(start, hi):
                x[i] += a[i] * b[i]
        irw, ilw, arw, alw = IR[w], IL[w], AR[w], AL[w]
        for i in range(start, hi):
            irw[i] = x[i] * arw[i]
            ilw[i] = x[i] * alw[i]
            x[i] = 0.0
        for d in range(1, w + 1):
            a, b = IR[d], CR[w - d, d:]
            for i in range(start, hi):
                x[i] += a[i] * b[i]
        crw = CR[w]
        for i in range(start, hi):
            crw[i] = x[i]
            x[i] = 0.0
        for d in range(w):
            a, b = CL[d], IL[w - d, d:]
            for i in range(start, hi):
                x[i] += a[i] * b[i]
        clw = CL[w]
        for i in range(start, hi):
            clw[i] = x[i]
    if multiroot:
        return CR[n, 0]
    z = 0.0
    for r in range(1, n + 1):
        z += AR[r, 0] * CL[r - 1, 1] * CR[n - r, r]
    return z


@nb.njit(cache=True, nogil=True, fastmath=SUMS)
def _outside_real(AR, AL, n, multiroot, Z, CR, CL, IR, IL, OCR, OCL, OIR, OIL, g, M):
    """Outside pass on the width-layout charts: M[m, h] = mu(h -> m) = d log Z / d S[m, h]. Widths from the
    widest down; within a width the complete items first (they feed the incomplete items of the same
    width, nothing else of it), then the incomplete ones; every update is a contiguous axpy."""
    N1 = n + 1
    for a in range(N1):
        for b in range(N1):
            OCR[a, b] = 0.0
            OCL[a, b] = 0.0
            OIR[a, b] = 0.0
            OIL[a, b] = 0.0
            M[a, b] = 0.0
    start = 0 if multiroot else 1
    inv = 1.0 / Z
    if multiroot:
        OCR[n, 0] = 1.0
    else:
        for r in range(1, n + 1):
            OCL[r - 1, 1] += AR[r, 0] * CR[n - r, r]
            OCR[n - r, r] += AR[r, 0] * CL[r - 1, 1]
            M[r, 0] = AR[r, 0] * CL[r - 1, 1] * CR[n - r, r] * inv
    for w in range(n - start, 0, -1):
        hi = n + 1 - w
        o = OCR[w]
        for d in range(1, w + 1):
            oi, c, oc, ir = OIR[d], CR[w - d, d:], OCR[w - d, d:], IR[d]
            for i in range(start, hi):
                oi[i] += o[i] * c[i]
                oc[i] += o[i] * ir[i]
        o = OCL[w]
        for d in range(w):
            ol, il, oil, cl = OCL[d], IL[w - d, d:], OIL[w - d, d:], CL[d]
            for i in range(start, hi):
                ol[i] += o[i] * il[i]
                oil[i] += o[i] * cl[i]
        oir, oil, irw, ilw, arw, alw = OIR[w], OIL[w], IR[w], IL[w], AR[w], AL[w]
        for i in range(start, hi):
            M[i + w, i] = oir[i] * irw[i] * inv
            M[i, i + w] = oil[i] * ilw[i] * inv
            g[i] = oir[i] * arw[i] + oil[i] * alw[i]
        for d in range(w):
            oc, cl, ol, cr = OCR[d], CL[w - 1 - d, d + 1:], OCL[w - 1 - d, d + 1:], CR[d]
            for i in range(start, hi):
                oc[i] += g[i] * cl[i]
                ol[i] += g[i] * cr[i]


@nb.njit(cache=True, nogil=True)
def lae(a, b):
    """log(exp(a) + exp(b)) without overflow."""
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@nb.njit(cache=True, nogil=True)
def log_inside(S, n, multiroot):
    """The inside pass in log space: (CR, CRt, CL, CLt, IR, ILt, log Z), the charts (n+1, n+1) of the module
    docstring and their transposes (log values, -inf where nothing), read by :func:`inside_outside_log` and by
    the sampler of :mod:`ssvm_torch.trees.numba_sampling`."""
    N1 = n + 1
    CR = np.full((N1, N1), NEG_INF)
    CRt = np.full((N1, N1), NEG_INF)
    CL = np.full((N1, N1), NEG_INF)
    CLt = np.full((N1, N1), NEG_INF)
    IR = np.full((N1, N1), NEG_INF)
    ILt = np.full((N1, N1), NEG_INF)
    start = 0 if multiroot else 1
    for i in range(N1):
        CR[i, i] = 0.0
        CRt[i, i] = 0.0
        CL[i, i] = 0.0
        CLt[i, i] = 0.0
    for w in range(1, n + 1 - start):
        for i in range(start, n + 1 - w):
            j = i + w
            x = NEG_INF
            for k in range(i, j):
                x = lae(x, CR[i, k] + CLt[j, k + 1])
            IR[i, j] = x + S[j, i]
            ILt[j, i] = x + S[i, j] if i > 0 else NEG_INF
            c = NEG_INF
            for k in range(i + 1, j + 1):
                c = lae(c, IR[i, k] + CRt[j, k])
            CR[i, j] = c
            CRt[j, i] = c
            c = NEG_INF
            for k in range(i, j):
                c = lae(c, CL[i, k] + ILt[j, k])
            CL[i, j] = c
            CLt[j, i] = c
    if multiroot:
        logz = CR[0, n]
    else:
        logz = NEG_INF
        for r in range(1, n + 1):
            logz = lae(logz, S[r, 0] + CL[1, r] + CR[r, n])
    return CR, CRt, CL, CLt, IR, ILt, logz


@nb.njit(cache=True, nogil=True)
def inside_outside_log(S, n, multiroot, want_marginals, M):
    """The same inside-outside in log space (no shift, no underflow; one exp per term): the fallback of
    :func:`inside_outside` and its reference in the tests. Returns log Z; fills M when asked."""
    N1 = n + 1
    start = 0 if multiroot else 1
    CR, CRt, CL, CLt, IR, ILt, logz = log_inside(S, n, multiroot)
    if not want_marginals or logz == NEG_INF:
        return logz
    OCRr = np.full((N1, N1), NEG_INF)
    OCRc = np.full((N1, N1), NEG_INF)
    OCLr = np.full((N1, N1), NEG_INF)
    OCLc = np.full((N1, N1), NEG_INF)
    OIR = np.full((N1, N1), NEG_INF)
    OILt = np.full((N1, N1), NEG_INF)
    for a in range(N1):
        for b in range(N1):
            M[a, b] = 0.0
    if multiroot:
        OCRr[0, n] = 0.0
    else:
        for r in range(1, n + 1):
            OCLr[1, r] = lae(OCLr[1, r], S[r, 0] + CR[r, n])
            OCRr[r, n] = lae(OCRr[r, n], S[r, 0] + CL[1, r])
            M[r, 0] = math.exp(S[r, 0] + CL[1, r] + CR[r, n] - logz)
    for w in range(n - start, 0, -1):
        for i in range(start, n + 1 - w):
            j = i + w
            o = lae(OCRr[i, j], OCRc[j, i])
            if o != NEG_INF:
                for k in range(i + 1, j + 1):
                    OIR[i, k] = lae(OIR[i, k], o + CRt[j, k])
                    OCRc[j, k] = lae(OCRc[j, k], o + IR[i, k])
            o = lae(OCLr[i, j], OCLc[j, i])
            if o != NEG_INF:
                for k in range(i, j):
                    OCLr[i, k] = lae(OCLr[i, k], o + ILt[j, k])
                    OILt[j, k] = lae(OILt[j, k], o + CL[i, k])
            o_r = OIR[i, j]
            o_l = OILt[j, i]
            M[j, i] = math.exp(o_r + IR[i, j] - logz) if o_r != NEG_INF and IR[i, j] != NEG_INF else 0.0
            g = o_r + S[j, i]
            if i > 0:
                M[i, j] = math.exp(o_l + ILt[j, i] - logz) if o_l != NEG_INF and ILt[j, i] != NEG_INF else 0.0
                g = lae(g, o_l + S[i, j])
            if g != NEG_INF:
                for k in range(i, j):
                    OCRr[i, k] = lae(OCRr[i, k], g + CLt[j, k + 1])
                    OCLc[j, k + 1] = lae(OCLc[j, k + 1], g + CR[i, k])
    return logz


@nb.njit(cache=True, nogil=True)
def inside_outside(S, n, multiroot, want_marginals, M):
    """log Z of one sentence (S (>= n+1, >= n+1), float32 or float64) and, if ``want_marginals``, the arc
    marginals into M (n+1, n+1) (M[m, h] = mu(h -> m), zero elsewhere): real space after the row shift,
    log space where that underflows (module docstring). -inf when no tree exists."""
    if n == 0:
        for a in range(M.shape[0]):
            for b in range(M.shape[1]):
                M[a, b] = 0.0
        return 0.0
    N1 = n + 1
    AR = np.zeros((N1, N1))
    AL = np.zeros((N1, N1))
    shift = _shifted_arcs(S, n, AR, AL)
    if shift == NEG_INF:
        return NEG_INF
    CR = np.zeros((N1, N1))
    CL = np.zeros((N1, N1))
    IR = np.zeros((N1, N1))
    IL = np.zeros((N1, N1))
    x = np.zeros(N1)
    z = _inside_real(AR, AL, n, multiroot, CR, CL, IR, IL, x)
    if not (z >= REAL_MIN and z < np.inf):
        return inside_outside_log(S, n, multiroot, want_marginals, M)
    if want_marginals:
        _outside_real(AR, AL, n, multiroot, z, CR, CL, IR, IL, np.empty((N1, N1)), np.empty((N1, N1)),
                      np.empty((N1, N1)), np.empty((N1, N1)), x, M)
    return shift + math.log(z)


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def eisner_best(S, n, multiroot, heads):
    """The best projective tree of one sentence: heads[m] for m = 1..n (heads[0] = -1) and its score;
    -inf (heads undefined) when no tree exists. Max-plus on the [width, start] charts of
    :func:`_inside_real` (no shift: max-plus needs none); ties go to the first split point and,
    single-root, to the leftmost root child."""
    heads[0] = -1
    if n == 0:
        return 0.0
    N1 = n + 1
    SR = np.full((N1, N1), NEG_INF)             # SR[w, i] = S[i+w, i] (arc i -> i+w), SL[w, i] = S[i, i+w]
    SL = np.full((N1, N1), NEG_INF)
    for m in range(1, N1):
        for h in range(m):
            SR[m - h, h] = S[m, h]
        for h in range(m + 1, N1):
            SL[h - m, m] = S[m, h]
    CR = np.full((N1, N1), NEG_INF)
    CL = np.full((N1, N1), NEG_INF)
    IR = np.full((N1, N1), NEG_INF)
    IL = np.full((N1, N1), NEG_INF)
    X = np.full((N1, N1), NEG_INF)
    start = 0 if multiroot else 1
    for i in range(N1):
        CR[0, i] = 0.0
        CL[0, i] = 0.0
    for w in range(1, n + 1 - start):
        hi = n + 1 - w
        x = X[w]
        for d in range(w):
            a, b = CR[d], CL[w - 1 - d, d + 1:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > x[i]:
                    x[i] = v
        irw, ilw, srw, slw = IR[w], IL[w], SR[w], SL[w]
        for i in range(start, hi):
            irw[i] = x[i] + srw[i]
            ilw[i] = x[i] + slw[i]
        c = CR[w]
        for d in range(1, w + 1):
            a, b = IR[d], CR[w - d, d:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > c[i]:
                    c[i] = v
        c = CL[w]
        for d in range(w):
            a, b = CL[d], IL[w - d, d:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > c[i]:
                    c[i] = v
    # backtrack with an explicit stack of (item, width, start); item 0 = CR, 1 = CL, 2 = IR, 3 = IL
    stack = np.empty((4 * N1 + 4, 3), dtype=np.int64)
    if multiroot:
        best = CR[n, 0]
        stack[0, 0], stack[0, 1], stack[0, 2] = 0, n, 0
        top = 1
    else:
        best = NEG_INF
        root = 1
        for r in range(1, n + 1):
            v = SR[r, 0] + CL[r - 1, 1] + CR[n - r, r]
            if v > best:
                best = v
                root = r
        heads[root] = 0
        stack[0, 0], stack[0, 1], stack[0, 2] = 1, root - 1, 1
        stack[1, 0], stack[1, 1], stack[1, 2] = 0, n - root, root
        top = 2
    if best == NEG_INF:
        return NEG_INF
    while top > 0:
        top -= 1
        item, w, i = stack[top, 0], stack[top, 1], stack[top, 2]
        if w == 0:
            continue
        if item == 0:
            for d in range(1, w + 1):
                if IR[d, i] + CR[w - d, i + d] == CR[w, i]:
                    break
            stack[top, 0], stack[top, 1], stack[top, 2] = 2, d, i
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = 0, w - d, i + d
            top += 2
        elif item == 1:
            for d in range(w):
                if CL[d, i] + IL[w - d, i + d] == CL[w, i]:
                    break
            stack[top, 0], stack[top, 1], stack[top, 2] = 1, d, i
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = 3, w - d, i + d
            top += 2
        else:
            if item == 2:
                heads[i + w] = i
            else:
                heads[i] = i + w
            for d in range(w):
                if CR[d, i] + CL[w - 1 - d, i + d + 1] == X[w, i]:
                    break
            stack[top, 0], stack[top, 1], stack[top, 2] = 0, d, i
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = 1, w - 1 - d, i + d + 1
            top += 2
    return best


@nb.njit(cache=True, nogil=True)
def eisner_batch(S, lengths, multiroot, heads, scores):
    """:func:`eisner_best` of every sentence of a padded batch S (B, N, N), lengths (B,): heads (B, N)
    (-1 at 0 and beyond the length), scores (B,)."""
    for b in range(S.shape[0]):
        n = lengths[b]
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = eisner_best(S[b], n, multiroot, heads[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def eisner_batch_parallel(S, lengths, multiroot, heads, scores):
    """:func:`eisner_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        n = lengths[b]
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = eisner_best(S[b], n, multiroot, heads[b])


@nb.njit(cache=True, nogil=True)
def inside_outside_batch(S, lengths, multiroot, want_marginals, logz, M):
    """:func:`inside_outside` of every sentence of a padded batch: logz (B,), M (B, N, N) (zero padding)."""
    for b in range(S.shape[0]):
        n = lengths[b]
        if want_marginals:
            M[b] = 0.0
        logz[b] = inside_outside(S[b], n, multiroot, want_marginals, M[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def inside_outside_batch_parallel(S, lengths, multiroot, want_marginals, logz, M):
    """:func:`inside_outside_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        n = lengths[b]
        if want_marginals:
            M[b] = 0.0
        logz[b] = inside_outside(S[b], n, multiroot, want_marginals, M[b])
