"""One-thread runs in a process whose numba pool is the machine's default size (what a user's ``ssvm-train``
process is: ``--threads 1`` sets torch's count only), at this checkout against an earlier commit, side by side in
one run through the API users call: a perceptron epoch on conll2000-segments (the semi-Markov model) and on
conll2000 (the chain model with ssvm-train's features), and BCFW passes on conll2000-segments' store, after one
evaluation (a batched decode: the first parallel kernel). Before ssvm_torch/devices.py's start_numba_threads, numba's
OpenMP pool, started lazily after a serial kernel, reset torch's thread count to numba's (2 on the 2-core machine),
and the runs' torch ops ran on two threads.

The workers do not pin OMP_NUM_THREADS / NUMBA_NUM_THREADS (commits.run_worker with threads=None); each records
torch's thread count after its cases. Per side the median over rounds of each round's median.

With ``BENCH_BUSY=N`` in the environment each worker keeps N other processes spinning on the CPU while it times
(another one-thread run beside it: ``--threads 1`` exists so that two runs share two cores).

Usage: python benchmarks/bench_threads_commits.py --baseline 5eee8f2 [--rounds 3] [--calls 1]
       [--out benchmarks/results/threads_commits.json]
       BENCH_BUSY=1 python benchmarks/bench_threads_commits.py --baseline 5eee8f2 --out
       benchmarks/results/threads_commits_busy.json
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

TRAIN = {"conll2000-segments": 500, "conll2000": 1000}


def _spin():
    while True:
        pass


def worker(calls: int) -> dict:
    import multiprocessing
    import os
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(int(os.environ.get("BENCH_BUSY", 0)))]
    for p in busy:
        p.start()
    try:
        return _cases(calls) | {"busy_processes": len(busy)}
    finally:
        for p in busy:
            p.terminate()


def _cases(calls: int) -> dict:
    import torch
    torch.set_num_threads(1)                     # ssvm-train --threads 1
    import ssvm_torch
    from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
    from ssvm_torch.solvers import SolverConfig, make_solver
    from ssvm_torch.tasks import get_task, load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}
    tasks = {}
    for name, n in TRAIN.items():
        opts = get_task(name).options(features=None, min_count=None, loss=None, constraints=None, tags=None,
                                      trees=None, siblings=None, inference=None)
        tasks[name] = load_task(name, train_size=n, **opts)
        tasks[name].evaluate(torch.zeros(tasks[name].d, dtype=torch.float64))     # a batched decode first
    for name, task in tasks.items():
        out["cases"][f"perceptron epoch, {name} train {TRAIN[name]}"] = median_ms(
            lambda: train_perceptron(task.model, task.train, PerceptronConfig(epochs=1)), calls)
    seg = tasks["conll2000-segments"]

    def bcfw():
        make_solver(seg.store(), SolverConfig(solver="bcfw", sampling="gap", passes=2, gap_check=2)).run()
    out["cases"]["BCFW 2 passes + a gap check, conll2000-segments train 500"] = median_ms(bcfw, calls)
    out["torch_threads_after"] = torch.get_num_threads()
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/threads_commits.json", calls=1,
                       dtype="float64", threads=None, rounds=3)
