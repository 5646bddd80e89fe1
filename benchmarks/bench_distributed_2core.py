"""The distributed-BCFW issue's measure on a small machine: ``ssvm-train`` in one process, under
``torchrun --nproc-per-node 2`` (:func:`torchrun`) (no ``--exchange``: auto), and -- the machine's ceiling
-- two independent one-process runs side by side, alternated ``--reps`` times, with
``OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1``. Seconds per effective pass from each history.json:
(time_s of the last record - time_s of the second) / (the same difference of passes), the first
record's uncounted start and the compile of the first interval left out.

The side-by-side pair bounds what the machine can give two processes: two copies of the
one-process solver (the same store, configuration and seed, built in-process as ``ssvm-train``
builds them; 21 passes, a steadier window than the CLI runs' 7) start their runs at the same
instant (both wait for a go file once loaded) and each does one process's whole work, so
T1 (1/Ta + 1/Tb), with T1 the same worker alone, is the throughput two cores deliver for this
workload relative to one: 2 on a machine whose cores share nothing, less where they share memory
bandwidth, caches or a clock budget. (Two ``ssvm-train`` runs launched together would not do:
their solver windows, ~2 s of a ~15 s process, need not overlap.) Prints a table and writes
benchmarks/results/distributed_2core/summary.json (docs/distributed.md reads it).

Usage: python benchmarks/bench_distributed_2core.py [--datasets conll2000 ocr-large conll2000-edges] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--tags", "bio", "--constraints", "none", "--loss", "normalized", "--solver", "bcfw", "--sampling", "gap",
          "--passes", "7", "--gap-check", "2", "--seed", "0", "--quiet"]
CONFIGS = {   # the configurations
    "conll2000": ["--dataset", "conll2000", "--features", "sha-pereira", "--lam", "0.03", "--batch-size", "1024", *COMMON],
    "conll2000-edges": ["--dataset", "conll2000", "--features", "rich-edges", "--lam", "0.03", "--batch-size", "1024",
                        *COMMON],
    "ocr-large": ["--dataset", "ocr-large", "--lam", "1e-3", "--batch-size", "256", "--solver", "bcfw", "--sampling",
                  "gap", "--passes", "7", "--gap-check", "2", "--seed", "0", "--quiet"],
}
MODES = ("1", "2", "1-solver", "1+1")     # ssvm-train alone, under torchrun 2; the pair worker alone, two at once


def s_per_pass(out: Path) -> tuple[float, list, str | None]:
    hist = json.loads((out / "history.json").read_text())
    recs = hist["records"] if isinstance(hist, dict) else hist
    config = json.loads((out / "config.json").read_text())
    exchange = (config.get("distributed") or {}).get("exchange")
    rate = (recs[-1]["time_s"] - recs[1]["time_s"]) / (recs[-1]["passes"] - recs[1]["passes"])
    return rate, [{k: r[k] for k in ("passes", "time_s", "gap")} for r in recs], exchange


def torchrun(procs: int) -> list:
    """``torchrun`` for ``procs`` ranks on this machine with the static rendezvous at 127.0.0.1 on a free
    port (every benchmark that launches ranks: one way, and no fixed port that a run left busy)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs),
            "--master-addr", "127.0.0.1", "--master-port", str(port)]


def launch(args: list, out: Path, procs: int, env: dict | None = None, ranks: bool = False) -> subprocess.Popen:
    """``ssvm-train args --out out``: one process, or ``procs`` ranks under torchrun (``ranks``: torchrun even
    for one, a store of the distributed package with its profile in ranks.json)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(env or {})}
    cmd = (torchrun(procs) if procs > 1 or ranks else [sys.executable]) + ["-m", "ssvm_torch.cli.train", *args,
                                                                            "--out", str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def pair_worker(name: str, go: Path, out: Path) -> None:
    """The one-process run of ``name`` (the store and configuration ssvm-train builds), started
    when ``go`` exists; writes its seconds per effective pass to ``out``."""
    import torch
    from ssvm_torch import Solver, SolverConfig, distributed
    from ssvm_torch.tasks import get_task, load_task
    torch.set_num_threads(1)
    opts = dict(zip(CONFIGS[name][::2], CONFIGS[name][1::2]))
    dataset = opts["--dataset"]
    featurization = get_task(dataset).options(**{k: opts.get(f"--{k}") for k in ("features", "tags", "constraints",
                                                                                "loss") if f"--{k}" in opts})
    task = load_task(dataset, **featurization)
    store = distributed.sharded_store(task, task.lam(float(opts["--lam"])))
    solver = Solver(store, SolverConfig(solver="bcfw", sampling="gap", batch_size=int(opts["--batch-size"]),
                                        passes=21, gap_check=2, seed=0))   # a longer window than the CLI runs: steadier
    out.with_suffix(".ready").touch()
    while not go.exists():
        time.sleep(0.001)
    recs = solver.run()
    rate = (recs[-1]["time_s"] - recs[1]["time_s"]) / (recs[-1]["passes"] - recs[1]["passes"])
    out.write_text(json.dumps({"s_per_pass": rate, "exchange": store.exchange}))


def run_pair(name: str, copies: int, tmp: Path) -> list:
    """``copies`` pair workers started together; their seconds per pass."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    go = tmp / f"{name}.go"
    go.unlink(missing_ok=True)
    outs = [tmp / f"{name}-pair-{k}.json" for k in range(copies)]
    for o in outs:
        o.unlink(missing_ok=True)
        o.with_suffix(".ready").unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, __file__, "--pair-worker", name, str(go), str(o)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for o in outs]
    while not all(o.with_suffix(".ready").exists() for o in outs):
        if any(p.poll() for p in procs):
            break
        time.sleep(0.01)
    go.touch()
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"{name} pair worker: exit {p.returncode}\n{err[-3000:]}")
    return [json.loads(o.read_text())["s_per_pass"] for o in outs]


def run_mode(name: str, mode: str, tmp: Path) -> dict:
    if mode in ("1-solver", "1+1"):
        return {"s_per_pass": run_pair(name, 1 if mode == "1-solver" else 2, tmp)}
    out = tmp / f"{name}-{mode}"
    shutil.rmtree(out, ignore_errors=True)
    p = launch(CONFIGS[name], out, int(mode))
    _, err = p.communicate()
    if p.returncode:
        raise SystemExit(f"{name} {mode}: exit {p.returncode}\n{err[-3000:]}")
    rate, records, exchange = s_per_pass(out)
    return {"s_per_pass": [rate], "records": records, "exchange": exchange}


def summarize(name: str, runs: list) -> dict:
    by = {m: [r for r in runs if r["mode"] == m] for m in MODES}
    med = {m: statistics.median(x for r in by[m] for x in r["s_per_pass"]) for m in MODES if by[m]}
    res = {"median_s_per_pass": med, "runs": runs}
    if "1" in med and "2" in med:
        res["speedup_2"] = med["1"] / med["2"]
        one, two = by["1"][0]["records"], by["2"][0]["records"]
        res["gaps_within_1pct"] = len(one) == len(two) and all(
            abs(a["gap"] - b["gap"]) <= 0.01 * abs(b["gap"]) for a, b in zip(two, one))
    if "1-solver" in med and by["1+1"]:
        res["ceiling_2"] = statistics.median(med["1-solver"] * sum(1 / x for x in r["s_per_pass"]) for r in by["1+1"])
    return res


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--pair-worker":
        return pair_worker(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed_2core" / "summary.json"))
    args = ap.parse_args()
    result = {"machine": {"cpus": os.cpu_count()}, "reps": args.reps, "configs": {k: CONFIGS[k] for k in args.datasets},
              "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            runs = []
            for rep in range(args.reps):                # alternated: the machine's drift hits every mode alike
                for mode in args.modes:
                    runs.append({"mode": mode, "rep": rep, **run_mode(name, mode, Path(tmp))})
                    print(f"{name:16s} rep {rep} P={mode:4s} s/pass {runs[-1]['s_per_pass']}", flush=True)
            result["datasets"][name] = summarize(name, runs)
    print(f"\n{'dataset':16s} {'P=1':>7s} {'P=2':>7s} {'solver':>7s} {'1+1 each':>9s} {'P=2 speed-up':>13s} "
          f"{'machine ceiling':>16s}")
    for name, res in result["datasets"].items():
        med = res["median_s_per_pass"]
        each = statistics.median(x for r in res["runs"] if r["mode"] == "1+1" for x in r["s_per_pass"]) \
            if "1+1" in med else float("nan")
        print(f"{name:16s} {med.get('1', float('nan')):7.3f} {med.get('2', float('nan')):7.3f} "
              f"{med.get('1-solver', float('nan')):7.3f} {each:9.3f} "
              f"{res.get('speedup_2', float('nan')):12.2f}x {res.get('ceiling_2', float('nan')):15.2f}x"
              f"   gaps within 1%: {res.get('gaps_within_1pct')}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
