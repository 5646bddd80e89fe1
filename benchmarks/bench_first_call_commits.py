"""A layer's first call in a fresh process with an empty numba cache (a fresh install, or a new dtype or layout),
at this checkout against an earlier commit, side by side in one run: the compile time a user pays once per
install before the first batch trains, and every test process that is the first to need a kernel.

Each case runs in a new Python process whose ``NUMBA_CACHE_DIR`` is a new empty folder: the imports and the
inputs untimed, then the case's first call timed (the layer's loss and its backward, or its decode, as a training
loop or a tagger makes them: compile plus one run). Each side runs in its own worker process (``commits.py``: a
temporary git worktree of the earlier commit), the sides alternated over rounds; a worker starts each case
``--calls`` times. The figure per side is the median over rounds of each round's median, in ms.

Usage: python benchmarks/bench_first_call_commits.py --baseline 2803599 [--rounds 3] [--calls 1]
       [--out benchmarks/results/first_call_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side  # noqa: E402

SETUP = """
import time, torch
from ssvm_torch.nn import ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment, SemiMarkovChain
g = torch.Generator().manual_seed(0)
B, T = 8, 20
"""
# each case: (set-up code, the timed first call); float32 inputs, as a network gives them
CASES = {
    "LinearChain crf loss + backward": (
        "layer = LinearChain(9, batch_first=True, loss='crf')\n"
        "E = torch.randn(B, T, 9, generator=g).requires_grad_()\ntags = torch.randint(0, 9, (B, T), generator=g)",
        "layer(E, tags).backward()"),
    "LinearChain decode": (
        "layer = LinearChain(9, batch_first=True)\nE = torch.randn(B, T, 9, generator=g)",
        "layer.decode(E)"),
    "DependencyTree crf loss + backward": (
        "layer = DependencyTree(loss='crf')\nS = torch.randn(B, T + 1, T + 1, generator=g).requires_grad_()\n"
        "heads = torch.arange(-1, T).expand(B, T + 1).clone()            # word i's head: i - 1 (a chain)",
        "layer(S, heads).backward()"),
    "ConstituencyTree crf loss + backward": (
        "layer = ConstituencyTree(loss='crf')\nS = torch.randn(B, T + 1, T + 1, generator=g).requires_grad_()\n"
        "gold = torch.zeros(B, T + 1, T + 1, dtype=torch.bool)\n"
        "for i in range(T):\n    gold[:, i, i + 1] = True\nfor j in range(2, T + 1):\n    gold[:, 0, j] = True",
        "layer(S, gold).backward()"),
    "SemiMarkovChain crf loss + backward": (
        "layer = SemiMarkovChain(5, 4, loss='crf')\nS = torch.randn(B, T, 4, 5, generator=g).requires_grad_()\n"
        "gold = torch.zeros(B, T, dtype=torch.long)",
        "layer(S, gold).backward()"),
    "MonotonicAlignment crf loss + backward": (
        "layer = MonotonicAlignment(loss='crf')\nS = torch.randn(B, T, T, 3, generator=g).requires_grad_()\n"
        "path = torch.full((B, T, T), -1, dtype=torch.long)\npath[:, 0, 0] = 1\n"
        "for i in range(1, T):\n    path[:, i, i] = 1",
        "layer(S, path).backward()"),
}


def worker(calls: int) -> dict:
    """One side's medians (ms) of the first call per case, each call in a new process with an empty numba cache;
    the processes import this worker's checkout (the PYTHONPATH commits.run_worker set)."""
    import os
    import statistics
    import subprocess
    import tempfile

    import ssvm_torch
    out = {"module": ssvm_torch.__file__, "cases": {}}
    checkout = Path(ssvm_torch.__file__).resolve().parents[1]
    for name, (setup, call) in CASES.items():
        code = (SETUP + setup + "\nt0 = time.perf_counter()\n" + call
                + "\nprint(1e3 * (time.perf_counter() - t0))\n")
        times = []
        for _ in range(calls):
            with tempfile.TemporaryDirectory(prefix="ssvm_numba_cache_") as cache:
                r = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True,
                                   env={**os.environ, "NUMBA_CACHE_DIR": cache})
            if r.returncode != 0:
                raise SystemExit(f"{name} failed at {checkout}:\n{r.stderr[-2000:]}")
            times.append(float(r.stdout.strip().splitlines()[-1]))
        out["cases"][name] = statistics.median(times)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/first_call_commits.json", calls=1,
                       dtype="float32", rounds=3)
