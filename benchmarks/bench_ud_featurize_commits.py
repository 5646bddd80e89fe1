"""The first load of a UD English-EWT task (``load_task("ud-ewt", ...)``: reading, coding and featurizing the arc
designs with an empty feature cache, what ``ssvm-train --dataset ud-ewt`` does on its first run of a configuration)
at this checkout against an earlier commit, through the API users call, side by side in one run: McDonald's arc
template, the first 100 or 2,000 training sentences or all 12,544, evaluated on test or (``heldout="dev"``) on dev;
one thread (``--cases`` picks some: the whole training split takes about a minute per call at 96851ec).

Each call gets a new, empty ``SSVM_TORCH_CACHE`` folder, so every timed call featurizes. Each side runs in its own
worker process importing its checkout's package (``commits.py``: a temporary git worktree of the earlier commit),
the sides alternated over rounds after one warm-up run each (its numba kernels compiled and cached); a worker times
every case ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's
median.

Usage: python benchmarks/bench_ud_featurize_commits.py --baseline 96851ec [--rounds 3] [--calls 2]
       [--cases 0,1,2,3] [--out benchmarks/results/ud_featurize_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

CASES = [(100, None), (100, "dev"), (2000, None), (None, None)]        # (train_size, heldout)


def worker(calls: int) -> dict:
    """One side's medians (ms) of a first load per case, in this process."""
    import os
    import shutil
    import tempfile
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.tasks import load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}

    def first_load(train_size, heldout):
        folder = tempfile.mkdtemp(prefix="ssvm_featurize_")
        os.environ["SSVM_TORCH_CACHE"] = folder
        try:
            task = load_task("ud-ewt", train_size=train_size, heldout=heldout)
            assert not task.train.meta["featurization"]["cached"]
        finally:
            shutil.rmtree(folder)
    picked = [int(k) for k in os.environ.get("BENCH_CASES", "0,1,2").split(",")]
    for train_size, heldout in (CASES[k] for k in picked):
        name = f"train {train_size or 'all'}, evaluated on {heldout or 'test'}"
        out["cases"][name] = median_ms(lambda: first_load(train_size, heldout), calls)
    return out


if __name__ == "__main__":
    if "--cases" in sys.argv:                        # the workers read the choice from the environment
        at = sys.argv.index("--cases")
        import os
        os.environ["BENCH_CASES"] = sys.argv.pop(at + 1)
        sys.argv.pop(at)
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/ud_featurize_commits.json", calls=2,
                       dtype="float64")
