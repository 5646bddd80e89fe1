"""Convergence on OCR: exact duality gap vs effective passes (and solver time) for batch FW,
BCFW-uniform, BCFW-gap and SSG; final test error. Medians over seeds.

Settings: OCR-small lam = 0.01 and OCR-large lam = 1e-3, gap checked every 10 passes (BCFW's checks
count as passes). SSG keeps no dual: its column is primal(w_ssg) - best dual found by any method in
the same setting, a valid upper bound on its suboptimality ("gap vs best dual").

Writes benchmarks/results/convergence.json and convergence.png.
Usage: python benchmarks/bench_convergence.py [--seeds 3] [--passes 100] [--settings small large]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, load_ocr, make_store

SETTINGS = {"small": ("ocr-small", 0.01), "large": ("ocr-large", 1e-3)}
METHODS = {"fw": ("fw", "uniform"), "bcfw-uniform": ("bcfw", "uniform"), "bcfw-gap": ("bcfw", "gap"),
           "ssg": ("ssg", "uniform")}


def run_one(model, train, test, lam, solver, sampling, passes, seed):
    dual = make_store(model, train, lam)

    def evaluate(w):
        return {"test_error": model.metrics(w, test)["error"], "train_error": model.metrics(w, train)["error"]}

    cfg = SolverConfig(solver=solver, sampling=sampling, passes=passes, gap_check=10, seed=seed)
    return Solver(dual, cfg, evaluate=evaluate).run()


def at_passes(hist, p, key):
    """Value of ``key`` at the last record with passes <= p."""
    vals = [r[key] for r in hist if r["passes"] <= p + 1e-9 and r[key] is not None]
    return vals[-1] if vals else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--passes", type=float, default=100)
    ap.add_argument("--settings", nargs="+", default=["small", "large"], choices=list(SETTINGS))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "convergence.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {"seeds": args.seeds, "passes": args.passes, "gap_check": 10, "settings": {}}
    for key in args.settings:
        name, lam = SETTINGS[key]
        train, test = load_ocr(key)
        model = ChainModel.for_data(train)
        runs = {}
        for method, (solver, sampling) in METHODS.items():
            seeds = [0] if solver == "fw" else list(range(args.seeds))
            runs[method] = []
            for s in seeds:
                t0 = time.perf_counter()
                hist = run_one(model, train, test, lam, solver, sampling, args.passes, s)
                runs[method].append(hist)
                last = hist[-1]
                print(f"{name} lam={lam:g} {method:13s} seed {s}: passes {last['passes']:.0f} "
                      f"gap {last['gap'] if last['gap'] is not None else float('nan'):.4e} "
                      f"primal {last['primal']:.5f} test {last['test_error']:.4f} "
                      f"solver {last['time_s']:.1f}s wall {time.perf_counter() - t0:.1f}s", flush=True)
        best_dual = max(r["dual"] for m in runs.values() for h in m for r in h if r["dual"] is not None)
        for hist in runs["ssg"]:
            for r in hist:
                r["gap_vs_best_dual"] = r["primal"] - best_dual
        grid = sorted({r["passes"] for m in runs.values() for h in m for r in h})
        summary = {}
        for method, hists in runs.items():
            gkey = "gap_vs_best_dual" if method == "ssg" else "gap"
            curve = []
            for p in grid:
                vals = [at_passes(h, p, gkey) for h in hists]
                if all(v is not None for v in vals):
                    times = [at_passes(h, p, "time_s") for h in hists]
                    curve.append({"passes": p, "gap_median": statistics.median(vals), "gap_min": min(vals),
                                  "gap_max": max(vals), "time_s_median": statistics.median(times)})
            summary[method] = {
                "gap_key": gkey, "curve": curve,
                "final_passes": statistics.median(h[-1]["passes"] for h in hists),
                "final_gap_median": statistics.median(h[-1][gkey] for h in hists),
                "final_test_error_median": statistics.median(h[-1]["test_error"] for h in hists),
                "final_train_error_median": statistics.median(h[-1]["train_error"] for h in hists),
                "time_s_median": statistics.median(h[-1]["time_s"] for h in hists),
                "runs": len(hists)}
        results["settings"][name] = {"lam": lam, "best_dual": best_dual, "methods": summary}
        print(f"\n{name}, lam = {lam:g}: median over seeds at the final check")
        print(f"  {'method':14s} {'passes':>7s} {'gap':>11s} {'test err':>9s} {'time s':>8s}")
        for method, s in summary.items():
            print(f"  {method:14s} {s['final_passes']:7.0f} {s['final_gap_median']:11.4e} "
                  f"{s['final_test_error_median']:9.4f} {s['time_s_median']:8.1f}")
        print()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")
    try:
        plot(results, Path(args.out).with_suffix(".png"))
    except ImportError:
        print("matplotlib not installed: no figure")


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results["settings"])
    fig, axes = plt.subplots(2, len(names), figsize=(6 * len(names), 8), squeeze=False)
    for col, name in enumerate(names):
        s = results["settings"][name]
        for method, m in s["methods"].items():
            xs = [c["passes"] for c in m["curve"]]
            ts = [c["time_s_median"] for c in m["curve"]]
            med = [c["gap_median"] for c in m["curve"]]
            lo = [c["gap_min"] for c in m["curve"]]
            hi = [c["gap_max"] for c in m["curve"]]
            label = method + (" (vs best dual)" if m["gap_key"] != "gap" else "")
            for row, x in enumerate((xs, ts)):
                ax = axes[row][col]
                ax.semilogy(x, med, label=label)
                ax.fill_between(x, lo, hi, alpha=0.2)
        axes[0][col].set_title(f"{name}, lambda = {s['lam']:g}")
        axes[0][col].set_xlabel("effective passes")
        axes[1][col].set_xlabel("solver time (s)")
        for row in range(2):
            axes[row][col].set_ylabel("duality gap")
            axes[row][col].legend()
            axes[row][col].grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
