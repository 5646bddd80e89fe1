"""The constituency task's evaluation at this checkout against an earlier commit, through the API users call, side by
side in one run: ``load_task("ud-ewt-spans").evaluate(w)`` (what ``ssvm-train`` and ``ssvm-path`` run at every
record: labeled bracket F1 of the training and test splits by CKY) and ``task.predictions(w)`` (test_predictions.json)
at a fixed random w, on the first 2,000 training sentences and the 2,051 projective test sentences, one torch
thread; ``evaluate`` again under the commands' malloc setting (``cli/entry.py``: blocks of 4 MB and more mapped).

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git worktree
of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every call
``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_span_eval_commits.py --baseline e5f6c86 [--rounds 5] [--calls 5]
       [--out benchmarks/results/span_eval_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

TRAIN_SIZE = 2000


def worker(calls: int) -> dict:
    """One side's medians (ms) of evaluate and predictions, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.tasks import load_task
    task = load_task("ud-ewt-spans", train_size=TRAIN_SIZE)
    w = torch.randn(task.d, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.01
    out = {"module": ssvm_torch.__file__, "cases": {}}
    out["cases"][f"evaluate_train{TRAIN_SIZE}_test{task.n_test}"] = median_ms(lambda: task.evaluate(w), calls)
    if task.predictions is not None:
        out["cases"][f"predictions_test{task.n_test}"] = median_ms(lambda: task.predictions(w), calls)
    # as ssvm-train and ssvm-path run it: their malloc setting (blocks of 4 MB and more mapped; process-wide)
    from ssvm_torch.cli.entry import return_freed_memory
    if return_freed_memory():
        out["cases"][f"evaluate_train{TRAIN_SIZE}_test{task.n_test}_commands"] = median_ms(lambda: task.evaluate(w),
                                                                                            calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/span_eval_commits.json", argv, calls=5,
                       dtype="float64")


if __name__ == "__main__":
    main()
