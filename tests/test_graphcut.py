"""Graph-cut segmentation (App. I.3): the max-flow oracle against exhaustive enumeration on graphs
of <= 12 nodes, the class-balanced loss, the seeded generator, w_pairwise >= 0 throughout every
solver variant, the duality gap against an independent computation, and pairwise vs unaries."""
import itertools

import numpy as np
import pytest
import torch

from conftest import CheckedBox
from ssvm_torch import SSVMInputError, Solver, SolverConfig
from ssvm_torch.data import GraphData, GraphExample
from ssvm_torch.data.segmentation_synth import make_segmentation_synth
from ssvm_torch.models import GraphCutModel
from ssvm_torch.stores import BoxedDual, make_store


def graph_model(graphs, pairwise=True):
    data = GraphData(graphs)
    return GraphCutModel.for_data(data, pairwise), data


def random_graph(rng, N, F=3, P=2):
    pairs = np.array(list(itertools.combinations(range(N), 2)))
    keep = rng.uniform(size=len(pairs)) < 0.4
    edges = pairs[keep] if keep.any() else pairs[:1]
    y = rng.integers(0, 2, size=N)
    return GraphExample(X=rng.normal(size=(N, F)), edges=edges, edge_features=rng.uniform(size=(len(edges), P)), y=y)


def brute_force(model, data, w, i, augment):
    """max over all 2^N labelings of <w, phi(x_i, y)> (+ L_i(y)), by enumeration."""
    N = int(data.sizes[i])
    Y = torch.tensor(list(itertools.product((0, 1), repeat=N)))
    idx = torch.full((len(Y),), i)
    vals = model.phi(data, idx, Y) @ w + (model.loss(data, idx, Y) if augment else 0.0)
    return float(vals.max())


def phi_gt(model, data, i):
    return model.phi(data, [i], model.gt_batch(data, [i]))[0]


@pytest.mark.parametrize("seed", range(4))
def test_graphcut_oracle_equals_enumeration(seed):
    rng = np.random.default_rng(seed)
    graphs = [random_graph(rng, int(rng.integers(2, 13))) for _ in range(6)]
    m, data = graph_model(graphs)
    w = torch.tensor(rng.normal(size=m.d) * 3)
    w[m.pairwise_index] = torch.tensor(rng.uniform(0, 4, size=m.P))
    idx = torch.arange(data.n)
    labels, H = m.oracle(w, data, idx)                               # one cut for the whole batch
    plain = m.predict(w, data, idx)
    for i in range(data.n):
        best_aug = brute_force(m, data, w, i, augment=True)
        gt_score = float(phi_gt(m, data, i) @ w)
        assert float(H[i]) == pytest.approx(best_aug - gt_score, abs=1e-10)
        one = torch.tensor([i])
        got = float(m.phi(data, one, labels[i:i + 1]) @ w + m.loss(data, one, labels[i:i + 1]))
        assert got == pytest.approx(best_aug, abs=1e-10)
        got = float(m.phi(data, one, plain[i:i + 1]) @ w)
        assert got == pytest.approx(brute_force(m, data, w, i, augment=False), abs=1e-10)
        assert bool((labels[i, int(data.sizes[i]):] == -1).all())      # padding past N_i
        _, H1 = m.oracle(w, data, one)                                # batch of one = same optimum value
        assert float(H1[0]) == pytest.approx(float(H[i]), abs=1e-10)


def test_class_balanced_loss():
    g = GraphExample(X=np.zeros((5, 1)), edges=np.array([[0, 1]]), edge_features=np.ones((1, 1)),
                     y=np.array([1, 0, 0, 0, 0]))
    m, data = graph_model([g])
    idx = torch.tensor([0])
    assert float(m.loss(data, idx, torch.tensor([[0, 1, 1, 1, 1]]))) == pytest.approx(1.0)
    assert float(m.loss(data, idx, torch.tensor([[0, 0, 0, 0, 0]]))) == pytest.approx(0.5)     # the lone fg node
    assert float(m.loss(data, idx, torch.tensor([[1, 1, 0, 0, 0]]))) == pytest.approx(0.125)   # one of 4 bg nodes
    assert float(m.loss(data, idx, torch.tensor([[1, 0, 0, 0, 0]]))) == 0.0


def test_bad_graph_input():
    rng = np.random.default_rng(0)
    g = random_graph(rng, 5)
    bad = GraphExample(g.X, g.edges, -g.edge_features - 1, g.y)
    signed = GraphData([g, bad])                 # a container of any model: the cut's own check refuses it
    with pytest.raises(SSVMInputError, match=r"data.graphs\[1\].edge_features: expected values >= 0"):
        make_store(GraphCutModel.for_data(signed), signed, 0.1)
    nan = GraphExample(g.X, g.edges, g.edge_features * np.nan, g.y)
    with pytest.raises(SSVMInputError, match=r"graphs\[1\].edge_features"):
        GraphData([g, nan])
    with pytest.raises(SSVMInputError, match=r"data.n_states"):
        make_store(GraphCutModel.for_data(signed), GraphData([g], n_states=3), 0.1)
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].edges"):
        GraphData([GraphExample(g.X, g.edges + 10, g.edge_features, g.y)])
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].y"):
        GraphData([GraphExample(g.X, g.edges, g.edge_features, g.y + 2)])
    m, data = graph_model([g])
    w = torch.zeros(m.d)
    w[-1] = -0.5
    with pytest.raises(SSVMInputError, match="pairwise .* must be >= 0"):
        m.oracle(w, data, torch.tensor([0]))
    with pytest.raises(SSVMInputError, match="data.X"):
        make_store(GraphCutModel(7, 2), data, 0.1)


def test_generator_is_seeded_and_prefix_stable():
    a_tr, a_te = make_segmentation_synth(5, 3, seed=1)
    b_tr, _ = make_segmentation_synth(8, 1, seed=1)
    c_tr, _ = make_segmentation_synth(5, 3, seed=2)
    for ga, gb in zip(a_tr, b_tr):
        assert np.array_equal(ga.X, gb.X) and np.array_equal(ga.edges, gb.edges) and np.array_equal(ga.y, gb.y)
    assert not np.array_equal(a_tr[0].y, c_tr[0].y) or not np.allclose(a_tr[0].X, c_tr[0].X)
    for g in a_tr + a_te:
        assert 60 <= len(g.y) <= 140 and 0 < g.y.mean() < 1
        assert (g.edge_features >= 0).all() and g.edges.shape[0] >= 2 * len(g.y)   # planar triangulation
    GraphData(a_tr)                                                                # passes the input checks


@pytest.mark.parametrize("solver,sampling,step,cache", [
    ("bcfw", "gap", "fw", False), ("bcfw", "uniform", "pairwise", True), ("bcfw", "perm", "away", False),
    ("bcfw", "gap", "best", True), ("fw", "uniform", "fw", False), ("ssg", "uniform", "fw", False)])
def test_pairwise_weights_stay_nonnegative(solver, sampling, step, cache):
    train, _ = make_segmentation_synth(12, 1, seed=3)
    m, data = graph_model(train)
    d = CheckedBox(make_store(m, data, 1e-2), m.pairwise_index, lower=0.0)
    hist = Solver(d, SolverConfig(solver=solver, sampling=sampling, step=step, cache=cache, passes=6,
                                  gap_check=2)).run()
    assert d.checks >= (3 if solver == "fw" else hist[-1]["steps"] // 2)   # most steps move the block
    assert bool((d.w[m.pairwise_index] >= 0).all())
    if solver != "ssg":
        assert hist[-1]["gap"] < hist[0]["gap"]


def test_box_gap_equals_independent_primal_minus_dual():
    rng = np.random.default_rng(5)
    graphs = [random_graph(rng, int(rng.integers(3, 9))) for _ in range(8)]
    m, data = graph_model(graphs)
    lam = 0.05
    d = make_store(m, data, lam, nonnegative=m.pairwise_index)
    hist = Solver(d, SolverConfig(solver="bcfw", sampling="gap", step="best", cache=True, passes=15,
                                  gap_check=5, seed=1)).run()
    # independent: v from the stored blocks, w = clip(v), H_i by enumeration, App. H dual
    v = d.inner.W_blocks.sum(0)
    w = v.clone()
    w[m.pairwise_index] = w[m.pairwise_index].clamp(min=0)
    assert torch.allclose(w, d.w, atol=1e-12)
    H = [brute_force(m, data, w, i, augment=True) - float(phi_gt(m, data, i) @ w) for i in range(data.n)]
    primal = lam / 2 * float(w @ w) + float(np.mean(H))
    ell = float(d.inner.ell_i.sum())
    dual = ell - lam * float(w @ v) + lam / 2 * float(w @ w)
    assert hist[-1]["primal"] == pytest.approx(primal, abs=1e-10)
    assert hist[-1]["dual"] == pytest.approx(dual, abs=1e-10)
    assert hist[-1]["gap"] == pytest.approx(primal - dual, abs=1e-10) and hist[-1]["gap"] >= -1e-12


def test_learned_pairwise_beats_unaries_alone():
    train, test = make_segmentation_synth(60, 60, seed=0)
    errs = {}
    for pairwise in (False, True):
        m, data = graph_model(train, pairwise)
        d = make_store(m, data, 1e-3, nonnegative=m.pairwise_index if pairwise else None)
        assert isinstance(d, BoxedDual) == pairwise
        Solver(d, SolverConfig(solver="bcfw", sampling="gap", passes=15, gap_check=5)).run()
        errs[pairwise] = m.metrics(d.w, GraphData(test))["error"]
    assert errs[True] < 0.75 * errs[False], errs
