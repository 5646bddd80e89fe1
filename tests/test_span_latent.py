"""The constituency SSVM from partial brackets (the latent SSVM over trees: ssvm_torch/latent.py,
``ConstituencyModel.complete``, the span store's observed-bracket loss in stores/spans.py and
stores/span_kernels.py): every term against enumeration of all labeled binary trees, fully observed data bit
for bit the full store, the hiding that leaks nothing, refusals by name, and ``ssvm-train --hide-labels`` on
ud-ewt-spans."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import all_labeled_trees, assert_certified, assert_descends, random_span_data, same_bcfw_runs
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.data.partial import hidden_positions
from ssvm_torch.data.span_data import SpanData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import hide_labels, latent_objective, train_latent
from ssvm_torch.models import ConstituencyModel
from ssvm_torch.spans.checks import UNLABELED

LAM = 0.05


def _partial(seed=0, fraction=0.5, n=7, loss="hamming", unlabeled=0.0):
    data = random_span_data(np.random.default_rng(seed), n, 6, 2, lmin=1, lmax=4)
    model = ConstituencyModel(data.n_features, data.n_labels, loss, buckets=(1, 2, 3))
    return model, data, hide_labels(data, fraction, seed, unlabeled)


def _enumerate(model, data, i, w):
    """(trees (K, M, M), scores <w, phi(y)> (K,), Delta_O(y) (K,), in C (K,)) of every labeled tree of sentence i."""
    n = int(data.lengths[i])
    trees = all_labeled_trees(n, data.n_labels)
    idx = torch.full((trees.shape[0],), i)
    scores = model.phi(data, idx, trees) @ w
    obs = data.observed_charts([i], n + 1)[0]
    on, unlabeled = obs >= 0, obs == UNLABELED          # a bracket without its label: missed where the tree lacks it
    missed = ((trees[:, on] != obs[on]).sum(1) + (trees[:, unlabeled] < 0).sum(1)).double()
    delta = missed * float(model.costs(data.lengths[[i]])[0])
    return trees, scores, delta, missed == 0


def _brute(model, data, w):
    """(H_i = max_y [s(y) + Delta_O(y)] - s(y_i) (n,), its argmax trees, max_{h in C} s(h) - s(y_i) (n,), argmax_C)
    by enumeration, y_i the data's (completed) tree."""
    H, best, HC, bestC = [], [], [], []
    for i in range(data.n):
        trees, scores, delta, inC = _enumerate(model, data, i, w)
        gold = float(model.phi(data, [i], data.charts([i])) @ w)
        k = int(torch.argmax(scores + delta))
        H.append(float(scores[k] + delta[k]) - gold)
        best.append(trees[k])
        kc = int(torch.argmax(scores.masked_fill(~inC, -float("inf"))))
        HC.append(float(scores[kc]) - gold)
        bestC.append(trees[kc])
    return torch.tensor(H, dtype=torch.float64), best, torch.tensor(HC, dtype=torch.float64), bestC


def _charts_of(data, labels):
    """The stacked span rows ``labels`` as one chart per sentence."""
    return data.with_trees(labels).charts()


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("loss, unlabeled", [("hamming", 0.0), ("normalized", 0.0), ("hamming", 0.5),
                                           ("normalized", 0.6), ("hamming", 1.0)])
def test_store_oracle_loss_and_hinge_against_enumeration(kernels, loss, unlabeled):
    """The gap pass at a random w: each block's tree is the argmax of s(y) + Delta_O(y) over every labeled tree, its
    loss Delta_O, H_i the enumerated max minus the completed tree's score; max_margins the plain argmax. With
    ``unlabeled``, some observed brackets come without their labels (missed only where a tree lacks the span)."""
    model, _, data = _partial(1, 0.5, loss=loss, unlabeled=unlabeled)
    assert data.partial and 0 < int(data.observed.sum()) < data.spans.shape[0]
    assert (int((data.observed_codes() == 2).sum()) > 0) == (unlabeled > 0)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    store = make_store(model, data, LAM, kernels=kernels)
    store.set_point(w, 0.0)
    gp = store.gap_pass()
    H, best, _, _ = _brute(model, data, w)
    assert torch.allclose(gp.H, H, atol=1e-10)
    charts = _charts_of(SpanData(data.offsets, data.fptr, data.fidx, gp.labels, data.n_features, data.n_labels),
                        gp.labels)
    idx = torch.arange(data.n)
    for i in range(data.n):
        M = int(data.lengths[i]) + 1
        assert torch.equal(charts[i, :M, :M], best[i])
    assert torch.allclose(gp.loss * data.n, model.loss(data, idx, charts), atol=1e-12)
    margins = store.max_margins(w)
    for i in range(data.n):
        _, scores, _, _ = _enumerate(model, data, i, w)
        gold = float(model.phi(data, [i], data.charts([i])) @ w)
        assert float(margins[i]) == pytest.approx(float(scores.max()) - gold, abs=1e-10)


@pytest.mark.parametrize("unlabeled", [0.0, 0.5])
def test_completion_is_the_best_tree_holding_every_observed_bracket(unlabeled):
    model, _, data = _partial(2, 0.6, unlabeled=unlabeled)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    labels = model.complete(w, data)
    completed = data.with_trees(labels)
    _, _, _, bestC = _brute(model, data, w)
    for i in range(data.n):
        M = int(data.lengths[i]) + 1
        assert torch.equal(completed.charts([i], M)[0], bestC[i])
    assert int(completed.observed.sum()) == int(data.observed.sum())      # every observed bracket kept
    assert torch.equal(torch.bincount(completed.observed_codes().long(), minlength=3),
                       torch.bincount(data.observed_codes().long(), minlength=3))   # labeled or not, as given


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("unlabeled", [0.0, 0.5])
def test_bcfw_on_partial_brackets_certifies_an_independent_gap(kernels, unlabeled):
    """BCFW with gap sampling on partial brackets: the last record's primal is lam/2 |w|^2 + mean of the enumerated
    H_i, its gap that primal minus the dual; the compiled and torch stores walk the same trajectory."""
    model, _, data = _partial(3, 0.5, unlabeled=unlabeled)
    config = SolverConfig(solver="bcfw", sampling="gap", passes=8, gap_check=4, seed=0)
    store = make_store(model, data, LAM, kernels=kernels)
    hist = Solver(store, config).run()
    H, _, _, _ = _brute(model, data, store.w.clone())
    assert_certified(hist, store, LAM, H)
    other = make_store(model, data, LAM, kernels="torch" if kernels == "numba" else "numba")
    Solver(other, config).run()
    assert torch.allclose(other.w, store.w, atol=1e-10)


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_every_span_observed_is_the_full_store_bit_for_bit(kernels):
    model, data, _ = _partial(4)
    flagged = SpanData(data.offsets, data.fptr, data.fidx, data.spans, data.n_features, data.n_labels,
                       observed=torch.ones(data.spans.shape[0], dtype=torch.bool))
    assert not flagged.partial
    assert same_bcfw_runs(model, data, flagged, LAM, kernels)


@pytest.mark.parametrize("unlabeled", [0.0, 0.5])
def test_latent_objective_and_cccp_against_enumeration(unlabeled):
    """J(w) = lam/2 |w|^2 + mean_i [max_y (s + Delta_O) - max_C s] by enumeration at a random w; CCCP from 0 never
    records a higher objective, each record's J is the enumerated J of the point it keeps, and it improves on w = 0."""
    model, _, data = _partial(5, 0.5, unlabeled=unlabeled)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    H, _, HC, _ = _brute(model, data, w)
    J, _ = latent_objective(model, data, LAM, w)
    assert J == pytest.approx(LAM / 2 * float(w @ w) + float((H - HC).mean()), abs=1e-10)
    kept = []
    w_out, records = train_latent(model, data, LAM, SolverConfig(passes=30, gap_check=10), max_outer=4,
                                  evaluate=lambda v: kept.append(v.clone()) or {})
    assert_descends(records)
    H, _, HC, _ = _brute(model, data, w_out)
    assert records[-1]["objective"] == pytest.approx(LAM / 2 * float(w_out @ w_out) + float((H - HC).mean()),
                                                     abs=1e-9)
    assert torch.equal(kept[-1], w_out)


def test_hiding_brackets_leaks_nothing_and_keeps_the_observed():
    """round(f S) of the S gold spans hidden (the seed's rows); the observed ones stay in the placeholder trees with
    their labels; other labels on the hidden spans give the same hidden data; fraction 0 is the gold trees."""
    model, data, hidden = _partial(6, 0.4, n=12)
    S = data.spans.shape[0]
    mask = hidden_positions(S, 0.4, 6)
    assert int((~hidden.observed).sum()) == int(mask.sum()) == round(0.4 * S)
    rows = torch.repeat_interleave(torch.arange(data.n), 2 * data.lengths - 1)

    def keys(spans, keep):
        return sorted(map(tuple, torch.cat([rows[:, None], spans], 1)[keep].tolist()))
    assert keys(hidden.spans, hidden.observed) == keys(data.spans, ~mask)
    relabeled = data.spans.clone()
    relabeled[mask, 2] = (relabeled[mask, 2] + 1) % data.n_labels
    again = hide_labels(SpanData(data.offsets, data.fptr, data.fidx, relabeled, data.n_features, data.n_labels), 0.4, 6)
    assert torch.equal(again.spans, hidden.spans) and torch.equal(again.observed, hidden.observed)
    gold = hide_labels(data, 0.0, 0)
    assert torch.equal(gold.spans, data.spans) and bool(gold.observed.all())
    # the labels of round(u S) spans hidden too (an independent draw): other labels there give the same data
    both = hide_labels(data, 0.4, 6, unlabeled=0.5)
    unl = hidden_positions(S, 0.5, 6, stream=1)
    assert int(unl.sum()) == round(0.5 * S) and not torch.equal(unl, mask)
    code = both.observed_codes()
    assert keys(both.spans[:, :2], code == 2) == keys(data.spans[:, :2], unl & ~mask) != []
    assert keys(both.spans, code == 1) == keys(data.spans, ~unl & ~mask)     # the labeled ones with their labels
    relabeled = data.spans.clone()
    relabeled[unl | mask, 2] = (relabeled[unl | mask, 2] + 1) % data.n_labels
    again = hide_labels(SpanData(data.offsets, data.fptr, data.fidx, relabeled, data.n_features, data.n_labels), 0.4,
                        6, unlabeled=0.5)
    assert torch.equal(again.spans, both.spans) and torch.equal(again.observed_codes(), both.observed_codes())
    assert keys(both.spans[:, :2], both.observed) == keys(data.spans[:, :2], ~mask)    # every bracket kept
    bare = hide_labels(data, 0.0, 6, unlabeled=1.0)       # Pereira & Schabes: every bracket, no label
    assert bool((bare.observed_codes() == 2).all())
    assert keys(bare.spans[:, :2], bare.observed) == keys(data.spans[:, :2], torch.ones(S, dtype=torch.bool))
    relabeled = data.spans.clone()
    relabeled[:, 2] = (relabeled[:, 2] + 1) % data.n_labels
    assert torch.equal(hide_labels(SpanData(data.offsets, data.fptr, data.fidx, relabeled, data.n_features,
                                            data.n_labels), 0.0, 6, unlabeled=1.0).spans, bare.spans)


def test_refusals_name_the_field():
    model, data, hidden = _partial(7)
    with pytest.raises(SSVMInputError, match="observed"):
        SpanData(data.offsets, data.fptr, data.fidx, data.spans, data.n_features, data.n_labels,
                 observed=torch.ones(data.spans.shape[0]))
    with pytest.raises(SSVMInputError, match="observed"):
        SpanData(data.offsets, data.fptr, data.fidx, data.spans, data.n_features, data.n_labels,
                 observed=torch.ones(3, dtype=torch.bool))
    # a tree that drops an observed bracket is no completion
    full = hidden.with_trees(hidden.spans)
    assert torch.equal(full.observed, hidden.observed)
    i = int(torch.nonzero((hidden.lengths >= 2))[0, 0])
    so = hidden.span_offsets
    rows = hidden.spans[int(so[i]):int(so[i + 1])]
    obs = hidden.observed[int(so[i]):int(so[i + 1])]
    k = int(torch.nonzero(obs)[0, 0])
    bad = hidden.spans.clone()
    bad[int(so[i]) + k, 2] = (rows[k, 2] + 1) % hidden.n_labels
    with pytest.raises(SSVMInputError, match=f"sentence {i}: the tree lacks 1 of its observed brackets"):
        hidden.with_trees(bad)
    with pytest.raises(SSVMInputError, match="w0"):
        train_latent(model, hidden, LAM, w0="letters")
    with pytest.raises(SSVMInputError, match="hide_labels"):
        hide_labels(data, 1.0, 0)
    with pytest.raises(SSVMInputError, match="solver"):
        train_latent(model, hidden, LAM, SolverConfig(solver="eg"))


@pytest.mark.long
def test_ssvm_train_hide_labels_on_ud_ewt_spans(tmp_path, capsys):
    """``ssvm-train --dataset ud-ewt-spans --hide-labels``: hidden.json lists the hidden span rows, latent.json the
    outer steps whose objective never rises, the saved model is the last record's."""
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_model
    out = tmp_path / "run"
    assert main(["--dataset", "ud-ewt-spans", "--train-size", "60", "--hide-labels", "0.5", "--hide-seed", "2",
                 "--hide-bracket-labels", "0.3", "--lam", "0.01", "--passes", "3", "--gap-check", "3",
                 "--latent-outer", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "training gold spans hidden, the labels of" in printed and "(seed 2)" in printed and "CCCP:" in printed
    assert "test labeled bracket F1:" in printed
    hidden = json.loads((out / "hidden.json").read_text())
    config = json.loads((out / "config.json").read_text())
    S = hidden["positions"]
    gone = hidden_positions(S, 0.5, 2)           # rows of the stacked gold trees
    assert hidden["unit"] == "span rows" and hidden["hidden"] == torch.nonzero(gone)[:, 0].tolist()
    assert hidden["unlabeled"] == torch.nonzero(hidden_positions(S, 0.3, 2, stream=1) & ~gone)[:, 0].tolist() != []
    assert config["hidden_positions"] == len(hidden["hidden"]) and config["hide_labels"] == 0.5
    assert config["hide_bracket_labels"] == 0.3 and config["unlabeled_brackets"] == len(hidden["unlabeled"])
    records = json.loads((out / "latent.json").read_text())
    assert_descends(records)
    assert 0.0 < records[-1]["test_f1"] <= 100.0
    assert load_model(out / "model.pt")["w"].shape[0] > 0
    # an inner solver the constituency store cannot run is refused by name before anything is written
    refused = tmp_path / "eg"
    assert main(["--dataset", "ud-ewt-spans", "--train-size", "60", "--hide-labels", "0.5", "--solver", "eg",
                 "--lam", "0.01", "--out", str(refused)]) == 2
    assert "solver: 'eg' needs a store with marginal moves" in capsys.readouterr().err and not refused.exists()
    for extra, text in [(["--hide-bracket-labels", "0.3"], "hide_bracket_labels: trains the latent SSVM, with"),
                        (["--hide-labels", "0.5", "--hide-bracket-labels", "0.3", "--dataset", "ud-ewt"],
                         "hide_bracket_labels: hides constituency brackets' labels (ud-ewt-spans), not ud-ewt's"),
                        (["--hide-labels", "0.5", "--hide-bracket-labels", "1.5"],
                         "hide_bracket_labels: expected a fraction in [0, 1] (1: brackets without any label), got 1.5")]:
        assert main(["--dataset", "ud-ewt-spans", "--train-size", "60", "--lam", "0.01", *extra,
                     "--out", str(refused)]) == 2
        assert text in capsys.readouterr().err and not refused.exists()
