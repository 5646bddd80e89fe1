"""Data-parallel mini-batch BCFW on this machine: P = 1 and 2 processes (gloo, one torch and one
numba thread each, launched by torchrun) on OCR-large and CoNLL-2000: seconds per effective pass,
gap vs wall time and bytes sent per rank per pass; then a model of larger clusters from the measured
per-block decode time, the per-step replicated cost and gloo's all-reduce / all-gather time vs
message size. Prints tables and writes benchmarks/results/distributed.json.

Usage: python benchmarks/bench_distributed.py [--datasets ocr-large conll2000] [--passes 6]
       (internally re-launched as: torchrun --nproc-per-node P benchmarks/bench_distributed.py --worker ...)
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def worker(args):
    import torch.distributed as dist
    from ssvm_torch import Solver, SolverConfig
    from ssvm_torch import distributed
    from ssvm_torch.tasks import load_task
    torch.set_num_threads(1)
    rank, size = distributed.init(torch.device("cpu"), timeout_s=600)
    task = load_task(args.dataset)
    store = distributed.sharded_store(task, args.lam, exchange=args.exchange)
    cfg = SolverConfig(solver="bcfw", sampling="gap", batch_size=args.tau, passes=args.passes,
                       gap_check=args.gap_check, seed=0)
    solver = Solver(store, cfg)
    dist.barrier()
    t0 = time.perf_counter()
    hist = solver.run()
    wall = time.perf_counter() - t0
    comm = {}
    for mb in (0.01, 0.1, 1, 10, 60):                    # gloo all-reduce and all-gather time vs message size
        t = torch.zeros(int(mb * 2 ** 20 / 8), dtype=torch.float64)
        out = [torch.empty_like(t) for _ in range(size)]
        dist.barrier()
        s = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(t)
        ar = (time.perf_counter() - s) / 3
        s = time.perf_counter()
        for _ in range(3):
            dist.all_gather(out, t)
        comm[str(mb)] = {"allreduce_s": ar, "allgather_s": (time.perf_counter() - s) / 3}
    if rank == 0:
        res = {"P": size, "dataset": args.dataset, "n": task.n_train, "d": task.d, "tau": args.tau,
               "exchange": "gather" if store.gather else "allreduce", "wall_s": wall,
               "solver_s": hist[-1]["time_s"], "passes": hist[-1]["passes"],
               "s_per_pass": hist[-1]["time_s"] / hist[-1]["passes"],
               "bytes_per_step": store.bytes_per_step, "steps": store.steps_exchanged,
               "bytes_per_pass": store.bytes_sent / hist[-1]["passes"],
               "curve": [{"passes": r["passes"], "gap": r["gap"], "time_s": r["time_s"]} for r in hist],
               "comm": comm}
        Path(args.json).write_text(json.dumps(res))
    distributed.finish()


def launch(P, dataset, tau, passes, gap_check, lam, exchange):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(P), "--master-port", str(port),
               __file__, "--worker", "--dataset", dataset, "--tau", str(tau), "--passes", str(passes),
               "--gap-check", str(gap_check), "--lam", str(lam), "--exchange", exchange, "--json", str(out)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        return json.loads(out.read_text())


def model(run1, run2, n, P):
    """Predicted seconds per pass on P ranks: the sharded work (decoding, gap pass) divides by P,
    the replicated work (line search, move of w, sampler) does not, plus the measured exchange time
    for the bytes per step. Assumes gloo-like links as measured here between 2 local processes."""
    t1, t2 = run1["s_per_pass"], run2["s_per_pass"]
    # two equations: t1 = a + r, t2 = a/2 + r + c2  (c2 = exchange time per pass on 2 ranks)
    steps_per_pass = n / run1["tau"]
    mb = run2["bytes_per_step"] / 2 ** 20
    sizes = sorted(run2["comm"], key=float)
    key = min(sizes, key=lambda k: abs(float(k) - mb))
    op = "allgather_s" if run2["exchange"] == "gather" else "allreduce_s"
    c2 = steps_per_pass * run2["comm"][key][op] * (mb / float(key) if float(key) > 0 else 1)
    a = max(2 * (t1 - t2 + c2), 0.0)
    r = max(t1 - a, 0.0)
    # ring all-reduce: ~2 (P-1)/P of the message per rank; all-gather: (P-1)/P of P pieces
    cP = c2 * (2 * (P - 1) / P if op == "allreduce_s" else (P - 1))
    return {"P": P, "s_per_pass": a / P + r + cP, "speedup": t1 / (a / P + r + cP), "sharded_s": a, "replicated_s": r,
            "exchange_s_per_pass_at_2": c2}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--dataset", default="ocr-large")
    ap.add_argument("--datasets", nargs="+", default=["ocr-large", "conll2000"])
    ap.add_argument("--tau", type=int, default=None)
    ap.add_argument("--passes", type=float, default=6)
    ap.add_argument("--gap-check", type=float, default=2)
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("--exchange", default="auto")
    ap.add_argument("--json", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    from ssvm_torch.outputs import atomic_write_bytes
    settings = {"ocr-large": dict(tau=256, lam=1e-3), "conll2000": dict(tau=1024, lam=3e-2)}
    res = {"runs": {}, "model": {}}
    for ds in args.datasets:
        st = settings.get(ds, dict(tau=args.tau or 256, lam=args.lam or 1e-3))
        runs = [launch(P, ds, st["tau"], args.passes, args.gap_check, st["lam"], args.exchange) for P in (1, 2)]
        res["runs"][ds] = runs
        n = runs[0]["n"]
        print(f"{ds}: n = {n}, d = {runs[0]['d']}, tau = {st['tau']}, exchange {runs[1]['exchange']}")
        for r in runs:
            print(f"  P = {r['P']}: {r['s_per_pass']:.3f} s per effective pass, final gap {r['curve'][-1]['gap']:.4g}, "
                  f"{r['bytes_per_pass'] / 2 ** 20:.1f} MiB sent per rank per pass", flush=True)
        print(f"  speedup P=2 vs P=1: {runs[0]['s_per_pass'] / runs[1]['s_per_pass']:.2f}x")
        preds = [model(runs[0], runs[1], n, P) for P in (8, 64, 512)]
        big = [model(runs[0], runs[1], 100 * n, P) for P in (8, 64, 512)] if ds == "conll2000" else []
        res["model"][ds] = {"measured_n": preds, "replicated_100x": big}
        for p in preds:
            print(f"  predicted P = {p['P']}: {p['s_per_pass']:.3f} s per pass ({p['speedup']:.1f}x)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(args.out), json.dumps(res, indent=1).encode())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
