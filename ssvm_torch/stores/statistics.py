"""The moves that every expected-statistics store shares (the semi-Markov store, stores/segments.py, and the
constituency store, stores/spans.py): a block is alpha_i's expected statistics (per-position P, per-row counts Gc)
and w = sum_i A_i (s(y_i) - M_i) / (lam n) follows from them exactly, so batch FW's corner and move, the exact
recomputation and the regularization path's rescaling are the same arithmetic on (P, Gc, ell_i) for both.

A store that mixes this in provides ``P``, ``Gc``, their gold values ``P_gt``, ``G_gt``, ``ell_i``, ``_ell``,
``w``, ``lam``, ``_stats_of(labels)`` (the statistics of a gap pass's labelings), ``w_from_stats(P, Gc, out)`` and
``_forget_delta()`` (drop what the last corner cached: the state it was computed on moves)."""
from __future__ import annotations

import torch

from ..errors import check_positive
from .base import GapPass


class ExpectedStatistics:
    """Batch FW, recompute and rescale of an expected-statistics store (module docstring)."""

    def corner_point(self, gp: GapPass):
        return self.w_from_stats(*self._stats_of(gp.labels)), float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        self._forget_delta()
        P, Gc = self._stats_of(gp.labels)
        self.P.mul_(1 - gamma).add_(P, alpha=gamma)
        self.Gc.mul_(1 - gamma).add_(Gc, alpha=gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss.to(self.dtype), alpha=gamma)
        self.w.mul_(1 - gamma).add_(w_s, alpha=gamma)
        self._ell[0] = self.ell_i.sum()

    def recompute(self) -> None:
        self.w_from_stats(self.P, self.Gc, self.w)
        self._ell[0] = self.ell_i.sum()

    def rescale(self, lam_new: float, rho: float) -> None:
        """alpha_i <- rho alpha_i + (1 - rho) delta(y_i); w follows exactly from the statistics."""
        lam_new = check_positive(lam_new, "lam_new")
        self._forget_delta()
        self.P.mul_(rho).add_(self.P_gt, alpha=1.0 - rho)
        self.Gc.mul_(rho).add_(self.G_gt, alpha=1.0 - rho)
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self.recompute()
