"""Numba kernels of chains with edge-observation features (models/chain_edges.py, stores/chain_edges.py).

The transition into position t scores trans[y_t, y_{t-1}] + sum_a e_t[a] E[a, p(y_t, y_{t-1})],
e_t the edge attributes of position t (CSR ``eptr, eidx, evals``), E (A_e, P) the edge weights and
p the index of a label pair among the P pairs the model has weights for (``pair_next``,
``pair_prev``; ``pair_of[next, prev]`` = p or -1). The compact store keeps, per block i and per
distinct edge attribute of the block (a *group* g, ``gptr[i] <= g < gptr[i+1]``, attribute
``gattr[g]``, entry j of the edge CSR in group ``egrp[j]``), the expected label-pair counts
Me[g, p] under alpha_i: a linear statistic, so the block gap terms keep the form of
:mod:`ssvm_torch.stores.chain` with one more term each:
    <M_i, theta_i>   += sum_g <Me[g], E[gattr[g]]>
    ||A_i(D)||^2     += sum_g ||De[g]||^2          (the groups of a block are distinct attributes)
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .chain_kernels import _FAST, nb_block_unary, nb_build_delta, nb_delta_sqnorm, nb_m_theta
from ..chain.numba_viterbi import viterbi_segment_tt


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt):
    """Tt[t] = trans + the edge scores of position s+t, for t = 1..T-1 (Tt[0] is not used)."""
    K = trans.shape[0]
    for t in range(1, T):
        for a in range(K):
            for b in range(K):
                Tt[t, a, b] = trans[a, b]
        for j in range(eptr[s + t], eptr[s + t + 1]):
            v = evals[j]
            f = eidx[j]
            for p in range(pair_next.shape[0]):
                Tt[t, pair_next[p], pair_prev[p]] += v * E[f, p]


@nb.njit(cache=True, nogil=True)
def nb_viterbi_edges(U, off, first, last, trans, eptr, eidx, evals, E, pair_next, pair_prev, gt, lw, out, scores,
                     pen):
    """(Loss-augmented) Viterbi of every sequence with per-position transitions; U (N, K) all rows,
    ``lw`` (n,) the loss of one wrong position of each sequence (zeros: plain decoding); ``pen`` the
    tag constraints (oracles/viterbi.py)."""
    K = U.shape[1]
    n = off.shape[0] - 1
    tmax = 1
    for i in range(n):
        tmax = max(tmax, off[i + 1] - off[i])
    Tt = np.empty((tmax, K, K))
    delta, newd = np.empty(K), np.empty(K)
    bp = np.empty((tmax, K), dtype=np.int64)
    for i in range(n):
        s, T = off[i], off[i + 1] - off[i]
        nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
        scores[i] = viterbi_segment_tt(U, s, T, first, last, Tt, True, gt, lw[i], out, delta, newd, bp, pen)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_edge_m_theta(i, gptr, gattr, E, Me):
    """sum_g <Me[g], E[gattr[g]]> over the groups of block i."""
    m = 0.0
    for g in range(gptr[i], gptr[i + 1]):
        a = gattr[g]
        for p in range(Me.shape[1]):
            m += Me[g, p] * E[a, p]
    return m


@nb.njit(cache=True, nogil=True)
def nb_edge_stats(labels, off, eptr, evals, egrp, pair_of, out, scale):
    """out[g, p] += scale * the edge statistics of ragged ``labels`` (N,): the sum over positions
    t >= 1 of a sequence and their entries j in group g = egrp[j] of evals[j] [pair (y_t, y_{t-1}) = p].
    With the attribute ids ``eidx`` for ``egrp``, out is an (A_e, P) edge block: scale phi's edge rows summed
    over the sequences (the batch FW corner's, stores/chain_edges.py)."""
    for i in range(off.shape[0] - 1):
        for r in range(off[i] + 1, off[i + 1]):
            p = pair_of[labels[r], labels[r - 1]]
            if p >= 0:
                for j in range(eptr[r], eptr[r + 1]):
                    out[egrp[j], p] += scale * evals[j]


@nb.njit(cache=True, nogil=True)
def nb_edge_scores(labels, off, eptr, eidx, evals, pair_of, E, sign, out):
    """out[i] += sign * <E, S_e(y)> of each sequence's ragged ``labels``: the edge part of <w, phi(x_i, y)>."""
    for i in range(off.shape[0] - 1):
        acc = 0.0
        for r in range(off[i] + 1, off[i + 1]):
            p = pair_of[labels[r], labels[r - 1]]
            if p >= 0:
                for j in range(eptr[r], eptr[r + 1]):
                    acc += evals[j] * E[eidx[j], p]
        out[i] += sign * acc


@nb.njit(cache=True, nogil=True)
def nb_edge_m_thetas(gptr, gattr, E, Me, out):
    """out[i] = sum_g <Me[g], E[gattr[g]]> over the groups of every block i: the edge part of <M_i, theta_i>."""
    for i in range(gptr.shape[0] - 1):
        out[i] = nb_edge_m_theta(i, gptr, gattr, E, Me)


@nb.njit(cache=True, nogil=True)
def nb_edge_weights(Y, off, eptr, evals, egrp, pair_of, gattr, Me, coef, E):
    """E = coef * sum_g (S_e(y_gt)[g] - Me[g]) scattered to the rows gattr[g]: the edge block of w
    from the statistics, with no (groups, P) temporary."""
    E[:] = 0.0
    for g in range(Me.shape[0]):
        for p in range(Me.shape[1]):
            E[gattr[g], p] -= coef * Me[g, p]
    for i in range(off.shape[0] - 1):
        for r in range(off[i] + 1, off[i + 1]):
            p = pair_of[Y[r], Y[r - 1]]
            if p >= 0:
                for j in range(eptr[r], eptr[r + 1]):
                    E[gattr[egrp[j]], p] += coef * evals[j]


@nb.njit(cache=True, nogil=True)
def nb_edge_delta(i, s, T, ys, eptr, evals, egrp, pair_of, gptr, Me, De):
    """De[g - gptr[i]] = S_e(ys)[g] - Me[g] for the groups of block i; returns sum De^2."""
    g0 = gptr[i]
    for g in range(g0, gptr[i + 1]):
        for p in range(Me.shape[1]):
            De[g - g0, p] = -Me[g, p]
    for t in range(1, T):
        p = pair_of[ys[t], ys[t - 1]]
        if p >= 0:
            for j in range(eptr[s + t], eptr[s + t + 1]):
                De[egrp[j] - g0, p] += evals[j]
    sq = 0.0
    for g in range(gptr[i + 1] - g0):
        for p in range(Me.shape[1]):
            sq += De[g, p] * De[g, p]
    return sq


@nb.njit(cache=True, nogil=True)
def _add_edge_stats(s, T, ys, sign, g0, eptr, evals, egrp, pair_of, De):
    """De[g - g0, p] += sign * the edge statistics of the labeling ys of the positions s..s+T-1."""
    for t in range(1, T):
        p = pair_of[ys[t], ys[t - 1]]
        if p >= 0:
            for j in range(eptr[s + t], eptr[s + t + 1]):
                De[egrp[j] - g0, p] += sign * evals[j]


@nb.njit(cache=True, nogil=True)
def nb_edge_pair_delta(i, s, T, yp, p_current, yq, q_current, eptr, evals, egrp, pair_of, gptr, Me, De):
    """De[g - gptr[i]] = S_e(P)[g] - S_e(Q)[g] for the groups of block i, P / Q a labeling (``yp`` / ``yq``) or,
    with ``p_current`` / ``q_current``, the block's point Me_i (the pairwise and away steps, Osokin et al. 2016,
    Alg. 3 / 4); returns sum De^2, the edge part of ||A_i(D)||^2."""
    g0 = gptr[i]
    for g in range(g0, gptr[i + 1]):
        for p in range(Me.shape[1]):
            De[g - g0, p] = (Me[g, p] if p_current else 0.0) - (Me[g, p] if q_current else 0.0)
    if not p_current:
        _add_edge_stats(s, T, yp, 1.0, g0, eptr, evals, egrp, pair_of, De)
    if not q_current:
        _add_edge_stats(s, T, yq, -1.0, g0, eptr, evals, egrp, pair_of, De)
    sq = 0.0
    for g in range(gptr[i + 1] - g0):
        for p in range(Me.shape[1]):
            sq += De[g, p] * De[g, p]
    return sq


@nb.njit(cache=True, nogil=True)
def nb_edge_labelings_dots(i, s, T, labelings, eptr, eidx, evals, pair_of, E, gptr, gattr, Me, out):
    """out[j] += <S_e(y_j) - Me_i, E> for each labeling y_j (the rows of ``labelings``, (m, T)): the edge part
    of block i's gap towards each stored corner (what the cache and the away corner rank)."""
    m = nb_edge_m_theta(i, gptr, gattr, E, Me)
    for r in range(labelings.shape[0]):
        acc = 0.0
        for t in range(1, T):
            p = pair_of[labelings[r, t], labelings[r, t - 1]]
            if p >= 0:
                for j in range(eptr[s + t], eptr[s + t + 1]):
                    acc += evals[j] * E[eidx[j], p]
        out[r] += acc - m


@nb.njit(cache=True, nogil=True)
def nb_edge_move(i, c, gamma, De, gptr, gattr, E, Me):
    """E[gattr[g]] += c De[g] and Me[g] += gamma De[g] for the groups of block i."""
    g0 = gptr[i]
    for g in range(g0, gptr[i + 1]):
        a = gattr[g]
        for p in range(Me.shape[1]):
            d = De[g - g0, p]
            if d != 0.0:
                E[a, p] += c * d
                Me[g, p] += gamma * d


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_fw_corner_edges(i, lw, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt,
                       eptr, eidx, evals, egrp, E, pair_next, pair_prev, pair_of, gptr, gattr, Me,
                       U, Tt, delta, newd, bp, Du, Dt, De, ys, pen):
    """:func:`~ssvm_torch.oracles.chain_kernels.nb_fw_corner` with edge-observation features:
    (L(y*), <S(y*) - M_i, theta_i>, ||A_i(S(y*) - M_i)||^2) in units of 1/(lam n); y* into ys and
    the edge part of S(y*) - M_i into De. ``Y`` enters the loss only: a negative label is unobserved and
    costs nothing (the latent SSVM's inner problem, ssvm_torch/latent.py)."""
    s = off[i]
    T = off[i + 1] - s
    nb_block_unary(i, fptr, fidx, fval, off, W, U)
    nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
    aug = viterbi_segment_tt(U, np.int64(0), T, first, last, Tt, True, Y[s:s + T], lw, ys, delta, newd, bp, pen)
    wrong = 0
    for t in range(T):
        if ys[t] != Y[s + t] and Y[s + t] >= 0:
            wrong += 1
    loss = wrong * lw
    m_theta = nb_m_theta(i, off, U, first, last, trans, Mu, Mt) + nb_edge_m_theta(i, gptr, gattr, E, Me)
    nb_build_delta(i, False, ys, True, ys, off, Mu, Mt, Du, Dt)
    sq = nb_delta_sqnorm(i, Du, Dt, off, G, goff) + nb_edge_delta(i, s, T, ys, eptr, evals, egrp, pair_of, gptr,
                                                                  Me, De)
    return loss, (aug - loss) - m_theta, sq


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_gap_pass_edges(U, off, Y, YL, first, last, trans, Mu, Mt, eptr, eidx, evals, E, pair_next, pair_prev, gptr,
                      gattr, Me, tw, pen):
    """:func:`~ssvm_torch.oracles.chain_kernels.nb_gap_pass` with edge-observation features: labels
    (N,), aug scores, <M_i, theta_i>, ground-truth scores and mismatch counts (n,). ``Y``: the gold labels
    (the ground-truth scores), ``YL``: the loss's (``Y``, or negative where unobserved: no loss there)."""
    N, K = U.shape
    n = off.shape[0] - 1
    labels = np.empty(N, dtype=np.int64)
    aug = np.empty(n)
    nb_viterbi_edges(U, off, first, last, trans, eptr, eidx, evals, E, pair_next, pair_prev, YL, tw, labels, aug, pen)
    m_theta, gt_score, wrong = np.empty(n), np.empty(n), np.empty(n)
    tmax = 1
    for i in range(n):
        tmax = max(tmax, off[i + 1] - off[i])
    Tt = np.empty((tmax, K, K))
    for i in range(n):
        s, T = off[i], off[i + 1] - off[i]
        m_theta[i] = nb_m_theta(i, off, U[s:s + T], first, last, trans, Mu, Mt) + nb_edge_m_theta(i, gptr, gattr,
                                                                                                   E, Me)
        nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
        gs = first[Y[s]] + last[Y[s + T - 1]]
        wr = 0.0
        for t in range(T):
            gs += U[s + t, Y[s + t]]
            if t > 0:
                gs += Tt[t, Y[s + t], Y[s + t - 1]]
            if labels[s + t] != YL[s + t] and YL[s + t] >= 0:
                wr += 1.0
        gt_score[i] = gs
        wrong[i] = wr
    return labels, aug, m_theta, gt_score, wrong
