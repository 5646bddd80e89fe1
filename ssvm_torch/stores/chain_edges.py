"""Compact block store of a chain with edge-observation features (models/chain_edges.py).

Block i is :class:`~ssvm_torch.stores.chain.ChainDual`'s (label marginals Mu_i, transition counts
Mt_i) plus, for each distinct edge attribute of the block (a group g), the expected counts of the
supported label pairs at the positions carrying it, Me[g] (P,). The edge part of w_i is
(S_e(y_i) - Me_i) / (lam n) scattered to the rows of the groups' attributes, and the block gap
terms gain the edge terms documented in :mod:`ssvm_torch.oracles.edge_kernels`. State grows by
sum_i (distinct edge attributes of block i) x P floats.

Every term of the chain store gains its edge part, so the store runs what the chain store runs: BCFW with FW,
pairwise and away block steps and the cache (the active-set terms read the edge part of each difference,
:func:`~ssvm_torch.oracles.edge_kernels.nb_edge_pair_delta`), any sampling, gap passes, checkpoints, weighted
averaging (the shadow vector's edge rows move with w's), batch FW and the regularization path (the corner's
edge rows, :func:`~ssvm_torch.oracles.edge_kernels.nb_edge_stats` by attribute; the max margins and lam <w_i, w> with their
edge scores), the warm lambda grid, SSG, mini-batch BCFW (``--batch-size``: tau corners, one joint
direction, the exact line search of :class:`~ssvm_torch.solvers.steps.MiniBatchStep`) and the 1-slack cutting plane
(its joint constraints as dense rows or as joint labelings, whose products and point gain the edge scores and
rows), on the numba kernels (CPU float64). The sharded stores of the gather / allreduce exchanges are refused with a
clear error (the columns exchange, :mod:`ssvm_torch.distributed.column_shards_edges`, runs mini-batch BCFW under
torchrun).
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.types import ChainData
from ..errors import SSVMInputError, check
from ..models.chain_edges import EdgeChainModel, block_chunks
from ..models.chain_index import padded_index
from ..oracles.chain_kernels import nb_unary_all
from ..oracles.edge_kernels import (nb_edge_delta, nb_edge_labelings_dots, nb_edge_m_thetas, nb_edge_move,
                                    nb_edge_pair_delta, nb_edge_scores, nb_edge_stats, nb_edge_weights,
                                    nb_fw_corner_edges, nb_gap_pass_edges)
from .base import BatchCorners, BlockDual, Corner, GapPass
from .chain import ChainDual
from .ragged import host_labels


class EdgeChainDual(ChainDual):
    """:class:`ChainDual` with the edge statistics Me (sum of groups, P) of every block."""

    supports_marginal_moves = False  # the chain's marginal moves (EG, DEG) know no edge scores or statistics
    shardable = False                # gather / allreduce ship no edge block; the columns exchange runs it (column_shards_edges.py)
    shares_w = False                 # the edge block is rebuilt beside w (recompute), not into a given vector
    description = ("a chain with edge-observation features (the edge: items of a template, e.g. conll2000's default "
                   "rich-edges; a template without them, e.g. rich, runs every solver)")

    def __init__(self, model: EdgeChainModel, data: ChainData, lam: float, device=None, dtype=torch.float64,
                 kernels: str = "auto", n_objective: int | None = None):
        check(isinstance(model, EdgeChainModel), "model", "an EdgeChainModel", type(model).__name__)
        if kernels == "torch" or (device is not None and torch.device(device).type != "cpu") or dtype != torch.float64:
            raise SSVMInputError(f"kernels: a chain with edge-observation features runs on the numba kernels (CPU "
                                 f"float64); got kernels {kernels!r}, device {device}, dtype {dtype}")
        super().__init__(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
        # the numba kernels only read the feature CSR (this store has no torch path): binary attributes
        # (CoNLL's) share one 1.0 through a stride-0 view instead of nnz copies, attribute ids take 4
        # bytes: -150 MB on CoNLL's rich-edges. (The chain store keeps int64 / materialized values: its
        # mini-batch torch ops index with them, and int32 indices there cost 30% per pass.)
        if self.fval.numel() and bool((self.fval == 1).all()):
            self.fval = torch.ones(1, dtype=dtype).expand(self.fval.numel())
        if model.F < 2 ** 31:
            self.fidx = self.fidx.to(torch.int32)
        self._bind_numpy()
        self.eptr, self.eidx, self.evals = model.edge_csr(data)
        # groups: the distinct (block, edge attribute) pairs, in block order
        block_of_entry = np.repeat(self.seg.numpy(), np.diff(self.eptr))
        A = model.n_edge_features
        keys, self.egrp = np.unique(block_of_entry * A + self.eidx, return_inverse=True)
        self.egrp = self.egrp.astype(np.int64)
        self.gattr = (keys % A).astype(np.int64)
        self.gptr = np.searchsorted(keys // A, np.arange(self.n + 1)).astype(np.int64)
        self.pair_next, self.pair_prev = model.pairs[:, 0].numpy().copy(), model.pairs[:, 1].numpy().copy()
        self.Me = torch.zeros(len(self.gattr), model.P, dtype=torch.float64)
        self._add_gt_edge_stats(self.Me.numpy(), 1.0)             # alpha_i = delta(y_i)
        tmax, K = int(self.lengths.max()), model.K
        self._ework = (np.empty((tmax, K, K)), np.empty((max(1, int(np.diff(self.gptr).max(initial=1))), model.P)))

    def _add_gt_edge_stats(self, out: np.ndarray, scale: float) -> np.ndarray:
        """out += scale * S_e(y_i) of every block (in place: no (groups, P) temporary)."""
        nb_edge_stats(self._np[4], self._np[3], self.eptr, self.evals, self.egrp, self.model.pair_of, out, scale)
        return out

    def _E(self) -> np.ndarray:
        """The edge block of w as a zero-copy (A_e, P) numpy view."""
        return self.model.edge_weights(self.w).numpy()

    def fw_corner(self, i: int) -> Corner:
        inv_lamn = 1.0 / (self.lam * self.N)
        T = int(self._np[3][i + 1] - self._np[3][i])
        ys = np.empty(T, dtype=np.int64)
        U, delta, newd, bp, Du, Dt = self._work
        loss, dot, sq = nb_fw_corner_edges(
            i, self._tw[i], *self._np_loss, self.eptr, self.eidx, self.evals, self.egrp, self._E(), self.pair_next,
            self.pair_prev, self.model.pair_of, self.gptr, self.gattr, self.Me.numpy(), U, self._ework[0], delta, newd,
            bp, Du, Dt, self._ework[1], ys, self.model.pen_host)
        loss /= self.N
        return Corner(ys, loss, dot * inv_lamn, sq * inv_lamn * inv_lamn, dot / self.N - self._np_ell[0][i] + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        ys = np.asarray(corner.labels, dtype=np.int64)
        s, e = int(self._np[3][i]), int(self._np[3][i + 1])
        De = self._ework[1]
        nb_edge_delta(i, s, e - s, ys, self.eptr, self.evals, self.egrp, self.model.pair_of, self.gptr,
                      self.Me.numpy(), De)
        self._edge_move(i, De, gamma)
        super().pair_move(i, ys, None, corner.loss, self._np_ell[0][i], gamma)

    def _edge_move(self, i: int, De: np.ndarray, gamma: float) -> None:
        """Me_i += gamma De, the edge rows of w by -gamma De / (lam n) and, with averaging, the shadow vector's by
        shadow_coef times that (the chain part's moves do the same: stores/chain.py)."""
        c = -gamma / (self.lam * self.N)
        nb_edge_move(i, c, gamma, De, self.gptr, self.gattr, self._E(), self.Me.numpy())
        if self.shadow is not None:
            nb_edge_move(i, c * float(self.shadow_coef), 0.0, De, self.gptr, self.gattr,
                         self.model.edge_weights(self.shadow).numpy(), self.Me.numpy())

    def gap_pass(self) -> GapPass:
        """The exact gap pass over chunks of blocks (the kernel on array slices: only a chunk's
        unaries exist at a time, (chunk tokens, K) instead of (N, K))."""
        W, first, last, trans = (t.numpy() for t in self.model.split(self.w))
        WT = np.ascontiguousarray(W.T)
        fptr, fidx, fval, off, Y = self._np[:5]
        Mu, Mt = self._np[11], self._np[12]
        parts = []
        for b0, b1 in block_chunks(self.n):
            p0, p1 = int(off[b0]), int(off[b1])
            U = np.empty((p1 - p0, self.model.K))
            nb_unary_all(WT, fptr[p0:p1 + 1], fidx, fval, U)
            parts.append(nb_gap_pass_edges(
                U, off[b0:b1 + 1] - p0, Y[p0:p1], self._np_loss[4][p0:p1], first, last, trans, Mu[p0:p1], Mt[b0:b1], self.eptr[p0:p1 + 1],
                self.eidx, self.evals, self._E(), self.pair_next, self.pair_prev, self.gptr[b0:b1 + 1], self.gattr,
                self.Me.numpy(), self._tw[b0:b1], self.model.pen_host))
        labels, aug, m_theta, gt_score, wrong = (np.concatenate(x) for x in zip(*parts))
        labels, aug, m_theta, gt_score = map(torch.from_numpy, (labels, aug, m_theta, gt_score))
        loss = torch.from_numpy(wrong) * self.tw / self.N
        return GapPass(labels=labels, loss=loss, H=aug - gt_score, block_gaps=(aug - m_theta) / self.N - self.ell_i)

    def recompute(self) -> None:
        super().recompute()                                  # chain blocks; the edge block is rebuilt here
        nb_edge_weights(self._np[4], self._np[3], self.eptr, self.evals, self.egrp, self.model.pair_of, self.gattr,
                        self.Me.numpy(), 1.0 / (self.lam * self.N), self._E())

    def rescale(self, lam_new: float, rho: float) -> None:
        self._add_gt_edge_stats(self.Me.mul_(rho).numpy(), 1.0 - rho)
        super().rescale(lam_new, rho)

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of one block (tests and inspection)."""
        w = super().block_w(i)
        g0, g1 = int(self.gptr[i]), int(self.gptr[i + 1])
        D = torch.from_numpy(self._add_gt_edge_stats(np.zeros(self.Me.shape), 1.0)[g0:g1]) - self.Me[g0:g1]
        self.model.edge_weights(w).index_add_(0, torch.from_numpy(self.gattr[g0:g1]), D / (self.lam * self.N))
        return w

    STATE_TENSORS = (*ChainDual.STATE_TENSORS, "Me")      # the edge statistics too

    # -- mini-batch BCFW ------------------------------------------------------------------------
    def batch_corners(self, idx, with_direction: bool = True) -> BatchCorners:
        """The corners of the distinct blocks ``idx`` (the edge Viterbi of :meth:`fw_corner`, block
        by block) and the joint direction dw = -sum_i (A_i(D_i) + A^e_i(De_i)) / (lam n): the chain
        part as :class:`ChainDual`'s (D_i = S(y*_i) - M_i), the edge part De_i = S_e(y*_i) - Me_i
        scattered to the rows of block i's edge attributes."""
        idx = torch.as_tensor(idx).reshape(-1)
        blocks = idx.tolist()
        corners = [self.fw_corner(i) for i in blocks]
        pos, valid = padded_index(self.offsets, idx)
        labels = torch.full(pos.shape, -1, dtype=torch.int64)
        labels[valid] = torch.from_numpy(np.concatenate([np.asarray(c.labels, dtype=np.int64) for c in corners]))
        loss = torch.tensor([c.loss for c in corners], dtype=torch.float64)
        gaps = torch.tensor([c.gap for c in corners], dtype=torch.float64)
        D, Dt, parts = self.direction_terms(idx, pos, valid, labels)
        coef = -1.0 / (self.lam * self.N)
        De = [self._edge_delta(i, c.labels) for i, c in zip(blocks, corners)]
        groups = torch.from_numpy(np.concatenate([np.arange(self.gptr[i], self.gptr[i + 1]) for i in blocks]))
        De = torch.from_numpy(np.concatenate(De)) if len(De) else torch.zeros(0, self.model.P, dtype=torch.float64)
        parts["edges"] = {"attr": torch.from_numpy(self.gattr)[groups], "stats": coef * De}
        ell_b = self.ell_i[idx]
        return BatchCorners(idx, loss, gaps, self.direction(parts) if with_direction else None,
                            float((loss - ell_b).sum()), moves=(pos[valid], D[valid], Dt, groups, De), parts=parts)

    def _edge_delta(self, i: int, ys) -> np.ndarray:
        """De_i = S_e(ys) - Me_i over block i's groups (a (groups, P) array)."""
        s, e = int(self._np[3][i]), int(self._np[3][i + 1])
        De = np.empty((int(self.gptr[i + 1] - self.gptr[i]), self.model.P))
        nb_edge_delta(i, s, e - s, np.asarray(ys, dtype=np.int64), self.eptr, self.evals, self.egrp,
                      self.model.pair_of, self.gptr, self.Me.numpy(), De)
        return De

    def direction(self, parts: dict) -> torch.Tensor:
        """The chain part (:meth:`ChainDual.direction`) plus the edge rows, summed in batch order."""
        chain = super().direction({k: v for k, v in parts.items() if k != "edges"})
        edges = parts["edges"]
        P, d0 = self.model.P, self.model.d0
        if not chain.is_sparse:
            self.model.edge_weights(chain).index_add_(0, edges["attr"], edges["stats"])
            return chain
        flat = (d0 + edges["attr"][:, None] * P + torch.arange(P)).reshape(1, -1)
        edge = torch.sparse_coo_tensor(flat, edges["stats"].reshape(-1), chain.shape)
        return (chain + edge).coalesce()

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        rows, D, Dt, groups, De = corners.moves
        super().batch_move(BatchCorners(corners.idx, corners.loss, corners.gaps, corners.dw, corners.dell,
                                        moves=(rows, D, Dt)), gamma)
        self.Me.index_put_((groups,), gamma * De, accumulate=True)      # in place: the numba views stay valid

    # -- active-set steps and the cache: the chain part (ChainDual's) plus the edge part --------------
    def _edge_pair(self, i: int, P, Q):
        """(De (groups of block i, P), sum De^2) of S_e(P) - S_e(Q), None = the block's point Me_i."""
        s, e = int(self._np[3][i]), int(self._np[3][i + 1])
        De = self._ework[1]
        none = self._no_labels
        sq = nb_edge_pair_delta(i, s, e - s, none if P is None else host_labels(P), P is None,
                                none if Q is None else host_labels(Q), Q is None, self.eptr, self.evals, self.egrp,
                                self.model.pair_of, self.gptr, self.Me.numpy(), De)
        return De, sq

    batched_cache = False                   # its corner gaps score edge features: ChainDual's batch kernel does not
    # its moves and norms add the edge rows, which ChainDual's fused kernel does not: the step from these two
    pairwise_step = BlockDual.pairwise_step
    fw_step = BlockDual.fw_step             # its corner and move have edge terms too

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) of each labeling (:meth:`ChainDual.corner_gaps`) with the edge term <S_e(y) - Me_i, E> / n."""
        gaps = super().corner_gaps(i, labelings)
        L = host_labels(labelings)
        s, e = int(self._np[3][i]), int(self._np[3][i + 1])
        edge = np.zeros(L.shape[0])
        nb_edge_labelings_dots(i, s, e - s, L, self.eptr, self.eidx, self.evals, self.model.pair_of,
                               self._E(), self.gptr, self.gattr, self.Me.numpy(), edge)
        return gaps + edge / self.N

    def pair_sqnorm(self, i: int, P, Q) -> float:
        return super().pair_sqnorm(i, P, Q) + self._edge_pair(i, P, Q)[1] / (self.lam * self.N) ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        self._edge_move(i, self._edge_pair(i, P, Q)[0], gamma)
        super().pair_move(i, P, Q, loss_P, loss_Q, gamma)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef psi_i(y*) (SSG): the chain part and the edge rows coef (S_e(y_i) - S_e(y*))."""
        super().add_psi(i, corner, coef)
        s, e = int(self._np[3][i]), int(self._np[3][i + 1])
        De, _ = self._edge_pair(i, self._np[4][s:e], corner.labels)
        nb_edge_move(i, coef, 0.0, De, self.gptr, self.gattr, self._E(), self.Me.numpy())

    # -- batch FW and the regularization path -------------------------------------------------------
    def corner_point(self, gp: GapPass):
        """The batch FW corner (w_s, ell_s) of the gap pass's labels: the chain part (:meth:`ChainDual.corner_point`)
        and the edge rows (S_e(y_gt) - S_e(y*)) / (lam n)."""
        w_s, ell_s = super().corner_point(gp)
        E, coef = self.model.edge_weights(w_s).numpy(), 1.0 / (self.lam * self.N)
        for labels, c in ((self._np[4], coef), (host_labels(gp.labels), -coef)):     # rows by attribute id
            nb_edge_stats(labels, self._np[3], self.eptr, self.evals, self.eidx, self.model.pair_of, E, c)
        return w_s, ell_s

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        """Every block towards the corner: Me <- (1 - gamma) Me + gamma S_e(y*), then the chain part."""
        self.Me.mul_(1.0 - gamma)                                 # in place: the numba views stay valid
        nb_edge_stats(host_labels(gp.labels), self._np[3], self.eptr, self.evals, self.egrp, self.model.pair_of,
                      self.Me.numpy(), gamma)
        super().move_all(gp, w_s, ell_s, gamma)

    # -- joint constraints as labelings (the 1-slack cutting plane, solvers/working_set.py) -------------------
    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y_c), w> (:meth:`ChainDual.joint_dots`, the chain scores) plus the edge part
        (<E, S_e(y_gt)> - <E, S_e(y_c)>) / n summed over the blocks, E the edge block of w."""
        chain = super().joint_dots(w, labels)
        E = np.ascontiguousarray(self.model.edge_weights(w.to(self.device, self.dtype)).numpy())
        gold = self._edge_scores(self._np[4], E, 1.0, np.zeros(self.n)).sum()
        edge = [gold - self._edge_scores(host_labels(y), E, 1.0, np.zeros(self.n)).sum() for y in labels]
        return chain + torch.tensor(edge, dtype=chain.dtype) / self.N

    def joint_point(self, weights, labels: list) -> torch.Tensor:
        """sum_c weights_c a(y_c): the chain part (:meth:`ChainDual.joint_point`) and the edge rows
        (sum_c weights_c (S_e(y_gt) - S_e(y_c))) / (lam n), rows by attribute id."""
        w = super().joint_point(weights, labels)
        E, coef = self.model.edge_weights(w).numpy(), 1.0 / (self.lam * self.N)
        rows = (self._np[3], self.eptr, self.evals, self.eidx, self.model.pair_of, E)
        nb_edge_stats(self._np[4], *rows, coef * float(sum(weights)))
        for wc, y in zip(weights, labels):
            if float(wc) != 0.0:
                nb_edge_stats(host_labels(y), *rows, -coef * float(wc))
        return w

    def _edge_scores(self, labels: np.ndarray, E: np.ndarray, sign: float, out: np.ndarray) -> np.ndarray:
        nb_edge_scores(labels, self._np[3], self.eptr, self.eidx, self.evals, self.model.pair_of, E, sign, out)
        return out

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> of every block: the chain part of the edge decoding's labels
        (:meth:`ChainDual.max_margins` reads the chain scores) plus their edge scores."""
        w = w.to(self.device, self.dtype)
        labels = self.model.predict_ragged(w, self.data)
        pots = self._potentials_of(w)
        chain = self._scores(*pots, labels) - self._scores(*pots, self.Y)
        E = np.ascontiguousarray(self.model.edge_weights(w).numpy())
        edge = self._edge_scores(host_labels(labels), E, 1.0, np.zeros(self.n))
        return chain + torch.from_numpy(self._edge_scores(self._np[4], E, -1.0, edge))

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = <S(y_i) - M_i, theta_i> / n with the edge part <S_e(y_i) - Me_i, E> / n."""
        E, m = self._E(), np.empty(self.n)
        nb_edge_m_thetas(self.gptr, self.gattr, E, self.Me.numpy(), m)
        edge = self._edge_scores(self._np[4], E, 1.0, -m)
        return super().block_wdots() + torch.from_numpy(edge) / self.N
