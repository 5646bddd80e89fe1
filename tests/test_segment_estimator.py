"""The scikit-learn estimator of segmentations (ssvm_torch/segment_estimator.py): fit / predict / score on
CoNLL-2000 chunk tags against seqeval, the same fit from arrays as from the task's ChainData, scikit-learn's
parameter protocol, and bad input refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from seqeval.metrics import f1_score

from ssvm_torch import SegmentSSVM, SSVMInputError
from ssvm_torch.data.conll import load_conll2000
from ssvm_torch.data.segments import chunk_segments
from ssvm_torch.segment_estimator import chunk_f1

POS = "p[-1] p[0] p[1] p[-1]|p[0] p[0]|p[1]"          # POS attributes only: dense arrays stay small


@pytest.fixture(scope="module")
def conll():
    train, test = load_conll2000(200, POS, 1, None, tags="bio")

    def arrays(d, n):
        X = d.X.to_dense() if d.is_sparse else d.X
        off = d.offsets.tolist()
        return [X[off[i]:off[i + 1]].numpy() for i in range(n)], [list(t) for t in d.meta["tags"][:n]]
    return train, arrays(train, train.n), arrays(test, 300)


def test_fit_predict_and_score_are_conlleval_chunk_f1(conll):
    _, (X, tags), (Xt, tags_t) = conll
    est = SegmentSSVM(lam=1e-2, passes=6, gap_check=3).fit(X, tags)
    assert est.labels_[0] == "O" and set(est.labels_[1:]) == {t[2:] for s in tags for t in s if t != "O"}
    assert est.gap_ < est.history_[0]["gap"]
    pred = est.predict(Xt)
    assert [len(p) for p in pred] == [len(t) for t in tags_t]
    assert est.score(Xt, tags_t) == pytest.approx(f1_score(tags_t, pred), abs=1e-12)
    assert 0.7 < est.score(Xt, tags_t) < 1.0                    # POS tags alone chunk most of WSJ
    loss = est.loss(Xt, tags_t)
    wrong = [np.mean([p != g for p, g in zip(ps, gs)]) for ps, gs in zip(pred, tags_t)]
    assert loss.shape == (300,) and ((loss >= 0) & (loss <= 1)).all()
    assert np.all((loss == 0) == (np.array(wrong) == 0))        # zero loss exactly where the tags agree


def test_arrays_and_the_tasks_chaindata_give_the_same_fit(conll):
    train, (X, tags), _ = conll
    a = SegmentSSVM(lam=1e-2, passes=4, gap_check=2, seed=3).fit(X, tags)
    data = chunk_segments(train, a.labels_)
    b = SegmentSSVM(lam=1e-2, passes=4, gap_check=2, seed=3).fit(data)
    assert torch.allclose(a.coef_, b.coef_, atol=1e-10)
    assert b.score(data) == pytest.approx(a.score(X, tags), abs=1e-12)


def test_parameters_follow_scikit_learn(conll):
    from sklearn.base import clone
    est = SegmentSSVM(lam=0.1, max_length=4, task_loss="hamming", scheme="BIOES")
    params = est.get_params()
    assert params["max_length"] == 4 and params["task_loss"] == "hamming" and params["scheme"] == "BIOES"
    assert clone(est).get_params() == params
    _, (X, tags), _ = conll
    short = SegmentSSVM(lam=1e-2, passes=2, gap_check=2, max_length=3)
    with pytest.raises(SSVMInputError, match=r"max_length: expected at least the longest gold segment, \d+ "
                       r"positions \(sequence \d+, from position \d+\), got 3"):     # a longer gold chunk: refused
        short.fit(X, tags)


def test_bad_input_is_refused_by_name(conll):
    _, (X, tags), _ = conll
    est = SegmentSSVM(lam=1e-2, passes=2, gap_check=2)
    with pytest.raises(SSVMInputError, match=r"Y\[1\]: expected \d+ tags"):
        est.fit(X[:3], [tags[0], tags[1][:-1], tags[2]])
    with pytest.raises(SSVMInputError, match="expected 'O' or a BIO tag such as 'B-NP', got 'NP'"):
        est.fit(X[:2], [tags[0], ["NP"] * len(tags[1])])
    with pytest.raises(SSVMInputError, match=r"Y\[1\]\[2\]: expected a chunk tag string .* got 7"):
        est.fit(X[:2], [tags[0], tags[1][:2] + [7] + tags[1][3:]])
    est.fit(X[:20], tags[:20])
    with pytest.raises(SSVMInputError, match=r"X\[0\]: expected \d+ features"):
        est.predict([X[0][:, :5]])
    # NumPy arrays of tags (what a scikit-learn pipeline hands on) read as the lists
    arrays = SegmentSSVM(lam=1e-2, passes=2, gap_check=2).fit(X[:20], [np.array(t) for t in tags[:20]])
    assert torch.equal(arrays.coef_, est.coef_)
    assert arrays.score(X[:20], [np.array(t) for t in tags[:20]]) == est.score(X[:20], tags[:20])


def test_chunk_f1_is_seqevals_with_unseen_types():
    rng = np.random.default_rng(0)
    types = ["NP", "VP", "PP"]
    gold, pred = [], []
    for _ in range(40):
        T = int(rng.integers(1, 12))
        g = [str(rng.choice(["O", *(f"{p}-{k}" for p in "BI" for k in types)])) for _ in range(T)]
        p = [t if rng.random() < 0.7 else str(rng.choice(["O", "B-NP", "I-VP", "B-XYZ"])) for t in g]
        gold.append(g)
        pred.append(p)
    assert chunk_f1(pred, gold) == pytest.approx(f1_score(gold, pred), abs=1e-12)
