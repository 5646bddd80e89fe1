"""Regularization path vs grid search (Osokin et al. 2016, Fig. 4 / Fig. 8).

For each dataset: the eps-approximate path (kappa 0.9), the heuristic path (kappa 0.7, App. K) and grid
search over lam = 2^15 ... 2^lo solved to eps, warm (keep-primal) and cold; all with BCFW + gap sampling.
Records cumulative effective passes and solver time vs lambda and test error along the path.

Writes benchmarks/results/path_<dataset>.json and path_<dataset>.png.
Usage: python benchmarks/bench_path.py [--datasets ocr-small scene] [--eps 0.1] [--lo -10]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ssvm_torch.path import cold_starts, grid_lambdas, grid_search, regularization_path
from ssvm_torch.cli.path import path_task as task_for
from ssvm_torch.solvers import SolverConfig

RESULTS = Path(__file__).parent / "results"


def run(name, eps, lo, max_passes):
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=1)
    lam_min = 2.0 ** lo
    out = {"dataset": name, "eps": eps, "lam_min": lam_min}
    for label, heuristic, kappa in (("path", False, 0.9), ("heuristic", True, 0.7)):
        task = task_for(name)
        t0 = time.perf_counter()
        p = regularization_path(task.store(1.0), eps, kappa=kappa, heuristic=heuristic, lam_min=lam_min, config=cfg,
                                evaluate=task.evaluate, max_passes=max_passes)
        recs = p.records
        best = min(recs, key=lambda r: r["test_error"])
        out[label] = {"kappa": kappa, "breakpoints": len(recs), "lam_end": p.lam_end, "records": recs,
                      "passes": recs[-1]["passes"], "time_s": recs[-1]["time_s"], "wall_s": time.perf_counter() - t0,
                      "best_lam": best["lam"], "best_test_error": best["test_error"],
                      "max_gap": max(r["gap"] for r in recs)}
        print(f"{name} {label:9s} (kappa {kappa}): {len(recs)} breakpoints, end {p.lam_end:.3g}, "
              f"{recs[-1]['passes']:.0f} passes, {recs[-1]['time_s']:.1f} s; max breakpoint gap "
              f"{out[label]['max_gap']:.4f}; best test error {best['test_error']:.4f} at lambda {best['lam']:.4g}",
              flush=True)
    lams = [v for v in grid_lambdas(15, lo)]
    for warm in (True, False):
        task = task_for(name)
        recs = grid_search(cold_starts(task.store(1.0)), eps, lams, warm=warm, config=cfg, evaluate=task.evaluate,
                           max_passes=max_passes)
        label = "grid_warm" if warm else "grid_cold"
        best = min(recs, key=lambda r: r["test_error"])
        out[label] = {"records": recs, "passes": recs[-1]["passes"], "time_s": recs[-1]["time_s"],
                      "best_lam": best["lam"], "best_test_error": best["test_error"]}
        print(f"{name} {label:9s}: {len(recs)} lambdas, {recs[-1]['passes']:.0f} passes, {recs[-1]['time_s']:.1f} s; "
              f"best test error {best['test_error']:.4f} at lambda {best['lam']:.4g}", flush=True)
    return out


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for label, style in (("path", "-"), ("heuristic", "--"), ("grid_warm", "-o"), ("grid_cold", "-s")):
        recs = res[label]["records"]
        lam = [r["lam"] for r in recs]
        ax[0].loglog(lam, [max(r["passes"], 1e-1) for r in recs], style, ms=3, label=label)
        ax[1].loglog(lam, [max(r["time_s"], 1e-3) for r in recs], style, ms=3, label=label)
    recs = res["path"]["records"]
    ax[2].semilogx([r["lam"] for r in recs], [r["test_error"] for r in recs], "-", label="eps-path")
    ax[2].axvline(res["path"]["best_lam"], color="k", ls=":", label=f"best lambda {res['path']['best_lam']:.3g}")
    for a, t in zip(ax, ("cumulative effective passes", "cumulative solver time (s)", "test error")):
        a.set_xlabel("lambda (path runs right to left)")
        a.set_title(t)
        a.invert_xaxis()
        a.legend(fontsize=8)
    fig.suptitle(f"{res['dataset']}: eps = {res['eps']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=["ocr-small", "scene"])
    p.add_argument("--eps", type=float, default=0.1)
    p.add_argument("--lo", type=int, default=-10, help="smallest grid exponent; the paths stop at 2^lo too")
    p.add_argument("--max-passes", type=float, default=500)
    args = p.parse_args()
    torch.set_num_threads(1)
    RESULTS.mkdir(exist_ok=True)
    for name in args.datasets:
        res = run(name, args.eps, args.lo, args.max_passes)
        (RESULTS / f"path_{name}.json").write_text(json.dumps(res, indent=1))
        plot(res, RESULTS / f"path_{name}.png")


if __name__ == "__main__":
    main()
