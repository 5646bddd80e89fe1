"""Compact per-block dual storage of a dependency-tree SSVM (:class:`~ssvm_torch.models.dependency.DependencyModel`).

Since w_i = sum_y alpha_i(y) psi_i(y) / (lam n) and psi_i(y) = phi(x_i, y_i) - phi(x_i, y) is linear in the
tree's arc indicators, block i is stored as its arc marginals under alpha_i, M_i (one value per possible
arc h -> m of sentence i: n_i^2 of them, sum_i n_i^2 in all, O(sum n_i^2) state instead of n dense d-vectors).
With G_i the gold arcs, f_a the features of arc a and theta_a = <w, f_a> the arc scores the oracle computes
anyway:

    w_i                = sum_a (G_a - M_a) f_a / (lam n)
    lam <w_i - w_s, w>  = (<S(y*), theta> - <M_i, theta>) / n
    ||w_i - w_s||^2    = || sum_a (S(y*)_a - M_a) f_a ||^2 / (lam n)^2

so the block gap (eq. (6) of Osokin et al. 2016) is g_i = (<S(y*), theta> + L_i(y*) - <M_i, theta>) / n - ell_i
(with partial annotation, ``DependencyData.observed``, the gold tree is the latent SSVM's completion and L_i counts
the observed words only: ssvm_torch/latent.py),
and a move touches only the features of the arcs where the two points differ. Labelings are the heads of a
block's words, (n_i,) int64 (numpy arrays on the compiled path, tensors on the torch path).

Backends: ``numba`` (CPU float64) runs each block step as compiled kernels
(:mod:`ssvm_torch.oracles.tree_kernels`) on zero-copy numpy views with one d-sized scratch (the image of a
difference of points, on its touched features only); ``torch`` (any device) the same steps in torch ops
(:mod:`ssvm_torch.stores.tree_torch`); ``auto`` numba where it applies.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.trees import DependencyData
from ..devices import resolve_device, store_kernels, to_host
from ..errors import SSVMInputError, check_positive
from ..models.dependency import DependencyModel
from ..oracles.tree_kernels import (arc_index, nb_apply, nb_fw_corner,
                                    nb_gap_pass, nb_labeling_score, nb_m_dot, nb_move, nb_sqnorm,
                                    nb_statistics_image)
from .base import BatchCorners, BlockDual, Corner, GapPass, objective_n
from .optional_moves import JointConstraints
from .ragged import RaggedLabelings
from .state import TensorBlockState
from .tree_host import TreeHostPath
from .tree_marginal import TreeMarginalMoves
from .tree_torch import TreeTorchPath


class TreeDual(RaggedLabelings, TreeHostPath, TreeTorchPath, TreeMarginalMoves, JointConstraints, TensorBlockState,
               BlockDual):
    """Compact dual state of a dependency-tree SSVM (module docstring)."""

    shardable = False                 # the distributed exchanges ship chain statistics only
    shares_w = True                   # the shared-memory exchange runs it (ssvm_torch.distributed.shared_memory)
    description = "the dependency-tree store"

    def __init__(self, model: DependencyModel, data: DependencyData, lam: float, device=None, dtype=torch.float64,
                 kernels: str = "auto", n_objective: int | None = None):
        model.check_data(data)
        self.model = model
        self.lam = check_positive(lam, "lam")
        dev = resolve_device(device)
        self.device, self.dtype = dev, dtype
        self.data = data.to(dev)
        self.n, self.N = data.n, objective_n(data.n, n_objective)
        d = self.data
        self.offsets, self.lengths, self.arc_off = d.offsets, d.lengths, d.arc_off
        self.ptr, self.ids, self.gold = d.ptr, d.ids, d.heads
        self.lgold = d.loss_heads            # the heads the loss reads: -1 at unobserved words (the latent SSVM)
        self.tptr, self.tids = d.tok_ptr, d.tok_ids
        self.costs = model.costs(self.lengths, dtype)
        self.gold_ok = model.gold_in_space(d)
        self.kernels = store_kernels(kernels, dev, dtype)
        self._numba = self.kernels == "numba"
        # dual state: alpha_i = delta(y_i) at the start, i.e. M_i = G_i, w_i = 0, ell_i = 0
        self.M = torch.zeros(int(self.arc_off[-1]), dtype=dtype, device=dev)
        self.M[self._gold_arcs()] = 1.0
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=dev)
        self._ell = torch.zeros(1, dtype=dtype, device=dev)
        self.w = torch.zeros(model.d, dtype=dtype, device=dev)
        self._pending = None              # (owner token, touched count, tick): the scratch holds that image
        if self._numba:
            self._bind_numpy()

    def _gold_arcs(self) -> torch.Tensor:
        """The global arc numbers of every gold arc (W,)."""
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths)
        m = torch.arange(self.gold.shape[0], device=self.device) - self.offsets[rows] + 1
        n = self.lengths[rows]
        h = self.gold
        return self.arc_off[rows] + (m - 1) * n + torch.where(h < m, h, h - 1)

    # -- the point ------------------------------------------------------------------------------------------
    @property
    def ell(self) -> float:
        return float(self._h["ell"][0]) if self._numba else float(self._ell[0])

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.w.copy_(w)
        self._ell[0] = ell

    def _inv(self) -> float:
        return 1.0 / (self.lam * self.N)

    # -- BCFW -----------------------------------------------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        if not self._numba:
            return self._t_fw_corner(i)
        h = self._h
        n = int(h["offsets"][i + 1] - h["offsets"][i])
        heads = np.empty(n, dtype=np.int64)
        score, m_theta, wrong, nt, sq, _ = nb_fw_corner(
            i, h["offsets"], h["arc_off"], h["ptr"], h["ids"], h["tptr"], h["tids"], h["w"], h["gold"], h["lgold"],
            h["costs"], self.model.projective,
            self.model.multiroot, h["gold_ok"], h["M"], self._theta_buf, self._S, self._D, self._keys, self._vals,
            self._used, self._nu, heads)
        self._tick += 1
        self._nu = max(nt, 0)
        if nt < 0:                                           # the table is too small for this image: grow it
            nt = self._np_image([(i, heads, None)])
            sq = nb_sqnorm(self._vals, self._used, nt)
        loss = float(h["costs"][i]) * wrong / self.N
        self._pending = (("fw", i, id(heads)), nt, self._tick)
        inv = self._inv()
        dot = score - m_theta
        return Corner(heads, loss, dot * inv, sq * inv * inv, dot / self.N - float(self._h["ell_i"][i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        ell_i = float(self._h["ell_i"][i]) if self._numba else float(self.ell_i[i])
        self.pair_move(i, corner.labels, None, corner.loss, ell_i, gamma, token=("fw", i, id(corner.labels)))

    # -- active-set primitives ------------------------------------------------------------------------------
    def gt_labeling(self, i: int):
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return to_host(self.gold[s:e]).copy() if self._numba else self.gold[s:e].clone()

    def key(self, labeling) -> bytes:
        arr = to_host(labeling) if torch.is_tensor(labeling) else np.asarray(labeling)
        return np.ascontiguousarray(arr, dtype=np.int64).tobytes()

    def _wrong(self, i: int, labeling) -> int:
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        y = torch.as_tensor(labeling, device=self.device)
        lg = self.lgold[s:e]
        return int(((y != lg) & (lg >= 0)).sum())

    def loss_of(self, i: int, labeling) -> float:
        return float(self.costs[i]) * self._wrong(i, labeling) / self.N

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = (<S(y), theta> + L_i(y) - <M_i, theta>) / n - ell_i for each labeling (eq. (6) with y in place
        of the oracle's answer)."""
        if not self._numba:
            return self._t_corner_gaps(i, labelings)
        theta = self._np_theta(i)
        n, base, g0 = self._block(i)
        m_theta = nb_m_dot(self._h["M"], base, n, theta)
        gold = self._h["lgold"][g0:g0 + n]
        cost = float(self._h["costs"][i])
        out = np.array([nb_labeling_score(theta, n, np.asarray(y, dtype=np.int64))
                        + cost * int(((np.asarray(y) != gold) & (gold >= 0)).sum()) for y in labelings], dtype=np.float64)
        return (out - m_theta) / self.N - float(self._h["ell_i"][i])

    def pair_sqnorm(self, i: int, P, Q) -> float:
        """||w(P) - w(Q)||^2 for two points of block i (None: its current point)."""
        if not self._numba:
            return self._t_pair_sqnorm(i, P, Q)
        nt = self._np_image([(i, P, Q)])
        self._pending = (("pair", i, id(P), id(Q)), nt, self._tick)
        return nb_sqnorm(self._vals, self._used, nt) * self._inv() ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float, token=None) -> None:
        """x_i += gamma (v_P - v_Q); losses are L/n (for the current point: ell_i)."""
        if not self._numba:
            self._t_pair_move(i, P, Q, gamma)
        else:
            token = token if token is not None else ("pair", i, id(P), id(Q))
            if not (self._pending is not None and self._pending[0] == token and self._pending[2] == self._tick):
                self._np_image([(i, P, Q)])                  # the table and self._D now hold this move's image
            n, base, _ = self._block(i)
            scale = -gamma * self._inv()
            shadow = self.shadow.numpy() if self.shadow is not None else self._vals
            nb_move(base, n, gamma, self._D, self._h["M"], self._keys, self._vals, self._used, self._nu,
                    self._h["w"], scale, shadow, scale * self.shadow_coef if self.shadow is not None else 0.0)
            self._pending = None
        ell_i, ell = (self._h["ell_i"], self._h["ell"]) if self._numba else (self.ell_i, self._ell)
        ell_i[i] += gamma * (loss_P - loss_Q)          # numpy views on the compiled path: no tensor op per step
        ell[0] += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef psi_i(y*) = coef sum_a (G_a - S(y*)_a) f_a (SSG's primal step)."""
        gold = self.gt_labeling(i)
        if not self._numba:
            self._t_add_psi(i, gold, corner.labels, coef)
            return
        nt = self._np_image([(i, gold, corner.labels)])
        nb_apply(self._keys, self._vals, self._used, nt, self._h["w"], coef, self._vals, 0.0)   # SSG moves w alone
        self._pending = None

    # -- batched passes -------------------------------------------------------------------------------------
    def _pass_terms(self, costs=None):
        """(labels (W,), aug, <G, theta>, <M_i, theta>, wrong) of the loss-augmented tree of every block at w
        (``costs`` per block; default the model's)."""
        if not self._numba:
            return self._t_pass_terms(costs)
        h = self._h
        W = int(h["offsets"][-1])
        labels = np.empty(W, dtype=np.int64)
        aug, gold_scores, m_theta = np.empty(self.n), np.empty(self.n), np.empty(self.n)
        wrong = np.empty(self.n, dtype=np.int64)
        nb_gap_pass(h["offsets"], h["arc_off"], h["ptr"], h["ids"], h["tptr"], h["tids"], h["w"], h["gold"],
                    h["lgold"], h["costs"] if costs is None else costs, self.model.projective, self.model.multiroot, h["gold_ok"],
                    h["M"], labels, aug, gold_scores, m_theta, wrong)
        return tuple(torch.from_numpy(a) for a in (labels, aug, gold_scores, m_theta, wrong))

    def gap_pass(self) -> GapPass:
        """Every block gap at w: g_i = (aug_i - <M_i, theta_i>) / n - ell_i with aug_i = <S(y*), theta_i> + L_i(y*),
        and H_i = aug_i - <G_i, theta_i>."""
        labels, aug, gold_scores, m_theta, wrong = self._pass_terms()
        loss = wrong.to(self.dtype) * self.costs / self.N
        return GapPass(labels=labels, loss=loss, H=aug - gold_scores, block_gaps=(aug - m_theta) / self.N - self.ell_i)

    def w_from_labels(self, labels: torch.Tensor, coef: float = 1.0, out: torch.Tensor | None = None) -> torch.Tensor:
        """out += coef sum_i sum_a (G_a - S(y)_a) f_a / (lam n) for flat labels of every block (W,)."""
        out = torch.zeros_like(self.w) if out is None else out
        if self._numba:
            h = self._h
            nb_statistics_image(h["offsets"], h["arc_off"], h["ptr"], h["ids"], h["tptr"], h["tids"], h["gold"], h["M"],
                                np.ascontiguousarray(to_host(labels), dtype=np.int64), True, coef * self._inv(),
                                out.numpy())
            return out
        return self._t_statistics_image(labels, coef * self._inv(), out)

    def corner_point(self, gp: GapPass):
        return self.w_from_labels(gp.labels.to(self.device)), float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        self.M.mul_(1 - gamma)
        self.M[self._arcs_of(gp.labels.to(self.device))] += gamma
        self.ell_i.mul_(1 - gamma).add_(gp.loss.to(self.device, self.dtype), alpha=gamma)
        self.w.mul_(1 - gamma).add_(w_s, alpha=gamma)
        self._ell[0] = self.ell_i.sum()
        self._pending = None

    def _arcs_of(self, labels: torch.Tensor) -> torch.Tensor:
        """Global arc numbers of flat labels (W,) (one head per word of every block)."""
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths)
        m = torch.arange(labels.shape[0], device=self.device) - self.offsets[rows] + 1
        n = self.lengths[rows]
        return self.arc_off[rows] + (m - 1) * n + torch.where(labels < m, labels, labels - 1)

    def w_of_points(self, M: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i sum_a (G_a - M_a) f_a / (lam n) for arc marginals M (A,) of every block (into ``out``)."""
        out = torch.zeros_like(self.w) if out is None else out.zero_()
        if self._numba:
            h = self._h
            nb_statistics_image(h["offsets"], h["arc_off"], h["ptr"], h["ids"], h["tptr"], h["tids"], h["gold"],
                                np.ascontiguousarray(M.numpy()), self._no_heads, False, self._inv(), out.numpy())
            return out
        return self._t_w_of(M, out)

    def recompute(self, out: torch.Tensor | None = None) -> None:
        """w and ell exactly from the blocks: w = sum_i sum_a (G_a - M_a) f_a / (lam n) (into ``out`` instead
        when given: the shared exchange's mirror)."""
        self.w_of_points(self.M, self.w if out is None else out)
        self._ell[0] = self.ell_i.sum()

    def share_w(self, buffer: torch.Tensor) -> None:
        super().share_w(buffer)
        if self._numba:
            self._h["w"] = self.w.numpy()

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i (tests and inspection; never used by the solvers)."""
        n, base = int(self.lengths[i]), int(self.arc_off[i])
        g = torch.zeros(n * n, dtype=self.dtype, device=self.device)
        s = int(self.offsets[i])
        m = torch.arange(1, n + 1, device=self.device)
        h = self.gold[s:s + n]
        g[(m - 1) * n + torch.where(h < m, h, h - 1)] = 1.0
        D = g - self.M[base:base + n * n]
        return self._t_image([(i, D)]) * self._inv()

    # -- mini-batch BCFW ------------------------------------------------------------------------------------
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        """Corners of the distinct blocks ``idx`` at w and the squared norm of their joint direction; the
        direction itself stays in the scratch (numba) or a dense vector (torch) for :meth:`batch_move`."""
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        blocks = [int(i) for i in idx.tolist()]
        if not self._numba:
            return self._t_batch_corners(idx, blocks)
        labels, loss, gaps = [], np.empty(len(blocks)), np.empty(len(blocks))
        for k, i in enumerate(blocks):
            theta = self._np_theta(i)
            heads, score, _, wrong = self._np_oracle(i, theta)
            n, base, _ = self._block(i)
            loss[k] = float(self._h["costs"][i]) * wrong / self.N
            gaps[k] = (score - nb_m_dot(self._h["M"], base, n, theta)) / self.N - float(self._h["ell_i"][i]) + loss[k]
            labels.append(heads)
        nt = self._np_image([(i, y, None) for i, y in zip(blocks, labels)])
        sq = nb_sqnorm(self._vals, self._used, nt) * self._inv() ** 2
        token = ("batch", id(labels))
        self._pending = (token, nt, self._tick)
        loss_t, gaps_t = torch.from_numpy(loss), torch.from_numpy(gaps)
        return BatchCorners(idx, loss_t, gaps_t, None, float((loss_t - self.ell_i[idx]).sum()),
                            moves=(labels, token), parts={"labels": labels}, sqnorm=sq)

    def direction(self, parts: dict) -> torch.Tensor:
        raise SSVMInputError("the dependency-tree store builds no shipped directions: the distributed exchanges "
                             "are for chain stores (docs/distributed.md); run mini-batches in one process")

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        idx = [int(i) for i in corners.idx.tolist()]
        labels, token = corners.moves
        if not self._numba:
            self._t_batch_move(corners, gamma)
        else:
            if self._pending is not None and self._pending[0] == token and self._pending[2] == self._tick:
                nt = self._pending[1]
            else:
                nt = self._np_image([(i, y, None) for i, y in zip(idx, labels)])
            self._np_apply(nt, -gamma * self._inv())
            for i, y in zip(idx, labels):
                self._np_move_block(i, y, None, gamma)
            self._pending = None
        self.ell_i[corners.idx] = self.ell_i[corners.idx].lerp(corners.loss.to(self.device, self.dtype), gamma)
        self._ell[0] += gamma * corners.dell

    # -- joint constraints as labelings (the 1-slack cutting plane) -----------------------------------------
    def joint_labels(self, gp: GapPass) -> torch.Tensor:
        return gp.labels.to(self.device, torch.int16 if int(self.lengths.max()) < 2 ** 15 else torch.int64)

    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y), w> = (<w, Phi(y_gt)> - <w, Phi(y)>) / n, Phi summed over the blocks: the arc scores of w
        once, then one gather per labeling."""
        theta = self.all_arc_scores(w)
        gold = theta[self._arcs_of(self.gold)].sum()
        return torch.stack([(gold - theta[self._arcs_of(y.to(self.device).long())].sum()) for y in labels]) / self.N

    def joint_point(self, weights, labels: list) -> torch.Tensor:
        out = torch.zeros_like(self.w)
        for wc, y in zip(weights, labels):
            if float(wc) != 0.0:
                self.w_from_labels(y.to(self.device).long(), float(wc), out)
        return out

    def all_arc_scores(self, w: torch.Tensor) -> torch.Tensor:
        """theta_a = <w, f_a> of every arc of every block (A,): its own features and its head token's."""
        w = w.to(self.device, self.dtype)
        counts = self.ptr[1:] - self.ptr[:-1]
        owner = torch.repeat_interleave(torch.arange(counts.shape[0], device=self.device), counts)
        theta = torch.zeros(counts.shape[0], dtype=self.dtype, device=self.device).index_add_(0, owner,
                                                                                           w[self.ids.long()])
        tcounts = self.tptr[1:] - self.tptr[:-1]
        towner = torch.repeat_interleave(torch.arange(tcounts.shape[0], device=self.device), tcounts)
        u = torch.zeros(tcounts.shape[0], dtype=self.dtype, device=self.device).index_add_(0, towner,
                                                                                       w[self.tids.long()])
        return theta + u[self._arc_tokens()]

    def _arc_tokens(self) -> torch.Tensor:
        """The head token's number of every arc (A,)."""
        n_arcs = self.lengths * self.lengths
        row = torch.repeat_interleave(torch.arange(self.n, device=self.device), n_arcs)
        k = torch.arange(int(n_arcs.sum()), device=self.device) - self.arc_off[row]
        n = self.lengths[row]
        m = k // n + 1
        r = k - (m - 1) * n
        return self.offsets[row] + row + torch.where(r < m, r, r + 1)

    # -- regularization path --------------------------------------------------------------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        """alpha_i <- rho alpha_i + (1 - rho) delta(y_i): M <- rho M + (1 - rho) G, ell_i <- rho ell_i."""
        lam_new = check_positive(lam_new, "lam_new")
        self.M.mul_(rho)
        self.M[self._gold_arcs()] += 1.0 - rho
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self._pending = None
        self.recompute()

    def _at(self, w: torch.Tensor, costs=None):
        saved = self.w.clone()
        self.w.copy_(w.to(self.device, self.dtype))
        try:
            return self._pass_terms(costs)
        finally:
            self.w.copy_(saved)

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> per block (no loss; the gold tree in the space)."""
        zero = np.zeros(self.n) if self._numba else torch.zeros_like(self.costs)
        _, aug, gold_scores, _, _ = self._at(w, zero)
        return (aug - gold_scores).to(self.device)

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = (<G_i, theta_i> - <M_i, theta_i>) / n."""
        _, _, gold_scores, m_theta, _ = self._pass_terms()
        return (gold_scores - m_theta).to(self.device) / self.N

    # -- state ----------------------------------------------------------------------------------------------
    STATE_TENSORS = ("w", "ell_i", "M")      # saved and loaded by TensorBlockState

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._pending = None


__all__ = ["TreeDual", "arc_index"]
