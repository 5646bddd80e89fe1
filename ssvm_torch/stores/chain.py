"""Compact per-block dual storage of a chain SSVM (:class:`~ssvm_torch.models.chain.ChainModel`).

Since w_i = sum_y alpha_i(y) psi_i(y) / (lam n) and
psi_i(y) = phi(x_i, y_i) - phi(x_i, y) is linear in the chain's sufficient statistics, block i is
stored as the expected statistics under alpha_i: per-position label marginals Mu_i (T_i, K) and
expected transition counts Mt_i (K, K). Then w_i = A_i(S(y_i) - M_i) / (lam n), with A_i the linear
map from statistics to feature space, and
    <w_i - w_s, w>    = (<S(y*), theta_i> - <M_i, theta_i>) / (lam n)
    ||w_i - w_s||^2   = (sum_k D_k^T G_i D_k + |D_0|^2 + |D_{T-1}|^2 + |Dt|^2_F) / (lam n)^2
with theta_i the potentials the oracle computes anyway, D = onehot(y*) - Mu_i, Dt = S_trans(y*) - Mt_i,
and G_i = X_i X_i^T the (T_i, T_i) Gram matrix of the example. State is O(sum_i T_i K + n K^2).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn

from ..data.types import ChainData
from ..devices import resolve_device, store_kernels, to_host
from ..errors import SSVMInputError, check, check_positive
from ..models.chain import ChainModel
from ..chain.padded import fused_variant
from ..chain.triton_viterbi import fused_available
from ..models.chain_index import padded_trans_counts, segment_ids, trans_counts, unary_rows
from ..oracles.chain_kernels import (HostViews, nb_add_psi, nb_build_delta, nb_cached_gaps, nb_cached_pick,
                                     nb_corner_gaps, nb_stats_scatter,
                                     nb_delta_move, nb_delta_sqnorm, nb_fw_corner, nb_gap_pass, nb_gram,
                                     nb_labelings_scores)
from .base import SPARSE_D, BlockDual, BlockMarginals, Corner, GapPass, objective_n
from .ragged import RaggedLabelings, host_labels
from .state import TensorBlockState
from .chain_marginal import ChainMarginalMoves
from .chain_steps import ChainCompiledSteps
from .optional_moves import JointConstraints
from .chain_torch import ChainTorchPath



class ChainDual(ChainCompiledSteps, RaggedLabelings, ChainTorchPath, ChainMarginalMoves, JointConstraints,
                TensorBlockState, BlockDual):
    """Compact per-block dual state of a chain SSVM (see module docstring). Tensors live on
    ``device``. ``kernels``: ``numba`` runs the batch-1 step and gap passes as compiled kernels on
    zero-copy numpy views of the same tensors (CPU float64 only), ``torch`` the batched torch path
    (any device), ``auto`` numba where it applies, torch elsewhere."""

    shares_w = True

    def __init__(self, model: ChainModel, data: ChainData, lam: float, device=None, dtype=torch.float64,
                 kernels: str = "auto", n_objective: int | None = None):
        model.check_data(data)
        self.model, self.data = model, data
        self.lam = check_positive(lam, "lam")
        self.n, self.N = data.n, objective_n(data.n, n_objective)
        dev = resolve_device(device)
        self.device, self.dtype = dev, dtype
        K = model.K
        if data.allow_unknown and bool((data.Y >= model.K).any()):
            raise SSVMInputError(f"Y: training labels must be in [0, {model.K - 1}]; this data has labels "
                                 "unknown to the model (evaluation-only data)")
        self.fptr, self.fidx, self.fval = model.features_csr(data, dtype, dev)
        self._coo = {}                  # the torch path's sparse products, built on first use
        self._eg_work = None            # the EG kernel's scratch arrays, allocated on first use
        self.Y = data.Y.to(dev)
        # the labels of the task loss: Y, or -1 where unobserved (the latent SSVM's inner problem, Y there
        # a completion: the features use it, the loss does not; ssvm_torch/latent.py)
        self.partial = data.partial
        self.YL = data.loss_labels().to(dev)
        self.offsets = data.offsets.to(dev)
        self.seg = segment_ids(self.offsets)
        self.lengths = self.offsets[1:] - self.offsets[:-1]
        self.tw = model.token_loss(self.lengths, dtype)       # the loss of one wrong position of each block
        # Per-example Gram matrices G_i = X_i X_i^T, stored flat (sum_i T_i^2).
        self.goff = Fn.pad(torch.cumsum(self.lengths ** 2, 0), (1, 0))
        G = np.zeros(int(self.goff[-1]))
        nb_gram(self.fptr.cpu().numpy(), self.fidx.cpu().numpy(), self.fval.cpu().double().numpy(),
                 self.offsets.cpu().numpy(), self.goff.cpu().numpy(), G)
        self.G = torch.as_tensor(G, dtype=dtype, device=dev)
        self.first_pos, self.last_pos = self.offsets[:-1], self.offsets[1:] - 1
        self.inner_pairs = self.seg[1:] == self.seg[:-1]       # positions t >= 1 within one sequence (t-1, t)
        # dual state: alpha_i = delta(y_i) at start, i.e. w_i = 0, ell_i = 0
        self.Mu = Fn.one_hot(self.Y, K).to(dtype)
        self.Mt = trans_counts(self.Y, self.seg, self.n, K).to(dtype)
        self.gt_trans = self.Mt.sum(0)
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=dev)
        self._ell = torch.zeros(1, dtype=dtype, device=dev)
        self.w = torch.zeros(model.d, dtype=dtype, device=dev)
        self.sparse_direction, self._scratch = model.d >= SPARSE_D, None    # directions as touched coordinates
        self._t_max = None              # the longest chain, read once by the fused gap pass
        self._order = None              # the chains by decreasing length (the fused gap pass sorts once)
        self.kernels = store_kernels(kernels, dev, dtype)
        self._numba = self.kernels == "numba"
        if self.partial and not self._numba:
            raise SSVMInputError(f"data.observed: unobserved positions train on the numba chain store (CPU float64, "
                                 f"kernels 'auto' or 'numba'), got kernels {kernels!r} on {dev} {dtype}")
        if self._numba:
            self._bind_numpy()

    # -- numba fast path -----------------------------------------------------------------------
    def _bind_numpy(self):
        """Zero-copy numpy views of the state tensors (valid as long as they are updated in place)."""
        W, first, last, trans = self.model.split(self.w)
        K = self.model.K
        tmax = int(self.lengths.max())
        self._np = HostViews(self.fptr.numpy(), self.fidx.numpy(), self.fval.numpy(), self.offsets.numpy(),
                             self.Y.numpy(), self.G.numpy(), self.goff.numpy(), W.numpy(), first.numpy(), last.numpy(),
                             trans.numpy(), self.Mu.numpy(), self.Mt.numpy())
        self._np_ell, self._tw = (self.ell_i.numpy(), self._ell.numpy()), self.tw.numpy()
        # the views of the loss kernels (fw corner, corner gaps, batch corners): Y there enters the loss only
        self._np_loss = self._np._replace(Y=self.YL.numpy()) if self.partial else self._np
        self._no_labels = np.zeros(1, dtype=np.int64)
        self._work = (np.empty((tmax, K)), np.empty(K), np.empty(K), np.empty((tmax, K), dtype=np.int64),
                      np.empty((tmax, K)), np.empty((K, K)))
        # the argument lists of the per-step kernels, built once (a block step calls them with a handful of values)
        self._gap_views = (*self._np_loss[:5], *self._np[7:], self._work[0])
        self._pair_views = (*self._work[4:6], *self._np[:4], *self._np[5:7], *self._np[7:])

    def share_w(self, buffer: torch.Tensor) -> None:
        super().share_w(buffer)
        if self._numba:
            self._bind_numpy()

    @property
    def host(self) -> HostViews:
        """The numpy views the numba kernels work on (valid while the tensors are updated in place);
        only with ``kernels == "numba"``."""
        check(self._numba, "kernels", "'numba' (CPU float64 state) for host views", self.kernels)
        return self._np

    def shift_ell(self, delta: float) -> None:
        """ell += delta, the blocks' ell_i moved by their owner (a batch move done outside the store)."""
        self._ell[0] += delta

    def fw_corner(self, i: int) -> Corner:
        inv_lamn = 1.0 / (self.lam * self.N)
        if self._numba:
            T = int(self._np[3][i + 1] - self._np[3][i])
            ys = np.empty(T, dtype=np.int64)
            loss, dot, sq = nb_fw_corner(i, self._tw[i], *self._np_loss, *self._work, ys, self.model.pen_host)
            loss /= self.N
            return Corner(ys, loss, dot * inv_lamn, sq * inv_lamn * inv_lamn,
                          dot / self.N - self._np_ell[0][i] + loss)
        c = self._corners_torch(torch.tensor([i], device=self.device), with_sqnorm=True)
        loss, dot = float(c["loss"][0]), float(c["dot"][0])
        return Corner(c["labels"][0][c["valid"][0]], loss, dot * inv_lamn, float(c["sq"][0]) * inv_lamn * inv_lamn,
                      dot / self.N - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        """The FW step is the move from the current point towards the corner."""
        ell_i = self._np_ell[0][i] if self._numba else float(self.ell_i[i])
        self.pair_move(i, np.asarray(corner.labels, dtype=np.int64) if self._numba else corner.labels, None,
                       corner.loss, ell_i, gamma)

    # -- active-set primitives (pairwise / away steps, caching) --------------------------------
    # A point of block i may also be a BlockMarginals (a point of the marginal polytope: EG, DEG).
    # A point of block i is a labeling (int64 array of length T_i) or None, the block's current dual
    # point. Directions are differences of two points: x_i += gamma (v_P - v_Q).
    # Labelings are numpy int64 arrays for the numba kernels and int64 tensors on ``device`` for the
    # torch path (so a step never moves a labeling between host and device).
    def gt_labeling(self, i: int):
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return to_host(self.Y[s:e]).copy() if self._numba else self.Y[s:e].clone()

    def key(self, labeling) -> bytes:
        return self.model.key(labeling)

    def loss_of(self, i: int, labeling) -> float:
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        y = torch.as_tensor(labeling, device=self.device)
        gold = self.YL[s:e]
        return float(((y != gold) & (gold >= 0)).double().sum() * self.tw[i]) / self.N

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = lam <w_i - w_s(y), w> - ell_i + L_i(y)/n for each labeling: the FW gap of block i
        towards corner y (eq. (6) with y in place of the oracle's answer)."""
        if self._numba:
            L = labelings if isinstance(labelings, np.ndarray) and labelings.ndim == 2 else \
                np.stack([np.asarray(y, dtype=np.int64) for y in labelings])
            L = np.ascontiguousarray(L, dtype=np.int64)
            out = np.empty(L.shape[0])
            nb_corner_gaps(i, self._tw[i], L, *self._gap_views, out)
            return out / self.N - self._np_ell[0][i]
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        W, first, last, trans = self.model.split(self.w)
        U = unary_rows(W, (self.fptr, self.fidx, self.fval), torch.arange(s, e, device=self.device))
        Lt = labelings if torch.is_tensor(labelings) and labelings.dim() == 2 else \
            torch.stack([torch.as_tensor(y, device=self.device) for y in labelings])
        t = torch.arange(e - s, device=self.device)
        score = U[t, Lt].sum(1) + first[Lt[:, 0]] + last[Lt[:, -1]] + trans[Lt[:, 1:], Lt[:, :-1]].sum(1)
        loss = ((Lt != self.YL[s:e]) & (self.YL[s:e] >= 0)).to(self.dtype).sum(1) * self.tw[i]
        m_theta = (self.Mu[s:e] * U).sum() + self.Mu[s] @ first + self.Mu[e - 1] @ last + (self.Mt[i] * trans).sum()
        return to_host((score + loss - m_theta) / self.N - self.ell_i[i])

    @property
    def batched_cache(self) -> bool:
        """Whether :meth:`cached_best` scores every block's cache in one compiled call (numba kernels)."""
        return self._numba

    def cached_best(self, stacks: list) -> tuple[torch.Tensor, np.ndarray]:
        """For each block i, the row of ``stacks[i]`` ((c_i, T_i) int64: its cached labelings) with the largest
        corner gap (:meth:`corner_gaps`' values, the first of ties) and its loss L_i(y)/n, every block in two
        compiled calls (``batched_cache``): the 1-slack cutting plane's cache round. Returns the labelings stacked
        as a gap pass's ``labels`` (:meth:`stack_labelings`) and the (n,) losses."""
        counts = np.fromiter((a.shape[0] for a in stacks), np.int64, len(stacks))
        flat = np.concatenate([a.reshape(-1) for a in stacks])
        off = self._np.offsets
        starts = np.concatenate(([0], np.cumsum(counts * np.diff(off))[:-1]))
        out = np.empty(int(counts.sum()))
        nb_cached_gaps(flat, starts, counts, self._tw, *self._gap_views, out)
        gaps = out / self.N - np.repeat(self._np_ell[0], counts)    # corner_gaps' arithmetic, elementwise
        labels, wrong = np.empty(int(off[-1]), dtype=np.int64), np.empty(len(stacks))
        nb_cached_pick(gaps, flat, starts, counts, off, self._np_loss.Y, labels, wrong)
        return torch.from_numpy(labels), wrong * self._tw / self.N

    def _np_delta(self, i, P, Q):
        Du, Dt = self._work[4], self._work[5]
        if isinstance(P, BlockMarginals) or isinstance(Q, BlockMarginals):
            _, _, du, dt = self._torch_delta(i, P, Q)
            Du[:du.shape[0]], Dt[:] = du.numpy(), dt.numpy()
            return Du, Dt
        nb_build_delta(i, P is None, self._no_labels if P is None else P, Q is None,
                        self._no_labels if Q is None else Q, self._np[3], self._np[11], self._np[12], Du, Dt)
        return Du, Dt

    def _np_move(self, i, P, Q, gamma):
        Du, Dt = self._np_delta(i, P, Q)
        nb_delta_move(i, -gamma / (self.lam * self.N), gamma, Du, Dt, *self._np[:4], *self._np[7:], *self._shadow())

    def _torch_delta(self, i, P, Q):
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        K = self.model.K
        ones = torch.ones(1, e - s, dtype=torch.bool, device=self.device)

        def stats(point):
            if point is None:
                return self.Mu[s:e], self.Mt[i]
            if isinstance(point, BlockMarginals):
                return point.mu, point.mt
            y = torch.as_tensor(point, device=self.device)
            return Fn.one_hot(y, K).to(self.dtype), padded_trans_counts(y[None], ones, K, self.dtype)[0]
        (pu, pt), (qu, qt) = stats(P), stats(Q)
        return s, e, pu - qu, pt - qt

    def pair_sqnorm(self, i: int, P, Q) -> float:
        """||w(P) - w(Q)||^2 for two points of block i."""
        if self._numba:
            Du, Dt = self._np_delta(i, P, Q)
            sq = nb_delta_sqnorm(i, Du, Dt, self._np[3], self._np[5], self._np[6])
        else:
            s, e, D, Dt = self._torch_delta(i, P, Q)
            T = e - s
            G = self.G[int(self.goff[i]):int(self.goff[i + 1])].view(T, T)
            sq = float((D * (G @ D)).sum() + (D[0] ** 2).sum() + (D[-1] ** 2).sum() + (Dt ** 2).sum())
        return sq / (self.lam * self.N) ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q); losses are L/n (for the current point: ell_i)."""
        if self._numba:
            self._np_move(i, P, Q, gamma)
            ell_i, ell = self._np_ell
            ell_i[i] += gamma * (loss_P - loss_Q)
            ell[0] += gamma * (loss_P - loss_Q)
            return
        s, e, D, Dt = self._torch_delta(i, P, Q)
        self._add_stats(s, e, -gamma / (self.lam * self.N), D, Dt)
        self.Mu[s:e] += gamma * D
        self.Mt[i] += gamma * Dt
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell[0] += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef * psi_i(y*) = coef * A_i(S(y_i) - S(y*)): the emission part touches only the
        rows of the labels involved."""
        if self._numba:
            nb_add_psi(i, coef, corner.labels, *self._np[:5], *self._np[7:11])
            return
        s, e, D, Dt = self._torch_delta(i, self.gt_labeling(i), corner.labels)
        self._add_stats(s, e, coef, D, Dt, shadow=False)

    def gap_pass(self) -> GapPass:
        """All block gaps at the current w: g_i = (aug_score_i - <M_i, theta_i>)/n - ell_i, since
        lam <w_i, w> = (<S(y_i), theta_i> - <M_i, theta_i>)/n and H_i = aug_score_i - <S(y_i), theta_i>."""
        U, first, last, trans = self._potentials()
        if self._numba:
            labels, aug, m_theta, gt_score, wrong = nb_gap_pass(U.numpy(), *self._np[3:5], self._np_loss[4],
                                                                 first.numpy(), last.numpy(), trans.numpy(), self._np[11],
                                                                 self._np[12], self._tw, self.model.pen_host)
            labels, aug, m_theta, gt_score = map(torch.from_numpy, (labels, aug, m_theta, gt_score))
            loss = torch.from_numpy(wrong) * self.tw / self.N
        else:
            fused = U.is_cuda and fused_variant() is not None and fused_available(U)
            labels, aug, m_theta, gt_score, loss = self.gap_terms(fused, (U, first, last, trans))
        H = aug - gt_score
        gaps = (aug - m_theta) / self.N - self.ell_i
        return GapPass(labels=labels, loss=loss, H=H, block_gaps=gaps)

    def _point_of(self, labels: torch.Tensor):
        """Statistics of ragged labels: (one-hot (N, K), transition counts (n, K, K))."""
        K = self.model.K
        return Fn.one_hot(labels, K).to(self.dtype), trans_counts(labels, self.seg, self.n, K).to(self.dtype)

    def w_from_stats(self, Mu: torch.Tensor, Mt_sum: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i A_i(S(y_i) - M_i) / (lam n) for stacked statistics (the exact map from duals to w),
        into ``w`` in place if given (no d-sized temporaries: recompute on d = 24M)."""
        w = torch.zeros_like(self.w) if w is None else w.zero_()
        W, first, last, trans = self.model.split(w)
        if self._numba:                         # X^T D by a CSR walk over D's nonzeros, D formed row by row
            nb_stats_scatter(*self._np[:3], Mu.numpy(), self.Y.numpy(), W.numpy())
        else:
            D = Mu.neg()                        # S(y_i) - M_i with one (N, K) temporary, not three
            D[torch.arange(D.shape[0], device=D.device), self.Y] += 1
            W.copy_(torch.sparse.mm(self.sparse_features(True), D).T)
        for pos, out in ((self.first_pos, first), (self.last_pos, last)):
            D = Mu[pos].neg()                   # the first / last positions' rows of D only
            D[torch.arange(D.shape[0], device=D.device), self.Y[pos]] += 1
            out.copy_(D.sum(0))
        trans.copy_(self.gt_trans - Mt_sum)
        return w.div_(self.lam * self.N)

    def corner_point(self, gp: GapPass):
        oh, tc = self._point_of(gp.labels.to(self.device))
        return self.w_from_stats(oh, tc.sum(0)), float(gp.loss.sum())

    # -- joint constraints as labelings (JointConstraints) -------------------------------------
    def joint_labels(self, gp: GapPass) -> torch.Tensor:
        small = torch.int16 if self.model.K <= torch.iinfo(torch.int16).max else torch.int64
        return gp.labels.to(self.device, small)

    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y), w> = (<w, Phi(y_gt)> - <w, Phi(y)>) / n with Phi the sum over examples: scores
        from the potentials of w (no d-sized work per labeling; on the numba path one compiled walk per
        labeling, nb_labelings_scores)."""
        pots = self._potentials_of(w)
        if self._numba:
            rows = np.stack([self._np[4], *(host_labels(y) for y in labels)])
            out = np.empty(rows.shape[0])
            nb_labelings_scores(rows, self._np[3], *(np.ascontiguousarray(p.numpy()) for p in pots), out)
            return torch.from_numpy((out[0] - out[1:]) / self.N)
        scores = torch.stack([self._scores(*pots, y.to(self.device).long()).sum() for y in labels])
        return (self._scores(*pots, self.Y).sum() - scores) / self.N

    def joint_point(self, weights, labels: list) -> torch.Tensor:
        """w_from_stats of the weighted statistics, the missing mass 1 - sum weights on the ground
        truth (whose psi is 0), so the map's D = sum_c weights_c (S(y_gt) - S(y_c))."""
        K, rest = self.model.K, 1.0 - float(sum(weights))
        Mu = Fn.one_hot(self.Y, K).to(self.dtype).mul_(rest)
        Mt = self.gt_trans * rest
        rows, inner = torch.arange(len(self.Y), device=self.device), self.inner_pairs
        for wc, y in zip(weights, labels):
            wc = float(wc)
            y = y.long().to(self.device)
            Mu.index_put_((rows, y), torch.full(y.shape, wc, dtype=self.dtype, device=self.device), accumulate=True)
            nxt, prev = y[1:][inner], y[:-1][inner]
            Mt.index_put_((nxt, prev), torch.full(nxt.shape, wc, dtype=self.dtype, device=self.device),
                          accumulate=True)
        return self.w_from_stats(Mu, Mt)

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        oh, tc = self._point_of(gp.labels.to(self.device))
        self.Mu.mul_(1 - gamma).add_(oh, alpha=gamma)
        self.Mt.mul_(1 - gamma).add_(tc, alpha=gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss.to(self.device, self.dtype), alpha=gamma)
        self.w.mul_(1 - gamma).add_(w_s, alpha=gamma)
        self._ell[0] = self.ell_i.sum()

    def recompute(self, out: torch.Tensor | None = None) -> None:
        """w and ell exactly from the blocks (w into ``out`` instead when given: the shared exchange's mirror)."""
        self.w_from_stats(self.Mu, self.Mt.sum(0), self.w if out is None else out)
        self._ell[0] = self.ell_i.sum()

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of one block (for tests and inspection; never used by the solvers)."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        Xi = self.sparse_features().index_select(0, torch.arange(s, e, device=self.device)).to_dense()
        phi_gt = self.model.joint_feature(Xi, self.Y[s:e])
        w = torch.zeros_like(self.w)
        W, first, last, trans = self.model.split(w)
        W.copy_(self.Mu[s:e].T @ Xi)
        first.copy_(self.Mu[s])
        last.copy_(self.Mu[e - 1])
        trans.copy_(self.Mt[i])
        return (phi_gt - w) / (self.lam * self.N)

    # -- regularization path ------------------------------------------------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        """Mixes the statistics toward the ground truth (alpha_i <- rho alpha_i + (1 - rho) delta(y_i)),
        in place so the numba views stay valid; w follows exactly from the statistics."""
        lam_new = check_positive(lam_new, "lam_new")
        K = self.model.K
        self.Mu.mul_(rho).add_(Fn.one_hot(self.Y, K).to(self.dtype), alpha=1.0 - rho)
        self.Mt.mul_(rho).add_(trans_counts(self.Y, self.seg, self.n, K).to(self.dtype), alpha=1.0 - rho)
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self.recompute()

    def _scores(self, U, first, last, trans, labels) -> torch.Tensor:
        """<w, phi(x_i, y)> of ragged labels (N,) for every sequence, from the potentials of w."""
        sc = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
            0, self.seg, U.gather(1, labels[:, None])[:, 0])
        sc += first[labels[self.first_pos]] + last[labels[self.last_pos]]
        inner = self.inner_pairs                          # transition scores gathered, no (n, K, K) counts
        return sc.index_add_(0, self.seg[1:][inner], trans[labels[1:][inner], labels[:-1][inner]])

    def _potentials_of(self, w):
        """(U, first, last, trans) of another w (the store's w untouched: no d-sized copies)."""
        U, first, last, trans = self._potentials(w.to(self.device, self.dtype))
        return U, first.clone(), last.clone(), trans.clone()

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        w = w.to(self.device, self.dtype)
        labels = self.model.predict_ragged(w, self.data).to(self.device)
        pots = self._potentials_of(w)
        return self._scores(*pots, labels) - self._scores(*pots, self.Y)

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = (<S(y_i), theta_i> - <M_i, theta_i>) / n (module docstring)."""
        U, first, last, trans = self._potentials()
        m_theta = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(0, self.seg, (self.Mu * U).sum(1))
        m_theta += self.Mu[self.first_pos] @ first + self.Mu[self.last_pos] @ last + (self.Mt * trans).sum((1, 2))
        return (self._scores(U, first, last, trans, self.Y) - m_theta) / self.N

    # the tensors of a checkpoint's block state (TensorBlockState saves and loads them)
    STATE_TENSORS = ("w", "ell_i", "Mu", "Mt")
