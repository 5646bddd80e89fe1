"""Compact per-block dual storage of a second-order dependency-tree SSVM
(:class:`~ssvm_torch.models.sibling_dependency.SiblingDependencyModel`), CPU float64, compiled.

psi_i(y) = phi(x_i, y_i) - phi(x_i, y) is linear in the tree's part indicators (its arcs and its adjacent-sibling
parts), so block i is stored as its part marginals under alpha_i, M_i, as the first-order store keeps its arc
marginals (:mod:`ssvm_torch.stores.tree`). A sentence has n^2 arcs but about n^3 / 3 sibling parts, too many to
keep densely, while a convex combination of the few trees a block's steps visited touches a few n of them: M_i is
kept sparse, sorted by part key (:mod:`ssvm_torch.stores.sibling_kernels`), in a pool where each block owns a
slot that moves to the pool's end when it outgrows it. With G_i the gold tree's parts, g_p the features of part p
and theta_p = <w, g_p> the part scores the oracle computes anyway:

    w_i                = sum_p (G_p - M_p) g_p / (lam n)
    lam <w_i - w_s, w>  = (<S(y*), theta> - <M_i, theta>) / n
    ||w_i - w_s||^2    = || sum_p (S(y*)_p - M_p) g_p ||^2 / (lam n)^2

so the block gap (eq. (6) of Osokin et al. 2016) is g_i = (<S(y*), theta> + L_i(y*) - <M_i, theta>) / n - ell_i,
and a move touches only the features of the parts where the two points differ. Labelings are the heads of a
block's words (n_i,) int64 NumPy arrays, as in the first-order store. Every solver of the loop runs on it (BCFW,
gap sampling, pairwise / away steps, caching, batch FW, mini-batches in one process, the regularization path,
weighted averaging); it runs on the CPU in float64 only (the torch model, :class:`SiblingDependencyModel`, runs
anywhere; its dense store serves small feature sets on any device).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from ..data.sibling_keys import block_scores
from ..devices import resolve_device, to_host
from ..errors import SSVMInputError, check, check_positive
from ..oracles.tree_kernels import nb_apply, nb_clear, nb_sqnorm
from ..trees.checks import parallel_rows
from .base import BatchCorners, BlockDual, Corner, GapPass, objective_n
from .ragged import RaggedLabelings
from .sibling_kernels import (block_corner, merge, nb_dense_image, nb_labels_image, nb_sib_gap_pass,
                              nb_sib_gap_pass_parallel, parts_dot, parts_features_bound, parts_image, tree_parts)
from .sibling_pool import PartPool
from .state import TensorEll


class SiblingTreeDual(RaggedLabelings, PartPool, TensorEll, BlockDual):
    """Sparse part-marginal dual state of a second-order tree SSVM (module docstring)."""

    shardable = False
    description = "the second-order dependency-tree store"

    def __init__(self, model, data, lam: float, device=None, dtype=torch.float64, kernels: str = "auto",
                 n_objective: int | None = None):
        model.check_data(data)
        dev = resolve_device(device)
        if dev.type != "cpu" or dtype != torch.float64 or kernels == "torch":
            raise SSVMInputError(f"the second-order dependency-tree store runs compiled on the CPU in float64 "
                                 f"(kernels 'auto' or 'numba'); got device {dev}, dtype {dtype}, kernels {kernels!r}")
        self.model, self.lam = model, check_positive(lam, "lam")
        self.device, self.dtype, self._numba = dev, dtype, True
        self.data = data
        self.n, self.N = data.n, objective_n(data.n, n_objective)
        self.offsets, self.lengths = data.offsets, data.lengths
        self.ades = tuple(np.ascontiguousarray(to_host(t)) for t in (data.offsets, data.arc_off, data.ptr, data.ids,
                                                                     data.tok_ptr, data.tok_ids))
        self.sdes = data.sib.host()
        self.gold = np.ascontiguousarray(to_host(data.heads), dtype=np.int64)
        self.lgold = np.ascontiguousarray(to_host(data.loss_heads), dtype=np.int64)
        self.costs = np.ascontiguousarray(to_host(model.costs(data.lengths, dtype)))
        self.gold_ok = np.ascontiguousarray(to_host(model.gold_in_space(data)))
        self.Nmax = int(data.lengths.max()) + 1
        self._S = np.empty((self.Nmax, self.Nmax))
        self._SB = np.empty((self.Nmax, self.Nmax, self.Nmax))
        self._heads = np.empty(self.Nmax, dtype=np.int64)
        self._parts = np.empty(2 * self.Nmax, dtype=np.int64)
        self._n_items = int(self.sdes[2].shape[0]) - 1
        self._table(1 << 12)
        self.w = torch.zeros(model.d, dtype=dtype)
        self.ell_i = torch.zeros(self.n, dtype=dtype)
        self._ell = torch.zeros(1, dtype=dtype)
        self._pending = None                # (token, nu, D): the hash table holds the image of that difference D
        self._init_pool()

    # -- helpers --------------------------------------------------------------------------------------------
    def _n(self, i: int) -> int:
        return int(self.ades[0][i + 1] - self.ades[0][i])

    def _inv(self) -> float:
        return 1.0 / (self.lam * self.N)

    def _table(self, size: int) -> None:
        self._hkeys = np.full(size, -1, dtype=np.int64)
        self._hvals = np.zeros(size)
        self._used = np.empty(size, dtype=np.int64)
        self._nu = 0                        # the slots the table's current image holds (_used[:_nu])

    def _tree(self, i: int, labeling) -> tuple[np.ndarray, int]:
        """(sorted part keys, count) of a labeling (heads of the words) of block i."""
        n = self._n(i)
        hd = np.empty(n + 1, dtype=np.int64)
        hd[0] = -1
        hd[1:] = np.asarray(to_host(labeling) if torch.is_tensor(labeling) else labeling, dtype=np.int64)
        out = np.empty(2 * (n + 1), dtype=np.int64)
        return out, tree_parts(hd, n, self.data.sib.first_child, out)

    def _point(self, i: int, labeling):
        """(keys, vals, lo, count) of a point of block i: a labeling's parts, or the block's M_i (None)."""
        if labeling is None:
            return self.pkeys, self.pvals, int(self.pstart[i]), int(self.pcount[i])
        keys, k = self._tree(i, labeling)
        return keys, np.ones(k), 0, k

    def _difference(self, i: int, P, Q):
        """The sparse D = X(P) - X(Q) over block i's parts (X: a labeling's parts or M_i)."""
        pk, pv, plo, pn = self._point(i, P)
        qk, qv, qlo, qn = self._point(i, Q)
        ok, ov = np.empty(pn + qn, dtype=np.int64), np.empty(pn + qn)
        k = merge(pk, pv, plo, pn, qk, qv, qlo, qn, -1.0, ok, ov)
        return ok, ov, k

    def _image(self, blocks) -> int:
        """The image sum_b D_b g of the differences ``blocks`` [(i, keys, vals, count)] in the hash table."""
        # whatever image the table holds goes, pending or not: a recompute or a batch move drops the pending
        # token while its image stays (that image once leaked into every later one: tests/test_store_properties.py)
        nb_clear(self._hkeys, self._used, self._nu)
        self._nu = 0
        self._pending = None
        bound = sum(int(parts_features_bound(i, k, 0, c, self.ades, self._n_items)) for i, k, _, c in blocks)
        if 2 * bound > self._hkeys.shape[0]:
            self._table(1 << int(2 * bound).bit_length())
        nu = 0
        for i, keys, vals, cnt in blocks:
            nu = parts_image(i, keys, vals, 0, cnt, 1.0, self.ades, self.sdes, self._hkeys, self._hvals, self._used, nu)
        self._nu = nu
        return nu

    def _apply(self, nu: int, scale: float) -> None:
        """w += scale v (the image in the table), the shadow (weighted averaging) following; clears the table."""
        shadow = self.shadow.numpy() if self.shadow is not None else self._hvals
        nb_apply(self._hkeys, self._hvals, self._used, nu, self.w.numpy(), scale, shadow,
                 scale * self.shadow_coef if self.shadow is not None else 0.0)
        nb_clear(self._hkeys, self._used, nu)
        self._nu = 0
        self._pending = None

    def _corner(self, i: int, cost: float | None = None):
        """(heads (n,), <S(y*), theta>, wrong, <G_i, theta>, <M_i, theta>); the scratch keeps block i's scores."""
        n = self._n(i)
        k, score, wrong, gold_score = block_corner(
            i, self.ades, self.sdes, self.w.numpy(), self.gold, self.lgold, float(self.costs[i] if cost is None else
                                                                                 cost),
            self.model.multiroot, self.gold_ok, self._S, self._SB, self._heads, self._parts)
        m_theta = parts_dot(self.pkeys, self.pvals, int(self.pstart[i]), int(self.pcount[i]), n + 1, self._S,
                            self._SB)
        return self._heads[1:n + 1].copy(), score, wrong, gold_score, m_theta

    # -- BCFW -----------------------------------------------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        heads, score, wrong, _, m_theta = self._corner(i)
        loss = float(self.costs[i]) * wrong / self.N
        diff = self._difference(i, heads, None)
        nu = self._image([(i, *diff)])
        self._pending = (("fw", i, id(heads)), nu, diff)
        sq = nb_sqnorm(self._hvals, self._used, nu)
        inv = self._inv()
        dot = score - m_theta
        return Corner(heads, loss, dot * inv, sq * inv * inv, dot / self.N - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        self.pair_move(i, corner.labels, None, corner.loss, float(self.ell_i[i]), gamma,
                       token=("fw", i, id(corner.labels)))

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef psi_i(y*) = coef sum_p (G_p - S(y*)_p) g_p (SSG's primal step)."""
        keys, vals, k = self._difference(i, self.gt_labeling(i), corner.labels)
        self._apply(self._image([(i, keys, vals, k)]), coef)

    # -- active-set primitives ------------------------------------------------------------------------------
    def gt_labeling(self, i: int):
        s, e = int(self.ades[0][i]), int(self.ades[0][i + 1])
        return self.gold[s:e].copy()

    def key(self, labeling) -> bytes:
        arr = to_host(labeling) if torch.is_tensor(labeling) else np.asarray(labeling)
        return np.ascontiguousarray(arr, dtype=np.int64).tobytes()

    def _wrong(self, i: int, labeling) -> int:
        s, e = int(self.ades[0][i]), int(self.ades[0][i + 1])
        y = np.asarray(to_host(labeling) if torch.is_tensor(labeling) else labeling, dtype=np.int64)
        g = self.lgold[s:e]
        return int(((g >= 0) & (y != g)).sum())

    def loss_of(self, i: int, labeling) -> float:
        return float(self.costs[i]) * self._wrong(i, labeling) / self.N

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = (<S(y), theta> - <M_i, theta>) / n - ell_i + L_i(y) / n for each labeling."""
        n = self._n(i)
        block_scores(i, self.ades, self.sdes, self.w.numpy(), self._S, self._SB)
        m_theta = parts_dot(self.pkeys, self.pvals, int(self.pstart[i]), int(self.pcount[i]), n + 1, self._S,
                            self._SB)
        out = np.empty(len(labelings))
        for j, y in enumerate(labelings):
            keys, k = self._tree(i, y)
            score = parts_dot(keys, np.ones(k), 0, k, n + 1, self._S, self._SB)
            out[j] = (score - m_theta) / self.N - float(self.ell_i[i]) + self.loss_of(i, y)
        return out

    def pair_sqnorm(self, i: int, P, Q) -> float:
        diff = self._difference(i, P, Q)
        nu = self._image([(i, *diff)])
        self._pending = (("pair", i, id(P), id(Q)), nu, diff)
        return nb_sqnorm(self._hvals, self._used, nu) * self._inv() ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float, token=None) -> None:
        """M_i += gamma (X(P) - X(Q)), so w += -gamma sum_p D_p g_p / (lam n); ell_i += gamma (loss_P - loss_Q)."""
        token = token or ("pair", i, id(P), id(Q))
        if self._pending is not None and self._pending[0] == token:      # the corner's or the norm's difference
            _, nu, (keys, vals, k) = self._pending                      # (M_i has not moved since)
        else:
            keys, vals, k = self._difference(i, P, Q)
            nu = self._image([(i, keys, vals, k)])
        self._apply(nu, -gamma * self._inv())
        self._axpy(i, keys, vals, k, gamma)
        d_ell = gamma * (loss_P - loss_Q)
        self.ell_i[i] += d_ell
        self._ell[0] += d_ell

    # -- batched passes -------------------------------------------------------------------------------------
    def _pass_terms(self, w=None, costs=None):
        W = int(self.ades[0][-1])
        labels = np.empty(W, dtype=np.int64)
        aug, gold_scores, m_theta = np.empty(self.n), np.empty(self.n), np.empty(self.n)
        wrong = np.empty(self.n, dtype=np.int64)
        args = (self.ades, self.sdes, self.w.numpy() if w is None else w, self.gold, self.lgold,
                self.costs if costs is None else costs, self.model.multiroot, self.gold_ok, self.pstart, self.pcount,
                self.pkeys, self.pvals, self.Nmax)
        if parallel_rows(self.n):                  # torch's threads (--threads): one share of the blocks each
            nb_sib_gap_pass_parallel(*args, numba.get_num_threads(), labels, aug, gold_scores, m_theta, wrong)
        else:
            nb_sib_gap_pass(*args, labels, aug, gold_scores, m_theta, wrong)
        return tuple(torch.from_numpy(a) for a in (labels, aug, gold_scores, m_theta, wrong))

    def gap_pass(self) -> GapPass:
        labels, aug, gold_scores, m_theta, wrong = self._pass_terms()
        loss = wrong.to(self.dtype) * torch.from_numpy(self.costs) / self.N
        return GapPass(labels=labels, loss=loss, H=aug - gold_scores, block_gaps=(aug - m_theta) / self.N - self.ell_i)

    def corner_point(self, gp: GapPass):
        out = torch.zeros_like(self.w)
        nb_labels_image(self.ades, self.sdes, self.gold, np.ascontiguousarray(gp.labels.numpy(), dtype=np.int64),
                        True, self.pstart, self.pcount, self.pkeys, self.pvals, self._inv(), out.numpy())
        return out, float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        labels = gp.labels.numpy()
        for i in range(self.n):
            s, e = int(self.ades[0][i]), int(self.ades[0][i + 1])
            keys, vals, k = self._difference(i, labels[s:e], None)
            self._axpy(i, keys, vals, k, gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss.to(self.dtype), alpha=gamma)
        self.w.mul_(1 - gamma).add_(w_s, alpha=gamma)
        self._ell[0] = self.ell_i.sum()
        self._pending = None

    def recompute(self) -> None:
        """w and ell exactly from the blocks: w = sum_i sum_p (G_p - M_p) g_p / (lam n)."""
        self.w.zero_()
        nb_labels_image(self.ades, self.sdes, self.gold, self.gold, False, self.pstart, self.pcount, self.pkeys,
                        self.pvals, self._inv(), self.w.numpy())
        self._ell[0] = self.ell_i.sum()
        self._pending = None

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i (tests and inspection; never used by the solvers)."""
        out = torch.zeros_like(self.w)
        keys, vals, k = self._difference(i, self.gt_labeling(i), None)
        nb_dense_image(i, keys, vals, 0, k, self._inv(), self.ades, self.sdes, out.numpy())
        return out

    # -- mini-batch BCFW ------------------------------------------------------------------------------------
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        idx = torch.as_tensor(idx).reshape(-1)
        blocks = [int(i) for i in idx.tolist()]
        labels, loss, gaps, diffs = [], np.empty(len(blocks)), np.empty(len(blocks)), []
        for j, i in enumerate(blocks):
            heads, score, wrong, _, m_theta = self._corner(i)
            loss[j] = float(self.costs[i]) * wrong / self.N
            gaps[j] = (score - m_theta) / self.N - float(self.ell_i[i]) + loss[j]
            labels.append(heads)
            diffs.append((i, *self._difference(i, heads, None)))
        nu = self._image(diffs)
        token = ("batch", id(labels))
        self._pending = (token, nu, None)
        sq = nb_sqnorm(self._hvals, self._used, nu) * self._inv() ** 2
        loss_t, gaps_t = torch.from_numpy(loss), torch.from_numpy(gaps)
        return BatchCorners(idx, loss_t, gaps_t, None, float((loss_t - self.ell_i[idx]).sum()),
                            moves=(labels, token, diffs), parts={"labels": labels}, sqnorm=sq)

    def direction(self, parts: dict) -> torch.Tensor:
        raise SSVMInputError("the second-order dependency-tree store builds no shipped directions: the distributed "
                             "exchanges are for chain stores (docs/distributed.md); run mini-batches in one process")

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        labels, token, diffs = corners.moves
        nu = self._pending[1] if self._pending is not None and self._pending[0] == token else self._image(diffs)
        self._apply(nu, -gamma * self._inv())
        for i, keys, vals, k in diffs:
            self._axpy(i, keys, vals, k, gamma)
        self.ell_i[corners.idx] = self.ell_i[corners.idx].lerp(corners.loss.to(self.dtype), gamma)
        self._ell[0] += gamma * corners.dell

    # -- regularization path --------------------------------------------------------------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        """alpha_i <- rho alpha_i + (1 - rho) delta(y_i): M_i <- M_i + (1 - rho) (G_i - M_i), ell_i <- rho ell_i."""
        lam_new = check_positive(lam_new, "lam_new")
        for i in range(self.n):
            keys, vals, k = self._difference(i, self.gt_labeling(i), None)
            self._axpy(i, keys, vals, k, 1.0 - rho)
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self.recompute()

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> per block (no loss; the gold tree in the space)."""
        _, aug, gold_scores, _, _ = self._pass_terms(np.ascontiguousarray(to_host(w.to(torch.float64))),
                                                     np.zeros(self.n))
        return aug - gold_scores

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = (<G_i, theta_i> - <M_i, theta_i>) / n."""
        _, _, gold_scores, m_theta, _ = self._pass_terms()
        return (gold_scores - m_theta) / self.N

    def load_state_dict(self, state: dict) -> None:
        check(isinstance(state, dict), "state", "a dict of the store's tensors", type(state).__name__)
        self._load_pool(state)
        self._pending = None


__all__ = ["SiblingTreeDual"]
