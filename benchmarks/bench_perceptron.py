"""The structured perceptron (ssvm_torch/perceptron.py) on OCR-small: seconds per epoch (training only, one torch
thread), mistakes per epoch and the test error of the averaged point and of the last iterate after each epoch, for
mini-batches of 1 and 16; beside it the BCFW SSVM (gap sampling, lambda = 1/n) at the same number of passes. With
``--conll``: the averaged perceptron on CoNLL-2000 chunking (load_task's plain featurization, d = 7.4M, sparse
updates), seconds per epoch and the test chunk F1 after each epoch and of the last iterate.

Writes benchmarks/results/perceptron_cpu.json.
Usage: python benchmarks/bench_perceptron.py [--epochs 10] [--conll]
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
    ap.add_argument("--conll", action="store_true", help="also CoNLL-2000 chunking (about 2 minutes a run)")
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
    if args.conll:
        out["conll2000"] = conll(args.epochs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "perceptron_cpu.json").write_text(json.dumps(out, indent=2) + "\n")


def conll(epochs: int) -> dict:
    from ssvm_torch.tasks import load_task
    problem = load_task("conll2000")
    run = train_perceptron(problem.model, problem.train, PerceptronConfig(epochs=epochs), evaluate=problem.evaluate)
    times = [b["time_s"] - a["time_s"] for a, b in zip([{"time_s": 0.0}] + run.history, run.history)]
    last = problem.evaluate(run.w_last)
    print(f"CoNLL-2000: {statistics.median(times):.1f} s/epoch (d = {problem.model.d}), test F1 averaged "
          f"{run.history[-1]['test_f1']:.2f} after {len(run.history)} epochs, last iterate {last['test_f1']:.2f}")
    return {"n_train": problem.train.n, "d": problem.model.d, "seconds_per_epoch_median": statistics.median(times),
            "mistakes": [r["mistakes"] for r in run.history], "test_f1_averaged": [r["test_f1"] for r in run.history],
            "test_f1_last_iterate": last["test_f1"]}


if __name__ == "__main__":
    main()
