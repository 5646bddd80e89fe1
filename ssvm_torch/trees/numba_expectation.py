"""Compiled Hessian-vector products of log Z over projective trees: Eisner's inside-outside in the first-order
expectation semiring (Li & Eisner 2009, "First- and second-order expectation semirings", Table 1), in log space.
The backward of the tree entropy and KL divergence (:mod:`ssvm_torch.trees.information`) on the CPU.

Every chart item (the charts of :mod:`ssvm_torch.trees.numba_eisner`: complete CR / CL, incomplete IR / IL over
spans i < j of positions 0..n) carries its log inside weight and the expectation, under the item's own
sub-trees, of v summed over their arcs; the outside pass carries the same for everything outside the item. For
an arc a of incomplete item (i, j), E[<phi, v> | a in y] = e_out + e_in, and

    (Hess v)_a = Cov(phi_a, <phi, v>) = mu_a (E[<phi, v> | a] - E[<phi, v>]),

so one pass gives d^2 log Z / dS^2 v with no (n^2 x n^2) matrix: O(n^3) per sentence as log Z's.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched
from .numba_eisner import REAL_MIN, lae

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True, inline="always")
def expect_add(x, ex, y, ey):
    """(x, ex) + (y, ey) in the expectation semiring: log weights added, expectations weighted by them."""
    if y == NEG_INF:
        return x, ex
    if x == NEG_INF:
        return y, ey
    z = lae(x, y)
    return z, ex * math.exp(x - z) + ey * math.exp(y - z)


@nb.njit(cache=True, nogil=True)
def hessian_vector_row(S, V, n, multiroot, out):
    """out[:n+1, :n+1] = (d^2 log Z / dS^2) V for one sentence's scores S and direction V ((n+1, n+1) [modifier,
    head]); returns log Z (-inf without a tree: out untouched)."""
    N1 = n + 1
    CR, eCR = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    CL, eCL = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    IR, eIR = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    IL, eIL = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    start = 0 if multiroot else 1
    for i in range(N1):
        CR[i, i] = 0.0
        CL[i, i] = 0.0
    for w in range(1, n + 1 - start):
        for i in range(start, n + 1 - w):
            j = i + w
            x, ex = NEG_INF, 0.0
            for k in range(i, j):
                x, ex = expect_add(x, ex, CR[i, k] + CL[k + 1, j], eCR[i, k] + eCL[k + 1, j])
            if x != NEG_INF:
                IR[i, j], eIR[i, j] = x + S[j, i], ex + V[j, i]
                if i > 0:
                    IL[i, j], eIL[i, j] = x + S[i, j], ex + V[i, j]
            c, ec = NEG_INF, 0.0
            for k in range(i + 1, j + 1):
                c, ec = expect_add(c, ec, IR[i, k] + CR[k, j], eIR[i, k] + eCR[k, j])
            CR[i, j], eCR[i, j] = c, ec
            c, ec = NEG_INF, 0.0
            for k in range(i, j):
                c, ec = expect_add(c, ec, CL[i, k] + IL[k, j], eCL[i, k] + eIL[k, j])
            CL[i, j], eCL[i, j] = c, ec
    OCR, eOCR = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    OCL, eOCL = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    OIR, eOIR = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    OIL, eOIL = np.full((N1, N1), NEG_INF), np.zeros((N1, N1))
    if multiroot:
        logz, ev = CR[0, n], eCR[0, n]
        OCR[0, n] = 0.0
    else:
        logz, ev = NEG_INF, 0.0
        for r in range(1, n + 1):
            logz, ev = expect_add(logz, ev, S[r, 0] + CL[1, r] + CR[r, n], V[r, 0] + eCL[1, r] + eCR[r, n])
        if logz == NEG_INF:
            return logz
        for r in range(1, n + 1):
            OCL[1, r], eOCL[1, r] = expect_add(OCL[1, r], eOCL[1, r], S[r, 0] + CR[r, n], V[r, 0] + eCR[r, n])
            OCR[r, n], eOCR[r, n] = expect_add(OCR[r, n], eOCR[r, n], S[r, 0] + CL[1, r], V[r, 0] + eCL[1, r])
            t = S[r, 0] + CL[1, r] + CR[r, n]
            if t != NEG_INF:
                out[r, 0] = math.exp(t - logz) * (V[r, 0] + eCL[1, r] + eCR[r, n] - ev)
    if logz == NEG_INF:
        return logz
    for w in range(n - start, 0, -1):
        for i in range(start, n + 1 - w):
            j = i + w
            o, eo = OCR[i, j], eOCR[i, j]
            if o != NEG_INF:
                for k in range(i + 1, j + 1):
                    OIR[i, k], eOIR[i, k] = expect_add(OIR[i, k], eOIR[i, k], o + CR[k, j], eo + eCR[k, j])
                    OCR[k, j], eOCR[k, j] = expect_add(OCR[k, j], eOCR[k, j], o + IR[i, k], eo + eIR[i, k])
            o, eo = OCL[i, j], eOCL[i, j]
            if o != NEG_INF:
                for k in range(i, j):
                    OCL[i, k], eOCL[i, k] = expect_add(OCL[i, k], eOCL[i, k], o + IL[k, j], eo + eIL[k, j])
                    OIL[k, j], eOIL[k, j] = expect_add(OIL[k, j], eOIL[k, j], o + CL[i, k], eo + eCL[i, k])
            g, eg = NEG_INF, 0.0
            if OIR[i, j] != NEG_INF and IR[i, j] != NEG_INF:
                out[j, i] = math.exp(OIR[i, j] + IR[i, j] - logz) * (eOIR[i, j] + eIR[i, j] - ev)
                g, eg = OIR[i, j] + S[j, i], eOIR[i, j] + V[j, i]
            if i > 0 and OIL[i, j] != NEG_INF and IL[i, j] != NEG_INF:
                out[i, j] = math.exp(OIL[i, j] + IL[i, j] - logz) * (eOIL[i, j] + eIL[i, j] - ev)
                g, eg = expect_add(g, eg, OIL[i, j] + S[i, j], eOIL[i, j] + V[i, j])
            if g != NEG_INF:
                for k in range(i, j):
                    OCR[i, k], eOCR[i, k] = expect_add(OCR[i, k], eOCR[i, k], g + CL[k + 1, j], eg + eCL[k + 1, j])
                    OCL[k + 1, j], eOCL[k + 1, j] = expect_add(OCL[k + 1, j], eOCL[k + 1, j], g + CR[i, k],
                                                         eg + eCR[i, k])
    return logz


@nb.njit(cache=True, nogil=True)
def hessian_vector_real(S, V, n, multiroot, out):
    """:func:`hessian_vector_row` in real space, the semiring's pairs (z, r = z E[v]) multiplied and added without
    a transcendental in the loops: each word's arc potentials shifted by their largest (as
    :func:`ssvm_torch.trees.numba_eisner.inside_outside`), so no chart entry overflows. Returns False, out
    untouched, where Z' underflows (below ``REAL_MIN``) or no tree has a finite score: the log-space pass then."""
    N1 = n + 1
    A = np.zeros((N1, N1))
    for m in range(1, N1):
        c = NEG_INF
        for h in range(N1):
            if h != m and S[m, h] > c:
                c = S[m, h]
        if c == NEG_INF:
            return False
        for h in range(N1):
            if h != m:
                A[m, h] = math.exp(S[m, h] - c)
    CR, rCR, CL, rCL = np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1))
    IR, rIR, IL, rIL = np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1))
    start = 0 if multiroot else 1
    for i in range(N1):
        CR[i, i] = 1.0
        CL[i, i] = 1.0
    for w in range(1, n + 1 - start):
        for i in range(start, n + 1 - w):
            j = i + w
            x, rx = 0.0, 0.0
            for k in range(i, j):
                x += CR[i, k] * CL[k + 1, j]
                rx += rCR[i, k] * CL[k + 1, j] + CR[i, k] * rCL[k + 1, j]
            a = A[j, i]
            IR[i, j], rIR[i, j] = x * a, (rx + x * V[j, i]) * a if a > 0.0 else 0.0
            if i > 0:
                a = A[i, j]
                IL[i, j], rIL[i, j] = x * a, (rx + x * V[i, j]) * a if a > 0.0 else 0.0
            c, rc = 0.0, 0.0
            for k in range(i + 1, j + 1):
                c += IR[i, k] * CR[k, j]
                rc += rIR[i, k] * CR[k, j] + IR[i, k] * rCR[k, j]
            CR[i, j], rCR[i, j] = c, rc
            c, rc = 0.0, 0.0
            for k in range(i, j):
                c += CL[i, k] * IL[k, j]
                rc += rCL[i, k] * IL[k, j] + CL[i, k] * rIL[k, j]
            CL[i, j], rCL[i, j] = c, rc
    if multiroot:
        z, rz = CR[0, n], rCR[0, n]
    else:
        z, rz = 0.0, 0.0
        for r in range(1, N1):
            if A[r, 0] > 0.0:
                t = A[r, 0] * CL[1, r] * CR[r, n]
                z += t
                rz += t * V[r, 0] + A[r, 0] * (rCL[1, r] * CR[r, n] + CL[1, r] * rCR[r, n])
    if not z >= REAL_MIN:
        return False
    ev = rz / z
    OCR, rOCR, OCL, rOCL = np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1))
    OIR, rOIR, OIL, rOIL = np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1)), np.zeros((N1, N1))
    if multiroot:
        OCR[0, n] = 1.0
    else:
        for r in range(1, N1):
            a = A[r, 0]
            if a > 0.0:
                OCL[1, r] += a * CR[r, n]
                rOCL[1, r] += a * (CR[r, n] * V[r, 0] + rCR[r, n])
                OCR[r, n] += a * CL[1, r]
                rOCR[r, n] += a * (CL[1, r] * V[r, 0] + rCL[1, r])
                t = a * CL[1, r] * CR[r, n]
                out[r, 0] = (t * V[r, 0] + a * (rCL[1, r] * CR[r, n] + CL[1, r] * rCR[r, n])) / z - t / z * ev
    for w in range(n - start, 0, -1):
        for i in range(start, n + 1 - w):
            j = i + w
            o, ro = OCR[i, j], rOCR[i, j]
            if o > 0.0:
                for k in range(i + 1, j + 1):
                    OIR[i, k] += o * CR[k, j]
                    rOIR[i, k] += ro * CR[k, j] + o * rCR[k, j]
                    OCR[k, j] += o * IR[i, k]
                    rOCR[k, j] += ro * IR[i, k] + o * rIR[i, k]
            o, ro = OCL[i, j], rOCL[i, j]
            if o > 0.0:
                for k in range(i, j):
                    OCL[i, k] += o * IL[k, j]
                    rOCL[i, k] += ro * IL[k, j] + o * rIL[k, j]
                    OIL[k, j] += o * CL[i, k]
                    rOIL[k, j] += ro * CL[i, k] + o * rCL[i, k]
            # the outside of X[i, j] (with its arc's v): g = sum over the two arcs of O * a, rg likewise
            g, rg = 0.0, 0.0
            a = A[j, i]
            if a > 0.0 and OIR[i, j] > 0.0:
                mu = OIR[i, j] * IR[i, j] / z
                out[j, i] = (rOIR[i, j] * IR[i, j] + OIR[i, j] * rIR[i, j]) / z - mu * ev
                g += OIR[i, j] * a
                rg += (rOIR[i, j] + OIR[i, j] * V[j, i]) * a
            if i > 0:
                a = A[i, j]
                if a > 0.0 and OIL[i, j] > 0.0:
                    mu = OIL[i, j] * IL[i, j] / z
                    out[i, j] = (rOIL[i, j] * IL[i, j] + OIL[i, j] * rIL[i, j]) / z - mu * ev
                    g += OIL[i, j] * a
                    rg += (rOIL[i, j] + OIL[i, j] * V[i, j]) * a
            if g > 0.0:
                for k in range(i, j):
                    OCR[i, k] += g * CL[k + 1, j]
                    rOCR[i, k] += rg * CL[k + 1, j] + g * rCL[k + 1, j]
                    OCL[k + 1, j] += g * CR[i, k]
                    rOCL[k + 1, j] += rg * CR[i, k] + g * rCR[i, k]
    return True


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def hessian_vector_batch(S, V, lengths, multiroot, out):
    """out[b] = Hess_b V[b] for every sentence (zeros off its words; an empty sentence gives zeros): the
    real-space pass, the log-space one where it cannot hold the sentence."""
    for b in nb.prange(S.shape[0]):
        n = lengths[b]
        for m in range(out.shape[1]):
            for h in range(out.shape[2]):
                out[b, m, h] = 0.0
        if n > 0 and not hessian_vector_real(S[b], V[b], n, multiroot, out[b]):
            for m in range(out.shape[1]):
                for h in range(out.shape[2]):
                    out[b, m, h] = 0.0
            hessian_vector_row(S[b], V[b], n, multiroot, out[b])
