"""Speed on OCR-large: microseconds per BCFW step (oracle + update + sampling, gap sampling) and
milliseconds per batched exact gap pass; also the batch-1 oracle alone and the torch batched
Viterbi for reference. Prints a table and writes benchmarks/results/speed.json.

Usage: python benchmarks/bench_speed.py [--repeats 5] [--threads 1]
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

from ssvm_torch import ChainModel, Solver, SolverConfig, load_ocr, make_store
from ssvm_torch.oracles import viterbi


def median_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, _ = load_ocr("large")
    model = ChainModel.for_data(train)
    lam = 1e-3
    n = train.n
    res = {"machine": platform.processor() or platform.machine(), "threads": args.threads,
           "torch": torch.__version__, "dataset": "ocr-large", "n": n, "lam": lam, "repeats": args.repeats}

    # warm-up run (numba compilation, caches), then the dual state after 5 passes for realistic steps
    dual = make_store(model, train, lam)
    Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=5, gap_check=5)).run()

    # BCFW steps: one pass of n steps per repeat, gap sampling, state carried on (as in a real run)
    solver = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=1e9, gap_check=10**6))
    sampler = solver.sampler
    sampler.set_all(dual.gap_pass().block_gaps.numpy())

    def one_pass():                       # the engine's own BCFW step (oracle, line search, update, sampler)
        step, state = solver.rule.step, solver.state
        for _ in range(n):
            step(sampler.next(), state)

    med, times = median_of(one_pass, args.repeats)
    res["bcfw_step_us"] = med / n * 1e6
    res["bcfw_step_us_all"] = [t / n * 1e6 for t in times]

    # oracle alone (batch 1)
    idx = np.random.default_rng(0).integers(0, n, size=n)

    def oracles():
        for i in idx:
            dual.fw_corner(int(i))

    med_o, _ = median_of(oracles, args.repeats)
    res["oracle_batch1_us"] = med_o / n * 1e6

    med_g, times_g = median_of(dual.gap_pass, args.repeats)
    res["gap_pass_ms"] = med_g * 1e3
    res["gap_pass_ms_all"] = [t * 1e3 for t in times_g]

    # reference: the pure-torch batched path (the one CUDA uses) on CPU
    torch_dual = make_store(model, train, lam, kernels="torch")
    torch_dual.load_state_dict(dual.state_dict())
    med_t, _ = median_of(torch_dual.gap_pass, max(1, args.repeats // 2))
    res["gap_pass_torch_ms"] = med_t * 1e3

    # torch batch-1 decode for reference
    W, first, last, trans = model.split(dual.w)
    s, e = int(train.offsets[0]), int(train.offsets[1])
    U = (model.features(train)[s:e] @ W.T)[None]
    lengths = torch.tensor([e - s])

    def torch_one():
        for _ in range(200):
            viterbi(U, lengths, first, last, trans)

    med_v, _ = median_of(torch_one, args.repeats)
    res["torch_viterbi_batch1_us"] = med_v / 200 * 1e6

    print(f"OCR-large (n={n}), {args.threads} thread(s), median of {args.repeats}:")
    print(f"  BCFW step (oracle + line search + update + gap sampling): {res['bcfw_step_us']:.1f} us")
    print(f"  batch-1 loss-augmented oracle + gap terms (numba):       {res['oracle_batch1_us']:.1f} us")
    print(f"  batch-1 Viterbi in pure torch (reference):                {res['torch_viterbi_batch1_us']:.1f} us")
    print(f"  exact gap pass over all {n} words (CPU path):           {res['gap_pass_ms']:.1f} ms")
    print(f"  exact gap pass, pure-torch batched path (CUDA's path):    {res['gap_pass_torch_ms']:.1f} ms")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
