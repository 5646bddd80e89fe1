"""The second-order dependency SSVM on UD English-EWT, one thread: the cost of its oracle (decoding the dev
split, an exact gap pass over the training set: median of repeats, the sides interleaved) through the API users
call, optionally side by side with an earlier commit (``--before DIR --commit C``, benchmarks/commits.py), and
first against second order (each ``--siblings`` template) trained alike (BCFW + gap sampling, same lambda and passes; dev UAS). Scores on dev
only: the test split is scored by ``ssvm-train`` alone.

Usage: python benchmarks/bench_sibling_ssvm.py [--passes 10] [--lam 3e-3] [--repeats 3] [--threads 1 2]
       [--siblings mcdonald-pereira mcdonald-pereira-adjacent] [--before /tmp/before_sib --commit C]
       [--out benchmarks/results/sibling_ssvm_ewt.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commits import add_before_options, before_and_now  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def oracle_runs(pkg, siblings: str = "mcdonald-pereira") -> dict:
    """A dev decode (predict_flat) and an exact gap pass over the training set at one random w (the scoring's cost
    does not depend on w), with ``pkg``'s loader, model and store and the sibling template ``siblings``: the two
    timed calls, compiled and run once."""
    from importlib import import_module
    trees = import_module(pkg.__name__ + ".data.trees")
    train, dev = trees.load_ud_dependencies("mcdonald", 1, "dev", siblings=siblings)
    model = import_module(pkg.__name__ + ".models").SiblingDependencyModel.for_data(train)
    w = torch.from_numpy(np.random.default_rng(0).normal(size=model.d) * 0.01)
    store = pkg.make_store(model, train, 3e-3)
    store.set_point(w, 0.0)
    runs = {"decode_dev_s": lambda: model.predict_flat(w, dev), "gap_pass_s": store.gap_pass}
    for run in runs.values():
        run()
    return runs


def set_threads(t: int) -> None:
    torch.set_num_threads(t)
    numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))


def oracle_seconds(sides: dict, repeats: int) -> dict:
    """Seconds of every side's timed calls (``sides``: name -> (oracle_runs, threads)), the sides interleaved in
    each repeat so that the machine's drift reaches them alike; medians and a check of the results."""
    out = {name: {key: [] for key in runs} for name, (runs, _) in sides.items()}
    last = {}
    for _ in range(repeats):
        for name, (runs, threads) in sides.items():
            set_threads(threads)
            for key, run in runs.items():
                t0 = time.perf_counter()
                last[name, key] = run()
                out[name][key].append(time.perf_counter() - t0)
    for name, res in out.items():
        res["check"] = {"heads_sum": int(last[name, "decode_dev_s"].sum()),
                        "gap_sum": float(last[name, "gap_pass_s"].block_gaps.sum())}
        res["median"] = {k: statistics.median(v) for k, v in res.items() if k.endswith("_s")}
    return out


def train_dev(siblings: str | None, lam: float, passes: float) -> dict:
    """BCFW + gap sampling on the training set (first order, or second order with the sibling template
    ``siblings``), dev UAS and the exact gap at the end, seconds."""
    from ssvm_torch import make_store
    from ssvm_torch.data.trees import load_ud_dependencies
    from ssvm_torch.models import DependencyModel, SiblingDependencyModel
    from ssvm_torch.solvers import SolverConfig, make_solver
    train, dev = load_ud_dependencies("mcdonald", 1, "dev", siblings=siblings)
    model = (DependencyModel if siblings is None else SiblingDependencyModel).for_data(train)
    store = make_store(model, train, lam)
    t0 = time.perf_counter()
    hist = make_solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=passes,
                                           seed=0)).run()
    seconds = time.perf_counter() - t0
    uas = model.metrics(store.w.detach(), dev)["uas"]
    return {"dev_uas": uas, "gap": hist[-1]["gap"], "primal": hist[-1]["primal"], "passes": hist[-1]["passes"],
            "seconds": seconds, "d": model.d}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=float, default=10)
    p.add_argument("--lam", type=float, default=3e-3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-training", action="store_true", help="the oracle timings only")
    p.add_argument("--siblings", nargs="+", default=["mcdonald-pereira"],
                   help="the second-order templates trained besides the first order (data/sibling_features.py), e.g. "
                        "mcdonald-pereira mcdonald-pereira-adjacent (without the first-child parts)")
    p.add_argument("--threads", type=int, nargs="+", default=[1],
                   help="torch / numba threads: the first for every figure, the others for this checkout's oracle")
    add_before_options(p, required=False)
    p.add_argument("--out", default="benchmarks/results/sibling_ssvm_ewt.json")
    args = p.parse_args(argv)
    set_threads(args.threads[0])
    os.environ.setdefault("SSVM_TORCH_DATA", str(ROOT / "datasets"))     # the earlier copy reads this checkout's data
    out = {"machine": platform.processor() or platform.machine(), "threads": args.threads, "lam": args.lam,
           "gold_pos_input": True}
    pkgs = before_and_now(args.before) if args.before else {"now": __import__("ssvm_torch")}
    sides = {side: (oracle_runs(pkg), args.threads[0]) for side, pkg in pkgs.items()}
    for template in args.siblings[1:]:         # this checkout's other templates (the first is the default's)
        sides[f"now_{template}"] = (oracle_runs(pkgs["now"], template), args.threads[0])
    for t in args.threads[1:]:                  # this checkout over more threads (the first is the runs' own)
        sides[f"now_{t}_threads"] = (sides["now"][0], t)
    out["oracle"] = oracle_seconds(sides, args.repeats)
    set_threads(args.threads[0])
    for side, res in out["oracle"].items():
        print(f"{side}: dev decode {res['median']['decode_dev_s']:.2f} s, train gap pass "
              f"{res['median']['gap_pass_s']:.2f} s (median of {args.repeats})", flush=True)
    if args.before:
        out["commit_before"] = args.commit
        b, n = out["oracle"]["before"], out["oracle"]["now"]
        out["speedup"] = {k: b["median"][k] / n["median"][k] for k in n["median"]}
        out["same_results"] = b["check"] == n["check"] or abs(b["check"]["gap_sum"] - n["check"]["gap_sum"]) < 1e-6
        print("speed-up", {k: round(v, 2) for k, v in out["speedup"].items()}, "same results", out["same_results"])
    if not args.skip_training:
        out["training"] = {t: train_dev(None if t == "first-order" else t, args.lam, args.passes)
                           for t in ["first-order", *args.siblings]}
        for t, r in out["training"].items():
            print(f"{t}: dev UAS {r['dev_uas']:.2f}, gap {r['gap']:.4f} after {r['passes']} passes, "
                  f"{r['seconds']:.0f} s, d = {r['d']:,}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
