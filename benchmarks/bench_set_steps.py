"""Block steps with working sets (pairwise / away / best steps, the gap cache of Osokin et al. 2016, Alg. 3-5) on
an OCR chain: an earlier package against this one, side by side in one process through ``make_solver``,
alternating, median of repeats. The trajectories must be equal (every record but its time: the same steps), and
the figure is the solver's seconds per block step. BCFW with plain FW steps (no sets, ``bcfw-gap``) is the step a
working-set step has to compete with. ``--seconds S`` also runs each method (and BCFW) for S solver seconds
with each package and prints the duality gap it reached (median of the repeats): what the step's cost means for
the user's run.

``--before DIR --commit C``: the earlier package as ``DIR/ssvm_torch_before`` (``git worktree add /tmp/old C && cp
-r /tmp/old/ssvm_torch DIR/ssvm_torch_before``).

Usage: python benchmarks/bench_set_steps.py --before DIR --commit C [--dataset ocr-small] [--lam 0.01]
       [--passes 30] [--repeats 3] [--methods bcpfw-gap-cache,...] [--seconds 6]
       [--out benchmarks/results/set_steps_ocr-small.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from commits import add_before_options, before_and_now
from ssvm_torch.atomic import atomic_write_bytes

#: name -> SolverConfig fields (BCFW with gap sampling, the steps of Osokin et al. 2016)
METHODS = {"bcpfw-gap-cache": dict(step="pairwise", cache=True), "bcpfw-gap": dict(step="pairwise"),
           "bcafw-gap-cache": dict(step="away", cache=True), "best-gap-cache": dict(step="best", cache=True),
           "bcfw-gap-cache": dict(step="fw", cache=True), "bcfw-gap": {}}


def run(package, dataset: str, lam: float, passes: float, fields: dict, seconds: float | None = None,
        train_size: int | None = None) -> dict:
    task = package.load_task(dataset, train_size=train_size)
    budget = {} if seconds is None else {"time_budget": seconds}
    cfg = package.SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=5, seed=0, **budget, **fields)
    solver = package.solvers.make_solver(task.store(lam), cfg)
    t = time.perf_counter()
    history = solver.run()
    wall = time.perf_counter() - t
    last = history[-1]
    return {"solver_s": last["time_s"], "wall_s": wall, "gap": last["gap"], "oracle_passes": last["passes"],
            "steps": solver.state.steps, "us_per_step": 1e6 * last["time_s"] / solver.state.steps,
            "cache_hits": last.get("cache_hits", 0),
            "records": [{k: v for k, v in r.items() if k != "time_s"} for r in history]}


def same_records(a: list, b: list, rtol: float) -> bool:
    """Whether two histories hold the same records (every value equal, or numbers within ``rtol``)."""
    if rtol == 0.0 or len(a) != len(b):
        return a == b
    close = lambda x, y: (x == y or isinstance(x, (int, float)) and isinstance(y, (int, float))  # noqa: E731
                          and abs(x - y) <= rtol * max(abs(x), abs(y)))
    return all(r.keys() == s.keys() and all(close(r[k], s[k]) for k in r) for r, s in zip(a, b))


def budget_runs(packages: dict, methods: list, args) -> dict:
    """Each method for ``args.seconds`` solver seconds with each package: the median of the repeats'
    final gaps, with their oracle passes and steps."""
    out = {}
    for m in methods:
        fields = METHODS[m]
        out[m] = {}
        for name, package in packages.items():
            rs = [run(package, args.dataset, args.lam, 1e9, fields, args.seconds, args.train_size)
                  for _ in range(args.repeats)]
            gaps = [r["gap"] for r in rs]
            out[m][name] = {"median_gap": statistics.median(gaps), "gaps": gaps,
                            "oracle_passes": [r["oracle_passes"] for r in rs], "steps": [r["steps"] for r in rs]}
        line = "; ".join(f"{k} {v['median_gap']:.4e} ({statistics.median(v['oracle_passes']):.0f} oracle passes, "
                         f"{statistics.median(v['steps'])} steps)" for k, v in out[m].items())
        print(f"{m:>16} after {args.seconds:g} s: gap {line}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_before_options(p)
    p.add_argument("--dataset", default="ocr-small")
    p.add_argument("--lam", type=float, default=0.01)
    p.add_argument("--train-size", type=int, default=None,
                   help="the first N training examples of a task that takes a size (None: all of them)")
    p.add_argument("--passes", type=float, default=30, help="oracle passes (cache hits are not passes)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--seconds", type=float, default=None,
                   help="also run each method for this many solver seconds and report the gap reached "
                        "(None: only the fixed passes)")
    p.add_argument("--rtol", type=float, default=0.0,
                   help="records must agree to this relative tolerance (0: exactly, the same steps float for float)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; expected names of {sorted(METHODS)}")
    torch.set_num_threads(1)
    packages = before_and_now(args.before)
    for package in packages.values():                # warm-up: numba's compile caches, the data
        for m in methods:
            run(package, args.dataset, args.lam, 2, METHODS[m], train_size=args.train_size)
    runs = {m: {"before": [], "now": []} for m in methods}
    for _ in range(args.repeats):
        for m in methods:
            for name, package in packages.items():
                runs[m][name].append(run(package, args.dataset, args.lam, args.passes, METHODS[m],
                                              train_size=args.train_size))
    summary = {}
    for m in methods:
        if not same_records(runs[m]["before"][0]["records"], runs[m]["now"][0]["records"], args.rtol):
            raise SystemExit(f"{m}: the two packages' trajectories differ (rtol {args.rtol:g}): not the same steps")
    for m, sides in runs.items():
        med = {k: statistics.median(r["solver_s"] for r in rs) for k, rs in sides.items()}
        r = sides["now"][0]
        line = {"median_solver_s": med, "steps": r["steps"], "oracle_passes": r["oracle_passes"], "gap": r["gap"],
                "cache_hits": r["cache_hits"], "us_per_step": {k: 1e6 * v / r["steps"] for k, v in med.items()}}
        if "before" in med:
            line["speedup"] = med["before"] / med["now"]
        summary[m] = line
        each = "; ".join(f"{k} {v:.2f} s ({line['us_per_step'][k]:.1f} us/step)" for k, v in med.items())
        ratio = f", {line['speedup']:.2f}x faster than {args.commit}" if "speedup" in line else ""
        print(f"{m:>16}: {each}{ratio}; {r['steps']} steps, {r['oracle_passes']:.0f} oracle passes, "
              f"{r['cache_hits']} cache hits, gap {r['gap']:.4e}")
    budget = budget_runs(packages, methods, args) if args.seconds else None
    if args.out:
        result = {"dataset": args.dataset, "train_size": args.train_size, "lam": args.lam, "passes": args.passes,
                  "repeats": args.repeats,
                  "commit_before": args.commit, "machine": platform.processor() or platform.machine(),
                  "summary": summary, "seconds": args.seconds, "gap_after_seconds": budget,
                  "runs": {m: {k: [{key: v for key, v in r.items() if key != "records"} for r in rs]
                               for k, rs in sides.items()} for m, sides in runs.items()}}
        atomic_write_bytes(Path(args.out), json.dumps(result, indent=1).encode())
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
