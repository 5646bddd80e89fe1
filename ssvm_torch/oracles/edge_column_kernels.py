"""Numba kernels of the coordinate-sharded chain store with edge-observation features
(:mod:`ssvm_torch.distributed.column_shards_edges`; CPU, float64): the loss-augmented decoding of some blocks of
a batch from given unaries with per-position transitions (trans + the edge scores of
:mod:`ssvm_torch.oracles.edge_kernels`), and the edge block's part of the mini-batch direction,
accumulated into a scratch of touched edge attributes, measured and applied with the blocks' edge
statistics Me.

Every rank holds the whole edge block E (A_e, P) and every block's Me, and moves them alike (they
are replicated, like the first / last / transition weights): only the emission columns are sharded."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .chain_column_kernels import nb_decode_block
from .chain_kernels import _FAST, nb_m_theta
from .edge_kernels import nb_edge_delta, nb_edge_m_theta, nb_position_trans


@launched
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
        s0, e0, s = starts[b], starts[b + 1], off[i]
        Ub = U[s0 - shift:e0 - shift]
        Tt = np.empty((e0 - s0, K, K))
        nb_position_trans(s, e0 - s0, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
        aug, wrong = nb_decode_block(Ub, first, last, Tt, True, Y[s:s + e0 - s0], tw[i], pen, labels[s0:e0])
        loss[b] = wrong * tw[i]
        m_theta = nb_m_theta(i, off, Ub, first, last, trans, Mu, Mt) + nb_edge_m_theta(i, gptr, gattr, E, Me)
        dot[b] = (aug - loss[b]) - m_theta


@nb.njit(cache=True, nogil=True)
def nb_batch_edge_delta(b, blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, Me, De):
    """De = S_e(y*_b) - Me of batch entry b's block (its labeling labels[starts[b]:starts[b+1]]);
    returns (the block, its first group)."""
    i = blocks[b]
    s0, e0 = starts[b], starts[b + 1]
    nb_edge_delta(i, off[i], e0 - s0, labels[s0:e0], eptr, evals, egrp, pair_of, gptr, Me, De)
    return i, gptr[i]


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
        i, g0 = nb_batch_edge_delta(b, blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, Me, De)
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
            i, g0 = nb_batch_edge_delta(b, blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, Me, De)
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
