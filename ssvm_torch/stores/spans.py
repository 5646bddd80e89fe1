"""Compact per-block dual storage of a constituency SSVM (:class:`~ssvm_torch.models.constituency.ConstituencyModel`).

phi(x_i, y) = A_i s(y) is linear in the tree's statistics s(y): per fencepost the spans of each label that begin and
that end there (T_i, C), per sentence the spans of each (length bucket, label) (G,) (models/constituency.py). As for
semi-Markov chains (stores/segments.py), block i is stored as the expected statistics under alpha_i, M_i = (P_i, Gc_i),
and w_i = A_i (s(y_i) - M_i) / (lam n), so with D = s(y*) - M_i and the potentials theta_i = A_i^T w (the fencepost
potentials U_i = X_i W and the length weights):

    <w_i - w_s, w>    = <D, theta_i> / (lam n)
    ||w_i - w_s||^2   = (sum_c D_c^T G_i D_c + |D_counts|^2) / (lam n)^2,    G_i = X_i X_i^T (T_i, T_i)

and the block gap g_i = (<D, theta_i> + L_i(y*)) / n - ell_i (eq. (6) of Osokin et al. 2016). With partial brackets
(``SpanData.observed``: the latent SSVM's inner problem, ssvm_torch/latent.py) the gold tree y_i is the completion and
L_i counts the observed brackets only (models/constituency.py). State is
O(sum_i T_i L + n G L), not n dense d-vectors. A block's labeling is its tree as (2 n_i - 1, 3) int64 rows
(i, j, label) ordered by (i, j); a gap pass's labels stack them by ``span_offsets``. Backends: ``numba`` (CPU
float64) runs the FW corner, the block move, the gap pass and the max margins as compiled kernels
(stores/span_host.py, stores/span_kernels.py); ``torch`` (any device) the same in torch ops with the span
package's CKY; the other moves (pairwise, away, mini-batch, batch FW) are torch ops on either.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.span_data import SpanData
from ..devices import resolve_device, store_kernels, to_host
from ..errors import check_positive
from ..models.chain_index import csr_row_nonzeros, feature_coo, segment_ids
from ..models.constituency import ConstituencyModel
from ..oracles.chain_kernels import nb_gram
from ..spans import ops
from ..spans.checks import UNLABELED
from .base import BatchCorners, BlockDual, Corner, GapPass, line_search, objective_n
from .optional_moves import JointConstraints
from .span_host import SpanHostSteps
from .state import TensorBlockState
from .statistics import ExpectedStatistics


class SpanDual(SpanHostSteps, JointConstraints, ExpectedStatistics, TensorBlockState, BlockDual):
    """Compact per-block dual state of a constituency SSVM (module docstring); tensors on ``device``."""

    STATE_TENSORS = ("w", "ell_i", "P", "Gc")
    shardable = False                    # the distributed exchanges ship chain statistics only
    description = "the constituency store"

    def __init__(self, model: ConstituencyModel, data: SpanData, lam: float, device=None, dtype=torch.float64,
                 kernels: str = "auto", n_objective: int | None = None):
        model.check_data(data)
        self.model, self.lam = model, check_positive(lam, "lam")
        self.n, self.N = data.n, objective_n(data.n, n_objective)
        self.device, self.dtype = resolve_device(device), dtype
        self.kernels = store_kernels(kernels, self.device, dtype)
        self._numba = False                                # labelings are tensors on the device
        self.data = data.to(self.device)
        d = self.data
        self.lengths, self.fo, self.so = d.lengths, d.fence_offsets, d.span_offsets
        self.T = self.lengths + 1
        self.fval = torch.ones(d.fidx.shape[0], dtype=dtype, device=self.device)
        self.csr = (d.fptr, d.fidx, self.fval)
        self._x = feature_coo(self.csr, model.F)            # X (P, F) and X^T for the whole-store passes
        self._xt = feature_coo(self.csr, model.F, transpose=True)
        self._entry_row = segment_ids(d.fptr)
        self.goff = torch.nn.functional.pad(torch.cumsum(self.T ** 2, 0), (1, 0))
        G = np.zeros(int(self.goff[-1]))
        nb_gram(to_host(d.fptr).astype(np.int64), to_host(d.fidx).astype(np.int64), np.ones(d.fidx.shape[0]),
                to_host(self.fo).astype(np.int64), to_host(self.goff).astype(np.int64), G)
        self.G = torch.as_tensor(G, dtype=dtype, device=self.device)
        self.costs = model.costs(self.lengths, dtype)
        self.block_of_span = segment_ids(self.so)
        self.P_gt, self.G_gt = self._stats_of(d.spans)
        # alpha_i = delta(y_i) at the start: w_i = 0, ell_i = 0
        self.P, self.Gc = self.P_gt.clone(), self.G_gt.clone()
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=self.device)
        self._ell = torch.zeros(1, dtype=dtype, device=self.device)
        self.w = torch.zeros(model.d, dtype=dtype, device=self.device)
        self._chunks = list(model.chunks(self.data))       # blocks of similar lengths, padded scores bounded
        self._corner_delta = None            # (block, labels, D) of the last fw_corner: the move that follows reads it
        self._host = self.kernels == "numba"     # the compiled steps (stores/span_host.py) on CPU float64
        if self._host:
            self._bind_host()

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._forget_delta()

    def _forget_delta(self) -> None:
        self._corner_delta = None

    # -- statistics ---------------------------------------------------------------------------------------------
    def _stats_of(self, spans: torch.Tensor, blocks: torch.Tensor | None = None):
        """(P (all fenceposts, C), Gc (n, G)) of stacked trees of every block (``blocks``: the block of each span
        row; default the stacking of ``span_offsets``)."""
        m = self.model
        spans = spans.to(self.device).long()
        blocks = self.block_of_span if blocks is None else blocks
        P = torch.zeros(int(self.fo[-1]), m.C, dtype=self.dtype, device=self.device)
        Gc = torch.zeros(self.n, len(m.buckets) * m.L, dtype=self.dtype, device=self.device)
        m.scatter_statistics(P, self.fo[blocks] + spans[:, 0], self.fo[blocks] + spans[:, 1], spans[:, 2], Gc, blocks)
        return P, Gc

    def _block_stats(self, i: int, y):
        """(p (T_i, C), c (G,)) of one tree of block i, or of its current point M_i for None."""
        s, e = int(self.fo[i]), int(self.fo[i + 1])
        if y is None:
            return self.P[s:e], self.Gc[i]
        m = self.model
        y = torch.as_tensor(y, device=self.device).long()
        p = torch.zeros(e - s, m.C, dtype=self.dtype, device=self.device)
        c = torch.zeros(1, len(m.buckets) * m.L, dtype=self.dtype, device=self.device)
        m.scatter_statistics(p, y[:, 0], y[:, 1], y[:, 2], c, torch.zeros_like(y[:, 0]))
        return p, c[0]

    def _stacked(self, labelings) -> torch.Tensor:
        """m trees of one block as one (m, 2 n_i - 1, 3) tensor on the store's device."""
        return torch.stack([torch.as_tensor(y, device=self.device).long() for y in labelings])

    def _trees_stats(self, i: int, Y: torch.Tensor):
        """(p (m, T_i, C), c (m, G)) of the m trees ``Y`` (:meth:`_stacked`) of block i in one scatter
        (:meth:`_block_stats` of each): a set step's corner gaps score a block's whole working set at once."""
        T, m = int(self.fo[i + 1] - self.fo[i]), self.model
        rows = torch.arange(Y.shape[0], device=self.device).repeat_interleave(Y.shape[1])
        flat = Y.reshape(-1, 3)
        p = torch.zeros(Y.shape[0] * T, m.C, dtype=self.dtype, device=self.device)
        c = torch.zeros(Y.shape[0], len(m.buckets) * m.L, dtype=self.dtype, device=self.device)
        m.scatter_statistics(p, rows * T + flat[:, 0], rows * T + flat[:, 1], flat[:, 2], c, rows)
        return p.view(Y.shape[0], T, m.C), c

    def _entries(self, i: int):
        """(local fencepost row, feature id, value) of block i's stored features: one slice of the CSR arrays."""
        a, b = int(self.data.fptr[self.fo[i]]), int(self.data.fptr[self.fo[i + 1]])
        return self._entry_row[a:b] - self.fo[i], self.data.fidx[a:b], self.fval[a:b]

    def _block_U(self, i: int, w: torch.Tensor | None = None) -> torch.Tensor:
        """U_i = X_i W (T_i, C) at w (default the store's)."""
        if self._host and w is None:
            return self._host_potentials(i)
        return self.model.fence_potentials(self.w if w is None else w, self.data, [i])[0]

    def _all_U(self, w: torch.Tensor | None = None) -> torch.Tensor:
        """U (all fenceposts, C) at w (default the store's)."""
        return torch.sparse.mm(self._x, self.model.split(self.w if w is None else w)[0])

    def _gram(self, i: int) -> torch.Tensor:
        T = int(self.T[i])
        return self.G[int(self.goff[i]):int(self.goff[i + 1])].view(T, T)

    def _dot(self, Dp, Dc, U, w=None) -> torch.Tensor:
        return (Dp * U).sum((-2, -1)) + Dc @ self.model.split(self.w if w is None else w)[1].reshape(-1)

    def _scatter(self, target: torch.Tensor, i: int, Dp, Dc, coef: float) -> None:
        """target += coef A_i (Dp, Dc)."""
        local, index, value = self._entries(i)
        W, lens = self.model.split(target)
        W.index_put_((index,), (coef * value)[:, None] * Dp.index_select(0, local), accumulate=True)
        lens.add_(coef * Dc.view_as(lens))

    def _add(self, i: int, Dp, Dc, coef: float) -> None:
        self._scatter(self.w, i, Dp, Dc, coef)
        if self.shadow is not None:
            self._scatter(self.shadow, i, Dp, Dc, coef * self.shadow_coef)

    # -- decoding -----------------------------------------------------------------------------------------------
    def _padded(self, idx: torch.Tensor):
        """(fencepost rows (B, M), their mask) of the blocks ``idx``."""
        T = self.T[idx]
        steps = torch.arange(int(T.max()), device=self.device)
        valid = steps[None, :] < T[:, None]
        return torch.where(valid, self.fo[idx][:, None] + steps[None, :], torch.zeros_like(steps)[None, :]), valid

    def _decode(self, idx: torch.Tensor, U: torch.Tensor, w: torch.Tensor, augment: bool):
        """Best (loss-augmented with ``augment``) trees of the blocks ``idx`` from their padded fencepost
        potentials U (B, M, C) at w: (charts (B, M, M), the observed gold brackets' charts)."""
        m = self.model
        lengths = self.lengths[idx]
        S = m.span_scores(U, m.split(w)[1], lengths)
        observed = self.data.observed_charts(idx, U.shape[1])
        if augment:
            S = ops.augment(S, observed, lengths, self.costs[idx])
        return ops.best(S, lengths, "torch" if self.kernels == "torch" else "auto")[0], observed

    def _terms(self, idx: torch.Tensor, U_all: torch.Tensor | None = None, w: torch.Tensor | None = None,
               augment: bool = True) -> dict:
        """Decoding of the blocks ``idx`` and their terms: trees as stacked span rows, L_i (B,), <s(y*) - M_i,
        theta_i> (B,), <s(y*) - s(y_i), theta_i> (B,), D = s(y*) - M_i per fencepost row and per block."""
        w = self.w if w is None else w
        rows, valid = self._padded(idx)
        if U_all is None:                                  # a few blocks: their own rows only
            U = self.model.fence_potentials(w, self.data, idx)
        else:
            U = U_all[rows] * valid[..., None].to(self.dtype)
        charts, observed = self._decode(idx, U, w, augment)
        lengths = self.lengths[idx]
        p, c = self.model.statistics(charts, lengths, self.dtype)
        mask = valid[..., None].to(self.dtype)
        Dp, Dc = p - self.P[rows] * mask, c - self.Gc[idx]
        b, i, j = (charts >= 0).nonzero(as_tuple=True)
        spans = torch.stack([i, j, charts[b, i, j]], 1)
        loss = ops.missed_spans(charts, observed, lengths).to(self.dtype) * self.costs[idx]
        return {"spans": spans, "block": idx[b], "loss": loss, "dot": self._dot(Dp, Dc, U, w),
                "margin": self._dot(p - self.P_gt[rows] * mask, c - self.G_gt[idx], U, w), "rows": rows[valid],
                "Dp": Dp[valid], "Dc": Dc}

    # -- block moves --------------------------------------------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        if self._host:
            spans, wrong, dot, sq, Dp, Dc = self._host_corner(i)
            loss = float(self.costs[i]) * wrong / self.N
        else:
            k = self._terms(torch.tensor([i], device=self.device))
            spans, Dp, Dc = k["spans"], k["Dp"], k["Dc"][0]
            sq = float((Dp * (self._gram(i) @ Dp)).sum() + Dc @ Dc)
            loss, dot = float(k["loss"][0]) / self.N, float(k["dot"][0])
        lamn = self.lam * self.N
        self._corner_delta = (i, spans, (Dp, Dc))
        return Corner(spans, loss, dot / lamn, sq / lamn ** 2, dot / self.N - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        self.pair_move(i, corner.labels, None, corner.loss, float(self.ell_i[i]), gamma)

    def _delta(self, i: int, P, Q):
        """(Dp (T_i, C), Dc (G,)) of s(P) - s(Q) for block i (None = its current point)."""
        cached = self._corner_delta
        if Q is None and cached is not None and cached[0] == i and cached[1] is P:
            return cached[2]
        (pp, pc), (qp, qc) = self._block_stats(i, P), self._block_stats(i, Q)
        return pp - qp, pc - qc

    def pair_sqnorm(self, i: int, P, Q) -> float:
        return self._sqnorm_of(i, *self._delta(i, P, Q))

    def _sqnorm_of(self, i: int, Dp, Dc) -> float:
        return float((Dp * (self._gram(i) @ Dp)).sum() + Dc @ Dc) / (self.lam * self.N) ** 2

    def pairwise_step(self, i: int, P, Q, loss_P: float, loss_Q: float, g: float, cap: float) -> float:
        """BlockDual.pairwise_step with the direction built once for its norm and its move (float for float)."""
        Dp, Dc = self._delta(i, P, Q)
        gamma, gain = line_search(g, self._sqnorm_of(i, Dp, Dc), cap, self.lam)
        if gamma > 0.0 and gain > 0.0:
            self._move_along(i, Dp, Dc, loss_P, loss_Q, gamma)
            return gamma
        return 0.0

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q): M_i += gamma D, w -= gamma A_i D / (lam n); losses are L/n."""
        self._move_along(i, *self._delta(i, P, Q), loss_P, loss_Q, gamma)

    def _move_along(self, i: int, Dp, Dc, loss_P: float, loss_Q: float, gamma: float) -> None:
        self._corner_delta = None
        if self._host:
            self._host_move(i, Dp, Dc, -gamma / (self.lam * self.N), gamma)
        else:
            self._add(i, Dp, Dc, -gamma / (self.lam * self.N))
            s, e = int(self.fo[i]), int(self.fo[i + 1])
            self.P[s:e] += gamma * Dp
            self.Gc[i] += gamma * Dc
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell[0] += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef psi_i(y*) = coef A_i (s(y_i) - s(y*))."""
        Dp, Dc = self._delta(i, self.gt_labeling(i), corner.labels)
        self._add(i, Dp, Dc, coef)

    # -- active-set primitives ----------------------------------------------------------------------------------
    def gt_labeling(self, i: int):
        return self.data.spans[int(self.so[i]):int(self.so[i + 1])].clone()

    def key(self, labeling) -> bytes:
        return np.ascontiguousarray(to_host(torch.as_tensor(labeling)), dtype=np.int64).tobytes()

    def _wrong(self, i: int, Y: torch.Tensor) -> torch.Tensor:
        """The observed gold brackets of block i that each tree of ``Y`` (:meth:`_stacked`) lacks or labels otherwise
        (all trees hold 2 n_i - 1 spans: with every span observed, the spans of the tree that are not gold spans with
        the gold label; a bracket observed without its label is missed only when the tree lacks its span)."""
        observed = self.data.observed_charts(torch.tensor([i], device=self.device))[0]
        at = observed[Y[..., 0], Y[..., 1]]
        return int(((observed >= 0) | (observed == UNLABELED)).sum()) - ((at == Y[..., 2]) | (at == UNLABELED)).sum(1)

    def loss_of(self, i: int, labeling) -> float:
        return float(self.costs[i]) * int(self._wrong(i, self._stacked([labeling]))[0]) / self.N

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = (<s(y) - M_i, theta_i> + L_i(y)) / n - ell_i for each labeling (eq. (6) towards y)."""
        U = self._block_U(i)
        Mp, Mc = self._block_stats(i, None)
        Y = self._stacked(labelings)
        p, c = self._trees_stats(i, Y)
        dots = self._dot(p - Mp, c - Mc, U)
        loss = self._wrong(i, Y).to(self.dtype) * self.costs[i]
        return to_host((dots + loss) / self.N - self.ell_i[i])

    def block_labeling(self, gp: GapPass, i: int):
        return gp.labels[int(self.so[i]):int(self.so[i + 1])].clone()

    def stack_labelings(self, labelings: list) -> torch.Tensor:
        return torch.cat([torch.as_tensor(y, device=self.device) for y in labelings])

    # -- batched passes -----------------------------------------------------------------------------------------
    def _passes(self, w: torch.Tensor | None = None, augment: bool = True):
        """_terms of every chunk of blocks at w."""
        w = self.w if w is None else w.to(self.device, self.dtype)
        U_all = self._all_U(w)
        for idx in self._chunks:
            yield idx, self._terms(idx, U_all, w, augment)

    def gap_pass(self) -> GapPass:
        """All block gaps at w, chunk by chunk of blocks of similar lengths:
        g_i = (<D_i, theta_i> + L_i) / n - ell_i, H_i = L_i + <s(y*) - s(y_i), theta_i>."""
        if self._host:
            labels, wrong, dot, H = self._host_pass(None, True)
            loss = wrong.to(self.dtype) * self.costs
            return GapPass(labels=labels, loss=loss / self.N, H=H, block_gaps=(dot + loss) / self.N - self.ell_i)
        labels = torch.empty_like(self.data.spans, dtype=torch.int64)
        loss = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        gaps, H = torch.zeros_like(loss), torch.zeros_like(loss)
        for idx, k in self._passes():
            self._place_sorted(idx, k, labels)
            loss[idx] = k["loss"]
            gaps[idx] = (k["dot"] + k["loss"]) / self.N - self.ell_i[idx]
            H[idx] = k["margin"] + k["loss"]
        return GapPass(labels=labels, loss=loss / self.N, H=H, block_gaps=gaps)

    def _place_sorted(self, idx: torch.Tensor, k: dict, out: torch.Tensor) -> None:
        """Write a chunk's trees (rows grouped by chunk position, each group 2 n - 1 rows) into the stacked form."""
        count = 2 * self.lengths[idx] - 1
        start = torch.repeat_interleave(self.so[idx] - (torch.cumsum(count, 0) - count), count)
        out[start + torch.arange(int(count.sum()), device=self.device)] = k["spans"]

    def w_from_stats(self, P: torch.Tensor, Gc: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i A_i (s(y_i) - M_i) / (lam n) for the statistics of every block (the exact map from duals to w)."""
        w = torch.zeros_like(self.w) if out is None else out.zero_()
        W, lens = self.model.split(w)
        W.copy_(torch.sparse.mm(self._xt, self.P_gt - P))
        lens.copy_((self.G_gt - Gc).sum(0).view_as(lens))
        return w.div_(self.lam * self.N)

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of one block (tests and inspection)."""
        s, e = int(self.fo[i]), int(self.fo[i + 1])
        w = torch.zeros_like(self.w)
        self._scatter(w, i, self.P_gt[s:e] - self.P[s:e], self.G_gt[i] - self.Gc[i], 1.0 / (self.lam * self.N))
        return w

    # -- mini-batch BCFW ----------------------------------------------------------------------------------------
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        """The corners of the distinct blocks ``idx`` (one batched decode) and dw = -sum_b A_b D_b / (lam n)."""
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        self._corner_delta = None
        k = self._terms(idx)
        gaps = (k["dot"] + k["loss"]) / self.N - self.ell_i[idx]
        loss = k["loss"] / self.N
        parts = {"counts": -k["Dc"] / (self.lam * self.N),
                 "positions": {"count": self.T[idx], "rows": k["rows"], "stats": -k["Dp"] / (self.lam * self.N)}}
        return BatchCorners(idx, loss, gaps, self.direction(parts) if with_direction else None,
                            float((loss - self.ell_i[idx]).sum()), moves=(k["rows"], k["Dp"], k["Dc"]), parts=parts)

    def direction(self, parts: dict) -> torch.Tensor:
        """dw = -sum_b A_b D_b / (lam n), dense: the feature rows of the batch's fenceposts and the counts."""
        positions = parts["positions"]
        rows, stats = positions["rows"], positions["stats"]
        dw = torch.zeros_like(self.w)
        W, lens = self.model.split(dw)
        local, nz = csr_row_nonzeros(self.data.fptr, rows)
        W.index_put_((self.data.fidx[nz],), self.fval[nz, None] * stats.index_select(0, local), accumulate=True)
        lens.add_(parts["counts"].sum(0).view_as(lens))
        return dw

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        self._corner_delta = None
        (rows, Dp, Dc), idx = corners.moves, corners.idx
        self.P.index_put_((rows,), gamma * Dp, accumulate=True)
        self.Gc.index_put_((idx,), gamma * Dc, accumulate=True)
        self.ell_i[idx] = self.ell_i[idx].lerp(corners.loss.to(self.dtype), gamma)
        self.w.add_(corners.dw, alpha=gamma)
        if self.shadow is not None:
            self.shadow.add_(corners.dw, alpha=gamma * self.shadow_coef)
        self._ell[0] += gamma * corners.dell

    # -- joint constraints as trees (the 1-slack cutting plane) -------------------------------------------------
    def joint_labels(self, gp: GapPass) -> torch.Tensor:
        return gp.labels.to(self.device, torch.int16 if int(self.lengths.max()) < 2 ** 15 else torch.int64)

    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y), w> = sum_i <s(y_i) - s(y_c,i), theta_i> / n for each joint labeling: the potentials of w once."""
        w = w.to(self.device, self.dtype)
        U, lens = self._all_U(w), self.model.split(w)[1].reshape(-1)

        def score(P, Gc):
            return (P * U).sum() + Gc.sum(0) @ lens
        gold = score(self.P_gt, self.G_gt)
        return torch.stack([gold - score(*self._stats_of(y)) for y in labels]) / self.N

    def joint_point(self, weights, labels: list) -> torch.Tensor:
        """sum_c weights_c a(y_c): the weighted statistics' w, the missing mass on the gold trees (psi = 0)."""
        rest = 1.0 - float(sum(weights))
        P, Gc = self.P_gt * rest, self.G_gt * rest
        for wc, y in zip(weights, labels):
            if float(wc) != 0.0:
                ps, cs = self._stats_of(y)
                P.add_(ps, alpha=float(wc))
                Gc.add_(cs, alpha=float(wc))
        return self.w_from_stats(P, Gc)

    # -- regularization path ------------------------------------------------------------------------------------
    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> of every block (plain decoding)."""
        if self._host:
            return self._host_pass(w.to(self.device, self.dtype).contiguous(), False)[3]
        out = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        for idx, k in self._passes(w, augment=False):
            out[idx] = k["margin"]
        return out

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = <s(y_i) - M_i, theta_i> / n."""
        U = self._all_U()
        out = (self.G_gt - self.Gc) @ self.model.split(self.w)[1].reshape(-1)
        rows = segment_ids(self.fo)
        return out.index_add_(0, rows, ((self.P_gt - self.P) * U).sum(1)) / self.N

