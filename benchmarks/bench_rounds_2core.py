"""Time to a certified duality gap: ``ssvm-train`` in one process (BCFW, batch size 1, gap sampling) against
the same command under ``torchrun --nproc-per-node P ... --exchange E`` (static rendezvous, bench_distributed_2core.torchrun) for each P of
``--procs`` and the exchange E of ``--exchange`` (``rounds`` or ``shared``; docs/distributed.md, "The
rounds exchange" and "The shared exchange"), alternated ``--reps`` times, one thread per process
(``launch`` of bench_distributed_2core.py). The time of a run is ``time_s`` of its first record whose
exact gap is at or under the dataset's threshold (every run checks the gap at the same passes); a
speed-up is the one-process median over the P-rank median. The CoNLL-2000 and UD English-EWT
thresholds are ones the one-process run needs at least 60 s for on this 2-core machine. Writes
benchmarks/results/distributed_2core/<exchange>.json (``--out``: the device check's 16-core stage
writes its own).

Usage: python benchmarks/bench_rounds_2core.py [--exchange rounds] [--datasets ocr-large conll2000 ud-ewt] [--reps 3]
       [--procs 2] [--fixed-too] [--pin-too] [--rebuild-too] [--pin-rebuild-too] [--one-rank-too]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_distributed_2core import ROOT, launch  # noqa: E402

from ssvm_torch.atomic import atomic_write_bytes  # noqa: E402

# --eval-every 0: the figure is solver time (records' time_s), which the task's errors never entered; evaluating
# every record (~0.3 s each on CoNLL-2000, 76 records to its threshold) only made each command longer (wall_s)
COMMON = ["--solver", "bcfw", "--sampling", "gap", "--seed", "0", "--eval-every", "0", "--quiet"]
CONFIGS = {   # (options, gap threshold): the commands
    "ocr-large": (["--dataset", "ocr-large", "--lam", "1e-3", "--gap-check", "1", "--passes", "400", *COMMON], 0.1),
    "conll2000": (["--dataset", "conll2000", "--features", "sha-pereira", "--tags", "bio", "--constraints", "none",
                   "--loss", "normalized", "--lam", "0.03", "--gap-check", "2", "--passes", "400", *COMMON], 3e-4),
    "ud-ewt": (["--dataset", "ud-ewt", "--lam", "3e-3", "--gap-check", "2", "--passes", "200", *COMMON], 0.07),
}

# the shared exchange's variants timed beside its default (--<name>-too): their environment and what they are
VARIANTS = {
    "fixed": ({"SSVM_SHARED_ROUND": "fixed"}, "fixed shares of a round's steps (SSVM_SHARED_ROUND=fixed, the "
                                              "exchange before round sharing)"),
    "pin": ({"SSVM_SHARED_PIN": "compact"}, "its ranks pinned to cores of their own (SSVM_SHARED_PIN=compact)"),
    "rebuild": ({"SSVM_SHARED_MIRROR": "rebuild"}, "each rank's mirror rebuilt at every check instead of written at "
                                                   "every move (SSVM_SHARED_MIRROR=rebuild)"),
    "pin_rebuild": ({"SSVM_SHARED_PIN": "compact", "SSVM_SHARED_MIRROR": "rebuild"}, "both of the above"),
}


def time_to_gap(out: Path, threshold: float) -> dict:
    hist = json.loads((out / "history.json").read_text())
    recs = hist["records"] if isinstance(hist, dict) else hist
    hit = next((r for r in recs if r["gap"] is not None and r["gap"] <= threshold), None)
    return {"time_s": None if hit is None else hit["time_s"], "passes": None if hit is None else hit["passes"],
            "curve": [{k: r[k] for k in ("passes", "time_s", "gap")} for r in recs]}


def run(name: str, procs: int, tmp: Path, exchange: str, passes: int | None = None, env: dict | None = None,
        as_rank: bool = False) -> dict:
    """One command's time to the dataset's gap threshold; ``passes`` cuts it short (the warm-up); ``env``: the
    shared exchange's settings of the mode (``SSVM_SHARED_ROUND=fixed``: every rank its own share of a round's
    steps, the exchange before round sharing; ``SSVM_SHARED_PIN=compact``: each rank pinned to a core of its
    own, ssvm_torch/distributed/affinity.py); ``as_rank``: one process as a rank of the exchange under torchrun
    (its steps with the mirror, and their profile: the baseline of the P-rank steps' cost)."""
    options, threshold = CONFIGS[name]
    args = [*options, "--gap-threshold", str(threshold)] + (["--exchange", exchange] if procs > 1 or as_rank else [])
    args += [] if passes is None else ["--passes", str(passes)]          # the last --passes is the one parsed
    out = tmp / f"{name}-{procs}{'-rank' if as_rank else ''}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    p = launch(args, out, procs, {"SSVM_SHARED_ROUND": "shared", "SSVM_SHARED_PIN": "none",
                                  "SSVM_SHARED_MIRROR": "steps", **(env or {})}, as_rank)
    _, err = p.communicate()
    if p.returncode:
        raise SystemExit(f"{name} P={procs}: exit {p.returncode}\n{err[-3000:]}")
    # the whole command's seconds beside the solver's: start-up (imports, rendezvous, loading) shows here; the
    # ranks' profile (ranks.json: each rank's steps and its seconds in steps, gap passes, mirror sums, barrier
    # waits and collectives, its CPUs if pinned) says where a P-rank run's time went (issue 74: what holds P = 8)
    ranks = json.loads((out / "ranks.json").read_text()) if (out / "ranks.json").exists() else None
    return {**time_to_gap(out, threshold), "wall_s": time.perf_counter() - t0, "ranks": ranks}


def profile_summary(ranks: list | None) -> str:
    """The ranks' profile in a few figures: steps (fewest-most), seconds in steps, gap passes and waits (mean)."""
    if not ranks or "steps_s" not in ranks[0]:
        return ""
    def mean(key):
        return sum(r[key] for r in ranks) / len(ranks)
    steps = [r["steps"] for r in ranks]
    return (f" [ranks: {min(steps)}-{max(steps)} steps, mean {mean('steps_s'):.2f} s steps, {mean('gap_s'):.2f} s gap "
            f"passes, {mean('sync_s'):.2f} s mirror sums, {mean('wait_s'):.2f} s barriers, {mean('comm_s'):.2f} s "
            "collectives" + (f", CPUs {[r['cpus'] for r in ranks]}" if ranks[0].get("cpus") else "") + "]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--exchange", choices=["rounds", "shared"], default="rounds")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--procs", type=int, nargs="+", default=[2], help="the numbers of ranks beside one process")
    ap.add_argument("--one-process-last", action="store_true",
                    help="run the ranks first and the one-process baseline last (a run cut by a time limit keeps "
                         "the P-rank figures; the device check: its baseline was measured on an earlier lease)")
    ap.add_argument("--no-warm", action="store_true",
                    help="skip the untimed warm-up commands (one process and the largest P, 2 passes each) that "
                         "fill numba's on-disk cache before the first timed run")
    for name, (_, what) in VARIANTS.items():
        ap.add_argument(f"--{name.replace('_', '-')}-too", action="store_true",
                        help=f"--exchange shared: each P also with {what}, alternated in the same run; its median "
                             f"and speed-up under the key 'P_{name}'")
    ap.add_argument("--one-rank-too", action="store_true",
                    help="also one process as a rank of the exchange under torchrun (key '1_rank'): its profile gives "
                         "the cost of a step with no other rank, against which the P-rank steps' cost is read")
    ap.add_argument("--out", default=None, help="default benchmarks/results/distributed_2core/<exchange>.json")
    args = ap.parse_args()
    args.out = args.out or str(ROOT / "benchmarks" / "results" / "distributed_2core" / f"{args.exchange}.json")
    out = Path(args.out)
    kept = json.loads(out.read_text())["datasets"] if out.exists() else {}     # the datasets not rerun stay
    result = {"machine": {"cpus": os.cpu_count()}, "exchange": args.exchange, "procs": args.procs,
              "warm": not args.no_warm,
              "datasets": {k: v for k, v in kept.items() if k not in args.datasets}}
    # each mode's label (its key in the JSON) and (ranks, the shared exchange's settings)
    modes = {p: (p, {}, False) for p in args.procs}
    for name, (env, _) in VARIANTS.items():
        if getattr(args, f"{name}_too") and args.exchange == "shared":
            modes.update({f"{p}_{name}": (p, env, False) for p in args.procs})
    if args.one_rank_too:
        modes["1_rank"] = (1, {}, True)
    modes[1] = (1, {}, False)
    ranks = [m for m in modes if m != 1]
    counts = [*ranks, 1] if args.one_process_last else [1, *ranks]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            if not args.no_warm:
                # numba compiles into an empty cache inside whichever command runs first (issue 74: P = 2 ran
                # first on the 16-core machine and its first record came at 6.7 s against 0.8 s warm); one
                # short command of each kind fills the cache before any clock starts
                for procs in sorted({1, max(args.procs)}):
                    warm = run(name, procs, Path(tmp), args.exchange, passes=2)
                    print(f"{name:10s} warm-up P={procs}: {warm['wall_s']:.1f} s", flush=True)
            runs = []
            for rep in range(args.reps):                 # alternated: the machine's drift hits both alike
                for procs in counts:
                    p, env, as_rank = modes[procs]
                    runs.append({"procs": procs, "rep": rep, **run(name, p, Path(tmp), args.exchange, env=env,
                                                                   as_rank=as_rank)})
                    print(f"{name:10s} rep {rep} P={procs}: {runs[-1]['time_s']} s, {runs[-1]['passes']} passes, "
                          f"{runs[-1]['wall_s']:.1f} s in all" + profile_summary(runs[-1]["ranks"]), flush=True)
                    # after every run: a run cut off by a time limit (the device check's) keeps what it measured
                    result["datasets"][name] = {"partial": True, "runs": runs}
                    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
            med = {}
            for procs in counts:
                times = [r["time_s"] for r in runs if r["procs"] == procs]
                med[procs] = statistics.median(times) if None not in times else None
            speedups = {p: (med[1] / med[p] if med[1] and med[p] else None) for p in ranks}
            result["datasets"][name] = {
                "reps": args.reps, "options": CONFIGS[name][0], "threshold": CONFIGS[name][1], "median_time_s": med,
                **{f"speedup_{p}": v for p, v in speedups.items()}, "runs": runs}
            print(f"{name}: one process {med[1]} s; " + "; ".join(
                f"P = {p} {args.exchange} {med[p]} s, speed-up {speedups[p]}" for p in ranks), flush=True)
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
