"""This checkout against an earlier commit, side by side in one run (the benchmarks' ``--baseline``): the
earlier commit checked out in a temporary git worktree, each side's measurements in a worker process that
imports its own checkout's ``ssvm_torch`` (PYTHONPATH), and a check that it did.

Used by ``bench_layer_commits.py`` (the chain layer) and ``bench_ud_deep_speed.py --baseline`` (the parser);
:func:`cases_side_by_side` is the whole command line of the benchmarks of per-case medians
(``bench_tree_sampling_commits.py``, ``bench_chain_kl_commits.py``).

The in-process form (``--before DIR --commit C``: :func:`add_before_options`, :func:`before_and_now`) imports an
earlier package copied as ``DIR/ssvm_torch_before`` (``git worktree add /tmp/old C && cp -r /tmp/old/ssvm_torch
DIR/ssvm_torch_before``) beside this one, for benchmarks that alternate the two in one process.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_before_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``--before DIR`` (a folder holding an earlier package as ssvm_torch_before/) and ``--commit C`` (its commit)."""
    p.add_argument("--before", type=Path, required=required,
                   help="a folder holding an earlier package as ssvm_torch_before/")
    p.add_argument("--commit", required=required, help="the earlier package's commit (recorded in the JSON)")


def before_and_now(folder: Path) -> dict:
    """{"before": the package ``folder``/ssvm_torch_before, "now": this checkout's ssvm_torch}, both imported."""
    sys.path.insert(0, str(folder))
    return {"before": importlib.import_module("ssvm_torch_before"), "now": importlib.import_module("ssvm_torch")}


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


def run_worker(checkout: Path, script: Path, args: list, threads: int | None = 1) -> dict:
    """Run ``script --worker *args`` with ``checkout``'s package first on the path and ``threads`` OpenMP /
    numba threads (None: the machine's defaults, as a user's process has them); its last stdout line is a JSON
    object whose ``module`` (``ssvm_torch.__file__``) must lie in ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, str(script), "--worker", *map(str, args)], env=env, capture_output=True,
                       text=True, cwd=checkout)
    if r.returncode != 0:
        raise SystemExit(f"worker at {checkout} failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if not Path(res["module"]).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"the worker for {checkout} imported {res['module']} (another checkout's ssvm_torch)")
    return res


def alternated_rounds(sides: dict, script: Path, worker_args: list, rounds: int, warm_args: list | None = None,
                      threads: int | None = 1):
    """{side: [one worker's JSON per round]}: every side's worker run once to warm its numba cache (with
    ``warm_args``, default ``worker_args``), then ``rounds`` rounds, the order of the sides reversed every other
    round so that neither always runs first; ``threads`` as :func:`run_worker`'s."""
    for path in sides.values():
        run_worker(path, script, warm_args if warm_args is not None else worker_args, threads)
    out = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(run_worker(sides[name], script, worker_args, threads))
    return out


def write_side_by_side(out: str, revs: dict, rounds: int, calls: int, table: dict, every_round: dict,
                       **setting) -> None:
    """The JSON of a side-by-side benchmark at ``out``: the machine, Python, the measured ``setting`` (dtype,
    threads, shapes), both commits (:func:`revisions`), the rounds and calls, the load average when it is written,
    the summary ``table`` and every round's raw figures."""
    result = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              **setting, **revs, "rounds": rounds, "calls": calls, "load_average_at_start": list(os.getloadavg()),
              "table": table, "every_round": every_round}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


def side_by_side_rounds(script: Path, doc: str, worker, default_out: str, argv=None, rounds: int = 5,
                        knob: tuple = ("--calls", int, 15), threads: int | None = 1):
    """The shared command line of the side-by-side benchmarks: ``--baseline`` (required), ``--rounds``, ``--out``
    and the worker's ``knob`` (name, type, default: e.g. ``--calls``); ``--worker`` prints one side's
    ``worker(knob's value)`` and returns None; otherwise both sides are alternated over ``--rounds``
    (:func:`alternated_rounds`, warmed with the knob at 1) and (args, :func:`revisions`, the rounds) is returned."""
    name, kind, default = knob
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--baseline", help="the earlier commit (any git revision; required)")
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument(name, type=kind, default=default)
    p.add_argument("--out", default=default_out)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    value = getattr(args, name.lstrip("-").replace("-", "_"))
    if args.worker:
        print(json.dumps(worker(value)))
        return None
    if not args.baseline:
        p.error("--baseline is required")
    revs = revisions(args.baseline)
    with baseline_worktree(revs["baseline"]) as wt:
        out = alternated_rounds({"current": ROOT, "baseline": wt}, script.resolve(), [name, value], args.rounds,
                                [name, 1], threads)
    return args, revs, out


def cases_side_by_side(script: Path, doc: str, worker, default_out: str, argv=None, calls: int = 15,
                       dtype: str = "float32", threads: int | None = 1, rounds: int = 5) -> None:
    """The command line of a benchmark of per-case medians ("cases": {name: ms}) at this checkout against
    ``--baseline`` (:func:`side_by_side_rounds`, whose knob is ``--calls``): each case's figure is the median over
    rounds of the round medians, printed with the speed-up and written by :func:`write_side_by_side` (``dtype`` as
    recorded, one thread)."""
    got = side_by_side_rounds(script, doc, worker, default_out, argv, rounds, ("--calls", int, calls), threads)
    if got is None:
        return
    args, revs, rounds = got
    table = {}
    for key in rounds["current"][0]["cases"]:
        row = {f"{side}_ms": statistics.median(rd["cases"][key] for rd in rounds[side]) for side in rounds}
        row["speedup_vs_baseline"] = row["baseline_ms"] / row["current_ms"]
        table[key] = row
        print(f"{key}: {row['current_ms']:.2f} ms (baseline {row['baseline_ms']:.2f}, "
              f"x{row['speedup_vs_baseline']:.2f})", flush=True)
    write_side_by_side(args.out, revs, args.rounds, args.calls, table, rounds, dtype=dtype,
                       threads=1 if threads == 1 else "torch 1, numba and OpenMP the machine's defaults")


def median_ms(call, calls: int) -> float:
    """A worker's figure for one case: ``call()`` once untimed (caches, allocations), then the median of ``calls``
    timed calls, in milliseconds."""
    import time
    call()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)
