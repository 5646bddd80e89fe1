"""Compiled Hessian-vector products of the second-order log Z (adjacent siblings, projective): the backward of the
second-order entropy and KL divergence (:class:`ssvm_torch.trees.information.SiblingFactored`) on the CPU.

The log-space inside-outside of :mod:`ssvm_torch.trees.numba_sibling_log` differentiated in forward mode along a
direction (V over the arcs, VB over the sibling pairs): every inside item carries, next to its log weight, the
tangent of that log weight, which is the expectation of <phi, v> over the item's sub-derivations (the first-order
expectation semiring of Li & Eisner 2009); every outside count P[item] (an item's expected count in a tree) carries
its tangent dP. A term's share of its parent, sh = exp(term - parent), has the tangent sh (dterm - dparent), so a
count q = P sh passes dq = dP sh + P sh (dterm - dparent) to the term's children. The counts of the incomplete
items and of the sibling terms are the arc and sibling marginals, so their tangents are d mu / d eps along v:
(Hess v) over both kinds of parts, exactly, in one O(n^3) pass of the marginals' own shape (no n^2 x n^2 matrix).
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..devices import launched

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True, inline="always")
def _logsum(t, dt, lo, hi):
    """(log sum_k exp(t[k]), sum_k softmax(t)_k dt[k]) over lo <= k < hi: a log-sum and its tangent."""
    mx = NEG_INF
    for k in range(lo, hi):
        if t[k] > mx:
            mx = t[k]
    if mx == NEG_INF:
        return NEG_INF, 0.0
    s, ds = 0.0, 0.0
    for k in range(lo, hi):
        if t[k] != NEG_INF:
            e = math.exp(t[k] - mx)
            s += e
            ds += e * dt[k]
    return mx + math.log(s), ds / s


@nb.njit(cache=True, nogil=True)
def _inside(S, SB, V, VB, n, multiroot, C, D, t, dt):
    """The inside pass of :func:`ssvm_torch.trees.numba_sibling_log.inside_log` with tangents: C[0..4] = CR, CL,
    IR, IL, X (log weights), D[0..4] their tangents. Returns (log Z, its tangent E[<phi, v>])."""
    CR, CL, IR, IL, X = C[0], C[1], C[2], C[3], C[4]
    dCR, dCL, dIR, dIL, dX = D[0], D[1], D[2], D[3], D[4]
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[i, i] = 0.0
        CL[i, i] = 0.0
    for j in range(start + 1, n + 1):
        for i in range(j - 1, start - 1, -1):
            for r in range(i, j):
                t[r], dt[r] = CR[i, r] + CL[r + 1, j], dCR[i, r] + dCL[r + 1, j]
            X[i, j], dX[i, j] = _logsum(t, dt, i, j)
            t[i], dt[i] = CL[i + 1, j], dCL[i + 1, j]
            for k in range(i + 1, j):
                t[k] = IR[i, k] + X[k, j] + SB[j, i, k]
                dt[k] = dIR[i, k] + dX[k, j] + VB[j, i, k]
            x, dx = _logsum(t, dt, i, j)
            IR[i, j], dIR[i, j] = S[j, i] + x, V[j, i] + dx
            if i > 0:
                t[i], dt[i] = CR[i, j - 1], dCR[i, j - 1]
                for k in range(i + 1, j):
                    t[k] = X[i, k] + IL[k, j] + SB[i, j, k]
                    dt[k] = dX[i, k] + dIL[k, j] + VB[i, j, k]
                x, dx = _logsum(t, dt, i, j)
                IL[i, j], dIL[i, j] = S[i, j] + x, V[i, j] + dx
            else:
                IL[i, j], dIL[i, j] = NEG_INF, 0.0
            for k in range(i + 1, j + 1):
                t[k], dt[k] = IR[i, k] + CR[k, j], dIR[i, k] + dCR[k, j]
            CR[i, j], dCR[i, j] = _logsum(t, dt, i + 1, j + 1)
            for k in range(i, j):
                t[k], dt[k] = CL[i, k] + IL[k, j], dCL[i, k] + dIL[k, j]
            CL[i, j], dCL[i, j] = _logsum(t, dt, i, j)
    if multiroot:
        return CR[0, n], dCR[0, n]
    for r in range(1, n + 1):
        t[r], dt[r] = S[r, 0] + CL[1, r] + CR[r, n], V[r, 0] + dCL[1, r] + dCR[r, n]
    return _logsum(t, dt, 1, n + 1)


@nb.njit(cache=True, nogil=True, inline="always")
def _pass(p, dp, term, dterm, parent, dparent):
    """(q, dq): the count p (tangent dp) times a term's share of its parent, and the tangent of that product."""
    if term == NEG_INF:
        return 0.0, 0.0
    sh = math.exp(term - parent)
    return p * sh, dp * sh + p * sh * (dterm - dparent)


@nb.njit(cache=True, nogil=True)
def _spread_siblings(p, dp, arc, darc, parent, dparent, a, da, b, db, sb, vsb, pa, dpa, pb, dpb, dms, lo, hi):
    """:func:`ssvm_torch.trees.numba_sibling_log._spread_siblings` with tangents; the sibling pairs' marginal
    tangents into dms[k]."""
    for k in range(lo, hi):
        q, dq = _pass(p, dp, arc + a[k] + b[k] + sb[k], darc + da[k] + db[k] + vsb[k], parent, dparent)
        pa[k] += q
        dpa[k] += dq
        pb[k] += q
        dpb[k] += dq
        dms[k] = dq


@nb.njit(cache=True, nogil=True)
def _outside(S, SB, V, VB, n, multiroot, logz, dlogz, C, D, out, out_sib):
    """The outside counts of :func:`ssvm_torch.trees.numba_sibling_log._outside_counts` with tangents: out[m, h] =
    (Hess v) at the arc h -> m, out_sib[m, h, s] at the sibling pair."""
    CR, CL, IR, IL, X = C[0], C[1], C[2], C[3], C[4]
    dCR, dCL, dIR, dIL, dX = D[0], D[1], D[2], D[3], D[4]
    N1 = n + 1
    P = np.zeros((5, N1, N1))
    dP = np.zeros((5, N1, N1))
    PCR, PCL, PIR, PIL, PX = P[0], P[1], P[2], P[3], P[4]
    dPCR, dPCL, dPIR, dPIL, dPX = dP[0], dP[1], dP[2], dP[3], dP[4]
    start = 0 if multiroot else 1
    if multiroot:
        PCR[0, n] = 1.0
    else:
        for r in range(1, n + 1):
            q, dq = _pass(1.0, 0.0, S[r, 0] + CL[1, r] + CR[r, n], V[r, 0] + dCL[1, r] + dCR[r, n], logz, dlogz)
            out[r, 0] = dq
            PCL[1, r] += q
            dPCL[1, r] += dq
            PCR[r, n] += q
            dPCR[r, n] += dq
    for j in range(n, start, -1):
        for i in range(start, j):
            p, dp = PCR[i, j], dPCR[i, j]
            if p != 0.0 or dp != 0.0:
                for k in range(i + 1, j + 1):
                    q, dq = _pass(p, dp, IR[i, k] + CR[k, j], dIR[i, k] + dCR[k, j], CR[i, j], dCR[i, j])
                    PIR[i, k] += q
                    dPIR[i, k] += dq
                    PCR[k, j] += q
                    dPCR[k, j] += dq
            p, dp = PCL[i, j], dPCL[i, j]
            if p != 0.0 or dp != 0.0:
                for k in range(i, j):
                    q, dq = _pass(p, dp, CL[i, k] + IL[k, j], dCL[i, k] + dIL[k, j], CL[i, j], dCL[i, j])
                    PCL[i, k] += q
                    dPCL[i, k] += dq
                    PIL[k, j] += q
                    dPIL[k, j] += dq
            p, dp = PIR[i, j], dPIR[i, j]
            out[j, i] = dp
            if p != 0.0 or dp != 0.0:
                q, dq = _pass(p, dp, S[j, i] + CL[i + 1, j], V[j, i] + dCL[i + 1, j], IR[i, j], dIR[i, j])
                PCL[i + 1, j] += q
                dPCL[i + 1, j] += dq
                _spread_siblings(p, dp, S[j, i], V[j, i], IR[i, j], dIR[i, j], IR[i], dIR[i], X[:, j], dX[:, j],
                                 SB[j, i], VB[j, i], PIR[i], dPIR[i], PX[:, j], dPX[:, j], out_sib[j, i], i + 1, j)
            if i > 0:
                p, dp = PIL[i, j], dPIL[i, j]
                out[i, j] = dp
                if p != 0.0 or dp != 0.0:
                    q, dq = _pass(p, dp, S[i, j] + CR[i, j - 1], V[i, j] + dCR[i, j - 1], IL[i, j], dIL[i, j])
                    PCR[i, j - 1] += q
                    dPCR[i, j - 1] += dq
                    _spread_siblings(p, dp, S[i, j], V[i, j], IL[i, j], dIL[i, j], X[i], dX[i], IL[:, j], dIL[:, j],
                                     SB[i, j], VB[i, j], PX[i], dPX[i], PIL[:, j], dPIL[:, j], out_sib[i, j], i + 1, j)
            p, dp = PX[i, j], dPX[i, j]
            if p != 0.0 or dp != 0.0:
                for r in range(i, j):
                    q, dq = _pass(p, dp, CR[i, r] + CL[r + 1, j], dCR[i, r] + dCL[r + 1, j], X[i, j], dX[i, j])
                    PCR[i, r] += q
                    dPCR[i, r] += dq
                    PCL[r + 1, j] += q
                    dPCL[r + 1, j] += dq


@nb.njit(cache=True, nogil=True)
def sibling_hessian_vector_row(S, SB, V, VB, n, multiroot, out, out_sib):
    """out (>= n+1, >= n+1) and out_sib (>= n+1,) * 3, zero-filled by the caller: d^2 log Z / d(S, SB)^2 (V, VB)
    of one sentence, over the arcs [modifier, head] and the sibling pairs [modifier, head, sibling]. Returns log Z
    (-inf without a tree: nothing written)."""
    if n == 0:
        return 0.0
    N1 = n + 1
    C = np.full((5, N1, N1), NEG_INF)
    D = np.zeros((5, N1, N1))
    t, dt = np.empty(n + 2), np.zeros(n + 2)
    logz, dlogz = _inside(S, SB, V, VB, n, multiroot, C, D, t, dt)
    if logz != NEG_INF:
        _outside(S, SB, V, VB, n, multiroot, logz, dlogz, C, D, out, out_sib)
    return logz


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sibling_hessian_vector_batch(S, SB, V, VB, lengths, multiroot, out, out_sib):
    """:func:`sibling_hessian_vector_row` of every sentence of a padded batch (out, out_sib zero-filled by the
    caller), spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        sibling_hessian_vector_row(S[b], SB[b], V[b], VB[b], lengths[b], multiroot, out[b], out_sib[b])
