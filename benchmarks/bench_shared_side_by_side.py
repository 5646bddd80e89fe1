"""The shared exchange side by side with an earlier commit, in one run: ``ssvm-train --exchange shared`` under
``torchrun`` at P ranks on CoNLL-2000 (bench_rounds_2core.py's command) for a fixed number of passes, from
this checkout and from ``--before`` (a ``git worktree`` of the earlier commit), alternated ``--reps`` times
after one untimed warm-up of each (numba's cache). Prints and writes each run's time, the slowest rank's
seconds in steps and in the checks' mirror sums (``sync_s`` of ranks.json: the sums and the snapshot), and the
medians.

Usage: git worktree add /tmp/before <commit> &&
       python benchmarks/bench_shared_side_by_side.py --before /tmp/before [--procs 2] [--passes 60] [--reps 4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_distributed_2core import ROOT, torchrun  # noqa: E402
from bench_rounds_2core import CONFIGS  # noqa: E402

from ssvm_torch.atomic import atomic_write_bytes  # noqa: E402


def one_run(tree: Path, procs: int, passes: int, dataset: str, out: Path) -> dict:
    """One command from the package tree ``tree`` (its own directory first on the path)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "SSVM_SHARED_PIN": "none",
           "PYTHONPATH": str(tree)}
    cmd = torchrun(procs) + ["-m", "ssvm_torch.cli.train", *CONFIGS[dataset][0], "--passes", str(passes),
                             "--exchange", "shared", "--out", str(out)]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{tree}: exit {p.returncode}\n{p.stderr[-3000:]}")
    hist = json.loads((out / "history.json").read_text())
    recs = hist["records"] if isinstance(hist, dict) else hist
    ranks = json.loads((out / "ranks.json").read_text())
    return {"time_s": recs[-1]["time_s"], "gap": recs[-1]["gap"], "checks": len(recs) - 1,
            "steps_s": max(r["steps_s"] for r in ranks), "sync_s": max(r["sync_s"] for r in ranks)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="a checkout (git worktree) of the earlier commit")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--passes", type=int, default=60)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--dataset", default="conll2000", choices=list(CONFIGS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed_2core" / "side_by_side.json"))
    args = ap.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    if not (trees["before"] / "ssvm_torch").is_dir():
        raise SystemExit(f"--before: expected a checkout with ssvm_torch/, got {trees['before']}")
    runs = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree in trees.items():                                  # untimed: numba's cache of each tree
            one_run(tree, args.procs, 2, args.dataset, Path(tmp) / name)
        for rep in range(args.reps):
            for name, tree in trees.items():
                runs[name].append(one_run(tree, args.procs, args.passes, args.dataset, Path(tmp) / name))
                print(f"rep {rep} {name}: {runs[name][-1]}", flush=True)
    medians = {k: {m: statistics.median(r[m] for r in v) for m in ("time_s", "steps_s", "sync_s")}
               for k, v in runs.items()}
    print(json.dumps(medians))
    result = {"machine": {"cpus": os.cpu_count()}, "dataset": args.dataset, "procs": args.procs,
              "passes": args.passes, "before": str(trees["before"]), "medians": medians, "runs": runs}
    atomic_write_bytes(Path(args.out), json.dumps(result, indent=1).encode())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
