"""The semi-Markov store's joint constraints kept as labelings (:class:`~ssvm_torch.stores.optional_moves.JointConstraints`):
the 1-slack cutting plane (solvers/cutting_plane.py) on CoNLL-2000's d = 12.1M semi-Markov model keeps each
constraint as one segmentation of every sentence (N small integers) instead of a dense d-vector (97 MB).

A joint segmentation y = (y_1..y_n) stands for a(y) = sum_i A_i (s(y_i^gold) - s(y_i)) / (lam n) with s the
segment statistics of models/semimarkov.py (per position token / begin / end indicators, per row counts), so
lam <a(y), w> = sum_i <s(y_i^gold) - s(y_i), theta_i> / n reads the potentials theta of w once, and
sum_c alpha_c a(y_c) is one map from weighted statistics to w (:meth:`SegmentDual.w_from_stats`).
"""
from __future__ import annotations

import numpy as np
import torch

from .base import GapPass
from .optional_moves import JointConstraints
from .ragged import host_labels


class SegmentJointConstraints(JointConstraints):
    """Joint constraints of :class:`~ssvm_torch.stores.segments.SegmentDual` as segmentations (module docstring);
    reads the store's ``_all_potentials``, ``_stats_of``, ``w_from_stats``, gold statistics and compiled step
    (``_host``, stores/segment_host.py)."""

    def joint_labels(self, gp: GapPass) -> torch.Tensor:
        """The gap pass's ragged segmentations (N,) as int16 (a label at each segment's start, -1 elsewhere)."""
        small = torch.int16 if self.model.K <= torch.iinfo(torch.int16).max else torch.int64
        return gp.labels.to(self.device, small)

    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y_c), w> = sum_i <s(y_i^gold) - s(y_c,i), theta_i> / n for each joint segmentation: on the
        compiled path one kernel scores every block under every labeling (each block's potentials once); on
        the torch path the potentials of w once, then per labeling its statistics against them (no d-sized
        work per labeling either way)."""
        w = w.to(self.device, self.dtype)
        if self._host is not None and len(labels):
            rows = np.stack([host_labels(self.gold[self.all_valid]), *(host_labels(y) for y in labels)])
            scores = self._host.joint_scores(rows, w)
            return torch.from_numpy((scores[0] - scores[1:]) / self.N)
        U, counts = self._all_potentials(w), w[self.model.e:]

        def score(P, Gc):
            return (P * U).sum() + Gc.sum(0) @ counts
        gold = score(self.P_gt, self.G_gt)
        return torch.stack([gold - score(*self._stats_of(y.to(self.device).long())) for y in labels]) / self.N

    def joint_point(self, weights, labels: list) -> torch.Tensor:
        """sum_c weights_c a(y_c) (weights >= 0, sum <= 1): w_from_stats of the weighted statistics, the missing
        mass 1 - sum weights on the gold segmentations (whose psi is 0)."""
        rest = 1.0 - float(sum(weights))
        P, Gc = self.P_gt * rest, self.G_gt * rest
        if self._host is not None and len(labels):
            self._host.add_labelings(np.stack([host_labels(y) for y in labels]), np.asarray(weights, np.float64),
                                     P.numpy(), Gc.numpy())
            return self.w_from_stats(P, Gc)
        for wc, y in zip(weights, labels):
            if float(wc) != 0.0:
                ps, cs = self._stats_of(y.to(self.device).long())
                P.add_(ps, alpha=float(wc))
                Gc.add_(cs, alpha=float(wc))
        return self.w_from_stats(P, Gc)
