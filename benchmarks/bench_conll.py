"""CoNLL-2000 at full scale, and the seed-000 study.

  full   BCFW + gap sampling on all 8,936 training sentences for each lambda of --lams:
         seconds per effective pass, peak RSS of the process, test chunk F1 / per-token error.
  seed0  the first 1,000 training sentences: batch FW vs BCFW-uniform vs BCFW-gap, exact gap every
         100 iterations (monitoring; gap sampling refreshes its block gaps every pass, counted),
         iterations to reach gap 0.01; gap and train error vs iterations and vs CPU time (4 plots).

Writes benchmarks/results/conll_<part>.json (+ conll_seed0.png).
Usage: python benchmarks/bench_conll.py [--parts full seed0] [--passes 50] [--lams 1e-2 1e-4 inv-n]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, make_store
from ssvm_torch.data.conll import chunk_f1, load_conll2000

RESULTS = Path(__file__).parent / "results"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def part_full(args):
    t0 = time.perf_counter()
    train, test = load_conll2000()
    load_s = time.perf_counter() - t0
    model = ChainModel.for_data(train)
    out = {"n": train.n, "d": model.d, "n_attributes": train.X.shape[1], "load_s": load_s, "runs": []}
    print(f"CoNLL-2000: n = {train.n}, d = {model.d:,} ({train.X.shape[1]:,} attributes), loaded in {load_s:.1f} s")

    def evaluate(w):
        labels = model.predict_ragged(w, test)
        f1 = chunk_f1(test, labels)
        return {"test_f1": f1["f1"], "test_position_error": float((labels != test.Y).double().mean()),
                "test_error": float(model.ragged_loss(test, labels).mean()), "train_error": model.metrics(w, train)["error"]}

    for lam_s in args.lams:
        lam = 1.0 / train.n if lam_s == "inv-n" else float(lam_s)
        dual = make_store(model, train, lam)
        hist = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=args.passes, gap_check=10),
                      evaluate=evaluate).run()
        last = hist[-1]
        steps_time = last["time_s"]
        run = {"lam": lam, "lam_label": lam_s, "passes": last["passes"], "time_s": steps_time,
               "s_per_pass": steps_time / last["passes"], "gap": last["gap"], "primal": last["primal"],
               "test_f1": last["test_f1"], "best_test_f1": max(r["test_f1"] for r in hist[1:]),
               "test_position_error": last["test_position_error"], "test_error": last["test_error"],
               "train_error": last["train_error"], "rss_mb": rss_mb(), "history": hist}
        out["runs"].append(run)
        print(f"lam = {lam:.3g} ({lam_s}): {last['passes']:.0f} passes in {steps_time:.1f} s "
              f"({run['s_per_pass']:.2f} s/pass), gap {last['gap']:.3e}, test F1 {last['test_f1']:.2f} "
              f"(best along the run {run['best_test_f1']:.2f}), per-token error {last['test_position_error']:.4f}, "
              f"peak RSS {run['rss_mb']:.0f} MB", flush=True)
        del dual
    out["peak_rss_mb"] = rss_mb()
    save("full", out)


def part_seed0(args):
    train, _ = load_conll2000(train_size=1000)
    model = ChainModel.for_data(train)
    lam = 1.0 / train.n
    out = {"n": train.n, "lam": lam, "methods": {}}

    def evaluate(w):
        return {"train_error": model.metrics(w, train)["error"]}

    methods = {"fw": dict(solver="fw", gap_check=1), "bcfw-uniform": dict(sampling="uniform", gap_check=0.1,
                                                                            gap_refresh=0),
               "bcfw-gap": dict(sampling="gap", gap_check=0.1, gap_refresh=10)}
    for name, cfg in methods.items():
        seeds = [0] if name == "fw" else range(args.seeds)
        runs = []
        for seed in seeds:
            dual = make_store(model, train, lam)
            hist = Solver(dual, SolverConfig(passes=args.seed0_passes, seed=seed, **cfg), evaluate=evaluate).run()
            it = [r["steps"] * (train.n if name == "fw" else 1) for r in hist]     # FW: n block updates per step
            reach = next((i for i, r in zip(it, hist) if r["gap"] <= 0.01), None)
            runs.append({"iterations": it, "gap": [r["gap"] for r in hist], "time_s": [r["time_s"] for r in hist],
                         "train_error": [r["train_error"] for r in hist], "iterations_to_0.01": reach})
        reached = [r["iterations_to_0.01"] for r in runs]
        out["methods"][name] = {"runs": runs, "iterations_to_0.01_median":
                                statistics.median(reached) if all(x is not None for x in reached) else None}
        print(f"seed-000 study ({train.n} sentences, lam = {lam:g}) {name}: iterations to gap 0.01 = {reached}",
              flush=True)
    g, u = (out["methods"][k]["iterations_to_0.01_median"] for k in ("bcfw-gap", "bcfw-uniform"))
    if g and u:
        out["gap_vs_uniform_fewer_iterations"] = 1 - g / u
        print(f"gap sampling needs {100 * (1 - g / u):.0f}% fewer iterations than uniform to reach gap 0.01")
    save("seed0", out)
    plot_seed0(out)


def plot_seed0(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for name, m in out["methods"].items():
        r = m["runs"][0]
        for row, key in enumerate(("gap", "train_error")):
            for col, x in enumerate(("iterations", "time_s")):
                ax = axes[row][col]
                (ax.semilogy if key == "gap" else ax.plot)(r[x], r[key], label=name)
                ax.set_xlabel("iterations (block updates)" if x == "iterations" else "CPU time (s)")
                ax.set_ylabel("duality gap" if key == "gap" else "train error")
                ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    axes[0][0].set_title(f"CoNLL-2000, first {out['n']} sentences, lambda = {out['lam']:g}")
    fig.tight_layout()
    fig.savefig(RESULTS / "conll_seed0.png", dpi=90)


def save(part, obj):
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"conll_{part}.json").write_text(json.dumps(obj, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", nargs="+", default=["full", "seed0"], choices=["full", "seed0"])
    ap.add_argument("--lams", nargs="+", default=["1e-2", "3e-2", "1e-4", "inv-n"])
    ap.add_argument("--passes", type=float, default=50)
    ap.add_argument("--seed0-passes", type=float, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for part in args.parts:
        {"full": part_full, "seed0": part_seed0}[part](args)


if __name__ == "__main__":
    main()
