"""The dependency-tree store beyond the conformance suite: gold trees outside the decoder's space, EG and
DEG on both paths, the second-stage labeler, and ssvm-train on UD English-EWT (tiny subsets)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import random_dependency_data
from ssvm_torch import SolverConfig, make_store
from ssvm_torch.cli.train import main as train_main
from ssvm_torch.models import DependencyModel
from ssvm_torch.solvers.make import make_solver
from ssvm_torch.stores.dense import DenseDual
from tree_reference import check_gold_outside_the_space


def _nonprojective_golds(seed=0):
    rng = np.random.default_rng(seed)
    data = random_dependency_data(rng, 10, 15, lmin=3, lmax=5, per_arc=3, projective_only=False)
    model = DependencyModel.for_data(data, projective=True)
    outside = ~model.gold_in_space(data)
    assert bool(outside.any()), "the random golds must include non-projective trees"
    return model, data, outside


def test_gold_outside_the_space_keeps_the_hinge_nonnegative_and_the_gap_exact():
    """Projective decoder, some non-projective gold trees: a block's labelings are the projective trees plus its
    gold tree, so H_i >= 0 and the store's gap equals primal - dual computed by brute force over that set."""
    model, data, outside = _nonprojective_golds()
    check_gold_outside_the_space(model, data)


@pytest.mark.parametrize("solver", ["eg", "deg"])
@pytest.mark.parametrize("projective", [True, False])
def test_marginal_solvers_on_both_paths(solver, projective):
    """EG and DEG: the compiled and the torch path take the same steps (gold trees outside the space
    included) until rounding flips a step test at its tolerance (the two paths sum an arc's score in different
    orders), so the first records are compared; the dual rises (EG) and every record's gap is >= 0."""
    rng = np.random.default_rng(2)
    data = random_dependency_data(rng, 8, 12, lmin=2, lmax=5, per_arc=3)
    model = DependencyModel.for_data(data, projective=projective)
    runs = []
    for kernels in ("numba", "torch"):
        store = make_store(model, data, 0.1, kernels=kernels)
        runs.append(make_solver(store, SolverConfig(solver=solver, sampling="perm", passes=12, gap_check=2,
                                                    seed=3)).run())
    a, b = runs
    assert [round(r["primal"], 9) for r in a[:4]] == [round(r["primal"], 9) for r in b[:4]]
    assert all(r["gap"] >= -1e-12 for r in a) and a[-1]["primal"] < a[0]["primal"]
    if solver == "eg":
        duals = [r["dual"] for r in a]
        assert all(y >= x - 1e-12 for x, y in zip(duals, duals[1:]))


def test_eg_marginals_are_a_point_of_the_dense_store():
    """After EG moves, the store's w is the exact image of its arc marginals (w = sum (G - M) f / (lam n)), as
    the dense rebuild of every block says."""
    rng = np.random.default_rng(4)
    data = random_dependency_data(rng, 6, 10, lmin=2, lmax=4)
    model = DependencyModel.for_data(data)
    store = make_store(model, data, 0.2)
    make_solver(store, SolverConfig(solver="eg", sampling="perm", passes=5, gap_check=5, seed=0)).run()
    assert torch.allclose(store.w, sum(store.block_w(i) for i in range(data.n)), atol=1e-10)
    dense = DenseDual(model.with_kernels("torch"), data, 0.2)
    assert store.dual() <= dense.primal_at(store.w) + 1e-12


def test_labeler_learns_relations_from_the_training_trees():
    from ssvm_torch.data.trees import load_ud_dependencies
    from ssvm_torch.labeler import attachment_scores, train_labeler
    train, dev = load_ud_dependencies("basic", evaluate_on="dev", train_size=400)
    labeler = train_labeler(train, passes=3)
    dev_small = dev.subset(range(300))
    scores = attachment_scores(dev_small, dev_small.heads, {"labeler": labeler})
    assert scores["uas"] == 100.0 and scores["sentence_error"] == 0.0 and 80.0 < scores["las"] < 100.0
    again = train_labeler(train, passes=3)
    assert again.digest() == labeler.digest() and torch.equal(again.w, labeler.w)   # deterministic
    wrong = dev_small.heads.clone()
    wrong[0] = (wrong[0] + 1) % 3
    worse = attachment_scores(dev_small, wrong, {"labeler": labeler})
    assert worse["uas"] < 100.0 and worse["sentence_error"] > 0


def test_ssvm_train_on_ud_ewt(tmp_path):
    out = tmp_path / "run"
    code = train_main(["--dataset", "ud-ewt", "--train-size", "150", "--features", "basic", "--passes", "2",
                       "--gap-check", "1", "--lam", "0.01", "--out", str(out), "--quiet"])
    assert code == 0
    hist = json.loads((out / "history.json").read_text())
    last = hist["records"][-1] if isinstance(hist, dict) else hist[-1]
    assert 40.0 < last["test_uas"] <= 100.0 and 0.0 < last["test_las"] <= last["test_uas"]
    assert last["test_error"] == pytest.approx(1 - last["test_uas"] / 100) and last["gap"] >= 0
    config = json.loads((out / "config.json").read_text())
    assert config["trees"] == "projective" and config["features"] == "basic"
    pred = json.loads((out / "test_predictions.json").read_text())
    assert len(pred["heads"]) == len(pred["labels"]) == 2077 and pred["split"] == "ud-ewt-test"
    assert all(len(h) == len(r) for h, r in zip(pred["heads"], pred["labels"])) and "root" in pred["labels"][0]


@pytest.mark.long
def test_select_lam_scores_the_released_dev_split(tmp_path, capsys):
    out = tmp_path / "sel"
    code = train_main(["--dataset", "ud-ewt", "--train-size", "120", "--features", "basic", "--select-lam",
                       "--lams", "1e-1", "1e-2", "--passes", "2", "--gap-check", "1", "--trees", "non-projective",
                       "--out", str(out)])
    assert code == 0
    sel = json.loads((out / "selection.json").read_text())
    assert sel["heldout"] == "dev" and sel["n_dev"] == 2001 and len(sel["table"]) == 2
    assert all("dev_uas" in row for row in sel["table"]) and sel["lam"] in (0.1, 0.01)
    assert "dev UAS" in capsys.readouterr().out
    assert train_main(["--dataset", "ud-ewt", "--select-lam", "--heldout", "0.2", "--out", str(tmp_path / "x")]) == 2
    assert "released development split" in capsys.readouterr().err
