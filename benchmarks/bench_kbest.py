"""The k best trees (Lawler's partition over the compiled oracles: :mod:`ssvm_torch.trees.kbest`,
:mod:`ssvm_torch.spans.kbest`) against torch-struct 0.5's ``topk`` (its k-max semiring through the chart,
autograd for the structures), on one CPU thread (torch.set_num_threads(1), numba.set_num_threads(1)), float32
scores of B full-length sentences of n words:

* projective single-root dependency trees: ours vs ``DependencyCRF(..., multiroot=False).topk(k)``;
* non-projective single-root trees: ours (Chu-Liu-Edmonds per subproblem; torch-struct has no k best here),
  with the 1-best decode's time for scale;
* binary span trees, unlabeled and with 4 labels: ours vs ``TreeCRF(...).topk(k)`` (inclusive spans).

Both sides get the same scores, alternated in every repeat, medians of ``--repeats``; the k scores of the two
sides are compared in float64 on the same shapes (random floats: no ties, so both rankings are the same list).
With ``--before DIR --commit C`` (an earlier package as DIR/ssvm_torch_before, :mod:`commits`) its projective k
best runs alternated with ours too (``before_projective``).

Usage: python benchmarks/bench_kbest.py [--quick] [--repeats 5] [--before DIR --commit C]
       [--out benchmarks/results/kbest_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import warnings
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spans import inclusive  # noqa: E402
from bench_trees import alternated, patch_torch_struct, to_torch_struct  # noqa: E402
from commits import add_before_options, before_and_now  # noqa: E402

from ssvm_torch.spans import span_decode  # noqa: E402
from ssvm_torch.trees import dependency_decode  # noqa: E402


def inclusive_labeled(S: torch.Tensor) -> torch.Tensor:
    """(B, n+1, n+1, L) fencepost spans -> torch-struct's (B, n, n, L) [i, j - 1], -1e9 below the diagonal."""
    return torch.stack([inclusive(S[..., l])[..., 0] for l in range(S.shape[-1])], -1)


def ts_scores(top: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """(B, k) scores of torch-struct's k structures (k, B, ...) under its potentials T (B, ...)."""
    return (top * T[None]).flatten(2).sum(2).T


def point(ts, B: int, n: int, k: int, repeats: int, before=None) -> dict:
    g = torch.Generator().manual_seed(n * 100 + k)
    S = torch.randn(B, n + 1, n + 1, generator=g)
    P = torch.randn(B, n + 1, n + 1, generator=g)
    Q = torch.randn(B, n + 1, n + 1, 4, generator=g)
    T, I, J = to_torch_struct(S), inclusive(P), inclusive_labeled(Q)
    ts_dep = lambda T: ts.DependencyCRF(T.clone().requires_grad_(True), multiroot=False).topk(k)   # noqa: E731
    ts_span = lambda I: ts.TreeCRF(I.clone().requires_grad_(True)).topk(k)                       # noqa: E731
    fns = {"ours_projective": lambda: dependency_decode(S, nbest=k),
           "torch_struct_projective": lambda: ts_dep(T),
           "ours_non_projective": lambda: dependency_decode(S, nbest=k, projective=False),
           "ours_non_projective_1best": lambda: dependency_decode(S, projective=False),
           "ours_projective_1best": lambda: dependency_decode(S),
           "ours_spans": lambda: span_decode(P, nbest=k), "torch_struct_spans": lambda: ts_span(I),
           "ours_labeled_spans": lambda: span_decode(Q, nbest=k), "torch_struct_labeled_spans": lambda: ts_span(J)}
    if before is not None:
        fns["before_projective"] = lambda: before.trees.dependency_decode(S, nbest=k)
        fns["before_spans"] = lambda: before.spans.span_decode(P, nbest=k)
        fns["before_labeled_spans"] = lambda: before.spans.span_decode(Q, nbest=k)
    times = alternated(fns, repeats)
    med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    T64, I64, J64 = T.double(), I.double(), J.double()
    diffs = {
        "projective": (dependency_decode(S.double(), nbest=k, return_scores=True)[1] - ts_scores(ts_dep(T64), T64)),
        "spans": span_decode(P.double(), nbest=k, return_scores=True)[1] - ts_scores(ts_span(I64), I64),
        "labeled_spans": span_decode(Q.double(), nbest=k, return_scores=True)[1] - ts_scores(ts_span(J64), J64)}
    out = {"B": B, "n": n, "k": k, "ms": med, "seconds": times,
           "max_score_difference_torch_struct_float64": {w: float(d.abs().max()) for w, d in diffs.items()}}
    for what in ("projective", "spans", "labeled_spans"):
        out[f"ratio_torch_struct_{what}"] = med[f"torch_struct_{what}"] / med[f"ours_{what}"]
    out["non_projective_vs_1best"] = med["ours_non_projective"] / med["ours_non_projective_1best"]
    out["projective_vs_1best"] = med["ours_projective"] / med["ours_projective_1best"]
    if before is not None:
        for what in ("projective", "spans", "labeled_spans"):
            out[f"ratio_before_{what}"] = med[f"before_{what}"] / med[f"ours_{what}"]
        out["max_score_difference_before_float64"] = max(float(
            (ours(x.double(), nbest=k, return_scores=True)[1]
             - theirs(x.double(), nbest=k, return_scores=True)[1]).abs().max())
            for ours, theirs, x in ((dependency_decode, before.trees.dependency_decode, S),
                                    (span_decode, before.spans.span_decode, P), (span_decode, before.spans.span_decode, Q)))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small shape, 2 repeats")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/kbest_cpu.json")
    add_before_options(p, required=False)
    args = p.parse_args(argv)
    before = before_and_now(args.before)["before"] if args.before else None
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ts = patch_torch_struct()
    points = [(4, 8, 3)] if args.quick else [(32, n, k) for n in (20, 40) for k in (2, 5, 10)]
    repeats = 2 if args.quick else args.repeats
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float32", "load_average_at_start": list(os.getloadavg()), "before_commit": args.commit,
              "points": {}}
    for B, n, k in points:
        r = point(ts, B, n, k, repeats, before)
        result["points"][f"{B}_{n}_{k}"] = r
        ms, d = r["ms"], r["max_score_difference_torch_struct_float64"]
        print(f"B {B} n {n} k {k}: projective {ms['ours_projective']:.1f} ms vs torch-struct "
              f"{ms['torch_struct_projective']:.1f} ({r['ratio_torch_struct_projective']:.1f}x; "
              f"{r['projective_vs_1best']:.0f}x our 1-best); non-projective {ms['ours_non_projective']:.1f} "
              f"({r['non_projective_vs_1best']:.0f}x our 1-best); spans {ms['ours_spans']:.1f} vs "
              f"{ms['torch_struct_spans']:.1f} ({r['ratio_torch_struct_spans']:.1f}x); 4 labels "
              f"{ms['ours_labeled_spans']:.1f} vs {ms['torch_struct_labeled_spans']:.1f} "
              f"({r['ratio_torch_struct_labeled_spans']:.1f}x); |score diff| {max(d.values()):.1e}"
              + (f"; before ({args.commit}): projective {ms['before_projective']:.1f} "
                 f"({r['ratio_before_projective']:.1f}x), spans {ms['before_spans']:.1f} "
                 f"({r['ratio_before_spans']:.1f}x), 4 labels {ms['before_labeled_spans']:.1f} "
                 f"({r['ratio_before_labeled_spans']:.1f}x)" if before is not None else ""), flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
