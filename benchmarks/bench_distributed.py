"""Data-parallel mini-batch BCFW on this machine: P = 1, 2, 4, 8 processes up to its cores (gloo, one
torch and one numba thread each, launched by torchrun) on OCR-large and CoNLL-2000, the same tau,
seed and passes for every P: seconds per effective pass, the speed-up over P = 1, the time to the
gap the P = 1 run ends at, whether the gaps equal P = 1's record for record, and bytes sent per rank
per pass (exchanges columns, allreduce and gather; P = 1 is the fastest one-process path, the
generic store's beside it); then a model of larger clusters from the measured
per-block decode time, the per-step replicated cost and gloo's all-reduce / all-gather time vs
message size. Prints tables and writes benchmarks/results/distributed.json.

Usage: python benchmarks/bench_distributed.py [--datasets ocr-large conll2000] [--passes 6] [--procs 1 2 4 8]
       (internally re-launched as: torchrun --nproc-per-node P benchmarks/bench_distributed.py --worker ...)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_distributed_2core import torchrun  # noqa: E402

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
    for mb in (0.01, 0.1, 1, 10, 60):                    # gloo's collectives' time vs message size
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
        ag = (time.perf_counter() - s) / 3
        flat = torch.empty_like(t)
        s = time.perf_counter()
        for _ in range(3):
            dist.all_to_all_single(flat, t)
        comm[str(mb)] = {"allreduce_s": ar, "allgather_s": ag, "alltoall_s": (time.perf_counter() - s) / 3}
    if rank == 0:
        res = {"P": size, "dataset": args.dataset, "n": task.n_train, "d": task.d, "tau": args.tau,
               "exchange": store.exchange, "wall_s": wall,
               "solver_s": hist[-1]["time_s"], "passes": hist[-1]["passes"],
               "s_per_pass": hist[-1]["time_s"] / hist[-1]["passes"],
               "bytes_per_step": store.bytes_per_step, "steps": store.steps_exchanged,
               "bytes_per_pass": store.bytes_sent / hist[-1]["passes"],
               "comm_s_per_pass": store.comm_s / hist[-1]["passes"],
               "shard_s_per_pass": store.shard_s / hist[-1]["passes"],
               "joint_s_per_pass": store.joint_s / hist[-1]["passes"],
               "curve": [{"passes": r["passes"], "gap": r["gap"], "time_s": r["time_s"]} for r in hist],
               "comm": comm}
        Path(args.json).write_text(json.dumps(res))
    distributed.finish()


def launch(P, dataset, tau, passes, gap_check, lam, exchange):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
        cmd = [*torchrun(P), __file__, "--worker", "--dataset", dataset, "--tau", str(tau), "--passes", str(passes),
               "--gap-check", str(gap_check), "--lam", str(lam), "--exchange", exchange, "--json", str(out)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        return json.loads(out.read_text())


def model(one, two, scale, P, network=None):
    """Predicted seconds per effective pass on P ranks (Amdahl plus the wire):
        T(P) = S / P + R + J + C(P)
    S = the sharded work per pass on one rank (decoding and the block terms, measured in the P = 1
    run), R = the replicated work (the rest of the P = 1 pass: the line search, the move of w, the
    sampler), J = the work every rank repeats on what was exchanged (building the joint direction from
    the gathered parts or merging the gathered entries: ``joint_s_per_pass`` of the P = 2 run; the
    coordinate shares of the gather exchange make it fall with P, which the model does not credit),
    C(P) = the collectives: what one rank receives per pass, 2 B2 (P - 1) / P with B2 the bytes one
    rank sends per pass at P = 2 (what is exchanged is the ranks' shares of a fixed total 2 B2, of
    which a rank receives all but its own; a ring all-reduce of a dense d-vector moves the same
    2 (P - 1) / P times its size), at a bandwidth: by default the
    all-gather bandwidth measured here between two local processes at the steps' message size;
    ``network`` = (bytes per second, seconds of latency per collective) for a network instead, the
    latency counted once per collective of a step (``collectives_per_step``). ``scale`` multiplies n
    (a 100x replicated CoNLL has 100x the blocks per pass: S, R, J and the bytes scale with it at a
    fixed tau)."""
    if two["exchange"] == "columns":     # its decode, partial unaries, direction share and moves all split by P
        S = (one["shard_s_per_pass"] + one["joint_s_per_pass"]) * scale
        J = 0.0
    else:
        S = one["shard_s_per_pass"] * scale
        J = two.get("joint_s_per_pass", 0.0) * scale
    R = max(one["s_per_pass"] - S / scale, 0.0) * scale
    at = min(two["comm"], key=lambda k: abs(float(k) * 2 ** 20 - two["bytes_per_step"]))   # the steps' message size
    used = "alltoall_s" if two["exchange"] == "columns" else "allgather_s"      # what the exchange runs on
    bandwidth = float(at) * 2 ** 20 / two["comm"][at][used]                   # bytes per second
    latency = 0.0
    if network is not None:
        bandwidth, per_collective = network
        steps_per_pass = two["steps"] / two["passes"]
        latency = per_collective * COLLECTIVES_PER_STEP[two["exchange"]] * steps_per_pass * scale * math.log2(P)
    C = 2 * two["bytes_per_pass"] * scale * (P - 1) / P / bandwidth + latency
    T = S / P + R + J + C
    return {"P": P, "s_per_pass": T, "speedup": (S + R) / T, "S": S, "R": R, "J": J, "C": C,
            "bandwidth_MBps": bandwidth / 1e6}


#: collectives of one mini-batch step (distributed.ShardedDual.batch_corners): the small all-reduce,
#: then the allreduce exchange's two ragged all-gathers (sizes and data: 4) or the gather exchange's
#: counts, its part tensors (first, last, trans, positions' stats, features' index, value, position)
#: and the two ragged all-gathers of the coordinate shares (1 + 7 + 4); the columns exchange
#: (column_shards.ColumnShardedChain): the all-to-alls of partial unaries and of labelings, the
#: all-reduce of ||dw||^2 (3); a tree/ring collective's latency grows as log2 P.
COLLECTIVES_PER_STEP = {"allreduce": 5, "gather": 13, "columns": 3}


def time_to(run: dict, target: float):
    """The solver seconds (and passes) of the run's first record with gap <= target, or None."""
    hit = next((r for r in run["curve"] if r["gap"] <= target * (1 + 1e-9)), None)
    return (None, None) if hit is None else (hit["time_s"], hit["passes"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--dataset", default="ocr-large")
    ap.add_argument("--datasets", nargs="+", default=["ocr-large", "conll2000"])
    ap.add_argument("--tau", type=int, default=None)
    ap.add_argument("--passes", type=float, default=6)
    ap.add_argument("--gap-check", type=float, default=2)
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("--exchange", default="auto", help="(worker) the exchange of this run")
    ap.add_argument("--exchanges", nargs="+", default=["columns", "allreduce", "gather"],
                    help="exchanges to run at P >= 2 (every one that applies to the dataset)")
    ap.add_argument("--procs", nargs="+", type=int, default=None,
                    help="process counts (default: 1, 2, 4, 8 up to the machine's cores)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--network-gbps", type=float, default=10.0, help="the model's network: bandwidth (Gbit/s)")
    ap.add_argument("--latency-us", type=float, default=50.0, help="the model's network: latency per collective")
    ap.add_argument("--remodel", action="store_true",
                    help="recompute the models of an existing --out file from its runs (no runs)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    import platform
    from ssvm_torch.outputs import atomic_write_bytes
    network = (args.network_gbps * 1e9 / 8, args.latency_us * 1e-6)
    out = Path(args.out)
    if args.remodel:
        res = json.loads(out.read_text())
        res["model_network"] = {"gbps": args.network_gbps, "latency_us": args.latency_us}
        for ds in res["runs"]:
            add_models(res, ds, network)
        atomic_write_bytes(out, json.dumps(res, indent=1).encode())
        return print(f"wrote {out}")
    cpus = os.cpu_count() or 1
    procs = args.procs or [p for p in (1, 2, 4, 8) if p <= max(cpus, 2)]
    if procs[0] != 1:
        raise SystemExit("--procs: expected the list to start with 1 (the baseline of every ratio)")
    settings = {"ocr-large": dict(tau=256, lam=1e-3), "conll2000": dict(tau=1024, lam=3e-2)}
    res = {"machine": {"cpus": cpus, "platform": platform.platform(), "processor": platform.processor(),
                       "torch": torch.__version__, "threads_per_rank": 1},
           "runs": {}, "model": {}, "model_network": {"gbps": args.network_gbps, "latency_us": args.latency_us}}
    out.parent.mkdir(parents=True, exist_ok=True)
    for ds in args.datasets:
        st = settings.get(ds, dict(tau=args.tau or 256, lam=args.lam or 1e-3))
        # the baseline is the fastest one-process path (auto: the columns store's kernels where they apply,
        # as ssvm-train picks them); the generic one-process store is recorded beside it ("1-generic")
        one = launch(1, ds, st["tau"], args.passes, args.gap_check, st["lam"], "auto")
        generic = launch(1, ds, st["tau"], args.passes, args.gap_check, st["lam"], "allreduce")
        target = one["curve"][-1]["gap"]                 # every run is timed to the gap the P = 1 run ends at
        one["target_gap"] = target
        one["time_to_target_s"], one["passes_to_target"] = time_to(one, target)
        print(f"{ds}: n = {one['n']}, d = {one['d']}, tau = {st['tau']}, target gap {target:.6g}")
        print(f"  P = 1 ({one['exchange']}): {one['s_per_pass']:.3f} s per effective pass (decode and block terms "
              f"{one['shard_s_per_pass']:.3f})", flush=True)
        print(f"  P = 1, generic store: {generic['s_per_pass']:.3f} s per effective pass", flush=True)
        res["runs"][ds] = {"1": one, "1-generic": generic}
        res["model"][ds] = {}
        for P in procs[1:]:
            for exchange in args.exchanges:
                run = launch(P, ds, st["tau"], args.passes, args.gap_check, st["lam"], exchange)
                run["target_gap"] = target
                run["time_to_target_s"], run["passes_to_target"] = time_to(run, target)
                run["speedup_s_per_pass"] = one["s_per_pass"] / run["s_per_pass"]
                run["same_gaps_as_P1"] = [r["gap"] for r in run["curve"]] == [r["gap"] for r in one["curve"]]
                res["runs"][ds][f"{P}-{exchange}"] = run
                print(f"  P = {P}, {exchange}: {run['s_per_pass']:.3f} s per effective pass "
                      f"({run['speedup_s_per_pass']:.2f}x), final gap {run['curve'][-1]['gap']:.6g} "
                      f"(same gaps as P = 1: {run['same_gaps_as_P1']}), shard {run['shard_s_per_pass']:.3f} s, "
                      f"collectives {run['comm_s_per_pass']:.3f} s, joint direction {run['joint_s_per_pass']:.3f} s, "
                      f"{run['bytes_per_pass'] / 2 ** 20:.1f} MiB "
                      "sent per rank per pass", flush=True)
                atomic_write_bytes(out, json.dumps(res, indent=1).encode())
        add_models(res, ds, network)
        atomic_write_bytes(out, json.dumps(res, indent=1).encode())
    print(f"wrote {out}")


def add_models(res: dict, ds: str, network) -> None:
    """res["model"][ds][exchange]: :func:`model` from the P = 1 and P = 2 runs, at the process counts
    measured (to check it against them) and 64, 512, with the local bandwidth (``measured_n``) and
    over ``network`` (``network_n``; CoNLL also 100x replicated: ``replicated_100x_network``)."""
    runs = res["runs"][ds]
    one = runs["1"]
    measured = sorted({int(k.split("-")[0]) for k in runs if not k.startswith("1")})
    res["model"][ds] = {}
    for key, two in runs.items():
        if not key.startswith("2-"):
            continue
        exchange = key[2:]
        m = {"measured_n": [model(one, two, 1, P) for P in sorted(set(measured) | {64, 512})],
             "network_n": [model(one, two, 1, P, network) for P in (2, 8, 64, 512)]}
        if ds == "conll2000":
            m["replicated_100x_network"] = [model(one, two, 100, P, network) for P in (8, 64, 512)]
        for row in m["measured_n"]:
            run = runs.get(f"{row['P']}-{exchange}")
            row["measured_s_per_pass"] = None if run is None else run["s_per_pass"]
        res["model"][ds][exchange] = m
        for label, rows in m.items():
            print(f"    {ds} {exchange} model ({label}): " + ", ".join(
                f"P = {p['P']}: {p['s_per_pass']:.3f} s/pass ({p['speedup']:.1f}x)"
                + (f" [measured {p['measured_s_per_pass']:.3f}]" if p.get("measured_s_per_pass") else "")
                for p in rows))


if __name__ == "__main__":
    main()
