"""model.pt is the certificate's point (issue: EG and DEG as published): for every solver the last
record's primal and dual are recomputed from model.pt and the data alone -- the model's own
loss-augmented oracle (tested against brute force in test_conformance.py), not the solver's state or
its store -- and match to 1e-8."""
import json

import pytest
import torch

from ssvm_torch.cli.train import main
from ssvm_torch.outputs import load_model
from ssvm_torch.solvers.deg import DEGSolver
from ssvm_torch.tasks import load_task


def recomputed(model_file: dict, task) -> tuple[float, float]:
    """(objective (1) at model.pt's w, the dual value the file certifies)."""
    w, ell, lam = model_file["w"], model_file["ell"], model_file["lam"]
    data = task.train
    _, H = task.model.oracle(w, data, torch.arange(data.n))
    primal = 0.5 * lam * float(w @ w) + float(H.sum()) / data.n
    if "radius" in model_file:                       # DEG: the ball-constrained min of L(., z_bar)
        dual = DEGSolver.ball_dual(model_file["w_dual"], ell, lam, model_file["radius"])
    elif "w_dual" in model_file:                     # the model is an earlier check's point: the store's w
        dual = ell - 0.5 * lam * float(model_file["w_dual"] @ model_file["w_dual"])
    else:
        dual = ell - 0.5 * lam * float(w @ w)
    return primal, dual


@pytest.mark.parametrize("solver", ["bcfw", "eg", "deg", "cutting-plane"])
def test_records_are_recomputable_from_model_file(tmp_path, solver):
    out = tmp_path / solver
    assert main(["--dataset", "ocr-small", "--lam", "0.05", "--solver", solver,
                 "--passes", "6", "--gap-check", "2", "--seed", "1", "--out", str(out), "--quiet"]) == 0
    history = json.loads((out / "history.json").read_text())
    last = history[-1]
    model_file = load_model(out / "model.pt")
    earlier = solver != "deg" and last["model_check"] < len(history) - 1     # the best check was not the last
    assert ("w_dual" in model_file) == (solver == "deg" or earlier)
    primal, dual = recomputed(model_file, load_task("ocr-small"))
    assert last["primal"] == pytest.approx(primal, rel=1e-8, abs=1e-8)
    assert last["dual"] == pytest.approx(dual, rel=1e-8, abs=1e-8)
    assert last["gap"] == pytest.approx(primal - dual, rel=1e-8, abs=1e-8)
    assert last["gap"] > 0
