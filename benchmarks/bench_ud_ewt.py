"""The first-order dependency SSVM on UD English-EWT (gold POS as input), one thread: the solvers compared per
effective pass on the same model (BCFW with gap sampling against online EG, Collins et al. 2008's comparison,
and the dual extragradient), the decoders compared on the dev split (projective and non-projective trees,
each trained and decoded both ways), and the cost of a BCFW pass (median over passes, excluding the gap
checks). Scores on dev only: the test split is scored by ``ssvm-train`` alone.

Usage: python benchmarks/bench_ud_ewt.py [--passes 12] [--lam 1e-4] [--out benchmarks/results/ud_ewt_dev.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time
from pathlib import Path

import numba
import torch

from ssvm_torch.solvers import SolverConfig, make_solver
from ssvm_torch.tasks import load_task


def run(problem, lam: float, solver: str, passes: float, gap_check: float, seed: int = 0) -> list[dict]:
    """The records of one run (dev UAS on the records, the model's decoder)."""
    store = problem.store(lam)

    def evaluate(w):
        m = problem.model.metrics(w.detach().to("cpu", torch.float64), problem.test)
        return {"train_error": 0.0, "test_error": m["error"], "test_uas": m["uas"]}
    sampling = "gap" if solver in ("bcfw", "eg") else "perm"
    hist = make_solver(store, SolverConfig(solver=solver, sampling=sampling, passes=passes, gap_check=gap_check,
                                           seed=seed), evaluate=evaluate).run()
    keys = ("passes", "time_s", "primal", "dual", "gap", "test_uas")
    return [{k: r.get(k) for k in keys} for r in hist], store


def pass_seconds(problem, lam: float, passes: int = 6) -> dict:
    """Seconds per effective BCFW pass (gap sampling), block steps only: a run without gap checks in between,
    timed pass by pass through the solver's own clock."""
    store = problem.store(lam)
    times, last = [], [0.0]

    def progress(rec):
        times.append(rec["time_s"] - last[0])
        last[0] = rec["time_s"]
    t0 = time.perf_counter()
    store.gap_pass()
    gap_pass = time.perf_counter() - t0
    hist = make_solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=1, seed=0),
                       progress=progress).run()
    # each interval is one pass of block steps and one exact gap pass (the solver counts both as passes)
    steps = [t - gap_pass for t in times[1:]]
    return {"block_steps_pass_s": statistics.median(steps), "gap_pass_s": gap_pass, "intervals_s": times[1:],
            "per_effective_pass_s": hist[-1]["time_s"] / hist[-1]["passes"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=float, default=12)
    p.add_argument("--lam", type=float, default=1e-4)
    p.add_argument("--out", default="benchmarks/results/ud_ewt_dev.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    out = {"machine": platform.processor() or platform.machine(), "lam": args.lam, "gold_pos_input": True}
    proj = load_task("ud-ewt", heldout="dev", trees="projective")
    out["bcfw_pass"] = pass_seconds(proj, args.lam)
    bp = out["bcfw_pass"]
    print(f"BCFW: {bp['block_steps_pass_s']:.2f} s per pass of block steps, {bp['gap_pass_s']:.2f} s per exact gap "
          f"pass, {bp['per_effective_pass_s']:.2f} s per effective pass", flush=True)
    out["solvers"] = {}
    for solver in ("bcfw", "eg", "deg"):
        recs, _ = run(proj, args.lam, solver, args.passes, 2)
        out["solvers"][solver] = recs
        print(solver, [(r["passes"], round(r["primal"], 4), round(r["gap"], 4), round(r["test_uas"], 2)) for r in recs],
              flush=True)
    out["decoders"] = {}
    nonproj = load_task("ud-ewt", heldout="dev", trees="non-projective")
    for trained, problem in (("projective", proj), ("non-projective", nonproj)):
        recs, store = run(problem, args.lam, "bcfw", args.passes, args.passes)
        row = {}
        for decoded in ("projective", "non-projective"):
            model = type(problem.model).for_data(problem.train, projective=decoded == "projective")
            row[decoded] = model.metrics(store.w, problem.test)["uas"]
        out["decoders"][trained] = {"decoded_uas": row, "records": recs}
        print("trained", trained, row, flush=True)
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
