"""Mini-batch BCFW on this CPU: duality gap vs effective passes and vs time for several batch
sizes tau (tau = 1 is BCFW), OCR-large, lambda = 1e-3, gap sampling, the same seed. Shows how much
per-pass progress a large tau costs (one joint line search for tau blocks instead of tau searches).
Prints a table and writes benchmarks/results/minibatch.json.

With ``--vs-batch-fw``: seconds per step of tau = n (``--batch-size n``) against batch FW
(``--solver fw``) on OCR-small, lambda = 0.01 (median of ``--repeats`` runs, both in one process),
written to benchmarks/results/minibatch_tau_n.json.

Usage: python benchmarks/bench_minibatch.py [--taus 1 16 256] [--passes 20] [--kernels auto]
       python benchmarks/bench_minibatch.py --vs-batch-fw [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import numba
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.outputs import atomic_write_bytes
from ssvm_torch.tasks import load_task

RESULTS = Path(__file__).parent / "results"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ocr-large")
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--taus", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--passes", type=float, default=60)
    ap.add_argument("--gap-check", type=float, default=2, help="passes of steps between exact gap passes")
    ap.add_argument("--target", type=float, default=0.1, help="report the time and passes to this gap")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernels", default="auto", help="auto = numba (parallel decodes over numba threads) on CPU")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/minibatch.json "
                                               "(--vs-batch-fw: minibatch_tau_n.json)")
    ap.add_argument("--vs-batch-fw", action="store_true", help="time tau = n against batch FW instead")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.vs_batch_fw:
        return tau_n_vs_batch_fw(args)
    args.out = args.out or str(RESULTS / "minibatch.json")
    task = load_task(args.dataset)
    res = {"machine": platform.processor() or platform.machine(), "torch_threads": args.threads,
           "numba_threads": numba.get_num_threads(), "torch": torch.__version__, "dataset": args.dataset,
           "n": task.n_train, "lam": args.lam, "seed": args.seed, "kernels": args.kernels,
           "gap_check": args.gap_check, "target": args.target, "runs": {}}
    warm = task.store(args.lam, kernels=args.kernels)          # compile the kernels outside the timings
    Solver(warm, SolverConfig(batch_size=2, passes=0.01, gap_check=0.01)).run()
    for tau in args.taus:
        store = task.store(args.lam, kernels=args.kernels)
        cfg = SolverConfig(solver="bcfw", sampling="gap", batch_size=tau, passes=args.passes,
                           gap_check=args.gap_check, seed=args.seed)
        hist = Solver(store, cfg).run()
        curve = [{"passes": r["passes"], "gap": r["gap"], "time_s": r["time_s"]} for r in hist]
        hit = next((r for r in curve if r["gap"] <= args.target), None)
        res["runs"][str(tau)] = {"curve": curve, "s_per_pass": hist[-1]["time_s"] / hist[-1]["passes"],
                                 "passes_to_target": hit and hit["passes"], "time_to_target_s": hit and hit["time_s"]}
        print(f"tau={tau:5d}  {hist[-1]['time_s'] / hist[-1]['passes']:.3f} s/effective pass   gap after "
              + "  ".join(f"{p:g}: {next(r['gap'] for r in curve if r['passes'] >= p):.4g}"
                          for p in (10, 20, 40, args.passes) if p <= args.passes)
              + f"   gap {args.target} at " + ("-" if hit is None else f"{hit['passes']:.0f} passes, {hit['time_s']:.1f} s"),
              flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(args.out), json.dumps(res, indent=1).encode())
    print(f"wrote {args.out}")


def tau_n_vs_batch_fw(args) -> None:
    """s per step of mini-batch BCFW with tau = n and of batch FW (the same steps: test_minibatch.py),
    on OCR-small at lambda = 0.01 unless --dataset / --lam say otherwise; the first record's time
    (kernel compilation, the start's gap pass) is left out."""
    dataset = "ocr-small" if args.dataset == "ocr-large" else args.dataset
    lam = 0.01 if args.lam == 1e-3 else args.lam
    task = load_task(dataset)
    steps = 10
    configs = {"batch-fw": dict(solver="fw", passes=steps + 1, gap_check=steps + 1),
               "tau-n": dict(solver="bcfw", sampling="gap", batch_size=task.n_train, passes=steps,
                             gap_check=steps, seed=args.seed)}
    per_step = {k: [] for k in configs}
    for _ in range(args.repeats + 1):                  # the first round compiles the kernels
        for name, kw in configs.items():
            hist = Solver(task.store(lam, kernels=args.kernels), SolverConfig(**kw)).run()
            per_step[name].append((hist[-1]["time_s"] - hist[0]["time_s"]) / hist[-1]["steps"])
    med = {k: statistics.median(v[1:]) for k, v in per_step.items()}
    res = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
           "numba_threads": numba.get_num_threads(), "dataset": dataset, "n": task.n_train, "lam": lam,
           "steps": steps, "repeats": args.repeats, "s_per_step": per_step, "median_s_per_step": med,
           "ratio_tau_n_to_batch_fw": med["tau-n"] / med["batch-fw"]}
    print(f"{dataset}: batch FW {med['batch-fw'] * 1e3:.1f} ms/step, tau = n {med['tau-n'] * 1e3:.1f} ms/step, "
          f"ratio {res['ratio_tau_n_to_batch_fw']:.2f} (median of {args.repeats})")
    out = Path(args.out or RESULTS / "minibatch_tau_n.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, json.dumps(res, indent=1).encode())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
