"""The BCFW variants of Osokin et al. 2016 (FW / pairwise / away steps, with and without the cache; gap sampling)
and the 1-slack cutting plane (with and without its inference cache) on CoNLL-2000 at full scale with the recommended setting (``CONLL_RECOMMENDED``: the rich-edges template,
BIOES tags under their constraints, the Hamming loss) and its dev-chosen lambda: the exact duality gap against
effective passes (oracle calls / n) and solver seconds, the passes and seconds each method needs to reach the
gap plain BCFW ends with (the first method's last gap), the cache hit rate and the test F1 of the last point. One process, the methods one after the other on one
thread, one store alive at a time.

Usage: python benchmarks/bench_conll_variants.py [--passes 30] [--lam 3e-3] [--methods bcfw bcpfw ...]
       [--out benchmarks/results/conll_variants.json]
       python benchmarks/bench_conll_variants.py --report benchmarks/results/conll_variants.json
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
from pathlib import Path

import torch

from ssvm_torch import SolverConfig, make_store
from ssvm_torch.solvers import make_solver
from ssvm_torch.tasks import CONLL_RECOMMENDED, load_task

METHODS = {"bcfw": {"step": "fw"}, "bcfw-cache": {"step": "fw", "cache": True}, "bcpfw": {"step": "pairwise"},
           "bcpfw-cache": {"step": "pairwise", "cache": True}, "bcafw": {"step": "away"},
           # the 1-slack cutting plane (Joachims et al. 2009): one oracle pass per iteration, constraints as joint
           # labelings; with its inference cache
           "cutting-plane": {"solver": "cutting-plane"}, "cutting-plane-cache": {"solver": "cutting-plane",
                                                                               "cache": True}}


def first_reach(hist: list[dict], target: float) -> dict | None:
    """The first exact-gap record at or below ``target``: its effective passes and solver seconds."""
    for r in hist:
        if r["gap"] <= target:
            return {"passes": r["passes"], "time_s": r["time_s"]}
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=float, default=30)
    p.add_argument("--gap-check", type=float, default=2)
    p.add_argument("--lam", type=float, default=3e-3, help="default: the recommended setting's dev choice "
                   "(docs/results.md)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/conll_variants.json")
    p.add_argument("--report", type=Path, help="print the table of a written JSON (nothing is run)")
    args = p.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text()))
        return
    torch.set_num_threads(1)
    task = load_task("conll2000", **CONLL_RECOMMENDED)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "setting": CONLL_RECOMMENDED, "lam": args.lam, "n": task.train.n, "passes": args.passes,
              "gap_check": args.gap_check, "seed": args.seed, "methods": {}}
    for name in args.methods:
        store = make_store(task.model, task.train, args.lam)
        config = SolverConfig(**{"solver": "bcfw", "sampling": "gap", "passes": args.passes,
                                 "gap_check": args.gap_check, "seed": args.seed, **METHODS[name]})
        solver = make_solver(store, config)
        hist = solver.run()
        last = hist[-1]
        f1 = task.evaluate(store.w)["test_f1"]
        result["methods"][name] = {
            "store": type(store).__name__, "history": [{k: r[k] for k in ("passes", "time_s", "gap", "primal")}
                                                       for r in hist],
            "last_gap": last["gap"], "working_set": last.get("working_set"), "cache_hits": last.get("cache_hits"),
            "time_s": last["time_s"], "cache_hit_rate": last.get("cache_hit_rate", 0.0),
            "steps": {k: last.get(k, 0) for k in ("fw_steps", "pairwise_steps", "away_steps")}, "test_f1": f1}
        print(f"{name:20s} gap {last['gap']:.3e} after {last['passes']:.0f} passes, {last['time_s']:.0f} s, "
              f"test F1 {f1:.2f}", flush=True)
        del store
        gc.collect()
    report(result)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


def report(result: dict) -> None:
    """Adds and prints, per method, the passes and seconds to the first method's last gap."""
    methods = result["methods"]
    target = next(iter(methods.values()))["last_gap"]
    result["target_gap"] = target
    print(f"to the gap {target:.3e} ({next(iter(methods))}'s last):")
    for name, m in methods.items():
        m["reach_target"] = first_reach(m["history"], target)
        r = m["reach_target"]
        at = f"{r['passes']:.0f} passes, {r['time_s']:.1f} s" if r else "not reached"
        cache = (f"cache rounds {m['cache_hits']}" if m.get("cache_hits") is not None      # the cutting plane's
                 else f"cache hits {m['cache_hit_rate']:.2f}")
        print(f"  {name:20s} {at:24s} last gap {m['last_gap']:.3e}, {cache}, test F1 {m['test_f1']:.2f}")


if __name__ == "__main__":
    main()
