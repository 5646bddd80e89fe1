"""The coordinate-sharded chain store with edge-observation features (the ``columns`` exchange for
:class:`~ssvm_torch.stores.chain_edges.EdgeChainDual`, e.g. CoNLL-2000's rich-edges template).

The emission columns are sharded as in :mod:`ssvm_torch.distributed.column_shards` (partial unaries, one
all-to-all, the labelings shared, each rank's column share of dw); the edge block E (A_e, P) of w
and every block's edge statistics Me are replicated, like the first / last / transition weights:
every rank decodes with the whole E (the transition into position t is trans + the edge scores of
its attributes, :mod:`ssvm_torch.oracles.edge_kernels`), builds the edge part of dw for all tau
blocks from the shared labelings (:func:`~ssvm_torch.oracles.edge_column_kernels.nb_edge_share_direction`),
adds its ||.||^2 to the line search's after the all-reduce, and moves E and Me alike. On CoNLL's
rich-edges E is 18,274 x 145 numbers (21 MB) against 24M emission weights, so replicating it costs
little memory; its per-step work (~32 groups x 145 per block) is repeated on every rank.
"""
from __future__ import annotations

import numpy as np

from .column_shards import ColumnShardedChain
from ..oracles.edge_column_kernels import nb_decode_rows_edges, nb_edge_apply, nb_edge_share_direction
from ..oracles.edge_kernels import nb_gap_pass_edges
from ..stores.chain_edges import EdgeChainDual


class ColumnShardedEdgeChain(ColumnShardedChain):
    """One rank of the coordinate-sharded store of a chain with edge-observation features (module
    docstring); ``local`` is an :class:`~ssvm_torch.stores.chain_edges.EdgeChainDual` of the whole
    training set."""

    store_type = EdgeChainDual

    def __init__(self, local: EdgeChainDual):
        super().__init__(local)
        A, P = local.model.n_edge_features, local.model.P
        self._E = local.model.edge_weights(local.w).numpy()         # (A_e, P) view of w: replicated
        self._dE = np.zeros((A, P))                                  # the edge part of dw, zero between steps
        self._emark = np.zeros(A, dtype=np.bool_)
        self._etouched = np.empty(A, dtype=np.int64)
        self._De = np.empty((max(1, int(np.diff(local.gptr).max(initial=1))), P))   # one block's groups
        self._edge_pending = None                                    # (blocks, starts, labels, n) of dE

    def _edge_args(self):
        L = self.local
        return L.host.offsets, L.eptr, L.evals, L.egrp, L.model.pair_of, L.gptr

    def _drop_pending(self) -> None:
        super()._drop_pending()
        if self._edge_pending is not None:
            self._replicated_move(*self._edge_pending[:3], 0.0)

    def _decode(self, mine, blocks, starts, shift, U, labels, loss, dot) -> None:
        L, h = self.local, self.local.host
        nb_decode_rows_edges(mine, blocks, starts, shift, h.offsets, h.Y, U, h.first, h.last, h.trans, h.Mu, h.Mt,
                             self._tw, L.model.pen_host, L.eptr, L.eidx, L.evals, self._E, L.pair_next, L.pair_prev,
                             L.gptr, L.gattr, L.Me.numpy(), labels, loss, dot)

    def _replicated_direction(self, blocks, starts, labels, coef: float) -> float:
        """The edge block of dw (every rank alike, from the shared labelings); returns ||dE||^2."""
        off, eptr, evals, egrp, pair_of, gptr = self._edge_args()
        n, sq = nb_edge_share_direction(blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr,
                                        self.local.gattr, self.local.Me.numpy(), coef, self._De, self._dE,
                                        self._emark, self._etouched)
        self._edge_pending = (blocks, starts, labels, n)
        return sq

    def _replicated_move(self, blocks, starts, labels, gamma: float) -> None:
        """Me_b += gamma De_b for the batch's blocks and E += gamma dE; the scratch is clean after it."""
        off, eptr, evals, egrp, pair_of, gptr = self._edge_args()
        n = self._edge_pending[3]
        nb_edge_apply(blocks, starts, labels, off, eptr, evals, egrp, pair_of, gptr, self.local.Me.numpy(), self._De,
                      gamma, self._E, self._dE, self._emark, self._etouched, n)
        self._edge_pending = None

    def _gap_terms(self, cut: np.ndarray, at: np.ndarray, U: np.ndarray):
        """The edge gap pass (:func:`~ssvm_torch.oracles.edge_kernels.nb_gap_pass_edges`) on this
        rank's contiguous range of blocks."""
        L, h, r = self.local, self.local.host, self.rank
        b0, b1 = int(cut[r]), int(cut[r + 1])
        p0, p1 = int(h.offsets[b0]), int(h.offsets[b1])
        _, aug, m_theta, gt, wrong = nb_gap_pass_edges(
            U, h.offsets[b0:b1 + 1] - p0, h.Y[p0:p1], h.Y[p0:p1], h.first, h.last, h.trans, h.Mu[p0:p1], h.Mt[b0:b1],
            L.eptr[p0:p1 + 1], L.eidx, L.evals, self._E, L.pair_next, L.pair_prev, L.gptr[b0:b1 + 1], L.gattr,
            L.Me.numpy(), self._tw[b0:b1], L.model.pen_host)
        return aug, m_theta, gt, wrong
