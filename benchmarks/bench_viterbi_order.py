"""The chain kernels at every label count: LinearChain's decode and hinge + backward under each loop
order of the numba Viterbi (row-wise argmax scan, column-wise compare-and-select, and the automatic
pick by K of ssvm_torch/chain/numba_viterbi.py), its CRF + backward, against pytorch-crf's decode and
NLL + backward, for K in {3, 5, 9, 22, 45, 100}; and the BCFW store's step on OCR-large (K = 26) and
CoNLL-2000 (K = 22), where the automatic pick runs.

One process, one thread, float32 emissions, full masks, B 64, T 50 by default. Each timing sample is
the mean of a batch of calls (sized to about --sample-s seconds, at most --calls); the orders and the
libraries are alternated within every round and the figure is the median over --rounds rounds, so
machine noise hits every variant alike ("auto/best": auto's time over the faster order's, the median
over rounds of the ratio within a round). The labels and the per-row hinge losses of the three orders are
checked equal bit for bit at every K before anything is timed.

Usage: python benchmarks/bench_viterbi_order.py [--ks 3 5 9 22 45 100] [--rounds 7] [--no-stores]
       [--out benchmarks/results/viterbi_order.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numba
import numpy as np
import torch

from ssvm_torch.chain.numba_viterbi import COLUMNWISE_MIN_K, forced_loop_order
from ssvm_torch.nn import LinearChain

ORDERS = ("rowwise", "columnwise", "auto")


def per_call(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def calls_for(fn, sample_s: float, max_calls: int) -> int:
    """How many calls make one sample of about sample_s seconds (after a warm-up call)."""
    fn()
    one = per_call(fn, 3)
    return int(max(3, min(max_calls, sample_s / max(one, 1e-7))))


def layer_point(B: int, T: int, K: int, rounds: int, sample_s: float, max_calls: int) -> dict:
    from torchcrf import CRF
    torch.manual_seed(0)
    ref = CRF(K, batch_first=True)
    hinge = LinearChain(K, batch_first=True, loss="hinge")
    crf = LinearChain(K, batch_first=True, loss="crf")
    hinge.load_state_dict(ref.state_dict())
    crf.load_state_dict(ref.state_dict())
    g = torch.Generator().manual_seed(K)
    E = torch.randn(B, T, K, generator=g)
    Eg = E.clone().requires_grad_(True)
    tags = torch.randint(K, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)

    def backward(loss):
        Eg.grad = None
        loss.backward()

    # the orders agree bit for bit: labels, per-row hinge losses (the loss-augmented max) and gradients
    seen = {}
    for order in ORDERS:
        with forced_loop_order(order):
            labels = hinge.decode(E, mask)
            Eg.grad = None
            per_row = hinge(Eg, tags, mask, reduction="none")
            per_row.sum().backward()
            seen[order] = (labels, per_row.detach().clone(), Eg.grad.clone())
    base = seen["rowwise"]
    identical = all(torch.equal(a, b) for order in ORDERS[1:] for a, b in zip(base, seen[order]))
    if not identical:
        raise SystemExit(f"K={K}: the loop orders disagree (labels, hinge losses or gradients)")

    ours = {("decode", order): (order, lambda: hinge.decode(E, mask)) for order in ORDERS}
    ours.update({("hinge+backward", order): (order, lambda: backward(hinge(Eg, tags, mask))) for order in ORDERS})
    ours[("crf+backward", "auto")] = ("auto", lambda: backward(crf(Eg, tags, mask)))
    theirs = {("decode", "pytorch-crf"): lambda: ref.decode(E, mask),
              ("nll+backward", "pytorch-crf"): lambda: backward(-ref(Eg, tags, mask))}
    sizes = {}
    for key, (order, fn) in ours.items():
        with forced_loop_order(order):
            sizes[key] = calls_for(fn, sample_s, max_calls)
    for key, fn in theirs.items():
        sizes[key] = calls_for(fn, sample_s, max_calls)
    samples = {key: [] for key in sizes}
    keys = list(sizes)
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:       # rotate the order of the variants
            if key in ours:
                order, fn = ours[key]
                with forced_loop_order(order):
                    samples[key].append(per_call(fn, sizes[key]))
            else:
                samples[key].append(per_call(theirs[key], sizes[key]))
    ms = {f"{op}/{variant}": statistics.median(v) * 1e3 for (op, variant), v in samples.items()}
    row = {"B": B, "T": T, "K": K, "ms": ms, "calls_per_sample": {f"{a}/{b}": n for (a, b), n in sizes.items()},
           "bit_identical_orders": identical,
           "auto_order": "columnwise" if K >= COLUMNWISE_MIN_K else "rowwise"}
    for op in ("decode", "hinge+backward"):
        faster = min(ms[f"{op}/rowwise"], ms[f"{op}/columnwise"])
        row[f"{op}_auto_over_faster_order"] = ms[f"{op}/auto"] / faster
        # the same ratio paired within each round (the three variants ran back to back): less noisy
        paired = [a / min(r, c) for a, r, c in zip(samples[(op, "auto")], samples[(op, "rowwise")],
                                                   samples[(op, "columnwise")])]
        row[f"{op}_auto_over_faster_order_paired_median"] = statistics.median(paired)
    row["vs_pytorch_crf"] = {
        "decode": ms["decode/pytorch-crf"] / ms["decode/auto"],
        "hinge+backward_vs_nll+backward": ms["nll+backward/pytorch-crf"] / ms["hinge+backward/auto"],
        "crf+backward_vs_nll+backward": ms["nll+backward/pytorch-crf"] / ms["crf+backward/auto"]}
    return row


def store_step(task_name: str, lam: float, rounds: int) -> dict:
    """Microseconds per BCFW step (loss-augmented oracle, line search, update, gap sampling) of the
    task's compiled chain store, after 3 warm passes, one pass of n steps per round."""
    from ssvm_torch.solvers import Solver, SolverConfig
    from ssvm_torch.tasks import load_task
    problem = load_task(task_name)
    dual = problem.store(lam)
    Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=3, gap_check=3)).run()
    solver = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=1e9, gap_check=10 ** 6))
    sampler = solver.sampler
    sampler.set_all(dual.gap_pass().block_gaps.numpy())
    n = dual.n

    def one_pass():
        step, state = solver.rule.step, solver.state
        for _ in range(n):
            step(sampler.next(), state)

    times = [per_call(one_pass, 1) / n * 1e6 for _ in range(rounds)]
    return {"task": task_name, "K": int(problem.train.n_states), "n": n, "lam": lam,
            "bcfw_step_us": statistics.median(times), "bcfw_step_us_all": times}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 5, 9, 22, 45, 100])
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--T", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sample-s", type=float, default=0.15, help="seconds of calls per timing sample")
    ap.add_argument("--calls", type=int, default=200, help="at most this many calls per sample")
    ap.add_argument("--no-stores", action="store_true", help="skip the OCR / CoNLL store steps")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "viterbi_order.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    res = {"machine": platform.processor() or platform.machine(), "threads": 1, "torch": torch.__version__,
           "numba": numba.__version__, "dtype": "float32", "rounds": args.rounds,
           "columnwise_min_k": COLUMNWISE_MIN_K, "layer": []}
    print(f"B {args.B}, T {args.T}, one thread, float32; ms per call, median of {args.rounds} alternated rounds")
    print(f"{'K':>4} {'dec row':>8} {'dec col':>8} {'dec auto':>8} {'ptcrf':>8} {'hin row':>8} {'hin col':>8} "
          f"{'hin auto':>8} {'crf+bw':>8} {'ptcrf nll':>9}  auto/best  x decode  x hinge  x crf")
    for K in args.ks:
        row = layer_point(args.B, args.T, K, args.rounds, args.sample_s, args.calls)
        res["layer"].append(row)
        m, v = row["ms"], row["vs_pytorch_crf"]
        print(f"{K:>4} {m['decode/rowwise']:8.3f} {m['decode/columnwise']:8.3f} {m['decode/auto']:8.3f} "
              f"{m['decode/pytorch-crf']:8.3f} {m['hinge+backward/rowwise']:8.3f} "
              f"{m['hinge+backward/columnwise']:8.3f} {m['hinge+backward/auto']:8.3f} {m['crf+backward/auto']:8.3f} "
              f"{m['nll+backward/pytorch-crf']:9.3f}  {row['decode_auto_over_faster_order_paired_median']:.2f}/"
              f"{row['hinge+backward_auto_over_faster_order_paired_median']:.2f}  {v['decode']:7.1f}  "
              f"{v['hinge+backward_vs_nll+backward']:6.1f}  {v['crf+backward_vs_nll+backward']:5.1f}", flush=True)
    if not args.no_stores:
        res["stores"] = [store_step("ocr-large", 1e-3, args.rounds), store_step("conll2000", 1e-4, 3)]
        for s in res["stores"]:
            print(f"{s['task']} (K {s['K']}, n {s['n']}): BCFW step {s['bcfw_step_us']:.1f} us (median)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
