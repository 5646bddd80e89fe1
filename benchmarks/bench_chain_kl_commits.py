"""LinearChain.kl + backward of two constrained chains at this checkout against an earlier commit, through the API
users call, side by side in one run: a teacher p and a student q, both under the BIO constraints (K 9: four chunk
types; K 45: BIOES over eleven), float32 emissions of B rows of T positions (full masks), the gradient of the summed
KL w.r.t. both emissions and both layers' parameters, one torch and one numba thread.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_chain_kl_commits.py --baseline 8966863~1 [--rounds 5] [--calls 15]
       [--out benchmarks/results/chain_kl_commits.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import (ROOT, alternated_rounds, baseline_worktree, revisions,  # noqa: E402
                     write_side_by_side)

# (B, T, scheme, chunk types): K = 2 * types + 1 (BIO) or 4 * types + 1 (BIOES)
CASES = [(64, 50, "BIO", 4), (16, 100, "BIO", 4), (8, 50, "BIOES", 11)]


def worker(calls: int) -> dict:
    """One side's medians (ms) of KL + backward per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import LinearChain, allowed_transitions
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, T, scheme, types in CASES:
        inner = ["B", "I"] if scheme == "BIO" else ["B", "I", "E", "S"]
        tags = ["O"] + [f"{p}-T{c}" for c in range(types) for p in inner]
        K = len(tags)
        torch.manual_seed(0)
        p, q = (LinearChain(K, batch_first=True, loss="crf", constraints=allowed_transitions(scheme, tags))
                for _ in range(2))
        g = torch.Generator().manual_seed(1)
        E = torch.randn(B, T, K, generator=g).requires_grad_()
        Q = torch.randn(B, T, K, generator=g).requires_grad_()

        def call():
            p.zero_grad(set_to_none=True)
            q.zero_grad(set_to_none=True)
            E.grad = Q.grad = None
            p.kl(E, Q, other=q).sum().backward()

        call()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out["cases"][f"B{B}_T{T}_K{K}_{scheme}"] = 1e3 * statistics.median(times)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the earlier commit (any git revision; required)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--out", default="benchmarks/results/chain_kl_commits.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.calls)))
        return
    if not args.baseline:
        p.error("--baseline is required")
    revs = revisions(args.baseline)
    with baseline_worktree(revs["baseline"]) as wt:
        rounds = alternated_rounds({"current": ROOT, "baseline": wt}, Path(__file__).resolve(),
                                   ["--calls", args.calls], args.rounds, ["--calls", 1])
    table = {}
    for key in rounds["current"][0]["cases"]:
        row = {f"{side}_ms": statistics.median(rd["cases"][key] for rd in rounds[side]) for side in rounds}
        row["speedup_vs_baseline"] = row["baseline_ms"] / row["current_ms"]
        table[key] = row
        print(f"{key}: {row['current_ms']:.2f} ms (baseline {row['baseline_ms']:.2f}, "
              f"x{row['speedup_vs_baseline']:.2f})", flush=True)
    write_side_by_side(args.out, revs, args.rounds, args.calls, table, rounds, dtype="float32", threads=1)


if __name__ == "__main__":
    main()
