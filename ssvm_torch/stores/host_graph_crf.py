"""Host structure (stores/host_structures.py) of :class:`~ssvm_torch.models.graph_crf.GraphCRFModel`: one graph at
a time on host arrays, for the compiled block steps of stores/dense_compiled.py.

The torch model spends most of a block step in tensor calls around the oracle (the layout of the batch's
marginals, phi by a segmented outer product, the loss, the labelings' value checks), where the LP of a small
graph takes a fraction of that. Here the factor scores, phi and the loss are numba loops over each node's
nonzero features (scene's nodes carry 295 of their 1,770 columns), and the LP / max-sum / enumeration are the
model's own (oracles/local_polytope.py, ``enumerate_map``), on the same scores: the torch model stays the
reference (tests/test_dense_compiled.py holds the two equal).

A labeling is the model's marginal vector [mu_nodes (N K) ; mu_edges (E K K)] (float64, row-major), or its
compact form [mu_nodes (N K)] for an integral one (the corners' and the gold labelings: GraphCRFModel's module
docstring); a batch of them is stacked as the torch model's, padded with -1.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np
import torch

from ..models.graph_crf import GraphCRFModel, enumerate_map
from ..oracles.local_polytope import check_finite_scores, forest_max_sum, forest_schedule, is_forest, solve_graph
from ..oracles.node_domains import lift, restrict
from .host_flat import as_host, padded


@nb.njit(cache=True)
def _scores(indptr, cols, vals, y, c, lab, Fe, w, K, F, sym, inv, tn, te):
    """Loss-augmented node scores tn (N, K) = (<W_k, [x_v, 1]> + [l(k) != l(y_v)] c_v ... ) (l = ``lab``, the
    states' labels: the identity without sub-states) and edge scores te (E, K, K)
    = sum_p f_e[p] V_p (V_p tied symmetric where ``sym[p]`` is 1, antisymmetric where it is -1), as
    GraphCRFModel.scores + augment; the 1/N on <w, phi> only (the loss weights c_v carry their own). Returns
    whether every score is finite (the oracles refuse NaN / inf: local_polytope.check_finite_scores)."""
    N = y.shape[0]
    finite = True
    for v in range(N):
        for k in range(K):
            s = w[k * F + F - 1]
            for j in range(indptr[v], indptr[v + 1]):
                s += vals[j] * w[k * F + cols[j]]
            tn[v, k] = s * inv + (0.0 if lab[k] == lab[y[v]] else c[v])
            finite = finite and math.isfinite(tn[v, k])
    P = Fe.shape[1]
    if P == 0:
        return finite
    du, KK = K * F, K * K
    V = np.empty((P, K, K))
    for p in range(P):
        for k in range(K):
            for m in range(K):
                a = w[du + p * KK + k * K + m]
                V[p, k, m] = 0.5 * (a + sym[p] * w[du + p * KK + m * K + k]) if sym[p] != 0 else a
    for e in range(Fe.shape[0]):
        for k in range(K):
            for m in range(K):
                s = 0.0
                for p in range(P):
                    s += Fe[e, p] * V[p, k, m]
                te[e, k, m] = s * inv
                finite = finite and math.isfinite(te[e, k, m])
    return finite


@nb.njit(cache=True)
def _features(indptr, cols, vals, Fe, edges, mu, full, K, F, sym, inv, out):
    """phi(x, mu) into ``out`` (d): the unary blocks mu_v[k] [x_v, 1] and the pairwise sums f_e[p] mu_e[k, m],
    symmetrized where ``sym[p]`` is 1, antisymmetrized where it is -1, all times 1/N (GraphCRFModel.phi). ``full``:
    mu holds the edges' marginals after the nodes'; else (compact) mu_e = mu_a mu_b (the nodes' product)."""
    out[:] = 0.0
    N = indptr.shape[0] - 1
    for v in range(N):
        for k in range(K):
            m = mu[v * K + k]
            if m == 0.0:
                continue
            base = k * F
            for j in range(indptr[v], indptr[v + 1]):
                out[base + cols[j]] += m * vals[j]
            out[base + F - 1] += m
    P = Fe.shape[1]
    du, KK, off = K * F, K * K, N * K
    for e in range(Fe.shape[0]):
        if full:
            for km in range(KK):
                m = mu[off + e * KK + km]
                if m == 0.0:
                    continue
                for p in range(P):
                    out[du + p * KK + km] += Fe[e, p] * m
        else:
            a, b = edges[e, 0] * K, edges[e, 1] * K
            for k in range(K):
                if mu[a + k] == 0.0:
                    continue
                for m in range(K):
                    q = mu[a + k] * mu[b + m]
                    if q != 0.0:
                        for p in range(P):
                            out[du + p * KK + k * K + m] += Fe[e, p] * q
    for p in range(P):
        if sym[p] != 0:
            for k in range(K):
                if sym[p] < 0:
                    out[du + p * KK + k * K + k] = 0.0            # an antisymmetric table's diagonal is 0
                for m in range(k + 1, K):
                    a, b = du + p * KK + k * K + m, du + p * KK + m * K + k
                    t = 0.5 * (out[a] + sym[p] * out[b])
                    out[a], out[b] = t, sym[p] * t
    for j in range(out.shape[0]):
        out[j] *= inv


@nb.njit(cache=True)
def _integral(y, K, out):
    """The compact labeling (GraphCRFModel's module docstring) of an integral labeling y into ``out`` (N K): 1 at
    node v's state y_v, 0 elsewhere."""
    out[:] = 0.0
    for v in range(y.shape[0]):
        out[v * K + y[v]] = 1.0


@nb.njit(cache=True)
def _loss(mu, y, c, lab, K):
    """sum_v c_v (1 - sum of mu_v[k] over the states k of y_v's label l(y_v)) (GraphCRFModel.loss)."""
    s = 0.0
    for v in range(y.shape[0]):
        right = 0.0
        for k in range(K):
            if lab[k] == lab[y[v]]:
                right += mu[v * K + k]
        s += c[v] * (1.0 - right)
    return s


class GraphCRFHost:
    def stack(self, labelings):
        return padded(labelings, -1.0, np.float64)

    def __init__(self, model: GraphCRFModel, data):
        self.K, self.F, self.d = model.K, model.F, model.d
        self.enumerate = model.inference == "enumerate"
        self.exact = model.inference == "exact"
        self.pairwise = model.P > 0
        self.sym = np.zeros(model.P, dtype=np.float64)     # 1 symmetric, -1 antisymmetric, 0 free
        self.sym[list(model.symmetric)] = 1.0
        self.sym[list(model.antisymmetric)] = -1.0
        self.lab = np.ascontiguousarray(model.state_labels, dtype=np.int64)
        import scipy.sparse as sp
        X = sp.csr_matrix(as_host(data.X))
        y, Fe = as_host(data.y).astype(np.int64), as_host(data.Fe)
        edges = as_host(data.edges_local).astype(np.int64)
        c = as_host(data.cw) if model.loss_name == "balanced" else np.repeat(as_host(data.inv_visible),
                                                                             data.node_off[1:] - data.node_off[:-1])
        if data.observed is not None and model.loss_name != "balanced":      # an unobserved node's label costs 0
            c = c * as_host(data.observed)
        inv = as_host(data.inv_size)
        no, eo = data.node_off, data.edge_off
        #: each example's node domains (GraphCRFModel.domains) where the model restricts them, else None
        self.domains = model.graph_domains(data, range(data.n)) if model.restricted else [None] * data.n
        self.ex = []
        for i in range(data.n):
            Xi = X[no[i]:no[i + 1]]
            e = np.ascontiguousarray(edges[eo[i]:eo[i + 1]])
            n = int(no[i + 1] - no[i])
            self.ex.append((Xi.indptr.astype(np.int64), Xi.indices.astype(np.int64), Xi.data.astype(np.float64),
                            y[no[i]:no[i + 1]], c[no[i]:no[i + 1]], np.ascontiguousarray(Fe[eo[i]:eo[i + 1]]), e,
                            float(inv[i]), forest_schedule(n, e) if is_forest(n, e) else None))
        self.cols = np.arange(self.d, dtype=np.int64)

    def _mu(self, i, y):
        """(the labeling as a float64 vector of its length, whether it is full) (batched ones are padded with -1;
        a compact one has no edge entries: GraphCRFModel's module docstring)."""
        ex = self.ex[i]
        nodes, E = (len(ex[0]) - 1) * self.K, len(ex[6])
        mu = y.detach().cpu().numpy() if torch.is_tensor(y) else np.asarray(y)
        full = E > 0 and len(mu) > nodes and mu[nodes] >= 0
        n = nodes + E * self.K * self.K if full else nodes
        return np.ascontiguousarray(mu[:n], dtype=np.float64), full

    def _integral(self, i, y) -> np.ndarray:
        out = np.empty(len(y) * self.K)
        _integral(y, self.K, out)
        return out

    def gt(self, i):
        return self._integral(i, self.ex[i][3])

    def features(self, i, y):
        indptr, cols, vals, _, _, Fe, edges, inv, _ = self.ex[i]
        out = np.empty(self.d)
        mu, full = self._mu(i, y)
        _features(indptr, cols, vals, Fe, edges, mu, full, self.K, self.F, self.sym, inv, out)
        return self.cols, out

    def loss(self, i, y):
        ex = self.ex[i]
        return float(_loss(self._mu(i, y)[0], ex[3], ex[4], self.lab, self.K))

    def _solve(self, tn, te, edges, forest):
        """(mu_nodes, mu_edges, integral): the model's oracle on one graph's scores (enumeration, or solve_graph's
        LP / branch and bound)."""
        return enumerate_map(tn, te, edges) if self.enumerate else solve_graph(tn, te, edges, forest, self.exact)

    def _over_domains(self, i, tn, te, edges, forest, finite):
        """(labeling, full) of the argmax over the nodes' domains (GraphCRFModel._solve's restricted case: hidden
        states, node types): the restricted problem solved as the torch model does, its marginals lifted back."""
        states = self.domains[i]
        rows = np.arange(len(states))
        tn_r, te_r = restrict(tn, te, edges, states)
        if not self.pairwise:
            return self._integral(i, states[rows, tn_r.argmax(1)]), False
        if not finite:
            check_finite_scores(tn_r, te_r)       # refuses them by name
        mu_n, mu_e, integral = self._solve(tn_r, te_r, edges, forest)
        if integral:
            return self._integral(i, states[rows, mu_n.argmax(1)]), False
        mu_n, mu_e = lift(mu_n, mu_e, edges, states, self.K)
        return np.concatenate([mu_n.ravel(), mu_e.ravel()]).astype(np.float64), True

    def corner(self, w, i):
        indptr, cols, vals, y, c, Fe, edges, inv, forest = self.ex[i]
        K = self.K
        tn, te = np.empty((len(y), K)), np.zeros((len(edges), K, K))
        finite = _scores(indptr, cols, vals, y, c, self.lab, Fe, w, K, self.F, self.sym, inv, tn, te)
        full = False                              # integral labelings compact (GraphCRFModel's module docstring)
        if self.domains[i] is not None:           # each node over its domain (oracles/node_domains.py)
            mu, full = self._over_domains(i, tn, te, edges, forest, finite)
        elif not self.pairwise:                   # the torch model's argmax per node (no LP, no check there)
            mu = self._integral(i, tn.argmax(1))
        else:
            if not finite:
                check_finite_scores(tn, te)       # refuses them by name
            if forest is not None and not self.enumerate:      # solve_graph's forest case, packed directly
                mu = self._integral(i, forest_max_sum(tn, te, edges, forest))
            else:
                mu_n, mu_e, integral = self._solve(tn, te, edges, forest)
                full = not integral
                mu = (np.concatenate([mu_n.ravel(), mu_e.ravel()]) if full else
                      self._integral(i, mu_n.argmax(1))).astype(np.float64)
        out = np.empty(self.d)
        _features(indptr, cols, vals, Fe, edges, mu, full, K, self.F, self.sym, inv, out)
        return mu, self.cols, out, float(_loss(mu, y, c, self.lab, K))
