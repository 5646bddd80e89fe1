"""``ssvm-path`` at this checkout against an earlier commit, side by side in one run, as users run it: the whole
command (``python -m ssvm_torch.cli.path --dataset D --eps E``) in a child process per side, the sides alternated
over ``--rounds``, each child's peak resident memory (``os.wait4``'s ``ru_maxrss``), wall, user and system seconds,
the path's size on disk, its breakpoints and solver seconds, and whether both sides' records agree but their times.

The earlier commit is checked out in a temporary git worktree (benchmarks/commits.py) and run from there.

Usage: python benchmarks/bench_path_memory_commits.py --baseline da3a52a [--dataset conll2000] [--eps 0.1]
       [--rounds 1] [--out benchmarks/results/path_memory_commits.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import ROOT, baseline_worktree, revisions, write_side_by_side  # noqa: E402


def run_side(checkout: Path, dataset: str, eps: float, out: Path) -> dict:
    """One ``ssvm-path`` run of ``checkout``'s package in a child process: its resources and its path's figures."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "SSVM_TORCH_DATA": str(ROOT / "datasets")}
    cmd = [sys.executable, "-m", "ssvm_torch.cli.path", "--dataset", dataset, "--eps", str(eps), "--out", str(out),
           "--quiet"]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    err = child.stderr.read().decode()
    if status != 0:
        raise RuntimeError(f"{checkout}: ssvm-path exited with {status}: {err[-2000:]}")
    records = json.loads((out / "path.json").read_text())
    return {"peak_rss_mb": usage.ru_maxrss / 1024, "wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
            "path_pt_mb": (out / "path.pt").stat().st_size / 2 ** 20, "breakpoints": len(records),
            "solver_s": records[-1]["time_s"], "records": [{k: v for k, v in r.items() if k != "time_s"}
                                                           for r in records]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the earlier commit (any git revision)")
    p.add_argument("--dataset", default="conll2000")
    p.add_argument("--eps", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/path_memory_commits.json")
    args = p.parse_args(argv)
    revs = revisions(args.baseline)
    rounds = {"current": [], "baseline": []}
    with baseline_worktree(revs["baseline"]) as wt, tempfile.TemporaryDirectory(prefix="ssvm_path_") as tmp:
        sides = {"current": ROOT, "baseline": wt}
        for r in range(args.rounds):
            for name in (["current", "baseline"] if r % 2 == 0 else ["baseline", "current"]):
                got = run_side(sides[name], args.dataset, args.eps, Path(tmp) / f"{name}{r}")
                print(f"round {r} {name}: peak RSS {got['peak_rss_mb']:.0f} MB, path.pt {got['path_pt_mb']:.0f} MB, "
                      f"wall {got['wall_s']:.1f} s (user {got['user_s']:.1f}, sys {got['sys_s']:.1f}), "
                      f"{got['breakpoints']} breakpoints, solver {got['solver_s']:.1f} s", flush=True)
                rounds[name].append(got)
    same = all(c["records"] == b["records"] for c, b in zip(rounds["current"], rounds["baseline"]))
    table = {}
    for key in ("peak_rss_mb", "path_pt_mb", "wall_s", "user_s", "sys_s", "solver_s"):
        row = {f"{side}": statistics.median(rd[key] for rd in rounds[side]) for side in rounds}
        row["baseline_over_current"] = row["baseline"] / row["current"]
        table[key] = row
    table["records_equal_but_times"] = same
    print(json.dumps(table, indent=1))
    for side in rounds.values():
        for rd in side:
            rd.pop("records")
    write_side_by_side(args.out, revs, args.rounds, 1, table, rounds, dataset=args.dataset, eps=args.eps,
                       threads="ssvm-path's defaults (--threads 1)")


if __name__ == "__main__":
    main()
