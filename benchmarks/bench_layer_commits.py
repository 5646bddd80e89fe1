"""LinearChain at this checkout against an earlier commit, through the API users call: ``LinearChain(K).decode``
and the hinge loss + backward, B 64, T 50, float32 emissions, full masks, one torch thread and one numba
thread, at K in {3, 9, 22, 45, 64}; pytorch-crf's ``CRF.decode`` beside (the peer's ratio).

The earlier commit is checked out in a temporary git worktree (``git worktree add``, removed at the end) and
imported from there by PYTHONPATH in its own process; each round runs one worker process per side, the sides
alternating (current, baseline, baseline, current, ...), and every worker times each call ``--calls`` times
after a warm-up (numba's cache warmed by a first run of each side before the timed rounds). The figure per side
and K is the median over rounds of each round's median; every round's medians are in the JSON, with the
commit each side imported (the worker reports ``ssvm_torch.__file__`` and the check refuses a side that
imported the other's code).

Usage: python benchmarks/bench_layer_commits.py [--baseline c32f200] [--rounds 3] [--calls 60]
       [--out benchmarks/results/layer_commits.json]
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

KS = (3, 9, 22, 45, 64)
B, T = 64, 50


def worker(ks, calls: int) -> dict:
    """One side's medians (ms) of decode and hinge + backward per K (and pytorch-crf's decode), in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import LinearChain
    try:
        from torchcrf import CRF
    except ImportError:
        CRF = None
    out = {"module": ssvm_torch.__file__, "ks": {}}
    for K in ks:
        g = torch.Generator().manual_seed(K)
        em = torch.randn(T, B, K, generator=g)
        tags = torch.randint(0, K, (T, B), generator=g)
        mask = torch.ones(T, B, dtype=torch.bool)
        layer = LinearChain(K)

        def decode():
            layer.decode(em, mask)

        def hinge():
            x = em.clone().requires_grad_(True)
            layer(x, tags, mask).backward()

        fns = {"decode": decode, "hinge_backward": hinge}
        if CRF is not None:
            crf = CRF(K)
            fns["pytorch_crf_decode"] = lambda: crf.decode(em, mask)
        row = {}
        for name, fn in fns.items():
            fn()
            fn()
            times = []
            for _ in range(calls if name != "pytorch_crf_decode" else max(5, calls // 6)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            row[name] = 1e3 * statistics.median(times)
        out["ks"][str(K)] = row
    return out


def run_side(path: Path, ks, calls: int) -> dict:
    return run_worker(path, Path(__file__).resolve(), ["--ks", *ks, "--calls", calls])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="c32f200", help="the earlier commit (any git revision)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=60)
    p.add_argument("--ks", type=int, nargs="+", default=list(KS))
    p.add_argument("--out", default="benchmarks/results/layer_commits.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.ks, args.calls)))
        return
    revs = revisions(args.baseline)
    with baseline_worktree(revs["baseline"]) as wt:
        sides = {"current": ROOT, "baseline": wt}
        for name, path in sides.items():                 # warm numba's caches of both checkouts
            run_side(path, args.ks, 2)
        rounds = {name: [] for name in sides}
        for r in range(args.rounds):
            order = ("current", "baseline") if r % 2 == 0 else ("baseline", "current")
            for name in order:
                rounds[name].append(run_side(sides[name], args.ks, args.calls))
                print(f"round {r} {name}: " + ", ".join(f"K {k} decode {v['decode']:.2f} ms" for k, v in
                                                        rounds[name][-1]["ks"].items()), flush=True)
    table = {}
    for K in map(str, args.ks):
        row = {}
        for name in ("current", "baseline"):
            for op in ("decode", "hinge_backward", "pytorch_crf_decode"):
                vals = [rd["ks"][K][op] for rd in rounds[name] if op in rd["ks"][K]]
                if vals:
                    row[f"{name}_{op}_ms"] = statistics.median(vals)
        row["decode_speedup_vs_baseline"] = row["baseline_decode_ms"] / row["current_decode_ms"]
        row["hinge_speedup_vs_baseline"] = row["baseline_hinge_backward_ms"] / row["current_hinge_backward_ms"]
        crf = [rd["ks"][K]["pytorch_crf_decode"] for rd in rounds["current"] + rounds["baseline"]
               if "pytorch_crf_decode" in rd["ks"][K]]
        if crf:
            row["pytorch_crf_decode_ms"] = statistics.median(crf)
            row["current_vs_pytorch_crf"] = row["pytorch_crf_decode_ms"] / row["current_decode_ms"]
            row["baseline_vs_pytorch_crf"] = row["pytorch_crf_decode_ms"] / row["baseline_decode_ms"]
        table[K] = row
        print(f"K {K:>3}: decode {row['current_decode_ms']:.3f} ms (baseline {row['baseline_decode_ms']:.3f}, "
              f"x{row['decode_speedup_vs_baseline']:.2f}); hinge + backward {row['current_hinge_backward_ms']:.3f} "
              f"(baseline {row['baseline_hinge_backward_ms']:.3f}, x{row['hinge_speedup_vs_baseline']:.2f})"
              + (f"; pytorch-crf decode {row['pytorch_crf_decode_ms']:.2f} ms, ours x{row['current_vs_pytorch_crf']:.1f}"
                 if crf else ""), flush=True)
    write_side_by_side(args.out, revs, args.rounds, args.calls, table, rounds, shape={"B": B, "T": T, "dtype": "float32", "threads": 1})


if __name__ == "__main__":
    main()
