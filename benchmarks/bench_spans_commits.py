"""The span package's torch path (the code every device but the CPU's compiled kernels runs) at this checkout
against an earlier commit, through the API users call: ``span_log_partition(S, kernels="torch")`` + backward and
``span_decode(S, kernels="torch")``, float32 scores of B full-length sentences of n words, one torch thread, at
(B, n) in {(32, 20), (32, 40), (8, 80)}.

The earlier commit is checked out in a temporary git worktree (benchmarks/commits.py) and imported from there in
its own process; each round runs one worker process per side, the sides alternating, every worker timing each
call ``--calls`` times after a warm-up. The figure per side and shape is the median over rounds of each round's
median; every round's medians are in the JSON with the commit each side imported.

Usage: python benchmarks/bench_spans_commits.py --baseline 6f696d6 [--rounds 3] [--calls 30]
       [--out benchmarks/results/spans_commits.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import ROOT, baseline_worktree, revisions, run_worker, write_side_by_side  # noqa: E402

SHAPES = ((32, 20), (32, 40), (8, 80))
OPS = ("logz_backward", "decode")


def worker(shapes, calls: int) -> dict:
    """One side's medians (ms) of log Z + backward and decode per shape, torch path, in this process."""
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.spans import span_decode, span_log_partition
    out = {"module": ssvm_torch.__file__, "shapes": {}}
    for B, n in shapes:
        g = torch.Generator().manual_seed(B + n)
        S = torch.randn(B, n + 1, n + 1, generator=g)
        lengths = torch.full((B,), n)

        def logz():
            x = S.clone().requires_grad_(True)
            span_log_partition(x, lengths=lengths, kernels="torch").sum().backward()

        fns = {"logz_backward": logz, "decode": lambda: span_decode(S, lengths=lengths, kernels="torch")}
        row = {}
        for name, fn in fns.items():
            fn()
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            row[name] = 1e3 * statistics.median(times)
        out["shapes"][f"{B}_{n}"] = row
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="the earlier commit (any git revision; required)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--shapes", type=int, nargs="+", default=[v for s in SHAPES for v in s],
                   help="B n pairs, flattened")
    p.add_argument("--out", default="benchmarks/results/spans_commits.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = list(zip(args.shapes[::2], args.shapes[1::2]))
    if args.worker:
        print(json.dumps(worker(shapes, args.calls)))
        return
    if not args.baseline:
        p.error("--baseline is required")
    revs = revisions(args.baseline)
    flat = [v for s in shapes for v in s]
    with baseline_worktree(revs["baseline"]) as wt:
        sides = {"current": ROOT, "baseline": wt}
        for path in sides.values():                    # warm each checkout's numba cache
            run_worker(path, Path(__file__).resolve(), ["--shapes", *flat, "--calls", 1])
        rounds = {name: [] for name in sides}
        for r in range(args.rounds):
            for name in (("current", "baseline") if r % 2 == 0 else ("baseline", "current")):
                rounds[name].append(run_worker(sides[name], Path(__file__).resolve(),
                                               ["--shapes", *flat, "--calls", args.calls]))
                print(f"round {r} {name}: " + ", ".join(f"{k} log Z + backward {v['logz_backward']:.2f} ms, decode "
                                                        f"{v['decode']:.2f} ms"
                                                        for k, v in rounds[name][-1]["shapes"].items()), flush=True)
    table = {}
    for key in (f"{B}_{n}" for B, n in shapes):
        row = {f"{side}_{op}_ms": statistics.median(rd["shapes"][key][op] for rd in rounds[side])
               for side in sides for op in OPS}
        for op in OPS:
            row[f"{op}_speedup_vs_baseline"] = row[f"baseline_{op}_ms"] / row[f"current_{op}_ms"]
        table[key] = row
        print(f"B, n = {key}: log Z + backward {row['current_logz_backward_ms']:.2f} ms (baseline "
              f"{row['baseline_logz_backward_ms']:.2f}, x{row['logz_backward_speedup_vs_baseline']:.2f}); decode "
              f"{row['current_decode_ms']:.2f} ms (baseline {row['baseline_decode_ms']:.2f}, "
              f"x{row['decode_speedup_vs_baseline']:.2f})", flush=True)
    write_side_by_side(args.out, revs, args.rounds, args.calls, table, rounds, dtype="float32", threads=1)


if __name__ == "__main__":
    main()
