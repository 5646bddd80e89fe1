"""The constituency SSVM (models/constituency.py, stores/spans.py, data/span_data.py) beyond the conformance suite
(tests/test_conformance.py runs its brute-force checks on tiny random instances): refusals of bad data by name, the
featurization and the phrase structures of dependency trees, and on real UD English-EWT sentences the store's gap
against an independent primal - dual and the bracket F1 against a count over span sets."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_span_data
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.data.span_data import JOIN, SpanData, fencepost_items, gold_spans
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.models import ConstituencyModel
from ssvm_torch.spans import debinarize, spans_of_chart
from ssvm_torch.tasks import load_task


def _data(spans, lengths=(2,), labels=2, F=3):
    lengths = torch.tensor(lengths)
    P = int(lengths.sum()) + len(lengths)
    return SpanData(torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0)), torch.arange(P + 1),
                    torch.zeros(P, dtype=torch.int64), torch.tensor(spans, dtype=torch.int64).reshape(-1, 3), F, labels)


def test_a_tree_is_refused_by_name_with_what_is_wrong():
    _data([(0, 1, 0), (0, 2, 1), (1, 2, 0)])                             # a binary tree over two words
    cases = {"not 0 <= i < j <= n": [(0, 1, 0), (0, 3, 1), (1, 2, 0)],
             r"label in \[0, 2\)": [(0, 1, 0), (0, 2, 2), (1, 2, 0)],
             "a one-word span or the whole sentence missing": [(0, 1, 0), (0, 2, 1), (0, 2, 0)],
             r"2 n_i - 1 spans": [(0, 1, 0), (0, 2, 1)]}
    for message, spans in cases.items():
        with pytest.raises(SSVMInputError, match=message):
            _data(spans)
    with pytest.raises(SSVMInputError, match="fidx: expected feature ids in"):
        SpanData(torch.tensor([0, 2]), torch.arange(4), torch.tensor([0, 1, 5]), torch.tensor(
            [(0, 1, 0), (0, 2, 1), (1, 2, 0)]), 3, 2)
    with pytest.raises(SSVMInputError, match="fptr"):
        SpanData(torch.tensor([0, 2]), torch.arange(3), torch.tensor([0, 1]), torch.tensor(
            [(0, 1, 0), (0, 2, 1), (1, 2, 0)]), 3, 2)
    model = ConstituencyModel(3, 2)
    with pytest.raises(SSVMInputError, match="data.n_labels"):
        model.check_data(_data([(0, 1, 0), (0, 2, 1), (1, 2, 0)], labels=3))
    with pytest.raises(SSVMInputError, match="fill"):
        ConstituencyModel(3, 2, fill=2)


def test_fencepost_features_read_the_words_around_each_fencepost():
    items = fencepost_items(["The", "dog"], ["DET", "NOUN"])
    assert len(items) == 3
    assert items[0] == ["bias", "lw=<s>", "rw=the", "lp=<s>", "rp=DET", "lp,rp=<s>,DET", "ls=<s>", "rs=the",
                        "llp,lp=<s2>,<s>", "rp,rrp=DET,NOUN", "lw,rp=<s>,DET", "lp,rw=<s>,the", "llw=<s2>", "rrw=dog",
                        "llp,lp,rp=<s2>,<s>,DET", "lp,rp,rrp=<s>,DET,NOUN", "lw,rw=<s>,the"]
    assert "lw=the" in items[1] and "rw=dog" in items[1] and "rs=dog" in items[1] and "lw,rw=the,dog" in items[1]
    assert "rp,rrp=</s>,</s2>" in items[2] and "lp,rp=NOUN,</s>" in items[2] and "rrw=</s2>" in items[2]


def test_phrase_structures_of_dependency_trees():
    labels = {t: k for k, t in enumerate([JOIN, "DET", "NOUN", "VERB"])}
    # "the dog barks": the -> dog -> barks -> root: (0, 2) NOUN, (0, 3) VERB; binarized, the leaves joined by 0
    spans = gold_spans([2, 3, 0], ["DET", "NOUN", "VERB"], labels)
    assert spans == [(0, 1, 0), (0, 2, 2), (0, 3, 3), (1, 2, 0), (2, 3, 0)]
    # 3 -> 1 and 4 -> 2 cross: word 4's subtree {2, 4} is not contiguous, there is no phrase structure
    assert gold_spans([3, 4, 0, 3], ["DET"] * 4, labels) is None


def test_subset_keeps_each_sentence_its_features_and_tree():
    data = random_span_data(np.random.default_rng(0), 6, 9, 3, lmin=1, lmax=5)
    idx = [4, 1, 5]
    sub = data.subset(idx)
    assert torch.equal(sub.lengths, data.lengths[idx])
    for b, i in enumerate(idx):
        n = int(data.lengths[i])
        assert torch.equal(sub.charts([b], n + 1), data.charts([i], n + 1))
        fo, so = data.fence_offsets, sub.fence_offsets
        for k in range(n + 1):
            a = data.fidx[data.fptr[fo[i] + k]:data.fptr[fo[i] + k + 1]]
            c = sub.fidx[sub.fptr[so[b] + k]:sub.fptr[so[b] + k + 1]]
            assert torch.equal(a, c)


@pytest.fixture(scope="module")
def ewt():
    return load_task("ud-ewt-spans", train_size=60)


def test_ewt_gap_is_an_independent_primal_minus_dual(ewt):
    """On real sentences: the store's exact gap after BCFW with gap sampling equals lam/2 |w|^2 + mean H_i - dual with
    H_i from the model's own loss-augmented decoding and dense feature map (no store state)."""
    model, train = ewt.model, ewt.train
    lam = 1.0 / train.n
    store = make_store(model, train, lam)
    hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=3, seed=0)).run()
    w = store.w.clone()
    idx = torch.arange(train.n)
    labels, H = model.oracle(w, train, idx)
    primal = lam / 2 * float(w @ w) + float(H.mean())
    dual = store.ell - lam / 2 * float(w @ w)
    last = hist[-1]                        # the iterate's values (the record's model may be an earlier check's)
    assert last.get("primal_last", last["primal"]) == pytest.approx(primal, rel=1e-9)
    assert last.get("gap_last", last["gap"]) == pytest.approx(primal - dual, rel=1e-9, abs=1e-9)
    assert hist[0]["gap"] > 1.5 * last["gap"] > 0
    # the loss of every labeling: its spans off the gold tree (Hamming count)
    gold = train.charts(idx, labels.shape[1])
    wrong = ((labels >= 0) & (labels != gold)).flatten(1).sum(1).double()
    assert torch.equal(model.loss(train, idx, labels), wrong)


def test_ewt_bracket_f1_is_the_count_over_span_sets(ewt):
    model, test = ewt.model, ewt.test.subset(range(80))
    store = make_store(model, ewt.train, 1.0 / ewt.train.n)
    Solver(store, SolverConfig(solver="bcfw", sampling="perm", passes=3, gap_check=3, seed=1)).run()
    got = model.metrics(store.w, test)
    matched = predicted = golden = exact = 0
    for idx, charts in model.predict_charts(store.w, test):
        for i, row in zip(idx.tolist(), spans_of_chart(charts)):
            pred = {s for s in debinarize(row, 0) if s[1] - s[0] > 1}
            gold = {s for s in debinarize(spans_of_chart(test.charts([i]))[0], 0) if s[1] - s[0] > 1}
            matched, predicted, golden = matched + len(pred & gold), predicted + len(pred), golden + len(gold)
            exact += set(debinarize(row, 0)) == set(debinarize(spans_of_chart(test.charts([i]))[0], 0))
    p, r = matched / predicted, matched / golden
    assert got["f1"] == pytest.approx(100 * 2 * p * r / (p + r), abs=1e-9)
    assert got["exact"] == pytest.approx(exact / test.n)
    assert got["error"] == pytest.approx(1 - got["f1"] / 100)
    assert 20 < got["f1"] < 100                                         # three passes learn something


def test_ewt_task_options_and_layout(ewt):
    assert ewt.layout["sentences"]["train"][0] <= 60 and ewt.layout["n_labels"] == 18
    assert ewt.train.meta["label_names"][0] == JOIN
    with pytest.raises(SSVMInputError, match="features"):
        load_task("ud-ewt-spans", train_size=5, features="rich")
    with pytest.raises(SSVMInputError, match="heldout"):
        load_task("ud-ewt-spans", train_size=5, heldout=0.1)
    normalized = load_task("ud-ewt-spans", train_size=5, loss="normalized")
    assert normalized.model.loss_name == "normalized"
    one = torch.tensor([0])
    n = int(normalized.train.lengths[0])
    costs = normalized.model.costs(normalized.train.lengths[one])
    assert float(costs[0]) == pytest.approx(1.0 / (2 * n - 1))


@pytest.mark.long
def test_ssvm_train_on_ud_ewt_spans_writes_the_test_trees(tmp_path, capsys):
    import json
    from ssvm_torch.cli.train import main as train_main
    from ssvm_torch.outputs import load_model
    out = tmp_path / "run"
    assert train_main(["--dataset", "ud-ewt-spans", "--train-size", "100", "--passes", "2", "--gap-check", "1",
                       "--lam", "0.01", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "test labeled bracket F1" in printed and "(gap sampling)" in printed
    hist = json.loads((out / "history.json").read_text())
    last = hist["records"][-1] if isinstance(hist, dict) else hist[-1]
    assert 0.0 < last["test_f1"] <= last["test_unlabeled_f1"] <= 100.0 and last["gap"] >= 0
    assert last["test_error"] == pytest.approx(1 - last["test_f1"] / 100)
    pred = json.loads((out / "test_predictions.json").read_text())
    assert pred["split"] == "ud-ewt-spans-test" and len(pred["spans"]) == 2051 == len(pred["sent_ids"])
    assert pred["labels"][0] == JOIN and all(0 < s[2] < 18 for row in pred["spans"] for s in row)
    # the predictions are the trees of the saved weights
    problem = load_task("ud-ewt-spans", train_size=100)
    w = load_model(out / "model.pt")["w"]
    idx, charts = next(iter(problem.model.predict_charts(w, problem.test)))
    i = int(idx[0])
    assert [list(s) for s in debinarize(spans_of_chart(charts[:1])[0], 0)] == pred["spans"][i]


def test_path_primitives_against_brute_force_and_a_certified_path():
    """block_wdots, max_margins and rescale (the regularization path's primitives, Alg. 6-7 of Osokin et al. 2016)
    against dense block vectors and enumeration; then an eps-path whose certificate holds at random lambdas."""
    from conftest import all_labeled_trees
    from ssvm_torch.path import path_gap, regularization_path
    data = random_span_data(np.random.default_rng(3), 6, 5, 2, lmin=1, lmax=4)
    model = ConstituencyModel.for_data(data)
    store = make_store(model, data, 0.2)
    Solver(store, SolverConfig(solver="bcfw", sampling="perm", passes=3, gap_check=3, seed=0)).run()
    w = store.w.clone()
    dots = torch.stack([0.2 * store.block_w(i) @ w for i in range(data.n)])
    assert torch.allclose(store.block_wdots(), dots, atol=1e-12)
    margins = []
    for i in range(data.n):
        Y = all_labeled_trees(int(data.lengths[i]), model.L)
        idx = torch.full((len(Y),), i)
        gold = model.phi(data, torch.tensor([i]), model.gt_batch(data, torch.tensor([i]))) @ w
        margins.append(float((model.phi(data, idx, Y) @ w).max() - gold))
    assert torch.allclose(store.max_margins(w), torch.tensor(margins, dtype=torch.float64), atol=1e-10)
    before = [store.block_w(i).clone() for i in range(data.n)]
    store.rescale(0.1, 0.5)                                      # w_i <- rho (lam / lam_new) w_i
    for i in range(data.n):
        assert torch.allclose(store.block_w(i), 0.5 * 2.0 * before[i], atol=1e-12)
    eps = 0.1                                  # the normalized loss: a path of a few dozen breakpoints
    normalized = ConstituencyModel.for_data(data, loss="normalized")
    path = regularization_path(make_store(normalized, data, 1.0), eps, kappa=0.9, lam_min=3e-2,
                               config=SolverConfig(solver="bcfw", sampling="gap"))
    assert len(path.lambdas) >= 3
    checker = make_store(normalized, data, 1.0)
    for lam in np.exp(np.random.default_rng(0).uniform(np.log(max(path.lam_end, 3e-2)), np.log(10.0), size=6)):
        assert -1e-9 <= path_gap(checker, path, float(lam)) <= eps + 1e-9
