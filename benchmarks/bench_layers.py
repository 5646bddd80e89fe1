"""The linear-chain layers taggers use, side by side on CPU: ssvm_torch's LinearChain (structured hinge
and CRF) vs pytorch-crf 0.7.2 (``torchcrf.CRF``) vs torch-struct 0.5 ``LinearChainCRF`` (through the
project's reference adapter, ssvm_torch/chain/torch_struct.py). For every (B, T, K) of the grid, float32 emissions,
full masks: decode, loss + backward, marginals (pytorch-crf has none) -- median seconds of repeats --
and peak memory of each call (torch's CPU allocations seen by the profiler, the allocations the
kernels make with numpy not included; they are O(T K) per row). Runs once with 1 thread
(torch.set_num_threads(1), numba.set_num_threads(1)) and once with all cores. A reference library is
skipped where its (B, T, K, K) working set would exceed --max-gb: estimated as B T K^2 x 4 bytes x 2
for pytorch-crf (the per-step (B, K, K) sums autograd keeps) and min(B, 256) T K^2 x 4 bytes x 4 for
torch-struct (the wrapper cuts batches into 256 rows; edge potentials, their log-semiring scan and
its gradient). torch-struct is also skipped above --max-ts-work = B T K^3 (its chart products are
K^3 per step: 1e9 keeps B 512, T 20, K 45, which already takes ~50 s per loss + backward here, and
B 1, T 200, K 200 takes 28 s per decode), except its decode at B 512, T 20, K 200 (tried: it asks for
131 GB and is recorded as failed). A call that raises (out of memory) is recorded as failed.

--ks runs a subset of K; --merge PATH keeps the rows of an earlier JSON for the points not rerun;
--all-threads quick measures the all-cores pass at B 64, T 50, K 9 and B 512, T 20, K 200 only.

AllenNLP's ConditionalRandomField is not measured: its last release requires torch < 1.13.

Usage: python benchmarks/bench_layers.py [--quick] [--max-gb 3] [--out benchmarks/results/layers.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numba
import torch

from ssvm_torch.chain import chain_score, edge_potentials
from ssvm_torch.chain.torch_struct import reference_log_partition, reference_marginals
from ssvm_torch.nn import LinearChain

GRID_B, GRID_T, GRID_K = (1, 64, 512), (20, 50, 200), (9, 45, 200)


def timed(fn, budget_s: float):
    """Median seconds of repeated calls after one warm-up call: 5 repeats, fewer when a call is slow;
    a call slower than the budget is timed once (its warm-up: no compilation happens in it)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > budget_s:
        return first, 1
    repeats = 5 if first < budget_s / 10 else 3 if first < budget_s / 2 else 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), repeats


def peak_mb(fn) -> float:
    """Peak of torch's CPU allocations during one call (MB): the running sum, in time order, of each
    profiled op's own allocations minus its own frees (children excluded, so nothing counts twice)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage != 0), key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in events:
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return peak / 2 ** 20


def layers(K: int):
    from torchcrf import CRF
    torch.manual_seed(0)
    ref = CRF(K, batch_first=True)
    hinge = LinearChain(K, batch_first=True, loss="hinge")
    crf = LinearChain(K, batch_first=True, loss="crf")
    hinge.load_state_dict(ref.state_dict())
    crf.load_state_dict(ref.state_dict())
    return ref, hinge, crf


def calls(B, T, K, max_gb, max_ts_work):
    """{(library, operation): callable} for one grid point; None where a reference is skipped."""
    g = torch.Generator().manual_seed(0)
    E = torch.randn(B, T, K, generator=g)
    Eg = E.clone().requires_grad_(True)
    tags = torch.randint(K, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    lengths = torch.full((B,), T)
    ref, hinge, crf = layers(K)
    big_crf = B * T * K * K * 4 * 2 / 2 ** 30 > max_gb
    big_ts = min(B, 256) * T * K * K * 4 * 4 / 2 ** 30 > max_gb or B * T * K ** 3 > max_ts_work
    ts_decode_ok = not big_ts or (B, T, K) == (512, 20, 200)

    def backward(loss):
        Eg.grad = None
        loss.backward()

    def ts_scores():
        return ref.start_transitions, ref.end_transitions, ref.transitions.t()

    def ts_decode():                               # in chunks of 256 rows, as the wrapper's other calls
        from torch_struct import LinearChainCRF
        out = []
        with torch.no_grad(), warnings.catch_warnings():     # torch-struct 0.5 does not declare arg_constraints
            warnings.filterwarnings("ignore", message=".*arg_constraints.*")
            for s in range(0, B, 256):
                lp = edge_potentials(E[s:s + 256], lengths[s:s + 256], *(p.detach() for p in ts_scores()))
                out.append(LinearChainCRF(lp, lengths=lengths[s:s + 256]).argmax)
        return out

    out = {
        ("ssvm_torch", "decode"): lambda: hinge.decode(E, mask),
        ("ssvm_torch", "hinge+backward"): lambda: backward(hinge(Eg, tags, mask)),
        ("ssvm_torch", "crf+backward"): lambda: backward(crf(Eg, tags, mask)),
        ("ssvm_torch", "marginals"): lambda: crf.marginals(E, mask),
        ("pytorch-crf", "decode"): None if big_crf else (lambda: ref.decode(E, mask)),
        ("pytorch-crf", "crf+backward"): None if big_crf else (lambda: backward(-ref(Eg, tags, mask))),
        ("torch-struct", "decode"): ts_decode if ts_decode_ok else None,
        ("torch-struct", "crf+backward"): None if big_ts else (
            lambda: backward((reference_log_partition(Eg, lengths, *ts_scores())
                               - chain_score(Eg, lengths, *ts_scores(), tags)).sum())),
        ("torch-struct", "marginals"): None if big_ts else (lambda: reference_marginals(E, lengths, *ts_scores())),
    }
    return out


def run(threads: int, grid, max_gb: float, max_ts_work: float, budget_s: float, memory: bool):
    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    rows = []
    for B, T, K in grid:
        for (lib, op), fn in calls(B, T, K, max_gb, max_ts_work).items():
            row = {"B": B, "T": T, "K": K, "library": lib, "op": op, "threads": threads}
            if fn is None:
                row["skipped"] = f"(B, T, K, K) working set above {max_gb} GB or B T K^2 above {max_ts_work:g}"
            else:
                try:
                    row["s"], row["repeats"] = timed(fn, budget_s)
                    if memory and row["s"] < budget_s:      # one more call of a slow one is not worth it
                        row["peak_mb"] = peak_mb(fn)
                except (RuntimeError, MemoryError) as e:    # e.g. torch-struct's K^3 scan at K = 200
                    row["failed"] = str(e).splitlines()[0][-200:]
            rows.append(row)
            print(f"threads {threads} B {B:>4} T {T:>4} K {K:>4} {lib:<12} {op:<15} "
                  + (f"{row['s'] * 1e3:10.3f} ms" if "s" in row else "    failed" if "failed" in row else "   skipped")
                  + (f"  peak {row['peak_mb']:8.1f} MB" if "peak_mb" in row else ""), flush=True)
    return rows


def speedups(rows):
    """LinearChain's speed-up over each reference, per grid point and thread count."""
    by = {(r["B"], r["T"], r["K"], r["threads"], r["library"], r["op"]): r.get("s") for r in rows}
    out = []
    for (B, T, K, th, lib, op), s in by.items():
        if lib != "ssvm_torch" or s is None:
            continue
        for ref in ("pytorch-crf", "torch-struct"):
            ref_op = "crf+backward" if op in ("hinge+backward", "crf+backward") else op
            t = by.get((B, T, K, th, ref, ref_op))
            if t:
                out.append({"B": B, "T": T, "K": K, "threads": th, "op": op, "vs": ref, "vs_op": ref_op,
                            "speedup": t / s})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the must-show point (B 64, T 50, K 9) and K = 200, B = 512, T = 20 only")
    ap.add_argument("--max-gb", type=float, default=6.0)
    ap.add_argument("--max-ts-work", type=float, default=1e9)
    ap.add_argument("--ks", type=int, nargs="+", default=list(GRID_K))
    ap.add_argument("--all-threads", choices=["full", "quick"], default="full")
    ap.add_argument("--merge", default=None, help="an earlier layers JSON whose rows fill the points not rerun")
    ap.add_argument("--budget-s", type=float, default=20.0, help="fewer repeats for calls slower than budget/10")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "layers.json"))
    args = ap.parse_args()
    quick = [(64, 50, 9), (512, 20, 200)]
    grid = quick if args.quick else [(B, T, K) for K in args.ks for T in GRID_T for B in GRID_B]
    rows = run(1, grid, args.max_gb, args.max_ts_work, args.budget_s, memory=True)
    rows += run(os.cpu_count(), quick if args.all_threads == "quick" else grid, args.max_gb, args.max_ts_work,
                args.budget_s, memory=False)
    if args.merge:
        key = ("B", "T", "K", "threads", "library", "op")
        new = {tuple(r[k] for k in key) for r in rows}
        rows = [r for r in json.loads(Path(args.merge).read_text())["rows"] if tuple(r[k] for k in key) not in new] + rows
    res = {"machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
           "torch": torch.__version__, "numba": numba.__version__, "dtype": "float32", "mask": "full",
           "grid": {"B": list(GRID_B), "T": list(GRID_T), "K": list(GRID_K)}, "all_threads": args.all_threads,
           "max_ts_work": args.max_ts_work, "rows": rows,
           "speedups": speedups(rows)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    for s in res["speedups"]:
        if (s["B"], s["T"], s["K"]) in ((64, 50, 9), (512, 20, 200), (512, 50, 200)):
            print(f"B {s['B']} T {s['T']} K {s['K']} threads {s['threads']}: {s['op']} {s['speedup']:.1f}x "
                  f"{s['vs']} {s['vs_op']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
