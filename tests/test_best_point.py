"""What a run returns is the best point it certified (solvers/best_point.py): the last record of the
history and model.pt describe the lowest-primal check of the run, the gap there is P(w_best) minus
the last dual (a certificate for w_best), and the last iterate's values stay beside it."""
import json

import pytest
import torch

from ssvm_torch.cli.train import main
from ssvm_torch.outputs import load_model
from ssvm_torch.solvers.best_point import BestPoint
from ssvm_torch.tasks import load_task


def run(tmp_path, *argv):
    out = tmp_path / "run"
    assert main(["--dataset", "ocr-small", "--gap-check", "1", "--seed", "0", "--quiet", "--out", str(out), *argv]) == 0
    return json.loads((out / "history.json").read_text()), load_model(out / "model.pt")


def test_the_cutting_plane_returns_w_zero_when_its_iterates_are_worse(tmp_path):
    """1-slack cutting plane, OCR-small, lam 0.01, 10 passes: every iterate after the start has a
    primal above P(0) = 1 (1.67 at the end), so the run returns w = 0 and says so."""
    history, model = run(tmp_path, "--solver", "cutting-plane", "--lam", "0.01", "--passes", "10")
    last = history[-1]
    assert last["model_check"] == 0 and last["primal"] == pytest.approx(1.0, abs=1e-12)
    assert last["primal_last"] > 1.5 and last["gap_last"] > last["gap"]
    assert last["gap"] == pytest.approx(last["primal"] - last["dual"], rel=1e-12)
    assert float(model["w"].abs().max()) == 0.0 and "w_dual" in model
    assert last["passes"] >= 10                                     # the run's own counters stay


@pytest.mark.long
def test_bcfw_returns_its_lowest_primal_check_and_the_file_certifies_it(tmp_path):
    history, model = run(tmp_path, "--solver", "bcfw", "--sampling", "gap", "--lam", "0.0005", "--passes", "30")
    last = history[-1]
    primals = [r.get("primal_last", r["primal"]) for r in history]
    best = min(range(len(history)), key=primals.__getitem__)
    assert last["model_check"] == best < len(history) - 1             # this run's last iterate is not its best
    assert last["primal"] == pytest.approx(primals[best], rel=1e-12) and last["primal"] < last["primal_last"]
    assert last["test_error"] == history[best]["test_error"] and last["model_passes"] == history[best]["passes"]
    task = load_task("ocr-small")
    store = task.store(0.0005)
    assert store.primal_at(model["w"]) == pytest.approx(last["primal"], rel=1e-9)
    dual = model["ell"] - 0.5 * 0.0005 * float(model["w_dual"] @ model["w_dual"])
    assert dual == pytest.approx(last["dual"], rel=1e-9) and last["gap"] == pytest.approx(last["primal"] - dual, rel=1e-9)


def test_best_point_keeps_the_lowest_primal_and_round_trips():
    bp = BestPoint()
    history = []
    for i, p in enumerate([1.0, 0.5, 0.7]):
        history.append({"primal": p, "dual": 0.4 + 0.01 * i, "gap": p - 0.4 - 0.01 * i, "passes": float(i),
                        "test_error": 0.1 * i, "time_s": float(i)})
        bp.offer(history[-1], torch.full((2,), float(i)), i)
    again = BestPoint()
    again.load_state_dict(bp.state_dict())
    history = again.finish(history)
    last = history[-1]
    assert last["primal"] == 0.5 and last["test_error"] == pytest.approx(0.1) and last["primal_last"] == 0.7
    assert last["gap"] == pytest.approx(0.5 - 0.42) and last["passes"] == 2.0 and last["model_check"] == 1
    assert torch.equal(again.w, torch.full((2,), 1.0))
    again.load_state_dict(None)                                         # a checkpoint from before the rule
    assert again.record is None and again.primal == float("inf")


def test_best_point_copies_in_place_or_sparse_and_keeps_nothing_when_off():
    """A better dense point overwrites the kept copy in place (one copy of w at any time); a point
    with fewer than d / 4 nonzeros is kept as (index, value) -- CoNLL's rich-edges w, 389 MB dense,
    is 4.6% nonzero -- and comes back dense, through a checkpoint too; the path's inner solves keep none."""
    f64 = dict(dtype=torch.float64)
    bp = BestPoint()
    bp.offer({"primal": 1.0}, torch.arange(1.0, 9.0, **f64), 0)
    kept = bp.w
    bp.offer({"primal": 0.5}, torch.full((8,), 2.0, **f64), 1)
    assert bp.w is kept and torch.equal(kept, torch.full((8,), 2.0, **f64)) and bp.index == 1
    bp.offer({"primal": 0.7}, torch.full((8,), 3.0, **f64), 2)
    assert torch.equal(bp.w, torch.full((8,), 2.0, **f64)) and bp.index == 1
    sparse = torch.zeros(8, **f64)
    sparse[5] = -1.5
    bp.offer({"primal": 0.25}, sparse, 3)
    state = bp.state_dict()
    assert "w" not in state and state["w_index"].tolist() == [5] and state["d"] == 8
    assert torch.equal(bp.w, sparse) and bp.w.dtype == torch.float64
    again = BestPoint()
    again.load_state_dict(state)
    assert torch.equal(again.w, sparse) and again.index == 3
    bp.offer({"primal": 0.1}, torch.full((8,), 4.0, **f64), 4)        # dense again
    assert torch.equal(bp.w, torch.full((8,), 4.0, **f64)) and "w" in bp.state_dict()
    off = BestPoint(enabled=False)
    history = [{"primal": 1.0, "dual": 0.0}, {"primal": 2.0, "dual": 0.5}]
    for i, rec in enumerate(history):
        off.offer(rec, torch.ones(3), i)
    assert off.w is None and off.finish(history) == history


def test_a_solver_without_keep_best_returns_its_iterate():
    """Solver(keep_best=False), what the path and the lambda grid run: no copy of w, the history as
    the checks wrote it, the store's point as the model."""
    from ssvm_torch.solvers import Solver, SolverConfig
    dual = load_task("ocr-small").store(0.0005)
    solver = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", gap_check=1, passes=3), keep_best=False)
    history = solver.run()
    assert solver.best.w is None and solver.model_point()[0] is dual.w and solver.finish() == history
    assert solver.model_extras() == {}
