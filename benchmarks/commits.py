"""This checkout against an earlier commit, side by side in one run (the benchmarks' ``--baseline``): the
earlier commit checked out in a temporary git worktree, each side's measurements in a worker process that
imports its own checkout's ``ssvm_torch`` (PYTHONPATH), and a check that it did.

Used by ``bench_layer_commits.py`` (the chain layer) and ``bench_ud_deep_speed.py --baseline`` (the parser).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def revisions(baseline: str) -> dict:
    """The commits of both sides: ``current`` (HEAD; ``current_dirty`` when tracked files differ from it, the
    measured code then being HEAD plus those changes) and ``baseline`` (``baseline`` resolved)."""
    return {"current": git("rev-parse", "HEAD"), "current_dirty": bool(git("status", "--porcelain",
                                                                           "--untracked-files=no")),
            "baseline": git("rev-parse", baseline)}


@contextlib.contextmanager
def baseline_worktree(rev: str):
    """A detached worktree of ``rev`` in a temporary folder, removed (with the folder) on exit."""
    with tempfile.TemporaryDirectory(prefix="ssvm_baseline_") as tmp:
        wt = Path(tmp) / "baseline"
        git("worktree", "add", "--detach", str(wt), rev)
        try:
            yield wt
        finally:
            git("worktree", "remove", "--force", str(wt))


def run_worker(checkout: Path, script: Path, args: list, threads: int = 1) -> dict:
    """Run ``script --worker *args`` with ``checkout``'s package first on the path and ``threads`` OpenMP /
    numba threads; its last stdout line is a JSON object whose ``module`` (``ssvm_torch.__file__``) must lie
    in ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads),
           "NUMBA_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, str(script), "--worker", *map(str, args)], env=env, capture_output=True,
                       text=True, cwd=checkout)
    if r.returncode != 0:
        raise SystemExit(f"worker at {checkout} failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if not Path(res["module"]).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"the worker for {checkout} imported {res['module']} (another checkout's ssvm_torch)")
    return res
