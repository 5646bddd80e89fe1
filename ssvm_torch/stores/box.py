"""Box constraints l <= w <= u on a subset of coordinates (Osokin et al. 2016, App. H).

The dual keeps v = A alpha = sum_i w_i unconstrained and the primal point is w = clip(v, l, u)
(the minimizer of the Lagrangian over the box). With it
  * block gaps keep their form g_i = lam <w, v_i - v_s> - ell_i + ell_s (w clipped), so the
    oracle and gap pass are unchanged; their sum is the Lagrange duality gap of the box problem;
  * the dual is D(alpha) = ell - lam <w, v> + lam/2 ||w||^2;
  * -D has curvature at most lam ||dv||^2 along any direction (clip is 1-Lipschitz), so the usual
    step gamma = g / (lam ||dv||^2) (clipped to its range) never decreases the dual (App. H).

:class:`BoxedDual` wraps any BlockDual: moves act on v; after each one the constrained
coordinates are re-clipped. Only O(#constrained) extra work per step.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from .base import BatchCorners, BlockDual, Corner, GapPass
from .block_kernels import box_sync
from .state import check_like


class BoxedDual(BlockDual):
    # App. H's path would need the box in the rescaling; the average of clipped iterates is not a
    # clipped dual point.
    supports_path = False
    supports_averaging = False

    def __init__(self, inner: BlockDual, index, lower=None, upper=None):
        self.inner = inner
        d = inner.w.shape[0]
        idx = torch.as_tensor(index, dtype=torch.int64, device=inner.w.device).reshape(-1)
        check(idx.numel() >= 1, "box index", "at least one coordinate", 0)
        check(bool((idx >= 0).all()) and bool((idx < d).all()), "box index", f"coordinates in [0, {d - 1}]",
              f"range [{int(idx.min())}, {int(idx.max())}]")
        check(torch.unique(idx).numel() == idx.numel(), "box index", "distinct coordinates", "duplicates")

        def bound(b, name, default):
            t = torch.full((idx.numel(),), default, dtype=inner.w.dtype, device=inner.w.device) if b is None \
                else torch.as_tensor(b, dtype=inner.w.dtype, device=inner.w.device).expand(idx.numel()).clone()
            check(not bool(torch.isnan(t).any()), f"box {name}", "numbers (use +-inf for no bound)", "NaN")
            return t
        self.idx = idx
        self.lower = bound(lower, "lower", float("-inf"))
        self.upper = bound(upper, "upper", float("inf"))
        if bool((self.lower > self.upper).any()):
            raise SSVMInputError("box lower: expected lower <= upper for every constrained coordinate")
        self.n, self.N, self.lam = inner.n, inner.N, inner.lam
        self._host_sync = ((idx.numpy(), self.lower.numpy(), self.upper.numpy())
                           if getattr(inner, "compiled_blocks", False) else None)
        self.v_c = inner.w[idx].clone()
        self._clip()

    # -- keeping w = clip(v) -----------------------------------------------------------------
    def _clip(self):
        self.w_c = torch.minimum(torch.maximum(self.v_c, self.lower), self.upper)
        self.inner.w[self.idx] = self.w_c

    def _sync(self):
        """The inner dual added a change to w; on constrained coordinates it belongs to v."""
        if self._host_sync is not None:           # compiled inner store: one numba call per block step
            idx, lower, upper = self._host_sync
            box_sync(self.inner.w.numpy(), idx, self.v_c.numpy(), self.w_c.numpy(), lower, upper)
            return
        self.v_c += self.inner.w[self.idx] - self.w_c
        self._clip()

    @property
    def w(self):
        return self.inner.w

    @property
    def ell_i(self):
        return self.inner.ell_i

    @property
    def device(self) -> torch.device:
        return self.inner.device

    @property
    def ell(self) -> float:
        return self.inner.ell

    @property
    def v(self) -> torch.Tensor:
        v = self.inner.w.clone()
        v[self.idx] = self.v_c
        return v

    def dual(self) -> float:
        """ell - lam <w, v> + lam/2 ||w||^2 (App. H); v differs from w only on clipped coordinates."""
        w = self.inner.w
        return self.ell - 0.5 * self.lam * float(w @ w) - self.lam * float(self.w_c @ (self.v_c - self.w_c))

    # -- delegation with re-clipping ----------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        return self.inner.fw_corner(i)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        self.inner.fw_move(i, corner, gamma)
        self._sync()

    def pair_move(self, i, P, Q, loss_P, loss_Q, gamma) -> None:
        self.inner.pair_move(i, P, Q, loss_P, loss_Q, gamma)
        self._sync()

    def batch_corners(self, idx, with_direction: bool = True) -> BatchCorners:
        return self.inner.batch_corners(idx, with_direction)

    def direction(self, parts: dict) -> torch.Tensor:
        return self.inner.direction(parts)

    @property
    def shares_direction(self) -> bool:
        return self.inner.shares_direction

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        """The step along dv (gamma from the unclipped direction is safe, App. H), then re-clip."""
        self.inner.batch_move(corners, gamma)
        self._sync()

    def move_point(self, dw, dell, gamma) -> None:
        self.inner.move_point(dw, dell, gamma)
        self._sync()

    def gap_pass(self) -> GapPass:
        return self.inner.gap_pass()

    def corner_point(self, gp: GapPass):
        return self.inner.corner_point(gp)

    def block_labeling(self, gp: GapPass, i: int):
        return self.inner.block_labeling(gp, i)

    def stack_labelings(self, labelings: list):
        return self.inner.stack_labelings(labelings)

    def move_all(self, gp: GapPass, w_s, ell_s, gamma) -> None:
        v_c = (1.0 - gamma) * self.v_c + gamma * w_s[self.idx]
        self.inner.move_all(gp, w_s, ell_s, gamma)
        self.v_c = v_c
        self._clip()

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """Projected SSG: the subgradient step, then w projected onto the box."""
        self.inner.add_psi(i, corner, coef)
        self.v_c = self.inner.w[self.idx].clone()
        self._clip()

    def recompute(self) -> None:
        self.inner.recompute()
        self.v_c = self.inner.w[self.idx].clone()
        self._clip()

    def box(self):
        return self.idx, self.lower, self.upper

    def set_dual_point(self, v: torch.Tensor, ell: float) -> None:
        self.inner.set_point(v, ell)
        self.v_c = v[self.idx].clone()
        self._clip()

    def set_point(self, w, ell) -> None:
        raise SSVMInputError("averaging: not supported with box constraints (the average of clipped "
                             "points is not the clip of the averaged dual)")

    def block_w(self, i: int) -> torch.Tensor:
        return self.inner.block_w(i)

    def gt_labeling(self, i):
        return self.inner.gt_labeling(i)

    def key(self, labeling):
        return self.inner.key(labeling)

    def loss_of(self, i, labeling):
        return self.inner.loss_of(i, labeling)

    def corner_gaps(self, i, labelings):
        return self.inner.corner_gaps(i, labelings)

    def pair_sqnorm(self, i, P, Q) -> float:
        return self.inner.pair_sqnorm(i, P, Q)

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "v_c": self.v_c.clone()}

    # -- the path is declared unsupported (supports_path = False) -----------------------------
    def _no_path(self):
        raise SSVMInputError("dual: box-constrained stores do not support the regularization path "
                             "(the rescaling of Alg. 7 would have to account for the box)")

    def rescale(self, lam_new: float, rho: float) -> None:
        self._no_path()

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        self._no_path()

    def block_wdots(self) -> torch.Tensor:
        self._no_path()

    def load_state_dict(self, state: dict) -> None:
        check_like("state['v_c']", state.get("v_c"), self.v_c, "the boxed coordinates")
        self.inner.load_state_dict(state["inner"])
        self.v_c = state["v_c"].clone()
        self._clip()
