"""Compact per-block dual storage of a semi-Markov SSVM (:class:`~ssvm_torch.models.semimarkov.SemiMarkovModel`).

phi(x_i, y) = A_i s(y) is linear in the segmentation's statistics s(y): per position the token, begin and end
indicators of each label (T_i, C) and per row the first / last / transition / length counts (G,)
(models/semimarkov.py). As for chains (stores/chain.py), block i is stored as the expected statistics under
alpha_i, M_i = (P_i (T_i, C), Gc_i (G,)), and w_i = A_i(s(y_i) - M_i) / (lam n), so with D = s(y*) - M_i and the
potentials theta_i = A_i^T w (the per-position potentials U_i = [X_i, 1] W and the count weights):

    <w_i - w_s, w>    = <D, theta_i> / (lam n)
    ||w_i - w_s||^2   = (sum_c D_c^T G_i D_c + |D_counts|^2) / (lam n)^2,    G_i = X_i X_i^T (T_i, T_i)

and the block gap g_i = (<D, theta_i> + L_i(y*)) / n - ell_i (eq. (6) of Osokin et al. 2016). State is
O(sum_i T_i C + n G). Pure torch on any device; the decoder is the segment package's (compiled on CPU).
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import resolve_device, store_kernels, to_host
from ..errors import SSVMInputError, check_positive
from ..models.chain_index import csr_row_nonzeros, feature_coo, padded_index, segment_ids
from ..models.semimarkov import CHUNK, SemiMarkovModel
from ..oracles.chain_kernels import nb_csr_scatter_rows, nb_gram
from ..segments import ops
from ..segments.scoring import augmented, loss as segment_loss
from .base import SPARSE_D, BlockDual, Corner, GapPass, objective_n
from .ragged import RaggedLabelings
from .segment_batch import SegmentBatchMoves
from .segment_host import HostSegmentSteps
from .segment_joint import SegmentJointConstraints
from .state import TensorBlockState
from .statistics import ExpectedStatistics


class SegmentDual(RaggedLabelings, SegmentBatchMoves, SegmentJointConstraints, ExpectedStatistics, TensorBlockState,
                  BlockDual):
    """Compact per-block dual state of a semi-Markov SSVM (module docstring); tensors on ``device``."""

    STATE_TENSORS = ("w", "ell_i", "P", "Gc")

    def __init__(self, model: SemiMarkovModel, data, lam: float, device=None, dtype=torch.float64,
                 n_objective: int | None = None, kernels: str = "auto"):
        model.check_data(data)
        if data.allow_unknown:
            raise SSVMInputError("data: a semi-Markov store trains on labelled data (allow_unknown is for evaluation)")
        if data.partial:                                   # the gold y_i of a block is its completion
            model.check_segmentation(data, "data (a partially observed row's states must be a completion there: "
                                           "SemiMarkovModel.complete)")
        self.model, self.lam = model, check_positive(lam, "lam")
        self.n, self.N = data.n, objective_n(data.n, n_objective)
        self.device, self.dtype = resolve_device(device), dtype
        self._numba = False                                  # labelings are tensors on the device (RaggedLabelings)
        self.kernels = store_kernels(kernels, self.device, dtype)     # numba: the compiled block step
        self.data = data
        self.csr = model.features_csr(data, dtype, self.device)
        self.offsets = data.offsets.to(self.device)
        self.lengths = self.offsets[1:] - self.offsets[:-1]
        self.seg = segment_ids(self.offsets)
        self.c = model.token_loss(self.lengths, dtype)          # the loss of one wrong position of each block
        # the positions the task loss counts (all of them, or the observed ones: the latent SSVM, latent.py)
        self.observed = (data.observed if data.observed is not None else torch.ones_like(data.Y, dtype=torch.bool)
                         ).to(self.device)
        self.goff = torch.nn.functional.pad(torch.cumsum(self.lengths ** 2, 0), (1, 0))
        G = np.zeros(int(self.goff[-1]))
        nb_gram(*(to_host(t).astype(np.int64) for t in self.csr[:2]), to_host(self.csr[2]).astype(np.float64),
                to_host(self.offsets).astype(np.int64), to_host(self.goff).astype(np.int64), G)
        self.G = torch.as_tensor(G, dtype=dtype, device=self.device)
        self.gold = model.gt_batch(data, torch.arange(data.n)).to(self.device)      # (n, T_max) segmentations
        all_pos, self.all_valid = padded_index(self.offsets)
        self.all_pos = all_pos
        gp, self.G_gt = model.statistics(self.gold, self.lengths, dtype)
        self.P_gt = gp[self.all_valid]
        # alpha_i = delta(y_i) at start: w_i = 0, ell_i = 0
        self.P, self.Gc = self.P_gt.clone(), self.G_gt.clone()
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=self.device)
        self._ell = torch.zeros(1, dtype=dtype, device=self.device)
        self.w = torch.zeros(model.d, dtype=dtype, device=self.device)
        order = torch.argsort(self.lengths, descending=True, stable=True)
        self._chunks = [order[k:k + CHUNK] for k in range(0, self.n, CHUNK)]
        self._xt = None                                    # X^T as a sparse (F, N) matrix, built on first use
        self.sparse_direction = model.d >= SPARSE_D        # mini-batch directions as touched coordinates
        self._fptr = to_host(self.csr[0]).tolist()           # a block's stored entries are one slice of the CSR
        self._entry_row = segment_ids(self.csr[0])
        # (block, labels, its D) of the last fw_corner, as tensors or (the compiled step) host arrays
        self._corner_delta = self._host_delta = None
        # the compiled block step (stores/segment_host.py) on views of this state, or None: the torch path
        self._host = HostSegmentSteps(self) if self.kernels == "numba" else None

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._forget_delta()

    def _forget_delta(self) -> None:
        self._corner_delta = self._host_delta = None

    # -- statistics of blocks ------------------------------------------------------------------
    def _rows(self, idx: torch.Tensor):
        """(padded positions (B, T), their mask, lengths (B,)) of the blocks ``idx``."""
        pos, valid = padded_index(self.offsets, idx)
        return pos, valid, valid.sum(1)

    def _entries(self, rows: torch.Tensor):
        """(row of each stored feature entry within ``rows``, its feature index, its value) of the positions
        ``rows``: one slice of the CSR arrays when they are consecutive positions (one block's, or adjacent blocks' in
        order: blocks' rows are increasing within a block, so first-to-last spanning len(rows) means consecutive)."""
        fptr, fidx, fval = self.csr
        s, e = int(rows[0]), int(rows[-1]) + 1
        if e - s == rows.shape[0]:
            a, b = self._fptr[s], self._fptr[e]
            return self._entry_row[a:b] - s, fidx[a:b], fval[a:b]
        local, nz = csr_row_nonzeros(fptr, rows)
        return local, fidx[nz], fval[nz]

    def _theta(self, idx, pos, valid, U_all=None):
        """The padded potentials U (B, T, C) of the blocks at the current w (from all positions' U if given)."""
        U = torch.zeros(*valid.shape, self.model.C, dtype=self.dtype, device=self.device)
        if U_all is not None:
            U[valid] = U_all[pos[valid]]
            return U
        rows = pos[valid]
        local, index, value = self._entries(rows)
        X = torch.sparse_coo_tensor(torch.stack([local, index]), value, (rows.shape[0], self.model.F),
                                    check_invariants=False)
        U[valid] = torch.sparse.mm(X, self.model.split(self.w)[0])
        return U

    def _point(self, idx, pos, valid, lengths, P):
        """(per-position statistics (B, T, C), counts (B, G)) of the points P of the blocks ``idx``: None (their
        current points M_i) or segmentations, one row per block."""
        if P is None:
            return self.P[pos] * valid[..., None].to(self.dtype), self.Gc[idx]
        return self.model.statistics(torch.as_tensor(P, device=self.device).reshape(len(idx), -1)[:, :pos.shape[1]],
                                     lengths, self.dtype)

    def _gold(self, idx, pos, valid):
        """(per-position statistics (B, T, C), counts (B, G)) of the gold segmentations of the blocks ``idx``."""
        return self.P_gt[pos] * valid[..., None].to(self.dtype), self.G_gt[idx]

    def _dot(self, Dp, Dc, U):
        return (Dp * U).sum((1, 2)) + Dc @ self.w[self.model.e:]

    def _sqnorm(self, idx, valid, Dp, Dc) -> torch.Tensor:
        """||A_b D_b||^2 of every block of the batch (module docstring)."""
        out = (Dc * Dc).sum(1)
        for b, i in enumerate(idx.tolist()):
            T = int(valid[b].sum())
            Gi = self.G[int(self.goff[i]):int(self.goff[i + 1])].view(T, T)
            D = Dp[b, :T]
            out[b] += (D * (Gi @ D)).sum()
        return out

    def _scatter(self, target, rows, Dp_rows, Dc_sum, coef: float) -> None:
        """target += coef A(D): the emission rows of the positions ``rows`` and the counts."""
        local, index, value = self._entries(rows)
        W = self.model.split(target)[0]
        # index_put_ with accumulate: several times faster than index_add_ on the CPU for a few hundred rows
        W.index_put_((index,), (coef * value)[:, None] * Dp_rows.index_select(0, local), accumulate=True)
        target[self.model.e:] += coef * Dc_sum

    def _add(self, rows, Dp_rows, Dc_sum, coef: float) -> None:
        self._scatter(self.w, rows, Dp_rows, Dc_sum, coef)
        if self.shadow is not None:
            self._scatter(self.shadow, rows, Dp_rows, Dc_sum, coef * self.shadow_coef)

    def _corners(self, idx, U_all=None, sqnorm: bool = True):
        """Loss-augmented decoding of the blocks ``idx`` and their FW terms: labels (B, T), L (B,), <D, theta>
        (B,), ||A D||^2 (B,) or None, D (for the moves), the potentials U and the corners' statistics."""
        pos, valid, lengths = self._rows(idx)
        U = self._theta(idx, pos, valid, U_all)
        _, first, last, trans, _ = self.model.split(self.w)
        gold = self.gold[idx][:, :pos.shape[1]]
        c, obs = self.c[idx], self.observed[pos] & valid
        S, _ = augmented(self.model.segment_scores(U, self.w), gold, lengths, "tokens", c, obs)
        y = ops.best(S, first, last, trans, lengths, self.model.kernels)[0]
        ps, cs = self.model.statistics(y, lengths, self.dtype)
        Mp, Mc = self._point(idx, pos, valid, lengths, None)
        Dp, Dc = ps - Mp, cs - Mc
        loss = segment_loss(y, gold, lengths, "tokens", c, obs)
        return {"labels": y, "loss": loss, "dot": self._dot(Dp, Dc, U), "pos": pos, "valid": valid, "U": U,
                "sq": self._sqnorm(idx, valid, Dp, Dc) if sqnorm else None, "Dp": Dp, "Dc": Dc, "stats": (ps, cs)}

    # -- block moves ---------------------------------------------------------------------------------
    def _fw_corner_compiled(self, i: int) -> Corner:
        labels, loss, dot, sq, D, Dc = self._host.corner(i)
        self._corner_delta, self._host_delta = None, (i, labels, None, D, Dc, sq)
        lamn = self.lam * self.N
        loss /= self.N
        return Corner(labels, loss, dot / lamn, sq / lamn ** 2, dot / self.N - float(self.ell_i[i]) + loss)

    def fw_corner(self, i: int) -> Corner:
        if self._host is not None:
            return self._fw_corner_compiled(i)
        idx = torch.tensor([i], device=self.device)
        k = self._corners(idx)
        lamn = self.lam * self.N
        loss, dot = float(k["loss"][0]) / self.N, float(k["dot"][0])
        labels = k["labels"][0]
        # the FW step that usually follows moves along this D: kept until the block state changes
        self._corner_delta = (i, labels, (idx, k["pos"][0], k["valid"], k["Dp"], k["Dc"]))
        return Corner(labels, loss, dot / lamn, float(k["sq"][0]) / lamn ** 2,
                      dot / self.N - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        self.pair_move(i, corner.labels, None, corner.loss, float(self.ell_i[i]), gamma)

    def _delta(self, i: int, P, Q):
        """(idx, rows (T_i,), valid (1, T_i), D of the positions (1, T_i, C), D of the counts (1, G)) of
        s(P) - s(Q) for block i (None = its current point)."""
        cached = getattr(self, "_corner_delta", None)
        if Q is None and cached is not None and cached[0] == i and cached[1] is P:
            return cached[2]
        idx = torch.tensor([i], device=self.device)
        pos, valid, lengths = self._rows(idx)
        (pp, pc), (qp, qc) = (self._point(idx, pos, valid, lengths, X) for X in (P, Q))
        return idx, pos[0], valid, pp - qp, pc - qc

    def _host_pair(self, i: int, P, Q):
        """The compiled step's (block, P, Q, D (T_i, 3K), Dc (G,), ||A_i D||^2) of D = s(P) - s(Q), kept until the
        block state changes (the move that usually follows reads it)."""
        host = self._host_delta
        if host is None or host[0] != i or host[1] is not P or host[2] is not Q:
            self._corner_delta, self._host_delta = None, (i, P, Q, *self._host.pair(i, P, Q))
        return self._host_delta

    def pair_sqnorm(self, i: int, P, Q) -> float:
        if self._host is not None:
            sq = self._host_pair(i, P, Q)[5]
            return sq / (self.lam * self.N) ** 2
        idx, _, valid, Dp, Dc = self._delta(i, P, Q)
        return float(self._sqnorm(idx, valid, Dp, Dc)[0]) / (self.lam * self.N) ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q): M_i += gamma D, w -= gamma A_i D / (lam n); losses are L/n."""
        if self._host is not None:                        # the compiled corner's or pair's D
            _, _, _, D, Dc, _ = self._host_pair(i, P, Q)
            self._host.move(i, D, Dc, -gamma / (self.lam * self.N), gamma, self.shadow, self.shadow_coef)
            self._corner_delta = self._host_delta = None
            self.ell_i[i] += gamma * (loss_P - loss_Q)
            self._ell[0] += gamma * (loss_P - loss_Q)
            return
        _, rows, valid, Dp, Dc = self._delta(i, P, Q)
        self._corner_delta = self._host_delta = None
        D = Dp[0]                                          # one block: all of its T_i positions are valid
        self._add(rows, D, Dc[0], -gamma / (self.lam * self.N))
        self.P.index_put_((rows,), gamma * D, accumulate=True)
        self.Gc[i] += gamma * Dc[0]
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell[0] += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef psi_i(y*) = coef A_i (s(y_i) - s(y*))."""
        _, rows, valid, Dp, Dc = self._delta(i, self.gt_labeling(i), corner.labels)
        self._add(rows, Dp[0], Dc[0], coef)

    # -- active-set primitives ----------------------------------------------------------------------
    def gt_labeling(self, i: int):
        return self.gold[i, :int(self.lengths[i])].clone()

    def key(self, labeling):
        return self.model.key(labeling)

    def loss_of(self, i: int, labeling) -> float:
        idx = torch.tensor([i], device=self.device)
        s, T = int(self.offsets[i]), int(self.lengths[i])
        y = torch.as_tensor(labeling, device=self.device).reshape(1, T)
        return float(segment_loss(y, self.gold[idx, :T], self.lengths[idx], "tokens", self.c[idx],
                                  self.observed[s:s + T][None])[0]) / self.N

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = (<s(y) - M_i, theta_i> + L_i(y)) / n - ell_i for each labeling (eq. (6) towards y)."""
        if self._host is not None:
            return self._host.labelings_gaps(i, labelings) / self.N - float(self.ell_i[i])
        Y = torch.stack([torch.as_tensor(y, device=self.device) for y in labelings])
        m = Y.shape[0]
        idx = torch.full((m,), i, device=self.device)
        pos, valid, lengths = self._rows(idx)
        U = self._theta(idx, pos, valid)
        ps, cs = self.model.statistics(Y, lengths, self.dtype)
        Mp, Mc = self._point(idx, pos, valid, lengths, None)
        loss = segment_loss(Y, self.gold[idx, :Y.shape[1]], lengths, "tokens", self.c[idx], self.observed[pos] & valid)
        return to_host((self._dot(ps - Mp, cs - Mc, U) + loss) / self.N - self.ell_i[i])

    # -- batched passes -----------------------------------------------------------------------------
    def _all_potentials(self, w=None) -> torch.Tensor:
        """U (N, C) of every position at w (default the store's)."""
        w = self.w if w is None else w
        if self._xt is None:
            self._xt = feature_coo(self.csr, self.model.F, transpose=True)
        return torch.sparse.mm(self._xt.t(), self.model.split(w)[0])

    def _ragged(self, labels, pos, valid, out):
        out[pos[valid]] = labels[valid]

    def gap_pass(self) -> GapPass:
        """All block gaps at w, chunk by chunk of blocks of similar lengths (torch) or blocks in parallel threads
        (compiled):
        g_i = (<D_i, theta_i> + L_i) / n - ell_i, H_i = max_y [L_i(y) + <w, phi(x_i, y)>] - <w, phi(x_i, y_i)>
        = L_i + <s(y*) - s(y_i), theta_i>."""
        if self._host is not None:
            return self._gap_pass_compiled()
        U_all = self._all_potentials()
        labels = torch.full_like(self.seg, -1)
        loss = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        gaps, H = torch.zeros_like(loss), torch.zeros_like(loss)
        for idx in self._chunks:
            k = self._corners(idx, U_all, sqnorm=False)
            self._ragged(k["labels"], k["pos"], k["valid"], labels)
            loss[idx] = k["loss"]
            gaps[idx] = (k["dot"] + k["loss"]) / self.N - self.ell_i[idx]
            gp, gc = self._gold(idx, k["pos"], k["valid"])
            ps, cs = k["stats"]
            H[idx] = self._dot(ps - gp, cs - gc, k["U"]) + k["loss"]
        return GapPass(labels=labels, loss=loss / self.N, H=H, block_gaps=gaps)

    def _gap_pass_compiled(self) -> GapPass:
        labels, loss, dot, gold_dot = (torch.from_numpy(x) for x in self._host.gap_pass())
        return GapPass(labels=labels, loss=loss / self.N, H=loss + dot - gold_dot,
                       block_gaps=(dot + loss) / self.N - self.ell_i)

    def _stats_of(self, labels: torch.Tensor):
        """(P (N, C), counts (n, G)) of ragged segmentations (N,) of every block."""
        segs = torch.where(self.all_valid, labels[self.all_pos], torch.full_like(self.all_pos, -1))
        ps, cs = self.model.statistics(segs, self.lengths, self.dtype)
        return ps[self.all_valid], cs

    def w_from_stats(self, P: torch.Tensor, Gc: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i A_i (s(y_i) - M_i) / (lam n) for the statistics of every block (the exact map from duals to w): X^T D
        by a compiled walk over the feature rows on the host path, a sparse product on the torch path."""
        w = torch.zeros_like(self.w) if out is None else out.zero_()
        if self._host is not None:
            nb_csr_scatter_rows(*self._host.csr, (self.P_gt - P).numpy(), self.model.split(w)[0].numpy().T)
        else:
            if self._xt is None:
                self._xt = feature_coo(self.csr, self.model.F, transpose=True)
            self.model.split(w)[0].copy_(torch.sparse.mm(self._xt, self.P_gt - P))
        w[self.model.e:] = (self.G_gt - Gc).sum(0)
        return w.div_(self.lam * self.N)

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of one block (tests and inspection)."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        w = torch.zeros_like(self.w)
        self._scatter(w, torch.arange(s, e, device=self.device), self.P_gt[s:e] - self.P[s:e],
                      self.G_gt[i] - self.Gc[i], 1.0 / (self.lam * self.N))
        return w

    # -- regularization path ------------------------------------------------------------------------
    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> of every block."""
        w = w.to(self.device, self.dtype)
        U_all = self._all_potentials(w)
        out = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        _, first, last, trans, _ = self.model.split(w)
        for idx in self._chunks:
            pos, valid, lengths = self._rows(idx)
            U = self._theta(idx, pos, valid, U_all)
            y = ops.best(self.model.segment_scores(U, w), first, last, trans, lengths, self.model.kernels)[0]
            ps, cs = self.model.statistics(y, lengths, self.dtype)
            gp, gc = self._gold(idx, pos, valid)
            out[idx] = (U * (ps - gp)).sum((1, 2)) + (cs - gc) @ w[self.model.e:]
        return out

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = <s(y_i) - M_i, theta_i> / n."""
        U = self._all_potentials()
        out = (self.G_gt - self.Gc) @ self.w[self.model.e:]
        return out.index_add_(0, self.seg, ((self.P_gt - self.P) * U).sum(1)) / self.N
