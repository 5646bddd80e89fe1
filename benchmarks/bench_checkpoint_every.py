"""What ``--checkpoint`` costs a run and what ``--checkpoint-every SECONDS`` saves of it: ``ssvm-train`` (the
command users run, in this process) on one dataset with the exact gap every pass, without checkpoints, with a
checkpoint at every check, and with one at most every SECONDS (the last check always written). Wall time of
the whole command (the task's load included), alternating variants, median of repeats; the checkpoint's size
and the final gap (equal in every variant: checkpoints never change the run).

``--before DIR --commit C``: also the earlier package's command (``DIR/ssvm_torch_before``, made by ``git worktree
add /tmp/old C && cp -r /tmp/old/ssvm_torch DIR/ssvm_torch_before``) with a checkpoint at every check, side by side
in the same alternation (the checkpoint format's cost before and now).

Usage: python benchmarks/bench_checkpoint_every.py [--dataset conll2000] [--passes 8] [--gap-check 1]
       [--every 30] [--repeats 3] [--before DIR --commit C] [--out benchmarks/results/checkpoint_every_conll2000.json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.cli.train import main as ssvm_train


def run_once(command, common: list, extra: list, where: Path) -> dict:
    out = where / "run"
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    rc = command([*common, *extra, "--out", str(out), "--quiet"])
    wall = time.perf_counter() - t
    if rc != 0:
        raise SystemExit(f"ssvm-train {' '.join(common + extra)} exited {rc}")
    history = json.loads((out / "history.json").read_text())
    ck = out / "checkpoint.pt"
    return {"wall_s": wall, "solver_s": history[-1]["time_s"], "checks": len(history), "gap": history[-1]["gap"],
            "checkpoint_mb": ck.stat().st_size / 1e6 if ck.exists() else None}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="conll2000")
    p.add_argument("--lam", type=float, default=None, help="None = the task's default")
    p.add_argument("--passes", type=float, default=8)
    p.add_argument("--gap-check", type=float, default=1)
    p.add_argument("--every", type=float, default=30.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--before", type=Path, default=None, help="a folder holding an earlier package as ssvm_torch_before/")
    p.add_argument("--commit", default=None, help="--before: the earlier package's commit (recorded in the JSON)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.before is not None and not args.commit:
        p.error("--before needs --commit")
    common = ["--dataset", args.dataset, "--passes", str(args.passes), "--gap-check", str(args.gap_check),
              *(["--lam", str(args.lam)] if args.lam is not None else [])]
    variants = {"none": (ssvm_train, []), "every check": (ssvm_train, ["--checkpoint"]),
                f"every {args.every:g} s": (ssvm_train, ["--checkpoint", "--checkpoint-every", str(args.every)])}
    if args.before is not None:
        sys.path.insert(0, str(args.before))
        before = importlib.import_module("ssvm_torch_before.cli.train").main
        variants = {"before: every check": (before, ["--checkpoint"]), **variants}
    runs = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, (command, extra) in variants.items():
                runs[name].append(run_once(command, common, extra, Path(tmp)))
    base = statistics.median(r["wall_s"] for r in runs["none"])
    summary = {}
    for name, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        summary[name] = {"wall_s_median": wall, "wall_s": [r["wall_s"] for r in rs], "vs_none": wall / base,
                         "checks": rs[0]["checks"], "gap": rs[0]["gap"], "checkpoint_mb": rs[0]["checkpoint_mb"]}
        print(f"{name:>20}: {wall:7.2f} s wall (median of {len(rs)}; {wall / base:.3f}x no checkpoint), "
              f"{rs[0]['checks']} checks, gap {rs[0]['gap']:.6e}"
              + (f", checkpoint {rs[0]['checkpoint_mb']:.1f} MB" if rs[0]["checkpoint_mb"] else ""))
    gaps = {s["gap"] for s in summary.values()}
    if len(gaps) != 1:
        raise SystemExit(f"the variants ended at different gaps {gaps}: a checkpoint changed the run")
    result = {"dataset": args.dataset, "commit_before": args.commit, "passes": args.passes, "gap_check": args.gap_check, "every_s": args.every,
              "repeats": args.repeats, "machine": platform.processor() or platform.machine(), "variants": summary}
    if args.out:
        atomic_write_bytes(Path(args.out), json.dumps(result, indent=1).encode())
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
