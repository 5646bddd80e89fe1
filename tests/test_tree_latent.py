"""The dependency-tree SSVM from partial heads (the latent SSVM over trees: ssvm_torch/latent.py,
``DependencyModel.complete``, the tree store's loss on the observed words in stores/tree.py, stores/tree_torch.py,
stores/tree_marginal.py and oracles/tree_kernels.py): every term against enumeration of all trees (projective and
not), fully observed data bit for bit the full store, the hiding that leaks nothing, refusals by name, and
``ssvm-train --dataset ud-ewt --hide-labels``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_certified, assert_descends, random_dependency_data, same_bcfw_runs
from tree_reference import all_trees, tree_scores
from ssvm_torch import SolverConfig, make_store
from ssvm_torch.solvers import make_solver
from ssvm_torch.data.partial import hidden_positions
from ssvm_torch.data.trees import DependencyData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import arc_start, hide_heads, hide_labels, latent_objective, observed_arcs, train_latent
from ssvm_torch.models import DependencyModel

LAM = 0.05


def _partial(seed=0, fraction=0.5, n=8, projective=True, loss="hamming"):
    data = random_dependency_data(np.random.default_rng(seed), n, 12, lmin=1, lmax=5)
    model = DependencyModel(data.n_features, projective=projective, loss=loss)
    return model, data, hide_heads(data, fraction, seed, projective)


def _rebuild(data, heads=None, observed=None):
    return DependencyData(data.offsets, data.heads if heads is None else heads, data.labels, data.arc_off, data.ptr,
                          data.ids, data.n_features, data.name, {}, data.tok_ptr, data.tok_ids, observed)


def _enumerate(model, data, i, w):
    """(trees (T, n+1), s(y) (T,), Delta_O(y) (T,), keeps every observed head (T,), in the decoder's space (T,)) over
    every single-root tree of sentence i (the non-projective ones too)."""
    n = int(data.lengths[i])
    trees = all_trees(n, False, False)
    S = model.scores(w, data, [i])[0].numpy()
    scores = tree_scores(S, trees)
    lg = data.padded_loss_heads([i])[0, 1:n + 1].numpy()
    seen = lg >= 0
    wrong = ((trees[:, 1:] != lg[None, :]) & seen[None, :]).sum(1)
    delta = wrong * float(model.costs(data.lengths[[i]])[0])
    lo, hi = np.minimum(trees[:, 1:], np.arange(1, n + 1)), np.maximum(trees[:, 1:], np.arange(1, n + 1))
    cross = ((lo[:, :, None] < lo[:, None, :]) & (lo[:, None, :] < hi[:, :, None])
             & (hi[:, :, None] < hi[:, None, :])).reshape(len(trees), -1).any(1)
    space = ~cross if model.projective else np.ones(len(trees), dtype=bool)
    return trees, scores, delta, wrong == 0, space


def _brute(model, data, w):
    """(H_i = max over the space and the completed tree of s(y) + Delta_O(y), minus s(y_i); max over C of s(h) -
    s(y_i); the trees of C, in the space where C meets it, else all of them, whose score is that max)."""
    H, HC, best = [], [], []
    for i in range(data.n):
        trees, scores, delta, inC, space = _enumerate(model, data, i, w)
        n = int(data.lengths[i])
        gold = data.padded_heads([i])[0].numpy()
        g = int(np.nonzero((trees == gold[None, :n + 1]).all(1))[0][0])
        pick = inC & space if (inC & space).any() else inC             # the completion's space
        space[g] = True                          # the completed tree joins its sentence's space (the store's rule)
        H.append(float(np.max(np.where(space, scores + delta, -np.inf)) - scores[g]))
        top = float(np.max(np.where(pick, scores, -np.inf)))
        HC.append(top - float(scores[g]))
        best.append([t.tolist() for t in trees[pick & (scores >= top - 1e-12)]])
    return torch.tensor(H, dtype=torch.float64), torch.tensor(HC, dtype=torch.float64), best


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("projective", [True, False])
def test_store_loss_and_hinge_against_enumeration(kernels, projective):
    model, _, data = _partial(1, 0.5, projective=projective, loss="normalized")
    assert data.partial
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    store = make_store(model, data, LAM, kernels=kernels)
    store.set_point(w, 0.0)
    gp = store.gap_pass()
    H, _, _ = _brute(model, data, w)
    assert torch.allclose(gp.H, H, atol=1e-10)
    idx = torch.arange(data.n)
    labels = data.padded_heads(idx, gp.labels)
    assert torch.allclose(gp.loss * data.n, model.loss(data, idx, labels), atol=1e-12)
    _, oracle_H = model.oracle(w, data, idx)
    assert torch.allclose(oracle_H, H, atol=1e-10)


@pytest.mark.parametrize("projective", [True, False])
def test_completion_keeps_every_observed_head(projective):
    model, _, data = _partial(3, 0.6, n=10, projective=projective)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    heads = model.complete(w, data)
    assert torch.equal(heads[data.observed], data.heads[data.observed])
    _, _, best = _brute(model, data, w)
    completed = data.with_heads(heads)
    for i in range(data.n):
        n = int(data.lengths[i])
        assert completed.padded_heads([i])[0, :n + 1].tolist() in best[i]     # ties: random arcs may share features


@pytest.mark.parametrize("config", [dict(solver="bcfw", sampling="gap", kernels="numba"),
                                    dict(solver="bcfw", sampling="gap", kernels="torch"),
                                    dict(solver="eg", kernels="numba")])
def test_solvers_on_partial_heads_certify_an_independent_gap(config):
    """BCFW (both paths) and online EG (whose expected loss and loss potentials count the observed words): the last
    record's primal is lam/2 |w|^2 + mean of the enumerated H_i, the gap that primal minus the dual."""
    model, _, data = _partial(5, 0.5)
    kernels = config.pop("kernels")
    store = make_store(model, data, LAM, kernels=kernels)
    hist = make_solver(store, SolverConfig(passes=6, gap_check=3, seed=0, **config)).run()
    H, _, _ = _brute(model, data, store.w.clone())
    assert_certified(hist, store, LAM, H)


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_every_head_observed_is_the_full_store_bit_for_bit(kernels):
    model, data, _ = _partial(6)
    flagged = _rebuild(data, observed=torch.ones(data.heads.shape[0], dtype=torch.bool))
    assert not flagged.partial
    assert same_bcfw_runs(model, data, flagged, LAM, kernels)


def test_latent_objective_and_cccp_against_enumeration():
    model, _, data = _partial(7, 0.5)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    H, HC, _ = _brute(model, data, w)
    J, _ = latent_objective(model, data, LAM, w)
    assert J == pytest.approx(LAM / 2 * float(w @ w) + float((H - HC).mean()), abs=1e-10)
    w_out, records = train_latent(model, data, LAM, SolverConfig(passes=100, gap_check=50), max_outer=4, w0=None)
    assert_descends(records)
    H, HC, _ = _brute(model, data, w_out)
    assert records[-1]["objective"] == pytest.approx(LAM / 2 * float(w_out @ w_out) + float((H - HC).mean()),
                                                     abs=1e-9)


def test_the_observed_arcs_start_against_enumeration():
    """observed_arcs strips the features of the arcs into unobserved words and the head tokens' (the others kept);
    arc_start's SSVM on it certifies lam/2 |w|^2 + mean_i max_y [sum over observed m of theta(y_m -> m) + Delta_O(y)]
    - the same sum for the observed heads, enumerated; train_latent's default start for a DependencyModel is it."""
    model, data, hidden = _partial(11, 0.5)
    stripped = observed_arcs(hidden)
    rows = torch.repeat_interleave(torch.arange(data.n), data.lengths * data.lengths)
    k = torch.arange(int(data.arc_off[-1])) - data.arc_off[rows]
    word = data.offsets[rows] + torch.div(k, data.lengths[rows], rounding_mode="floor")
    counts, kept = hidden.ptr[1:] - hidden.ptr[:-1], stripped.ptr[1:] - stripped.ptr[:-1]
    assert torch.equal(kept, torch.where(hidden.observed[word], counts, torch.zeros_like(counts)))
    for a in torch.nonzero(hidden.observed[word])[:, 0].tolist():
        assert torch.equal(stripped.ids[stripped.ptr[a]:stripped.ptr[a + 1]], hidden.ids[hidden.ptr[a]:hidden.ptr[a + 1]])
    assert int(stripped.tok_ptr[-1]) == 0
    w = arc_start(model, hidden, LAM)
    total = 0.0
    for i in range(data.n):
        n = int(data.lengths[i])
        trees, _, delta, _, space = _enumerate(model, hidden, i, w)
        S = model.scores(w, stripped, [i])[0].numpy()
        scores = tree_scores(S, trees)
        gold = hidden.padded_heads([i])[0].numpy()
        g = int(np.nonzero((trees == gold[None, :n + 1]).all(1))[0][0])
        space[g] = True
        total += float(np.max(np.where(space, scores + delta, -np.inf)) - scores[g])
    primal = LAM / 2 * float(w @ w) + total / data.n
    store = make_store(model, stripped, LAM)
    store.set_point(w, 0.0)
    assert float(store.gap_pass().H.mean()) + LAM / 2 * float(w @ w) == pytest.approx(primal, abs=1e-10)
    _, records = train_latent(model, hidden, LAM, SolverConfig(passes=5, gap_check=5), max_outer=1)
    assert records[0]["objective"] == pytest.approx(latent_objective(model, hidden, LAM, w)[0], abs=1e-12)


def test_hiding_heads_leaks_nothing():
    """round(f W) heads hidden (the seed's words); the observed heads stay; data whose hidden heads differ (here:
    the placeholder's) hide to the same data; fraction 0 is the gold trees."""
    model, data, hidden = _partial(9, 0.4, n=12)
    mask = hidden_positions(data.heads.shape[0], 0.4, 9)
    assert torch.equal(~hidden.observed, mask)
    assert torch.equal(hidden.heads[~mask], data.heads[~mask])
    other = _rebuild(data, heads=hidden.heads)
    assert not torch.equal(other.heads, data.heads)               # the hidden heads differ from the gold ones
    again = hide_heads(other, 0.4, 9)
    assert torch.equal(again.heads, hidden.heads) and torch.equal(again.observed, hidden.observed)
    gold = hide_labels(data, 0.0, 0)
    assert torch.equal(gold.heads, data.heads) and bool(gold.observed.all())


def test_refusals_name_the_field():
    model, data, hidden = _partial(10)
    with pytest.raises(SSVMInputError, match="observed"):
        _rebuild(data, observed=torch.ones(data.heads.shape[0]))
    with pytest.raises(SSVMInputError, match="observed"):
        _rebuild(data, observed=torch.ones(2, dtype=torch.bool))
    k = int(torch.nonzero(hidden.observed & (torch.repeat_interleave(hidden.lengths, hidden.lengths) >= 2))[0, 0])
    bad = hidden.heads.clone()
    bad[k] = 0 if int(bad[k]) != 0 else 1
    with pytest.raises(SSVMInputError, match="has the observed head"):
        hidden.with_heads(bad)
    with pytest.raises(SSVMInputError, match="w0"):
        train_latent(model, hidden, LAM, w0="letters")
    with pytest.raises(SSVMInputError, match="'arcs' for a DependencyModel only"):
        from ssvm_torch.latent import check_start
        from ssvm_torch.models import ConstituencyModel
        check_start(ConstituencyModel(3, 2), "arcs")
    with pytest.raises(SSVMInputError, match="hide_labels"):
        hide_heads(data, -0.1, 0)


@pytest.mark.long
def test_ssvm_train_hide_labels_on_ud_ewt(tmp_path, capsys):
    from ssvm_torch.cli.train import main
    out = tmp_path / "run"
    assert main(["--dataset", "ud-ewt", "--train-size", "60", "--hide-labels", "0.5", "--lam", "0.01", "--passes", "3",
                 "--gap-check", "3", "--latent-outer", "2", "--latent-start", "zeros", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "training heads hidden (seed 0)" in printed and "CCCP:" in printed
    assert json.loads((out / "config.json").read_text())["latent_start"] == "zeros"
    hidden = json.loads((out / "hidden.json").read_text())
    assert hidden["unit"] == "words" and len(hidden["hidden"]) == round(0.5 * hidden["positions"])
    records = json.loads((out / "latent.json").read_text())
    assert_descends(records)
    assert 0.0 < records[-1]["test_error"] < 1.0
