"""Numba kernels of the coordinate-sharded chain store with edge-observation features
(:mod:`ssvm_torch.column_shards_edges`; CPU, float64): the loss-augmented decoding of some blocks of
a batch from given unaries with per-position transitions (trans + the edge scores of
:mod:`ssvm_torch.oracles.edge_kernels`), and the edge block's part of the mini-batch direction,
accumulated into a scratch of touched edge attributes, measured and applied with the blocks' edge
statistics Me.

Every rank holds the whole edge block E (A_e, P) and every block's Me, and moves them alike (they
are replicated, like the first / last / transition weights): only the emission columns are sharded."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..chain.numba_viterbi import viterbi_segment_tt
from .chain_kernels import _FAST, nb_m_theta
from .edge_kernels import nb_edge_delta, nb_edge_m_theta, nb_position_trans


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def nb_decode_rows_edges(mine, blocks, starts, shift, off, Y, U, first, last, trans, Mu, Mt, tw, pen,
                         eptr, eidx, evals, E, pair_next, pair_prev, gptr, gattr, Me, labels, loss, dot):
    """:func:`~ssvm_torch.oracles.chain_column_kernels.nb_decode_rows` with edge-observation
    features: the transition into position t of block i is trans + its edge scores, and
    <M_i, theta_i> gains the edge term sum_g <Me[g], E[gattr[g]]> (eq. (6) of Osokin et al. 2016 as
    :func:`~ssvm_torch.oracles.edge_kernels.nb_fw_corner_edges` computes it)."""
    K = U.shape[1]
    for q in nb.prange(mine.shape[0]):
        b = mine[q]
        i = blocks[b]
        s0 = starts[b]
        T = starts[b + 1] - s0
        s = off[i]
        delta, newd = np.empty(K), np.empty(K)
        bp = np.empty((T, K), dtype=np.int64)
        ys = np.empty(T, dtype=np.int64)
        Tt = np.empty((T, K, K))
        Ub = U[s0 - shift:s0 - shift + T]
        nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
        aug = viterbi_segment_tt(Ub, 0, T, first, last, Tt, True, Y[s:s + T], tw[i], ys, delta, newd, bp, pen)
        wrong = 0
        for t in range(T):
            labels[s0 + t] = ys[t]
            if ys[t] != Y[s + t]:
                wrong += 1
        loss[b] = wrong * tw[i]
        m_theta = nb_m_theta(i, off, Ub, first, last, trans, Mu, Mt) + nb_edge_m_theta(i, gptr, gattr, E, Me)
        dot[b] = (aug - loss[b]) - m_theta


@nb.njit(cache=True, nogil=True)
def nb_edge_share_direction(blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, gattr, Me, coef, De,
                            dE, mark, touched):
    """dE[gattr[g]] += coef De_b[g] for every group g of every block b of the batch, in batch order,
    De_b = S_e(y*_b) - Me_b (:func:`~ssvm_torch.oracles.edge_kernels.nb_edge_delta`; ``De`` a
    buffer of one block's groups): the edge block of dw = coef sum_b A^e_b(De_b). The touched
    attributes are listed in ``touched`` (marked in ``mark``). Returns (their number,
    ||dE||^2 over them)."""
    n = 0
    P = Me.shape[1]
    for b in range(blocks.shape[0]):
        i = blocks[b]
        s0 = starts[b]
        T = starts[b + 1] - s0
        nb_edge_delta(i, off[i], T, labels[s0:s0 + T], eptr, evals, egrp, pair_of, gptr, Me, De)
        g0 = gptr[i]
        for g in range(g0, gptr[i + 1]):
            a = gattr[g]
            if not mark[a]:
                mark[a] = True
                touched[n] = a
                n += 1
            for p in range(P):
                dE[a, p] += coef * De[g - g0, p]
    sq = 0.0
    for q in range(n):
        a = touched[q]
        for p in range(P):
            sq += dE[a, p] * dE[a, p]
    return n, sq


@nb.njit(cache=True, nogil=True)
def nb_edge_apply(blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, Me, De, gamma, E, dE, mark,
                  touched, n):
    """The step's edge move (gamma = 0: none): Me_b += gamma De_b for every block of the batch
    (De_b recomputed from the statistics before the move: the blocks of a batch are distinct, so no
    group moves twice) and E += gamma dE on the n touched attributes; then dE and the marks there
    are zero again."""
    P = Me.shape[1]
    if gamma != 0.0:
        for b in range(blocks.shape[0]):
            i = blocks[b]
            s0 = starts[b]
            T = starts[b + 1] - s0
            nb_edge_delta(i, off[i], T, labels[s0:s0 + T], eptr, evals, egrp, pair_of, gptr, Me, De)
            g0 = gptr[i]
            for g in range(g0, gptr[i + 1]):
                for p in range(P):
                    Me[g, p] += gamma * De[g - g0, p]
    for q in range(n):
        a = touched[q]
        for p in range(P):
            if gamma != 0.0:
                E[a, p] += gamma * dE[a, p]
            dE[a, p] = 0.0
        mark[a] = False
