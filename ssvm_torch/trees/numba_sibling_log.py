"""The compiled second-order inside-outside in log space: the fallback of the real-space pass
(:func:`ssvm_torch.trees.numba_sibling.sibling_inside_outside`) for the sentences whose shifted Z' underflows.

The recursions are those of :mod:`ssvm_torch.trees.numba_sibling` (McDonald & Pereira 2006's sibling items in
Eisner's chart, Zhang et al. 2020's second-order TreeCRF) in the log semiring on the raw scores: no shift, so
nothing underflows however far the best tree lies below the per-word maxima. A trained parser's scores are
large (arc and sibling scores of a few hundred nats): the real-space pass then underflows on most long
sentences, and their redo by the torch recursions (padded, through autograd) cost 80-100x the compiled pass;
this pass costs a few times the real-space one.

Each log-sum over the split points is two passes over a scratch row (the maximum, then one exp per term).
The outside pass runs in probability space, not in log space: ``P[item]`` is the item's expected count in
a tree under the CRF (in [0, 1]: an item occurs at most once per tree), and a parent's count flows to the
children of each of its terms in proportion to the term's share of the parent, exp(log term - log parent),
one exp per term and nothing to overflow. The count of an incomplete item is its arc's marginal, and the
share of a sibling term times it that sibling pair's marginal.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True, inline="always")
def _logsum(t, lo, hi):
    """log sum_{lo <= k < hi} exp(t[k]) (-inf for an empty or all -inf range)."""
    mx = NEG_INF
    for k in range(lo, hi):
        if t[k] > mx:
            mx = t[k]
    if mx == NEG_INF:
        return NEG_INF
    s = 0.0
    for k in range(lo, hi):
        s += math.exp(t[k] - mx)
    return mx + math.log(s)


@nb.njit(cache=True, nogil=True)
def inside_log(S, SB, n, multiroot, CR, CL, IR, IL, X, t):
    """The log-semiring inside pass (spans by right end, then left end downwards, as the real-space pass);
    returns log Z. ``t`` is a scratch row of n + 2 entries."""
    start = 0 if multiroot else 1
    for i in range(n + 1):
        CR[i, i] = 0.0
        CL[i, i] = 0.0
    for j in range(start + 1, n + 1):
        for i in range(j - 1, start - 1, -1):
            for r in range(i, j):
                t[r] = CR[i, r] + CL[r + 1, j]
            X[i, j] = _logsum(t, i, j)
            t[i] = CL[i + 1, j]                        # the nearest dependent: no sibling factor
            for k in range(i + 1, j):
                t[k] = IR[i, k] + X[k, j] + SB[j, i, k]
            IR[i, j] = S[j, i] + _logsum(t, i, j)
            if i > 0:                                  # the root is nobody's dependent
                t[i] = CR[i, j - 1]
                for k in range(i + 1, j):
                    t[k] = X[i, k] + IL[k, j] + SB[i, j, k]
                IL[i, j] = S[i, j] + _logsum(t, i, j)
            else:
                IL[i, j] = NEG_INF
            for k in range(i + 1, j + 1):
                t[k] = IR[i, k] + CR[k, j]
            CR[i, j] = _logsum(t, i + 1, j + 1)
            for k in range(i, j):
                t[k] = CL[i, k] + IL[k, j]
            CL[i, j] = _logsum(t, i, j)
    if multiroot:
        return CR[0, n]
    for r in range(1, n + 1):
        t[r] = S[r, 0] + CL[1, r] + CR[r, n]
    return _logsum(t, 1, n + 1)


@nb.njit(cache=True, nogil=True, inline="always")
def _share(term, parent):
    """exp(term - parent): a term's share of its parent's sum (0 for an absent term)."""
    return math.exp(term - parent) if term != NEG_INF else 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def _spread_siblings(p, arc, parent, a, b, sb, pa, pb, ms, lo, hi):
    """An incomplete item's count ``p`` to the children of its sibling terms k in [lo, hi): the term
    arc + a[k] + b[k] + sb[k] of the item's log value ``parent`` passes p x its share to pa[k] and pb[k], and that
    is the sibling pair's marginal ms[k]."""
    for k in range(lo, hi):
        q = p * _share(arc + a[k] + b[k] + sb[k], parent)
        pa[k] += q
        pb[k] += q
        ms[k] = q


@nb.njit(cache=True, nogil=True)
def _outside_counts(S, SB, n, multiroot, logz, CR, CL, IR, IL, X, M, MS):
    """The expected counts of the items (module docstring), spans in the reverse of the inside order, within a
    span the complete items, then the incomplete ones, then the sibling item: M[m, h] = mu(h -> m) and
    MS[m, h, s] the sibling marginals (written only for s strictly between h and m)."""
    N1 = n + 1
    PCR = np.zeros((N1, N1))
    PCL = np.zeros((N1, N1))
    PIR = np.zeros((N1, N1))
    PIL = np.zeros((N1, N1))
    PX = np.zeros((N1, N1))
    start = 0 if multiroot else 1
    if multiroot:
        PCR[0, n] = 1.0
    else:
        for r in range(1, n + 1):
            p = _share(S[r, 0] + CL[1, r] + CR[r, n], logz)
            M[r, 0] = p
            PCL[1, r] += p
            PCR[r, n] += p
    for j in range(n, start, -1):
        for i in range(start, j):
            p = PCR[i, j]
            if p != 0.0:
                for k in range(i + 1, j + 1):
                    q = p * _share(IR[i, k] + CR[k, j], CR[i, j])
                    PIR[i, k] += q
                    PCR[k, j] += q
            p = PCL[i, j]
            if p != 0.0:
                for k in range(i, j):
                    q = p * _share(CL[i, k] + IL[k, j], CL[i, j])
                    PCL[i, k] += q
                    PIL[k, j] += q
            p = PIR[i, j]
            M[j, i] = p
            if p != 0.0:
                PCL[i + 1, j] += p * _share(S[j, i] + CL[i + 1, j], IR[i, j])
                _spread_siblings(p, S[j, i], IR[i, j], IR[i], X[:, j], SB[j, i], PIR[i], PX[:, j], MS[j, i], i + 1, j)
            if i > 0:
                p = PIL[i, j]
                M[i, j] = p
                if p != 0.0:
                    PCR[i, j - 1] += p * _share(S[i, j] + CR[i, j - 1], IL[i, j])
                    _spread_siblings(p, S[i, j], IL[i, j], X[i], IL[:, j], SB[i, j], PX[i], PIL[:, j], MS[i, j],
                                     i + 1, j)
            p = PX[i, j]
            if p != 0.0:
                for r in range(i, j):
                    q = p * _share(CR[i, r] + CL[r + 1, j], X[i, j])
                    PCR[i, r] += q
                    PCL[r + 1, j] += q


@nb.njit(cache=True, nogil=True)
def log_charts(S, SB, n, multiroot):
    """(C (5, n+1, n+1): the log charts CR, CL, IR, IL, X of :func:`inside_log`, log Z) of one sentence."""
    N1 = n + 1
    C = np.full((5, N1, N1), NEG_INF)
    logz = inside_log(S, SB, n, multiroot, C[0], C[1], C[2], C[3], C[4], np.empty(n + 2))
    return C, logz


@nb.njit(cache=True, nogil=True)
def sibling_inside_outside_log(S, SB, n, multiroot, want_marginals, M, MS):
    """log Z of one sentence (S (>= n+1, >= n+1), SB (>= n+1,) * 3, float32 or float64; charts in float64) and,
    if ``want_marginals``, the arc marginals into M (n+1, n+1) and the sibling marginals into MS (n+1,) * 3,
    both zero-filled by the caller: :func:`ssvm_torch.trees.numba_sibling.sibling_inside_outside`'s contract
    without the underflow (-inf when no tree exists)."""
    if n == 0:
        return 0.0
    C, logz = log_charts(S, SB, n, multiroot)
    if want_marginals and logz != NEG_INF:
        _outside_counts(S, SB, n, multiroot, logz, C[0], C[1], C[2], C[3], C[4], M, MS)
    return logz
