"""Host structures (stores/host_structures.py) of the flat models: multiclass (Crammer-Singer) and
multi-label with a full pairwise graph (enumeration of the 2^L labelings), and the host-array helpers
of every host structure."""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..models.base import TIE
from ..models.flat import MulticlassModel, MultiLabelModel


def as_host(t) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t))


def labels_of(y) -> np.ndarray:
    return np.asarray(y.cpu() if torch.is_tensor(y) else y, dtype=np.int64)


def padded(labelings, fill, dtype=np.int64) -> torch.Tensor:
    out = np.full((len(labelings), max(len(y) for y in labelings)), fill, dtype=dtype)
    for r, y in enumerate(labelings):
        out[r, :len(y)] = y
    return torch.from_numpy(out)


def stacked(labelings) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(y, dtype=np.int64) for y in labelings]))


@nb.njit(cache=True)
def _first_max(s):
    """The lowest index within TIE of the maximum (models/flat.py's ``first_max``)."""
    best = s.max()
    tol = TIE * max(1.0, abs(best))
    for k in range(s.shape[0]):
        if s[k] >= best - tol:
            return k
    return 0


# -- multiclass (Crammer-Singer) -------------------------------------------------------------------
@nb.njit(cache=True)
def _multiclass_decode(x, yi, w, K, F):
    scores = np.empty(K)
    for k in range(K):
        s = 0.0
        for f in range(F - 1):
            s += x[f] * w[k * F + f]
        s += w[k * F + F - 1]
        if k != yi:
            s += 1.0
        scores[k] = s
    return _first_max(scores)


class MulticlassHost:
    stack = staticmethod(stacked)

    def __init__(self, model: MulticlassModel, data):
        self.K, self.F = model.K, model.F
        X = as_host(data.X)
        self.Xb = np.ascontiguousarray(np.concatenate([X, np.ones((X.shape[0], 1))], 1))
        self.Y = as_host(data.Y).astype(np.int64)
        self.base = np.arange(self.F, dtype=np.int64)

    def gt(self, i):
        return int(self.Y[i])

    def features(self, i, y):
        return self.base + int(y) * self.F, self.Xb[i]

    def loss(self, i, y):
        return float(int(y) != self.Y[i])

    def corner(self, w, i):
        y = _multiclass_decode(self.Xb[i], self.Y[i], w, self.K, self.F)
        return y, self.base + y * self.F, self.Xb[i], float(y != self.Y[i])


# -- multi-label, full pairwise graph (enumeration) -------------------------------------------------
@nb.njit(cache=True)
def _multilabel_decode(x, yi, w, L, F, pa, pb, out):
    U = np.empty(L)
    for l in range(L):
        s = 0.0
        for f in range(F - 1):
            s += x[f] * w[l * F + f]
        U[l] = s + w[l * F + F - 1]
    du = L * F
    scores = np.empty(1 << L)
    for j in range(1 << L):
        s = 0.0
        wrong = 0
        for l in range(L):
            bit = (j >> (L - 1 - l)) & 1
            if bit == 1:
                s += U[l]
            if bit != yi[l]:
                wrong += 1
        for p in range(pa.shape[0]):
            state = 2 * ((j >> (L - 1 - pa[p])) & 1) + ((j >> (L - 1 - pb[p])) & 1)
            s += w[du + 4 * p + state]
        scores[j] = s + wrong / L
    arg = _first_max(scores)
    for l in range(L):
        out[l] = (arg >> (L - 1 - l)) & 1


@nb.njit(cache=True)
def _multilabel_features(xb, y, F, pa, pb, cols, vals):
    L = y.shape[0]
    k = 0
    for l in range(L):
        if y[l] == 1:
            for f in range(F):
                cols[k] = l * F + f
                vals[k] = xb[f]
                k += 1
    for p in range(pa.shape[0]):
        cols[k] = L * F + 4 * p + 2 * y[pa[p]] + y[pb[p]]
        vals[k] = 1.0
        k += 1
    return k


class MultiLabelHost:
    stack = staticmethod(stacked)
    # the torch model's enumeration of all 2^L labelings is one batched tensor op: faster for a gap pass
    loop_gap_pass = False

    def __init__(self, model: MultiLabelModel, data):
        self.L, self.F = model.L, model.F
        X = as_host(data.X)
        self.Xb = np.ascontiguousarray(np.concatenate([X, np.ones((X.shape[0], 1))], 1))
        self.Y = as_host(data.Y).astype(np.int64)
        self.pa = np.array([p[0] for p in model.pairs], dtype=np.int64)
        self.pb = np.array([p[1] for p in model.pairs], dtype=np.int64)
        self.nnz = self.L * self.F + len(self.pa)

    def gt(self, i):
        return self.Y[i].copy()

    def features(self, i, y):
        cols, vals = np.empty(self.nnz, np.int64), np.empty(self.nnz)
        k = _multilabel_features(self.Xb[i], labels_of(y), self.F, self.pa, self.pb, cols, vals)
        return cols[:k], vals[:k]

    def loss(self, i, y):
        return float((labels_of(y) != self.Y[i]).sum()) / self.L

    def corner(self, w, i):
        y = np.empty(self.L, np.int64)
        _multilabel_decode(self.Xb[i], self.Y[i], w, self.L, self.F, self.pa, self.pb, y)
        cols, vals = self.features(i, y)
        return y, cols, vals, self.loss(i, y)
