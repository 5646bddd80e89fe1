"""The latent SSVM's scikit-learn estimators (ssvm_torch/latent_estimator.py): ``LatentChainSSVM`` is
``train_latent`` on the partly labeled data it builds (w bit for bit), with every label known and one CCCP step it
is ``ChainSSVM`` bit for bit; ``LatentSegmentSSVM`` likewise against ``SegmentSSVM``; the transduction keeps every
observed label and is the constrained argmax at coef_; scikit-learn's clone works; refusals name the field; and on
real OCR words with half the letters unlabeled CCCP descends and completes the hidden letters."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import ChainSSVM, LatentChainSSVM, LatentSegmentSSVM, SegmentSSVM
from ssvm_torch.data.types import ChainData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import complete, train_latent
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.solvers import SolverConfig

SOLVER = dict(passes=12, gap_check=4, step="pairwise", cache=True, seed=2)


def _sequences(seed=0, n=12, K=3, F=4, tags=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(int(t), F)) for t in rng.integers(1, 6, size=n)]
    ys = [np.array([tags[k] for k in rng.integers(0, K, size=len(x))], dtype=object) for x in xs]
    return xs, ys


def _hide(ys, fraction, seed, missing):
    rng = np.random.default_rng(seed)
    out = []
    for y in ys:
        y = y.copy()
        y[rng.random(len(y)) < fraction] = missing
        out.append(y)
    return out


def test_the_chain_estimator_is_train_latent_on_its_data():
    xs, ys = _sequences()
    part = _hide(ys, 0.4, 1, None)
    est = LatentChainSSVM(lam=0.05, missing=None, max_outer=4, **SOLVER).fit(xs, part)
    # the same problem built by hand: labels as indices of the sorted observed tags, None unobserved
    classes = np.array(["a", "b", "c"], dtype=object)
    seen = np.concatenate([np.array([v is not None for v in y]) for y in part])
    codes = [np.array([0 if v is None else int(np.searchsorted(classes, v)) for v in y]) for y in part]
    base = ChainData.from_sequences(xs, codes, 3)
    data = ChainData(base.X, base.Y, base.offsets, 3, base.name, observed=torch.from_numpy(seen))
    model = ChainModel.for_data(data)
    w, records = train_latent(model, data, 0.05, SolverConfig(**SOLVER), max_outer=4)
    assert torch.equal(est.coef_, w) and est.objective_ == records[-1]["objective"]
    assert [r["objective"] for r in est.latent_history_] == [r["objective"] for r in records]
    assert est.n_iter_ == sum(r["accepted"] for r in records[1:]) >= 1
    completed = complete(model, w, data).numpy()
    flat = np.concatenate(est.transduction_)
    assert list(flat) == list(classes[completed])
    assert all(t == y for t, y in zip(flat[seen], np.concatenate(part)[seen]))   # the observed labels kept
    assert [len(t) for t in est.transduction_] == [len(x) for x in xs]
    assert list(est.classes_) == ["a", "b", "c"]
    pred = est.predict(xs)
    assert [len(p) for p in pred] == [len(x) for x in xs] and set(np.concatenate(pred)) <= {"a", "b", "c"}
    assert 0.0 <= est.score(xs, ys) <= 1.0


def test_every_label_known_and_one_step_is_the_supervised_chain_estimator():
    xs, ys = _sequences(3)
    codes = [np.searchsorted(["a", "b", "c"], y.astype(str)) for y in ys]
    est = LatentChainSSVM(lam=0.05, max_outer=1, **SOLVER).fit(xs, codes)
    ref = ChainSSVM(lam=0.05, **SOLVER).fit(xs, codes)
    assert torch.equal(est.coef_, ref.coef_)
    assert all(np.array_equal(t, c) for t, c in zip(est.transduction_, codes))    # the completion is the gold


def test_missing_markers_minus_one_nan_and_a_string():
    xs, ys = _sequences(4)
    ints = [np.searchsorted(["a", "b", "c"], y.astype(str)) for y in ys]
    a = LatentChainSSVM(lam=0.05, max_outer=2, **SOLVER).fit(xs, _hide(ints, 0.3, 5, -1))
    floats = [y.astype(float) for y in _hide(ints, 0.3, 5, -1)]
    for y in floats:
        y[y == -1] = np.nan
    b = LatentChainSSVM(lam=0.05, max_outer=2, missing=float("nan"), **SOLVER).fit(xs, floats)
    c = LatentChainSSVM(lam=0.05, max_outer=2, missing="?", **SOLVER).fit(
        xs, [np.array(["?" if v == -1 else "abc"[v] for v in y], dtype=object) for y in _hide(ints, 0.3, 5, -1)])
    assert torch.equal(a.coef_, b.coef_) and torch.equal(a.coef_, c.coef_)
    assert list(a.classes_) == [0, 1, 2] and list(c.classes_) == ["a", "b", "c"]


def test_clone_and_refusals_name_the_field():
    from sklearn.base import clone
    est = LatentChainSSVM(lam=0.1, missing=None, max_outer=3, start="zeros")
    assert clone(est).get_params() == est.get_params()
    xs, ys = _sequences(5)
    part = _hide(ys, 0.5, 6, None)
    for params, text in [(dict(warm_start=True), "warm_start: the latent SSVM expects False"),
                         (dict(averaging=True), "averaging: the latent SSVM expects False"),
                         (dict(device="cuda"), "device: the latent SSVM expects 'cpu'"),
                         (dict(dtype="float32"), "dtype: the latent SSVM expects 'float64'"),
                         (dict(kernels="torch"), "kernels: the latent SSVM expects"),
                         (dict(max_outer=0), "max_outer: expected an int >= 1"),
                         (dict(tol=-1.0), "tol: expected a finite number >= 0"),
                         (dict(start="letters"), "start: expected 'auto', 'zeros' or an array"),
                         (dict(start=np.zeros(3)), "start: expected an array of d = "),
                         (dict(start=np.full(30, np.nan)), "start: expected finite weights, got 30 NaN")]:
        with pytest.raises(SSVMInputError, match=text):
            LatentChainSSVM(lam=0.1, missing=None, **params).fit(xs, part)
    with pytest.raises(SSVMInputError, match="Y: expected at least one observed label, got every label is None"):
        LatentChainSSVM(missing=None).fit(xs, [np.array([None] * len(x), dtype=object) for x in xs])
    with pytest.raises(SSVMInputError, match=r"Y\[0\]: expected \("):
        LatentChainSSVM(missing=None).fit(xs, [y[:-1] for y in part])


def test_score_and_loss_refuse_the_missing_marker():
    """A loss reads every label: an unlabeled position would count as an error, so Y with the marker is refused
    by name (the full labels score as ChainSSVM's)."""
    xs, ys = _sequences(7)
    for missing in (-1, None):
        part = _hide(ys, 0.5, 8, missing)
        est = LatentChainSSVM(lam=0.1, missing=missing, max_outer=1, **SOLVER).fit(xs, part)
        first = next(i for i, y in enumerate(part) if any(v is missing or v == missing for v in y))
        for call in (est.score, est.loss):
            with pytest.raises(SSVMInputError, match=rf"Y\[{first}\]: expected every label .* not the missing marker"):
                call(xs, part)
        assert 0.0 <= est.score(xs, ys) <= 1.0


def _tagged(seed=0, n=10, F=4):
    rng = np.random.default_rng(seed)
    xs, tags = [], []
    for _ in range(n):
        T = int(rng.integers(1, 7))
        row, t = [], 0
        while t < T:
            kind = rng.choice(["O", "NP", "VP"])
            width = 1 if kind == "O" else int(rng.integers(1, min(3, T - t) + 1))
            row += ["O"] if kind == "O" else [f"B-{kind}"] + [f"I-{kind}"] * (width - 1)
            t += width
        tags.append(row)
        xs.append(rng.normal(size=(T, F)))
    return xs, tags


def test_every_tag_known_and_one_step_is_the_supervised_segment_estimator():
    xs, tags = _tagged(1)
    est = LatentSegmentSSVM(lam=0.05, max_outer=1, max_length=3, **SOLVER).fit(xs, tags)
    ref = SegmentSSVM(lam=0.05, max_length=3, **SOLVER).fit(xs, tags)
    assert torch.equal(est.coef_, ref.coef_) and est.labels_ == ref.labels_
    assert est.transduction_ == tags                 # every tag known: the completion is the gold


def test_segment_transduction_keeps_every_known_tag_and_descends():
    xs, tags = _tagged(2, n=16)
    rng = np.random.default_rng(3)
    part = [[None if rng.random() < 0.4 else t for t in row] for row in tags]
    est = LatentSegmentSSVM(lam=0.05, max_outer=4, max_length=3, **SOLVER).fit(xs, part)
    objectives = [r["objective"] for r in est.latent_history_]
    assert all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert [len(t) for t in est.transduction_] == [len(x) for x in xs]
    # every known tag kept (valid BIO: an I- tag follows its chunk's B- / I- tag or an unknown one)
    assert all(got == known for row, done in zip(part, est.transduction_) for known, got in zip(row, done)
               if known is not None)
    assert est.transduction_ != tags                 # the unknown ones completed, not all as the gold
    assert 0.0 <= est.score(xs, tags) <= 1.0
    with pytest.raises(SSVMInputError, match="scheme: expected 'BIO' for LatentSegmentSSVM"):
        LatentSegmentSSVM(scheme="BIOES").fit(xs, part)
    with pytest.raises(SSVMInputError, match=r"Y\[0\]\[0\]: expected a chunk tag string"):
        LatentSegmentSSVM().fit(xs, [[3] + row[1:] for row in part])


def test_the_longest_known_chunk_bounds_segments_when_max_length_is_none():
    """max_length None: the longest chunk the known tags require, an I- tag after an unknown one counting the
    position before it; the default estimator then fits partly tagged sentences (it refused every one)."""
    from ssvm_torch.latent_estimator import longest_known_chunk
    assert longest_known_chunk([["O", None, "O"]]) == 1
    assert longest_known_chunk([["B-NP", "I-NP", "I-NP", "O"]]) == 3
    assert longest_known_chunk([[None, "I-NP", None]]) == 2                 # position 0 is inside the chunk
    assert longest_known_chunk([[None, "I-NP", "I-NP"], ["B-VP", None, "I-VP"]]) == 3
    assert longest_known_chunk([["B-NP", "I-VP", "I-VP"]]) == 2               # a new chunk at I-VP (conlleval)
    xs, tags = _tagged(2, n=16)
    rng = np.random.default_rng(3)
    part = [[None if rng.random() < 0.4 else t for t in row] for row in tags]
    est = LatentSegmentSSVM(lam=0.05, max_outer=2, **SOLVER).fit(xs, part)
    assert est.max_length_ == longest_known_chunk(part) and est.model_.L == est.max_length_
    assert all(got == known for row, done in zip(part, est.transduction_) for known, got in zip(row, done)
               if known is not None)
    assert LatentSegmentSSVM(lam=0.05, max_outer=1, max_length=5, **SOLVER).fit(xs, part).max_length_ == 5


def test_ocr_words_with_half_the_letters_unlabeled(ocr_small):
    train, test = ocr_small
    sub = train.subset(range(120))
    off, X, Y = sub.offsets.tolist(), sub.X.numpy(), sub.Y.numpy()
    xs = [X[a:b] for a, b in zip(off, off[1:])]
    ys = [Y[a:b] for a, b in zip(off, off[1:])]
    part = _hide(ys, 0.5, 7, -1)
    est = LatentChainSSVM(lam=0.01, passes=20, max_outer=4, n_states=26).fit(xs, part)
    objectives = [r["objective"] for r in est.latent_history_]
    assert objectives[-1] < objectives[0] and all(b <= a for a, b in zip(objectives, objectives[1:]))
    hidden = np.concatenate([p == -1 for p in part])
    right = np.concatenate(est.transduction_) == np.concatenate(ys)
    assert right[~hidden].all() and right[hidden].mean() > 0.5      # 26 letters: chance is 0.04


def test_supervised_estimators_refuse_unobserved_labels():
    """A container with unobserved labels given to a supervised estimator is refused by name (its fit would read
    the placeholder labels as gold): the latent estimators train it."""
    from ssvm_torch import GraphSSVM
    from ssvm_torch.data.examples import GraphData, GraphExample
    from ssvm_torch.latent import hide_labels
    from ssvm_torch.tasks import load_task
    chains = hide_labels(load_task("ocr-small").train.subset(torch.arange(10)), 0.5, 0)
    rng = np.random.default_rng(0)
    graphs = GraphData([GraphExample(rng.standard_normal((4, 2)), np.array([[0, 1], [1, 2]]), np.ones((2, 1)),
                                     np.array([0, 1, 1, 0]), np.array([True, False, True, True]))])
    for est, data in ((ChainSSVM(passes=2), chains), (GraphSSVM(passes=2), graphs)):
        with pytest.raises(SSVMInputError, match="latent SSVM"):
            est.fit(data)
