"""The structured perceptron (ssvm_torch/perceptron.py) on OCR-small: seconds per epoch (training only, one torch
thread), mistakes per epoch and the test error of the averaged point and of the last iterate after each epoch, for
mini-batches of 1 and 16; beside it the BCFW SSVM (gap sampling, lambda = 1/n) at the same number of passes. With
``--tasks``: the averaged perceptron on registered tasks at scale (sparse updates: ``add_psi``), seconds per epoch,
mistakes per epoch and the test metrics of the averaged point and of the last iterate after the last epoch;
``conll2000-recommended`` is CoNLL-2000 with the featurization ``ssvm-train`` uses (rich-edges, BIOES, constraints).

Writes benchmarks/results/perceptron_cpu.json.
Usage: python benchmarks/bench_perceptron.py [--epochs 10] [--tasks conll2000 conll2000-recommended ud-ewt]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import torch

from ssvm_torch import SolverConfig, make_store
from ssvm_torch.data import load_ocr
from ssvm_torch.models import ChainModel
from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
from ssvm_torch.solvers import make_solver

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--tasks", nargs="*", default=[], help="registered tasks to run at scale (minutes each)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, test = load_ocr("small")
    model = ChainModel.for_data(train)
    out = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "data": "ocr-small",
           "n_train": train.n, "n_test": test.n, "epochs": args.epochs, "runs": {}}

    def evaluate(w):
        return {"test_error": model.metrics(w, test)["error"]}

    for batch_size in (1, 16):
        cfg = PerceptronConfig(epochs=args.epochs, batch_size=batch_size)
        run = train_perceptron(model, train, cfg, evaluate=evaluate)
        last = model.metrics(run.w_last, test)["error"]
        times = [b["time_s"] - a["time_s"] for a, b in zip([{"time_s": 0.0}] + run.history, run.history)]
        out["runs"][f"batch_{batch_size}"] = {
            "seconds_per_epoch_median": statistics.median(times), "mistakes": [r["mistakes"] for r in run.history],
            "test_error_averaged": [r["test_error"] for r in run.history], "test_error_last_iterate": last,
            "stop_reason": run.stop_reason}
        print(f"batch {batch_size:2d}: {statistics.median(times):.3f} s/epoch, mistakes "
              f"{run.history[0]['mistakes']} -> {run.history[-1]['mistakes']}, test error averaged "
              f"{run.history[-1]['test_error']:.4f}, last iterate {last:.4f}")
    solver = make_solver(make_store(model, train, 1.0 / train.n),
                         SolverConfig(passes=args.epochs, gap_check=args.epochs, seed=0))
    history = solver.run()
    ssvm = {"passes": history[-1]["passes"], "seconds": history[-1]["time_s"], "gap": history[-1]["gap"],
            "test_error": model.metrics(solver.model_point()[0], test)["error"]}
    out["bcfw_ssvm"] = ssvm
    print(f"BCFW SSVM: {ssvm['seconds'] / ssvm['passes']:.3f} s/pass, test error {ssvm['test_error']:.4f} after "
          f"{ssvm['passes']:.0f} passes (gap {ssvm['gap']:.4f})")
    for name in args.tasks:
        out[name] = at_scale(name, args.epochs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "perceptron_cpu.json").write_text(json.dumps(out, indent=2) + "\n")


def at_scale(name: str, epochs: int) -> dict:
    from ssvm_torch.tasks import TASKS, load_task
    options = TASKS["conll2000"].recommended if name == "conll2000-recommended" else {}
    problem = load_task("conll2000" if name == "conll2000-recommended" else name, **options)
    run = train_perceptron(problem.model, problem.train, PerceptronConfig(epochs=epochs))
    times = [b["time_s"] - a["time_s"] for a, b in zip([{"time_s": 0.0}] + run.history, run.history)]
    averaged, last = problem.evaluate(run.w), problem.evaluate(run.w_last)
    print(f"{name}: {statistics.median(times):.1f} s/epoch (d = {problem.model.d}, n = {problem.train.n}), after "
          f"{len(run.history)} epochs averaged {averaged}, last iterate {last}")
    return {"n_train": problem.train.n, "d": problem.model.d, "options": options,
            "seconds_per_epoch_median": statistics.median(times), "mistakes": [r["mistakes"] for r in run.history],
            "test_averaged": averaged, "test_last_iterate": last}


if __name__ == "__main__":
    main()
