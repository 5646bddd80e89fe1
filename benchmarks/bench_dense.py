"""The dense structures at compiled speed (issue 20): block-step cost, pose to a certified gap, tree-oracle
throughput, and the regularization path against the warm grid.

  steps   microseconds per block step = solver time / oracle calls of a 6-pass BCFW-uniform run (the loop
          and config of ``ssvm-train --solver bcfw --sampling uniform --passes 6``) on scene, ocr-letters,
          segmentation-synth, pose-synth and hansards, for three stores measured interleaved in one run:
            torch     DenseDual with torch decoders (``--kernels torch``: the code CUDA runs)
            before    DenseDual with the compiled decoders (the default before this change)
            compiled  CompiledDenseDual (``--kernels auto`` on CPU float64 now)
          next to OCR-small's chain store (numba) in the same run; median of --repeats.
  pose    BCFW + gap sampling on pose-synth at lam = 1/n, ``--time-budget`` seconds, exact gap every 10 passes
          (the defaults of ssvm-train), stopped at the first check with gap <= 1% of the primal:
          gap / primal vs time, and the test joint errors (cells) against the unaries-only SSVM (solved the
          same way) and the template detector alone (per-joint argmax of its score maps); plus the tree
          max-sum oracle's throughput, single (the block step's call) and batched (a gap pass).
  path    the eps-path (kappa 0.9) and the warm grid (2^15 ... 2^-10) on OCR-small and scene, exact gap pass
          every pass (as before) and estimate-gated (check_below, checks every 0.1 pass): effective passes,
          seconds, breakpoints, and where the passes go (step passes vs exact certification passes).

Writes benchmarks/results/dense_<part>.json (and dense_pose.png: gap / primal vs time).
Usage: python benchmarks/bench_dense.py [--parts steps pose path] [--repeats 3] [--time-budget 240] [--replot]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch.models import MatchingModel
from ssvm_torch.path import cold_starts, grid_lambdas, grid_search, regularization_path
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import BoxedDual, DenseDual, MatchingDual, make_store
from ssvm_torch.tasks import load_task

RESULTS = Path(__file__).parent / "results"
DENSE = ("scene", "ocr-letters", "segmentation-synth", "pose-synth", "hansards")


def machine() -> dict:
    return {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def store_of(problem, variant: str):
    lam = problem.lam()
    if variant == "compiled":
        return make_store(problem.model, problem.train, lam, kernels="auto", nonnegative=problem.nonnegative)
    if variant == "torch":
        return make_store(problem.model, problem.train, lam, kernels="torch", nonnegative=problem.nonnegative)
    # the landed dense store: torch block algebra around the model's default (compiled) decoders
    cls = MatchingDual if isinstance(problem.model, MatchingModel) else DenseDual
    store = cls(problem.model, problem.train, lam)
    nonneg = problem.nonnegative
    return BoxedDual(store, nonneg, lower=0.0) if nonneg is not None and len(nonneg) else store


def six_passes(store) -> dict:
    cfg = SolverConfig(solver="bcfw", sampling="uniform", passes=6, seed=0)
    last = Solver(store, cfg).run()[-1]
    return {"us_per_step": 1e6 * last["time_s"] / last["oracle_calls"], "time_s": last["time_s"],
            "oracle_calls": last["oracle_calls"], "gap": last["gap"]}


def part_steps(args) -> dict:
    problems = {name: load_task(name) for name in ("ocr-small", *DENSE)}
    runs = {name: [("chain", None)] if name == "ocr-small" else [(v, None) for v in ("torch", "before", "compiled")]
            for name in problems}
    for name, p in problems.items():                      # warm-up: numba compilation / cache loading
        for variant, _ in runs[name]:
            store = p.store() if variant == "chain" else store_of(p, variant)
            Solver(store, SolverConfig(solver="bcfw", sampling="uniform", passes=0.2, gap_check=0.2)).run()
    samples = {(name, v): [] for name in problems for v, _ in runs[name]}
    for rep in range(args.repeats):
        for name, p in problems.items():
            for variant, _ in runs[name]:
                if variant == "torch" and rep > 0 and name == "pose-synth":
                    continue                              # pure-torch distance transforms: one run is enough
                store = p.store() if variant == "chain" else store_of(p, variant)
                r = six_passes(store)
                samples[(name, variant)].append(r)
                print(f"rep {rep} {name:18s} {variant:8s} {r['us_per_step']:8.1f} us/step", flush=True)
    out = {**machine(), "repeats": args.repeats, "definition": "solver time / oracle calls, 6-pass BCFW-uniform",
           "results": {}}
    for (name, variant), rs in samples.items():
        us = [r["us_per_step"] for r in rs]
        out["results"].setdefault(name, {"n": problems[name].n_train, "d": problems[name].d})[variant] = {
            "us_per_step_median": statistics.median(us), "us_per_step": us, "final_gap": rs[-1]["gap"]}
    ocr = out["results"]["ocr-small"]["chain"]["us_per_step_median"]
    print(f"\nOCR-small (chain, numba): {ocr:.1f} us/step")
    for name in DENSE:
        r = out["results"][name]
        c = r["compiled"]["us_per_step_median"]
        r["compiled_over_ocr_small"] = c / ocr
        r["speedup_over_before"] = r["before"]["us_per_step_median"] / c
        print(f"{name:18s} torch {r['torch']['us_per_step_median']:8.1f}  before {r['before']['us_per_step_median']:8.1f}"
              f"  compiled {c:6.1f} us/step  ({c / ocr:.1f}x OCR-small, {r['speedup_over_before']:.1f}x faster)")
    return out


def tree_throughput(problem, repeats) -> dict:
    """Loss-augmented tree max-sum: the block step's batch-1 call (compiled host oracle) and the batched
    torch model (numba distance transforms), examples/s, median of ``repeats``."""
    from ssvm_torch.stores.host_structures import host_structure
    data, model = problem.train, problem.model
    w = torch.ones(model.d, dtype=torch.float64)
    host = host_structure(model, data)
    wn = w.numpy()
    out = {}

    def timed(fn):
        fn()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)
    t = timed(lambda: [host.corner(wn, i) for i in range(data.n)])
    out["single_compiled"] = {"examples_per_s": data.n / t, "us_per_example": 1e6 * t / data.n}
    for B in (1, 16, data.n):
        idx = torch.arange(B)
        t = timed(lambda: [model.oracle(w, data, idx) for _ in range(max(1, data.n // B))])
        calls = max(1, data.n // B) * B
        out[f"batched_B{B}"] = {"examples_per_s": calls / t, "us_per_example": 1e6 * t / calls}
    return out


def solve_to_gap(problem, budget, rel) -> tuple[list, object]:
    store = problem.store()
    cfg = SolverConfig(solver="bcfw", sampling="gap", passes=1e7, gap_check=10, time_budget=budget, seed=0)
    solver = Solver(store, cfg)
    solver.start()
    hist = solver.state.history
    while not solver.state.done:
        solver.interval()
        last = hist[-1]
        if last["gap"] <= rel * last["primal"]:
            solver.state.stop_reason = "gap <= 1% of primal"
            break
    return hist, store


def part_pose(args) -> dict:
    out = {**machine(), "time_budget_s": args.time_budget, "target": "exact gap <= 1% of the primal"}
    runs = {}
    for label, unary in (("tree", False), ("unaries_only", True)):
        p = load_task("pose-synth", unary_only=unary)
        hist, store = solve_to_gap(p, args.time_budget, 0.01)
        last = hist[-1]
        ev = p.evaluate(store.w)
        runs[label] = {"lam": store.lam, "passes": last["passes"], "time_s": last["time_s"], "gap": last["gap"],
                       "primal": last["primal"], "gap_over_primal": last["gap"] / last["primal"],
                       "stop": "gap <= 1% of primal" if last["gap"] <= 0.01 * last["primal"] else "time budget",
                       "test_joint_error": ev["test_error"], "train_joint_error": ev["train_error"],
                       "test_pck": ev.get("test_pck"),
                       "history": [{k: r[k] for k in ("passes", "time_s", "gap", "primal")} for r in hist]}
        print(f"pose {label}: gap {last['gap']:.4g} / primal {last['primal']:.4g} = {last['gap'] / last['primal']:.4f} "
              f"after {last['time_s']:.1f} s ({last['passes']:.0f} passes); test joint error "
              f"{ev['test_error']:.3f} cells", flush=True)
    p = load_task("pose-synth")
    test = p.test
    pred = test.S.flatten(2).argmax(2)                               # the template detector alone
    cells = torch.stack([pred // test.W, pred % test.W], -1)
    runs["template_detector"] = {"test_joint_error": float((cells - test.Y).double().norm(dim=-1).mean())}
    print(f"pose template detector alone: test joint error {runs['template_detector']['test_joint_error']:.3f} cells")
    out["runs"] = runs
    out["tree_oracle"] = tree_throughput(p, args.repeats)
    for k, v in out["tree_oracle"].items():
        print(f"tree oracle {k}: {v['examples_per_s']:.0f} examples/s ({v['us_per_example']:.1f} us each)")
    return out


def part_path(args) -> dict:
    out = {**machine(), "eps": args.eps, "lam_min": 2.0 ** -10, "kappa": 0.9, "datasets": {}}
    for name in ("ocr-small", "scene"):
        res = {}
        for label, gc, gated in (("every_pass", 1.0, False), ("gated", 0.1, True)):
            cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=gc)
            p = load_task(name)
            path = regularization_path(p.store(1.0), args.eps, kappa=0.9, lam_min=2.0 ** -10, config=cfg, gated=gated)
            p = load_task(name)
            grid = grid_search(cold_starts(p.store(1.0)), args.eps, grid_lambdas(15, -10), warm=True, config=cfg,
                               gated=gated)
            res[label] = {"path": cost(path.records, 3.0, args.eps), "grid_warm": cost(grid, 0.0)}
            report(name, label, res[label])
        if name == "ocr-small":                 # does another kappa trade breakpoints for step passes better?
            for kappa in (0.7, 0.8, 0.95):
                p = load_task(name)
                path = regularization_path(p.store(1.0), args.eps, kappa=kappa, lam_min=2.0 ** -10, gated=True,
                                           config=SolverConfig(solver="bcfw", sampling="gap", gap_check=0.1))
                res[f"gated_kappa{kappa}"] = {"path": cost(path.records, 3.0, args.eps)}
                a = res[f"gated_kappa{kappa}"]["path"]
                print(f"{name} gated kappa {kappa}: path {a['solves']} breakpoints {a['passes']:.0f} passes "
                      f"({a['check_passes']:.0f} certification + {a['step_passes']:.0f} steps)", flush=True)
        out["datasets"][name] = res
    return out


def report(name, label, r):
    a, b = r["path"], r["grid_warm"]
    print(f"{name} {label:10s}: path {a['solves']} breakpoints {a['passes']:.0f} passes ({a['check_passes']:.0f} "
          f"certification + {a['step_passes']:.0f} steps) {a['time_s']:.1f} s | warm grid {b['solves']} lambdas "
          f"{b['passes']:.0f} passes ({b['check_passes']:.0f} + {b['step_passes']:.0f}) {b['time_s']:.1f} s; "
          f"breakpoints with every solve exact: {a['breakpoint_floor']:.0f}", flush=True)
    for lo in sorted(a["by_range"], reverse=True):
        pa, gb = a["by_range"][lo], b["by_range"].get(lo, {"check": 0, "step": 0, "solves": 0})
        print(f"   lam in [2^{lo}, 2^{lo + 5}): path {pa['solves']:3d} solves {pa['check']:5.0f} + {pa['step']:5.0f} | "
              f"grid {gb['solves']:2d} solves {gb['check']:4.0f} + {gb['step']:5.0f}")


def cost(records, init_passes, eps=None) -> dict:
    """Total effective passes split into exact certification passes (one per exact gap check: the
    records' ``checks``) and step passes, in all and by ranges of lambda (5 octaves each);
    ``init_passes``: the path's Alg. 6 passes (counted as certification)."""
    by, prev = {}, 0.0
    for r in records:
        lo = 5 * int(np.floor(np.log2(r["lam"]) / 5))
        b = by.setdefault(lo, {"solves": 0, "check": 0.0, "step": 0.0})
        spent = r["passes"] - prev
        prev = r["passes"]
        checks = float(r.get("checks") or 0) if r.get("stop_reason") is not None else min(spent, init_passes)
        b["solves"] += 1
        b["check"] += checks
        b["step"] += spent - checks
    check = sum(b["check"] for b in by.values())
    out = {"solves": len(records), "passes": records[-1]["passes"], "check_passes": check,
           "step_passes": records[-1]["passes"] - check, "time_s": records[-1]["time_s"], "by_range": by,
           "records": [{k: r.get(k) for k in ("lam", "gap", "passes", "time_s", "checks", "Delta", "rho")}
                       for r in records]}
    if eps is not None:
        out["breakpoint_floor"] = breakpoint_floor(records, eps)
    return out


def breakpoint_floor(records, eps: float) -> float:
    """Breakpoints the eps-path would need on the same Delta(lam) profile if every breakpoint were solved to
    gap 0: Prop. 1 then steps by rho = 1 - eps / Delta, i.e. -log(1 - eps / Delta) in log lam per breakpoint
    (the largest possible). Each breakpoint pays one exact pass, so this is a floor on its certification
    passes, whatever the solver. Record k holds the Delta (at lam_{k-1}) that chose lam_k."""
    total = 0.0
    for a, b in zip(records, records[1:]):
        if b.get("Delta") and b["Delta"] > eps:
            total += np.log(a["lam"] / b["lam"]) / -np.log(1.0 - eps / b["Delta"])
    return float(total)


def plot_pose(res, path) -> None:
    """Exact gap / primal vs solver time of the pose runs (log scale), the 1% target marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in ("tree", "unaries_only"):
        hist = res["runs"][label]["history"][1:]
        ax.semilogy([r["time_s"] for r in hist], [r["gap"] / r["primal"] for r in hist], label=label.replace("_", " "))
    ax.axhline(0.01, color="k", ls=":", label="1% of the primal")
    ax.set_xlabel("solver time (s)")
    ax.set_ylabel("exact gap / primal")
    ax.set_title("pose-synth, BCFW + gap sampling, lambda = 1/n (compiled store)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", nargs="+", default=["steps", "pose", "path"], choices=["steps", "pose", "path"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-budget", type=float, default=240.0)
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--replot", action="store_true", help="only redraw dense_pose.png from the saved JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    RESULTS.mkdir(exist_ok=True)
    if args.replot:
        plot_pose(json.loads((RESULTS / "dense_pose.json").read_text()), RESULTS / "dense_pose.png")
        return
    for part in args.parts:
        res = {"steps": part_steps, "pose": part_pose, "path": part_path}[part](args)
        (RESULTS / f"dense_{part}.json").write_text(json.dumps(res, indent=1))
        if part == "pose":
            plot_pose(res, RESULTS / "dense_pose.png")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
