"""Per-block working sets of labelings with their dual weights (Osokin et al. 2016, Alg. 3-5).

One structure serves both the active set S_i (entries with alpha_i(y) > 0) and the cache C_i
(S_i plus zero-weight labelings kept for cache hits), as the paper's reference code does. Labelings
are stored as given by the structure (integer arrays, ints); their feature vectors are never
stored: psi and L are recomputed on demand by the BlockDual.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..models.base import TIE
from ..stores.base import stack_labelings


def first_best(values, scale: float, largest: bool = True) -> int:
    """Index of the first entry within TIE * max(|values|, scale) of the largest (smallest) value: ties
    of corner gaps go to the first entry whatever store computed them (models/base.py). A NaN among the
    values gives 0 (numpy's max propagates it and no entry compares within the tolerance)."""
    v = np.ascontiguousarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("first_best: no values")
    return int(_first_best(v, float(scale), largest))


def away_corner(gaps, alpha: list, scale: float) -> tuple[int, float]:
    """(a, g_a) of the away step: among the entries with alpha > 0, the first within the tie tolerance of
    :func:`first_best` of the smallest corner gap, and that smallest gap (Alg. 3 / 4 of Osokin et al. 2016:
    the away corner maximizes <grad, v>, i.e. minimizes the corner gap)."""
    a, g = _away_corner(np.ascontiguousarray(gaps, dtype=np.float64), np.asarray(alpha, dtype=np.float64),
                        float(scale))
    if a < 0:
        raise ValueError("away_corner: no entry has alpha > 0 (an empty active set)")
    return int(a), float(g)


@nb.njit(cache=True, nogil=True)
def _first_best(v, scale, largest):
    # compiled: the steps call this once or twice per block step on a handful of values, where numpy's
    # per-call overhead (asarray, max, abs, compare, argmax) was most of its cost
    best, big = v[0], 0.0
    for k in range(v.shape[0]):
        x = v[k]
        if np.isnan(x):
            return 0
        if (x > best) if largest else (x < best):
            best = x
        if abs(x) > big:
            big = abs(x)
    tol = TIE * max(big, scale)
    for k in range(v.shape[0]):
        if (v[k] >= best - tol) if largest else (v[k] <= best + tol):
            return k
    return 0


@nb.njit(cache=True, nogil=True)
def _away_corner(gaps, alpha, scale):
    best, big, first = 0.0, 0.0, -1
    for k in range(gaps.shape[0]):
        if alpha[k] > 0.0:
            x = gaps[k]
            if first < 0:
                best, first = x, k
            if np.isnan(x):
                return first, x
            if x < best:
                best = x
            if abs(x) > big:
                big = abs(x)
    tol = TIE * max(big, scale)
    for k in range(gaps.shape[0]):
        if alpha[k] > 0.0 and gaps[k] <= best + tol:
            return k, best
    return -1, best


class BlockSet:
    __slots__ = ("labels", "keys", "alpha", "loss", "score", "_matrix")

    def __init__(self, label, key, loss: float):
        self.labels = [label]
        self.keys = {key: 0}
        self.alpha = [1.0]           # the dual starts at alpha_i = delta(y_i)
        self.loss = [loss]
        self.score = [0.0]           # last known corner gap, for eviction
        self._matrix = None

    def matrix(self):
        """The labelings stacked into one array (cached until the set changes)."""
        if self._matrix is None:
            on = next((y.device for y in self.labels if isinstance(y, torch.Tensor)), None)
            # device labelings stay on their device
            self._matrix = stack_labelings([torch.as_tensor(y, device=on) for y in self.labels] if on is not None
                                           else [np.asarray(y) for y in self.labels])
        return self._matrix

    def __len__(self):
        return len(self.labels)

    def active(self) -> list[int]:
        return [j for j, a in enumerate(self.alpha) if a > 0.0]

    def add(self, label, key, loss: float, score: float) -> int:
        j = self.keys.get(key)
        if j is None:
            j = len(self.labels)
            self.keys[key] = j
            self.labels.append(label)
            self.alpha.append(0.0)
            self.loss.append(loss)
            self.score.append(score)
            self._matrix = None
        else:
            self.score[j] = score
        return j

    def remove(self, drop: set[int]) -> None:
        keep = [j for j in range(len(self.labels)) if j not in drop]
        self.labels = [self.labels[j] for j in keep]
        self.alpha = [self.alpha[j] for j in keep]
        self.loss = [self.loss[j] for j in keep]
        self.score = [self.score[j] for j in keep]
        self.keys = {k: keep.index(j) for k, j in self.keys.items() if j not in drop}
        self._matrix = None

    def evict(self, max_size: int, protect: set[int]) -> bool:
        """Drop lowest-scoring zero-weight entries until ``max_size`` entries remain. Returns False
        when that is impossible without dropping an active or protected entry."""
        if len(self.labels) <= max_size:
            return True
        candidates = sorted((self.score[j], j) for j in range(len(self.labels))
                            if self.alpha[j] <= 0.0 and j not in protect)
        excess = len(self.labels) - max_size
        self.remove({j for _, j in candidates[:excess]})
        return len(self.labels) <= max_size


def corner_sets(dual, labelings: list, losses) -> list:
    """Working sets with alpha_i = delta(y_i~) for the labelings y_i~ (one per block) and their losses L/n: the
    decomposition of the point a batch move with gamma = 1 (``move_all``) leaves (the regularization path's start)."""
    return [BlockSet(y, dual.key(y), float(loss)) for y, loss in zip(labelings, losses)]


def warm_sets(dual, sets: list | None, rho: float) -> list | None:
    """alpha_i <- rho alpha_i + (1 - rho) delta(y_i) on the working sets, in place: the keep-primal rescaling of
    the regularization path (Osokin et al. 2016, Alg. 7; ``rescale(lam, rho)``) applied to the decomposition the
    pairwise / away steps and the cache keep, so that they go on from the rescaled point (None: no sets)."""
    for i, bs in enumerate(sets or []):
        bs.alpha = [rho * a for a in bs.alpha]
        if rho < 1.0:
            gt = dual.gt_labeling(i)
            j = bs.add(gt, dual.key(gt), 0.0, 0.0)
            bs.alpha[j] += 1.0 - rho
    return sets
