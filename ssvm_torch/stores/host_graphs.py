"""Host structures (stores/host_structures.py) of the graph models: graph cut (PyMaxflow on host arrays),
tree-structured pose (max-sum with distance transforms, one compiled call) and word alignment (scipy's
assignment solver on a matrix built by numba)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..errors import SSVMInputError
from ..models.graphcut import GraphCutModel
from ..models.matching import PAD, MatchingModel
from ..models.pose import TreePoseModel
from ..oracles.distance_transform import _nb_tree_max_sum_one, tree_split, tree_workspace
from ..oracles.maxflow import binary_cut_host
from .host_flat import as_host, labels_of, padded, stacked


# -- graph cut (submodular Potts on superpixel graphs) ----------------------------------------------
@nb.njit(cache=True)
def _graph_potentials(X, y, cw, Fe, w, F, inv, pairwise, gain, theta):
    for v in range(X.shape[0]):
        s = 0.0
        for f in range(F - 1):
            s += X[v, f] * w[f]
        s = (s + w[F - 1]) * inv
        gain[v] = s + (cw[v] if y[v] == 0 else -cw[v])
    if pairwise:
        for e in range(Fe.shape[0]):
            s = 0.0
            for f in range(Fe.shape[1]):
                s += Fe[e, f] * w[F + f]
            theta[e] = s * inv


@nb.njit(cache=True)
def _graph_features(X, Fe, edges, lab, F, inv, pairwise, out):
    out[:] = 0.0
    for v in range(X.shape[0]):
        if lab[v] == 1:
            for f in range(F - 1):
                out[f] += X[v, f]
            out[F - 1] += 1.0
    if pairwise:
        for e in range(edges.shape[0]):
            if lab[edges[e, 0]] == lab[edges[e, 1]]:
                for f in range(Fe.shape[1]):
                    out[F + f] += Fe[e, f]
    for k in range(out.shape[0]):
        out[k] *= inv


class GraphCutHost:
    def stack(self, labelings):
        return padded(labelings, -1)

    def __init__(self, model: GraphCutModel, data):
        self.F, self.d, self.pairwise = model.F, model.d, model.pairwise
        X, Fe, edges = as_host(data.X), as_host(data.Fe), as_host(data.edges_local).astype(np.int64)
        y, cw = as_host(data.y).astype(np.int64), as_host(data.cw)
        inv = as_host(data.inv_size)
        no, eo = data.node_off, data.edge_off
        self.ex = [(X[no[i]:no[i + 1]], y[no[i]:no[i + 1]], cw[no[i]:no[i + 1]], Fe[eo[i]:eo[i + 1]],
                    np.ascontiguousarray(edges[eo[i]:eo[i + 1]]), float(inv[i])) for i in range(data.n)]
        self.cols = np.arange(self.d, dtype=np.int64)

    def gt(self, i):
        return self.ex[i][1].copy()

    def _lab(self, i, y):
        return labels_of(y)[:self.ex[i][0].shape[0]]       # batched labelings are padded with -1

    def features(self, i, y):
        X, _, _, Fe, edges, inv = self.ex[i]
        out = np.empty(self.d)
        _graph_features(X, Fe, edges, self._lab(i, y), self.F, inv, self.pairwise, out)
        return self.cols, out

    def loss(self, i, y):
        _, yi, cw, _, _, _ = self.ex[i]
        return float(cw[self._lab(i, y) != yi].sum())

    def corner(self, w, i):
        X, yi, cw, Fe, edges, inv = self.ex[i]
        if self.pairwise and w[self.F:].min() < 0:       # the check of models/graphcut.py
            raise SSVMInputError("w: the pairwise (Potts) weights must be >= 0 for an exact graph cut (got min "
                                 f"{w[self.F:].min():.3g}); train with the box constraint w_pairwise >= 0")
        gain, theta = np.empty(X.shape[0]), np.empty(Fe.shape[0])
        _graph_potentials(X, yi, cw, Fe, w, self.F, inv, self.pairwise, gain, theta)
        y = binary_cut_host(gain, edges if self.pairwise else None, theta if self.pairwise else None)
        cols, vals = self.features(i, y)
        return y, cols, vals, self.loss(i, y)


# -- tree-structured pose (max-sum with distance transforms) ----------------------------------------
@nb.njit(cache=True)
def _pose_features_loss(S, gt, lab, parents, rest, scale, radius, pairwise, out):
    """phi(x, y) into ``out`` and L(y) = share of joints more than ``radius`` cells off (models/pose.py)."""
    J = S.shape[0]
    far = 0
    for j in range(J):
        out[j] = S[j, lab[j, 0], lab[j, 1]]
        if max(abs(lab[j, 0] - gt[j, 0]), abs(lab[j, 1] - gt[j, 1])) > radius:
            far += 1
    if pairwise:
        for j in range(1, J):
            p = parents[j]
            dx = (lab[j, 1] - lab[p, 1] - rest[j, 0]) / scale
            dy = (lab[j, 0] - lab[p, 0] - rest[j, 1]) / scale
            k = J + 4 * (j - 1)
            out[k], out[k + 1], out[k + 2], out[k + 3] = dx, -dx * dx, dy, -dy * dy
    return far / J


@nb.njit(cache=True)
def _pose_corner(S, gt, w, parents, rest, scale, radius, pairwise, groups, starts, w_pair, belief, loc, out,
                 arg_r, col, msg, T, arg_c, Tt, mt, art):
    """Loss-augmented unaries w_j S_j + [far] / J, tree max-sum, phi and the loss of the argmax, in one
    compiled call; returns (L, the smallest quadratic deformation weight) (the caller refuses a negative
    one before using the result)."""
    J, H, W = S.shape
    low = 0.0
    if pairwise:
        for j in range(1, J):
            for k in range(4):
                w_pair[j, k] = w[J + 4 * (j - 1) + k]
            low = min(low, w_pair[j, 1], w_pair[j, 3])
        if low < 0.0:
            return 0.0, low
    for j in range(J):
        for r in range(H):
            for c in range(W):
                cheb = max(abs(r - gt[j, 0]), abs(c - gt[j, 1]))
                belief[j, r, c] = S[j, r, c] * w[j] + (1.0 / J if cheb > radius else 0.0)
    _nb_tree_max_sum_one(belief, parents, w_pair, rest, scale, groups, starts, loc, arg_r, col, msg, T, arg_c,
                         Tt, mt, art)
    return _pose_features_loss(S, gt, loc, parents, rest, scale, radius, pairwise, out), low


def _launch_threads() -> None:
    """Dispatch the parallel tree kernel once from Python (a one-part tree): numba starts its worker
    threads on such a dispatch, and a compiled caller loaded from the cache (``_pose_corner``) would
    otherwise enter the parallel region with none started (a segfault)."""
    J, H, W = 1, 1, 1
    _nb_tree_max_sum_one(np.zeros((J, H, W)), np.array([-1], dtype=np.int64), np.zeros((J, 4)), np.zeros((J, 2)),
                         1.0, np.zeros(0, dtype=np.int64), np.zeros(3, dtype=np.int64), np.zeros((J, 2), np.int64),
                         *tree_workspace(J, H, W))


class TreePoseHost:
    stack = staticmethod(stacked)

    def __init__(self, model: TreePoseModel, data):
        self.J, self.d, self.pairwise = model.J, model.d, model.pairwise
        self.radius, self.scale = model.radius, model.scale
        self.parents = np.array(model.parents, dtype=np.int64)
        self.rest = as_host(model.rest).astype(np.float64)
        self.S, self.Y = as_host(data.S), as_host(data.Y).astype(np.int64)
        self.cols = np.arange(self.d, dtype=np.int64)
        self.w_pair = np.zeros((self.J, 4))
        self.belief = np.empty(self.S.shape[1:])
        self.work = tree_workspace(*self.S.shape[1:])
        self.split = tree_split(model.parents)
        _launch_threads()

    def gt(self, i):
        return self.Y[i].copy()

    def _features_loss(self, i, y):
        out = np.empty(self.d)
        L = _pose_features_loss(self.S[i], self.Y[i], labels_of(y).reshape(self.J, 2), self.parents, self.rest,
                                self.scale, self.radius, self.pairwise, out)
        return out, L

    def features(self, i, y):
        return self.cols, self._features_loss(i, y)[0]

    def loss(self, i, y):
        return self._features_loss(i, y)[1]

    def corner(self, w, i):
        y, out = np.empty((self.J, 2), np.int64), np.empty(self.d)
        L, low = _pose_corner(self.S[i], self.Y[i], w, self.parents, self.rest, self.scale, self.radius, self.pairwise,
                              *self.split, self.w_pair, self.belief, y, out, *self.work)
        if low < 0:            # the check of models/pose.py: a convex deformation has no distance transform
            raise SSVMInputError("w: the quadratic deformation weights must be >= 0 for the distance "
                                 f"transform (got min {low:.3g}); train with the box constraint")
        return y, self.cols, out, L


# -- word alignment (bipartite matching with NULL) ---------------------------------------------------
@nb.njit(cache=True)
def _matching_matrix(X, Ne, Nf, A, w, Fe, Fn, M):
    m, n = X.shape[0], X.shape[1]
    Z = m + n
    M[:, :] = -np.inf
    for i in range(m):
        for j in range(n):
            s = 0.0
            for f in range(Fe):
                s += X[i, j, f] * w[f]
            gold = 1.0 if A[i] == j else 0.0
            M[i, j] = s / Z + (1.0 - 2.0 * gold) / Z
        s = 0.0
        for f in range(Fn):
            s += Ne[i, f] * w[Fe + f]
        M[i, n + i] = s / Z
    for j in range(n):
        s = 0.0
        for f in range(Fn):
            s += Nf[j, f] * w[Fe + Fn + f]
        M[m + j, j] = s / Z
    for i in range(n):
        for j in range(m):
            M[m + i, n + j] = 0.0


@nb.njit(cache=True)
def _matching_features(X, Ne, Nf, a, Fe, Fn, out):
    m, n = X.shape[0], X.shape[1]
    out[:] = 0.0
    taken = np.zeros(n, np.bool_)
    for i in range(m):
        if a[i] >= 0:
            taken[a[i]] = True
            for f in range(Fe):
                out[f] += X[i, a[i], f]
        else:
            for f in range(Fn):
                out[Fe + f] += Ne[i, f]
    for j in range(n):
        if not taken[j]:
            for f in range(Fn):
                out[Fe + Fn + f] += Nf[j, f]
    for k in range(out.shape[0]):
        out[k] /= m + n


class MatchingHost:
    def stack(self, labelings):
        return padded(labelings, PAD)

    def __init__(self, model: MatchingModel, data):
        self.Fe, self.Fn, self.d = model.Fe, model.Fn, model.d
        self.ex = [(as_host(data.X[k]), as_host(data.Ne[k]), as_host(data.Nf[k]), as_host(data.A[k]).astype(np.int64))
                   for k in range(data.n)]
        self.cols = np.arange(self.d, dtype=np.int64)

    def gt(self, i):
        return self.ex[i][3].copy()

    def _lab(self, i, y):
        return labels_of(y)[:self.ex[i][0].shape[0]]       # batched labelings are padded

    def features(self, i, y):
        X, Ne, Nf, _ = self.ex[i]
        out = np.empty(self.d)
        _matching_features(X, Ne, Nf, self._lab(i, y), self.Fe, self.Fn, out)
        return self.cols, out

    def loss(self, i, y):
        X, _, _, t = self.ex[i]
        a = self._lab(i, y)
        wrong = int(((a != t) & (a >= 0)).sum()) + int(((a != t) & (t >= 0)).sum())
        return wrong / (X.shape[0] + X.shape[1])

    def corner(self, w, i):
        X, Ne, Nf, A = self.ex[i]
        m, n = X.shape[:2]
        M = np.empty((m + n, n + m))
        _matching_matrix(X, Ne, Nf, A, w, self.Fe, self.Fn, M)
        from scipy.optimize import linear_sum_assignment
        rows, cols = linear_sum_assignment(M, maximize=True)       # as oracles/assignment.py
        y = np.full(m, -1, dtype=np.int64)
        real = (rows < m) & (cols < n)
        y[rows[real]] = cols[real]
        c, v = self.features(i, y)
        return y, c, v, self.loss(i, y)
