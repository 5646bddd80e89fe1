"""Weighted averaging of the iterates (Lacoste-Julien et al. 2013): a listener of the loop.

w_avg(k+1) = k/(k+2) w_avg(k) + 2/(k+2) w(k+1) (and ell likewise), i.e. w_avg(K) = sum_k 2k/(K(K+1)) w(k).
For BCFW it is kept lazily in O(support) per step: w_avg(K) = w(K) - R(K)/T(K) with T(j) = j(j+1)/2 and
R accumulating T(j-1) dw(j) through the store's shadow vector, so averaging does not cost O(d) per
step (CoNLL: d = 7.4M). For FW and SSG the average is kept eagerly.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from ..stores.base import BlockDual


class Averager:
    def __init__(self, dual: BlockDual, lazy: bool):
        if not dual.supports_averaging:
            raise SSVMInputError("averaging: not supported with box constraints (e.g. segmentation-synth's "
                                 "w_pairwise >= 0: the average of clipped iterates is not a clipped dual point) nor "
                                 "by the coordinate-sharded store (exchange 'columns': w is whole only at gap checks)")
        self.dual, self.lazy = dual, lazy
        self.w_eager = None if lazy else dual.w.clone()
        self.R = torch.zeros_like(dual.w) if lazy else None
        dual.shadow = self.R
        self.ell_avg = dual.ell

    def w_avg(self, steps: int) -> torch.Tensor:
        """The weighted average after ``steps`` steps."""
        if self.lazy:
            return self.dual.w.clone() if steps == 0 else self.dual.w - self.R / (steps * (steps + 1) / 2.0)
        return self.w_eager

    def before_step(self, steps: int) -> None:
        """Step j = steps + 1 adds T(j-1) dw to R through the store's shadow."""
        if self.lazy:
            self.dual.shadow_coef = steps * (steps + 1) / 2.0

    def after_step(self, steps: int) -> None:
        """After step K (steps == K): rho = 2/(K+1), i.e. 2/(k+2) with k = K-1 in the paper."""
        rho = 2.0 / (steps + 1.0)
        if self.w_eager is not None:
            self.w_eager.lerp_(self.dual.w, rho)
        self.ell_avg += rho * (self.dual.ell - self.ell_avg)

    def after_recompute(self, w_before: torch.Tensor, steps: int) -> None:
        """The drift correction of an exact recomputation belongs to the last step's change."""
        if self.lazy:
            self.R.add_(self.dual.w - w_before, alpha=max(steps - 1, 0) * steps / 2.0)

    def state_dict(self) -> dict:
        return {"w_avg": None if self.w_eager is None else self.w_eager.clone(), "ell_avg": self.ell_avg,
                "avg_R": None if self.R is None else self.R.clone()}

    def load_state_dict(self, s: dict) -> None:
        if self.w_eager is not None:
            self.w_eager.copy_(s["w_avg"])
        if self.R is not None:
            self.R.copy_(s["avg_R"])
        self.ell_avg = s["ell_avg"]
