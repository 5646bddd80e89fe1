"""How long a fresh process takes to start, at this checkout against an earlier commit, side by side in one run:
``import ssvm_torch`` and ``--help`` of the console commands (``ssvm-train``, ``ssvm-deep``, ``ssvm-parse``), each
a new Python process (``python -c`` / ``python -c "...main()"`` with the checkout first on PYTHONPATH), timed from
the parent's spawn to its exit: what every command a user types pays before it reads its data, and what every
test that runs a command or torchrun ranks pays too.

Each side runs in its own worker process (``commits.py``: a temporary git worktree of the earlier commit), the sides
alternated over rounds; a worker starts each case ``--calls`` times after one untimed start (the operating
system's file cache warm, as for a user's second command). The figure per side is the median over rounds of each
round's median.

Usage: python benchmarks/bench_startup_commits.py --baseline 8b8c9fb [--rounds 5] [--calls 5]
       [--out benchmarks/results/startup_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

CASES = {
    "import ssvm_torch": "import ssvm_torch",
    "ssvm-train --help": "import sys; sys.argv = ['ssvm-train', '--help']; import _ssvm_torch_cli as c; c.train()",
    "ssvm-deep --help": "import sys; sys.argv = ['ssvm-deep', '--help']; import _ssvm_torch_cli as c; c.deep()",
    "ssvm-parse --help": "import sys; sys.argv = ['ssvm-parse', '--help']; import _ssvm_torch_cli as c; c.parse()",
}


def worker(calls: int) -> dict:
    """One side's medians (ms) of a process start per case; the processes import this worker's checkout (the
    PYTHONPATH commits.run_worker set)."""
    import os
    import subprocess
    import ssvm_torch
    out = {"module": ssvm_torch.__file__, "cases": {}}
    checkout = Path(ssvm_torch.__file__).resolve().parents[1]

    def start(code):
        r = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=os.environ, capture_output=True)
        if r.returncode != 0:
            raise SystemExit(f"{code!r} failed at {checkout}:\n{r.stderr.decode()[-2000:]}")
    for name, code in CASES.items():
        out["cases"][name] = median_ms(lambda: start(code), calls)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/startup_commits.json", calls=5,
                       dtype="n/a")
