"""A task's block store at an earlier commit against this one, side by side in one process through the calls users
make: ``make_solver(task.store(lam), SolverConfig(bcfw, gap sampling, exact gap every pass)).run()`` on the task's
first ``--train-size`` training examples, the two packages alternated in every repeat (the first repeat warms
numba's caches and is not recorded), medians of ``--repeats``; the two runs' final gaps must agree.

The earlier package is imported under another name: ``git worktree add /tmp/old C && cp -r /tmp/old/ssvm_torch
DIR/ssvm_torch_before`` (and ``SSVM_TORCH_DATA`` pointing at this checkout's datasets/).

Usage: python benchmarks/bench_store_versions.py --task ud-ewt --before DIR --commit C [--train-size 2000]
       [--passes 3] [--repeats 5] [--lam L] [--out benchmarks/results/store_versions_ud-ewt.json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from ssvm_torch.atomic import atomic_write_bytes


def timed_run(package, problem, lam: float, passes: int) -> tuple[float, float]:
    """(seconds, final gap) of ``passes`` passes of BCFW with gap sampling and the exact gap every pass on
    ``problem``'s store, through ``package``'s ``make_solver`` (this package or an earlier one)."""
    solvers = importlib.import_module(f"{package.__name__}.solvers")
    config = solvers.SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=1, seed=0)
    store = problem.store(lam)
    t0 = time.perf_counter()
    hist = solvers.make_solver(store, config).run()
    return time.perf_counter() - t0, hist[-1]["gap"]


def versions(task: str, before: Path, commit: str, train_size: int, passes: int, repeats: int,
             lam: float | None) -> dict:
    sys.path.insert(0, str(before))
    packages = {"before": importlib.import_module("ssvm_torch_before"), "now": importlib.import_module("ssvm_torch")}
    problems = {k: importlib.import_module(f"{p.__name__}.tasks").load_task(task, train_size=train_size)
                for k, p in packages.items()}
    seconds, gaps = {k: [] for k in packages}, {}
    for r in range(repeats + 1):
        for tag, pkg in packages.items():
            problem = problems[tag]
            elapsed, gaps[tag] = timed_run(pkg, problem, lam if lam is not None else 1.0 / problem.n_train, passes)
            if r:
                seconds[tag].append(elapsed)
    if abs(gaps["before"] - gaps["now"]) > 1e-9 * max(1.0, abs(gaps["now"])):
        raise SystemExit(f"the two versions' runs end at different gaps: {gaps}")
    med = {k: statistics.median(v) for k, v in seconds.items()}
    return {"task": task, "commit_before": commit, "train_size": problems["now"].n_train, "passes": passes,
            "repeats": repeats, "gap": gaps["now"], "solver_s": med, "speedup": med["before"] / med["now"],
            "solver_s_all": seconds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--before", type=Path, required=True, help="a folder holding the earlier package as ssvm_torch_before/")
    p.add_argument("--commit", required=True, help="the earlier package's commit (recorded in the JSON)")
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--lam", type=float, default=None, help="default 1 / n")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__},
           **versions(args.task, args.before, args.commit, args.train_size, args.passes, args.repeats, args.lam)}
    print(f"{args.task}: {out['train_size']} examples, {args.passes} passes of BCFW + gap sampling (exact gap every "
          f"pass), medians of {args.repeats}: {args.commit} {out['solver_s']['before']:.3f} s, now "
          f"{out['solver_s']['now']:.3f} s ({out['speedup']:.2f}x); final gaps equal ({out['gap']:.6g})")
    path = Path(args.out or f"benchmarks/results/store_versions_{args.task}.json")
    atomic_write_bytes(path, json.dumps(out, indent=1).encode())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
