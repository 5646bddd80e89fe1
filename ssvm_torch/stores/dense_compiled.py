"""The dense block store with compiled block steps (CPU, float64).

:class:`DenseDual` runs every block step as a batch-1 call of the torch model plus a dozen small
tensor ops: 0.1-1.5 ms per step, where the oracle itself takes a few microseconds (scene,
multiclass) or one library call (min cut, assignment). :class:`HostBlocks` replaces the block-level
primitives (FW corner and move, pairwise / away moves, corner gaps of the active set and cache) by
the host structure's batch-1 oracle (stores/host_structures.py) and the numba block algebra
(stores/block_kernels.py) on numpy views of the same tensors: the blocks, w and ell_i stay the
DenseDual's, so batched passes (gap pass, batch FW, mini-batches), the path, averaging, state and
the box wrapper are unchanged and the torch store is the reference of every result (tests hold
them equal to 1e-10).
"""
from __future__ import annotations

import numpy as np
import torch

from . import block_kernels as bk
from .base import Corner, GapPass
from .dense import DenseDual
from .matching import MatchingDual


#: the sparse features of "the block's current point" (no labeling) in point_diff
_NO_FEATURES = (np.empty(0, dtype=np.int64), np.empty(0))


class HostBlocks:
    """Mixin over :class:`DenseDual`: block steps through ``self.host`` (a host structure)."""

    compiled_blocks = True

    def _gt_features(self) -> torch.Tensor:
        """(n, d) phi(x_i, y_i) by the host structure, one compiled call per block (the torch model's batched phi
        took most of a small store's construction: 69 of 77 ms for 200 OCR word chains as graphs)."""
        host = self._early_host
        G = np.zeros((self.n, self.d))
        for i in range(self.n):
            cols, vals = host.features(i, host.gt(i))
            G[i, cols] = vals                       # distinct coordinates (stores/host_structures.py)
        return torch.from_numpy(G)

    def _init_host(self, host) -> None:
        self.host = host
        # views share memory with the tensors; every DenseDual update is in place, so they stay valid
        self._Wn, self._elln, self._wn = self.W_blocks.numpy(), self.ell_i.numpy(), self.w.numpy()
        self._Gn = self.phi_gt.numpy()
        self._scratch = np.empty(self.d)
        self._last = (-1, None, None, None)

    @property
    def _s(self) -> float:
        return 1.0 / (self.lam * self.N)

    def _shadow(self):
        return bk.NO_SHADOW if self.shadow is None else self.shadow.numpy()

    def _features(self, i, labeling):
        j, y, cols, vals = self._last         # the corner just decoded (fw_corner -> fw_move)
        if j == i and labeling is y:
            return cols, vals
        return self.host.features(i, labeling)

    # -- BlockMoves -------------------------------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        y, cols, vals, L = self.host.corner(self._wn, i)
        self._last = (i, y, cols, vals)
        dot, sq = bk.corner_terms(self._Wn[i], self._Gn[i], cols, vals, self._wn, self._s)
        loss = L / self.N
        return Corner(y, loss, dot, sq, self.lam * dot - float(self._elln[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        cols, vals = self._features(i, corner.labels)
        bk.fw_move(self._Wn[i], self._Gn[i], cols, vals, self._wn, self._s, gamma, self._shadow(), self.shadow_coef)
        old = float(self._elln[i])
        self._elln[i] = (1 - gamma) * old + gamma * corner.loss
        self._ell += gamma * (corner.loss - old)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        cols, vals = self._features(i, corner.labels)
        self._wn += coef * self._Gn[i]
        self._wn[cols] -= coef * vals

    # -- BatchPasses ------------------------------------------------------------------------------
    def gap_pass(self) -> GapPass:
        """The exact gap pass as a loop of the host oracle over the blocks (faster than the batched torch
        model for every structure but multi-label, whose enumeration is one tensor op):
        H_i = L_i(y*) - <w, g_i> + <w, phi(x_i, y*)>, block gaps as DenseDual.gap_pass."""
        if not getattr(self.host, "loop_gap_pass", True):
            return super().gap_pass()
        w = self._wn
        labels, L, phi_w = [], np.empty(self.n), np.empty(self.n)
        for i in range(self.n):
            y, cols, vals, L[i] = self.host.corner(w, i)
            labels.append(y)
            phi_w[i] = bk.phi_dot(cols, vals, w)
        H = torch.from_numpy(L - self._Gn @ w + phi_w)
        gaps = self.lam * (self.W_blocks @ self.w) - self.ell_i + H / self.N
        return GapPass(labels=self.host.stack(labels), loss=torch.from_numpy(L) / self.N, H=H, block_gaps=gaps)

    # -- ActiveSetMoves ---------------------------------------------------------------------------
    def gt_labeling(self, i: int):
        return self.host.gt(i)

    def loss_of(self, i: int, labeling) -> float:
        return self.host.loss(i, labeling) / self.N

    def corner_gaps(self, i: int, labelings):
        s = self._s
        base = bk.block_base_dot(self._Wn[i], self._Gn[i], self._wn, s)
        out = np.empty(len(labelings))
        for k, y in enumerate(labelings):
            cols, vals = self.host.features(i, y)
            out[k] = self.lam * (base + s * bk.phi_dot(cols, vals, self._wn)) + self.host.loss(i, y) / self.N
        return out - float(self._elln[i])

    def _diff(self, i, P, Q):
        cp, vp = _NO_FEATURES if P is None else self._features(i, P)
        cq, vq = _NO_FEATURES if Q is None else self._features(i, Q)
        bk.point_diff(self._scratch, self._Wn[i], self._Gn[i], self._s, P is None, cp, vp, Q is None, cq, vq)
        return self._scratch

    def pair_sqnorm(self, i: int, P, Q) -> float:
        diff = self._diff(i, P, Q)
        return float(diff @ diff)

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        bk.add_step(self._Wn[i], self._wn, self._diff(i, P, Q), gamma, self._shadow(), self.shadow_coef)
        self._elln[i] += gamma * (loss_P - loss_Q)
        self._ell += gamma * (loss_P - loss_Q)


def _host_first(store, model, data, host_factory):
    """The host structure of the store's CPU float64 data, built before the store (its phi of the ground truths
    comes from it: HostBlocks._gt_features); ``data`` checked by the model first, as the store does."""
    model.check_data(data)
    store._early_host = host_factory(model, data.to("cpu", torch.float64))
    return store._early_host


class CompiledDenseDual(HostBlocks, DenseDual):
    """:class:`DenseDual` with compiled block steps (``host``: the structure's host oracle)."""

    def __init__(self, model, data, lam: float, host_factory, n_objective: int | None = None):
        host = _host_first(self, model, data, host_factory)
        super().__init__(model, data, lam, device="cpu", dtype=torch.float64, n_objective=n_objective)
        self._init_host(host)


class CompiledMatchingDual(HostBlocks, MatchingDual):
    """:class:`MatchingDual` (with its relaxation for DEG) with compiled block steps."""

    def __init__(self, model, data, lam: float, host_factory, n_objective: int | None = None):
        host = _host_first(self, model, data, host_factory)
        super().__init__(model, data, lam, device="cpu", dtype=torch.float64, n_objective=n_objective)
        self._init_host(host)
