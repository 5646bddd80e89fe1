"""The cost of partial annotation in the layers (issue 73), one CPU thread, float32, medians of alternated repeats:

* the constrained operations against the unconstrained ones: log Z_C + backward against log Z + backward, and
  the best labeling / tree in C against the best one (C built from half the tags / heads observed: the
  restriction of the scores included);
* each loss + backward with every tag / head observed against the same batch with half of them unobserved
  (negative): a partial row computes C's term where a full one reads the gold score, so this ratio is the
  price of the marginal likelihood and the latent hinge.

* LinearChain, B 64, T 50, K 9 and 45 (crf, hinge, softmax_margin);
* DependencyTree, B 32 sentences of n = 40 words, projective first order, non-projective first order and
  projective second order (the same three losses);
* MonotonicAlignment, B 32 grids of 64 x 64, half of a gold path's cells observed (the same three losses).

Usage: python benchmarks/bench_partial.py [--repeats 7] [--out benchmarks/results/partial.json]
       [--sections chain trees alignment]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import numba
import torch

from ssvm_torch.nn import DependencyTree, LinearChain

sys.path.insert(0, str(Path(__file__).parent))
from bench_trees import alternated  # noqa: E402

LOSSES = ("crf", "hinge", "softmax_margin")


def op_rows(name: str, shape: str, ops: dict, repeats: int) -> list:
    """{op: (unconstrained fn, constrained fn)} timed alternately: rows with the ratio constrained / plain."""
    rows = []
    for op, (plain, constrained) in ops.items():
        reps = alternated({"plain": plain, "constrained": constrained}, repeats)
        med = {k: 1e3 * statistics.median(v) for k, v in reps.items()}
        rows.append({"layer": name, "shape": shape, "op": op, **med, "ratio": med["constrained"] / med["plain"]})
        print(f"{name} {shape:34s} {op:22s} plain {med['plain']:8.3f} ms  in C {med['constrained']:8.3f} ms  "
              f"x{med['constrained'] / med['plain']:.2f}", flush=True)
    return rows


def chain_rows(repeats: int) -> list:
    from ssvm_torch.chain import ops
    from ssvm_torch.chain.partial import restricted
    rows = []
    g = torch.Generator().manual_seed(0)
    for K in (9, 45):
        B, T = 64, 50
        E = torch.randn(B, T, K, generator=g)
        tags = torch.randint(0, K, (B, T), generator=g)
        hidden = torch.where(torch.rand(B, T, generator=g) < 0.5, -1, tags)
        mask = torch.ones(B, T, dtype=torch.bool)
        layer = LinearChain(K, batch_first=True)
        s, e, t = layer.start_transitions, layer.end_transitions, layer.transitions.t()
        s, e, t = s.detach(), e.detach(), t.detach()

        def logz(restrict):
            x = E.clone().requires_grad_(True)
            y = restricted(x, hidden, hidden >= 0) if restrict else x
            ops.log_partition(y, mask, s, e, t).sum().backward()

        def best(restrict):
            ops.decode(restricted(E, hidden, hidden >= 0) if restrict else E, mask, s, e, t)
        rows += op_rows("LinearChain", f"B {B}, T {T}, K {K}", {
            "log Z + backward": (lambda: logz(False), lambda: logz(True)),
            "best labeling": (lambda: best(False), lambda: best(True))}, repeats)
        for loss in LOSSES:
            layer = LinearChain(K, batch_first=True, loss=loss)

            def run(t):
                x = E.clone().requires_grad_(True)
                layer(x, t).backward()
            reps = alternated({"full": lambda: run(tags), "partial": lambda: run(hidden)}, repeats)
            med = {k: 1e3 * statistics.median(v) for k, v in reps.items()}
            rows.append({"layer": "LinearChain", "shape": f"B {B}, T {T}, K {K}", "loss": loss, **med,
                         "ratio": med["partial"] / med["full"]})
            print(f"LinearChain K {K:3d} {loss:15s} full {med['full']:8.3f} ms  half hidden {med['partial']:8.3f} ms  "
                  f"x{med['partial'] / med['full']:.2f}", flush=True)
    return rows


def tree_rows(repeats: int) -> list:
    rows = []
    g = torch.Generator().manual_seed(1)
    B, n = 32, 40
    S = torch.randn(B, n + 1, n + 1, generator=g)
    SB = torch.randn(B, n + 1, n + 1, n + 1, generator=g)
    heads = torch.full((B, n + 1), -1)
    heads[:, 1:] = torch.arange(0, n)                    # a chain 0 -> 1 -> 2 ...: projective, single root
    hidden = heads.clone()
    hidden[:, 1:][torch.rand(B, n, generator=g) < 0.5] = -1
    from ssvm_torch.trees import dependency_decode, dependency_log_partition
    from ssvm_torch.trees.partial import observed_heads, restrict
    lengths = torch.full((B,), n)
    observed = observed_heads(hidden, lengths)
    for kind, projective, sib in (("projective", True, None), ("non-projective", False, None),
                                  ("projective, second order", True, SB)):
        def logz(constrained):
            x = S.clone().requires_grad_(True)
            y = restrict(x, hidden, observed) if constrained else x
            dependency_log_partition(y, lengths=lengths, projective=projective, sib_scores=sib).sum().backward()

        def best(constrained):
            dependency_decode(restrict(S, hidden, observed) if constrained else S, lengths=lengths,
                              projective=projective, sib_scores=sib)
        rows += op_rows("DependencyTree", f"B {B}, n {n}, {kind}", {
            "log Z + backward": (lambda: logz(False), lambda: logz(True)),
            "best tree": (lambda: best(False), lambda: best(True))}, repeats)
        for loss in LOSSES:
            layer = DependencyTree(projective=projective, loss=loss)

            def run(h):
                x = S.clone().requires_grad_(True)
                y = None if sib is None else sib.clone().requires_grad_(True)
                layer(x, h, sib_scores=y).backward()
            reps = alternated({"full": lambda: run(heads), "partial": lambda: run(hidden)}, repeats)
            med = {k: 1e3 * statistics.median(v) for k, v in reps.items()}
            rows.append({"layer": "DependencyTree", "shape": f"B {B}, n {n}, {kind}", "loss": loss, **med,
                         "ratio": med["partial"] / med["full"]})
            print(f"DependencyTree {kind:26s} {loss:15s} full {med['full']:8.3f} ms  half hidden {med['partial']:8.3f} ms"
                  f"  x{med['partial'] / med['full']:.2f}", flush=True)
    return rows


def alignment_rows(repeats: int) -> list:
    """MonotonicAlignment, B 32 grids of 64 x 64 (dynamic time warping's scores), half of a gold path's cells
    observed (on the path: its move or any move; off it: -1) and the rest unobserved."""
    from ssvm_torch.align import decode, log_partition
    from ssvm_torch.align.partial import UNOBSERVED, VISITED, allowed_moves
    from ssvm_torch.nn import MonotonicAlignment, from_similarity
    rows = []
    g = torch.Generator().manual_seed(2)
    B, N, M = 32, 64, 64
    S = from_similarity(torch.randn(B, N, M, generator=g)).contiguous()
    gold = decode(S + torch.randn(S.shape, generator=g))
    hidden = torch.where(torch.rand(B, N, M, generator=g) < 0.5, UNOBSERVED, gold)
    hidden = torch.where((hidden >= 0) & (torch.rand(B, N, M, generator=g) < 0.5), VISITED, hidden)
    shape = f"B {B}, {N} x {M}"

    def restricted(x):
        return x.masked_fill(~allowed_moves(hidden), float("-inf"))

    def logz(constrained):
        x = S.clone().requires_grad_(True)
        log_partition(restricted(x) if constrained else x).sum().backward()

    def best(constrained):
        decode(restricted(S) if constrained else S)
    rows += op_rows("MonotonicAlignment", shape, {
        "log Z + backward": (lambda: logz(False), lambda: logz(True)),
        "best path": (lambda: best(False), lambda: best(True))}, repeats)
    for loss in LOSSES:
        layer = MonotonicAlignment(loss)

        def run(path):
            x = S.clone().requires_grad_(True)
            layer(x, path).backward()
        reps = alternated({"full": lambda: run(gold), "partial": lambda: run(hidden)}, repeats)
        med = {k: 1e3 * statistics.median(v) for k, v in reps.items()}
        rows.append({"layer": "MonotonicAlignment", "shape": shape, "loss": loss, **med,
                     "ratio": med["partial"] / med["full"]})
        print(f"MonotonicAlignment {shape:16s} {loss:15s} full {med['full']:8.3f} ms  half hidden "
              f"{med['partial']:8.3f} ms  x{med['partial'] / med['full']:.2f}", flush=True)
    return rows


SECTIONS = {"chain": chain_rows, "trees": tree_rows, "alignment": alignment_rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="benchmarks/results/partial.json")
    p.add_argument("--sections", nargs="+", choices=sorted(SECTIONS), default=list(SECTIONS))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float32", "repeats": args.repeats, "load_average_at_start": list(os.getloadavg()),
              "sections": args.sections, "rows": [r for name in args.sections for r in SECTIONS[name](args.repeats)]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
