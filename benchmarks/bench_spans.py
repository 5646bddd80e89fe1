"""Binary constituency trees (ssvm_torch.spans) against SuPar 1.1.4's ``ConstituencyCRF`` and torch-struct 0.5's
``TreeCRF`` on one CPU thread (torch.set_num_threads(1), numba.set_num_threads(1)), float32 span scores of B
full-length sentences of n words (SuPar's layout (B, n+1, n+1); torch-struct's inclusive (B, n, n, 1)):

* log Z + backward (the span marginals as the gradient): ours by the compiled inside pass and top-down marginals
  (``auto``; and on the scores times 400, where every row underflows the real-space pass and is redone in log
  space, ``ours_log_space``) and by the torch recursion with autograd (``torch``, the code every other device runs) vs SuPar's
  ``log_partition`` + autograd and torch-struct's ``partition`` + autograd;
* best tree: ours (compiled CKY with back-pointers; torch: the gradient of the max-plus root) vs SuPar's
  ``argmax`` (the gradient of its max-plus pass, then a sorted list per sentence) and torch-struct's ``argmax``.

All four on the same scores, alternated in every repeat, medians of ``--repeats``; log Z and the best trees'
scores compared in float64. Shapes: B 32 at n 20 and 40 (PTB sentences average about 25 words), B 8 at n 80.

Usage: python benchmarks/bench_spans.py [--quick] [--out benchmarks/results/spans_cpu.json]
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
from bench_trees import alternated, patch_torch_struct  # noqa: E402

from ssvm_torch.spans import span_decode, span_log_partition, span_score  # noqa: E402


def inclusive(S: torch.Tensor) -> torch.Tensor:
    """(B, n+1, n+1) fencepost spans -> torch-struct's (B, n, n, 1) [i, j - 1], -1e9 below the diagonal."""
    B, M, _ = S.shape
    out = torch.full((B, M - 1, M - 1, 1), -1e9, dtype=S.dtype)
    for i in range(M - 1):
        out[:, i, i:, 0] = S[:, i, i + 1:]
    return out


def point(ts, B: int, n: int, repeats: int) -> dict:
    from supar.structs import ConstituencyCRF
    g = torch.Generator().manual_seed(0)
    S = torch.randn(B, n + 1, n + 1, generator=g)
    T = inclusive(S)
    lengths = torch.full((B,), n)

    def ours(kernels):
        def run():
            x = S.clone().requires_grad_(True)
            span_log_partition(x, lengths=lengths, kernels=kernels).sum().backward()
        return run

    def supar_logz():
        x = S.clone().requires_grad_(True)
        ConstituencyCRF(x, lengths).log_partition.sum().backward()

    def ts_logz():
        x = T.clone().requires_grad_(True)
        ts.TreeCRF(x, lengths=lengths).partition.sum().backward()

    spread = S * 400          # scores spread over thousands of nats: every row takes the compiled log-space pass

    def ours_log_space():
        x = spread.clone().requires_grad_(True)
        span_log_partition(x, lengths=lengths).sum().backward()

    fns = {"ours_logz_backward": ours("auto"), "ours_log_space_logz_backward": ours_log_space,
           "ours_torch_logz_backward": ours("torch"),
           "supar_logz_backward": supar_logz, "torch_struct_logz_backward": ts_logz,
           "ours_decode": lambda: span_decode(S, lengths=lengths), "ours_torch_decode":
           lambda: span_decode(S, lengths=lengths, kernels="torch"),
           "supar_decode": lambda: ConstituencyCRF(S, lengths).argmax,
           "torch_struct_decode": lambda: ts.TreeCRF(T.clone().requires_grad_(True), lengths=lengths).argmax}
    times = alternated(fns, repeats)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    S64, T64 = S.double(), T.double()
    logz = span_log_partition(S64, lengths=lengths)
    ref = ConstituencyCRF(S64, lengths)
    ours_best = span_score(S64, span_decode(S64, lengths=lengths), lengths=lengths)
    ts_best = (ts.TreeCRF(T64.clone().requires_grad_(True), lengths=lengths).argmax * T64).sum((1, 2, 3))
    out = {"B": B, "n": n, "ms": med, "seconds": times,
           "max_logz_difference_supar_float64": float((logz - ref.log_partition.detach()).abs().max()),
           "max_logz_difference_torch_struct_float64":
               float((logz - ts.TreeCRF(T64, lengths=lengths).partition.detach()).abs().max()),
           "max_best_score_difference_supar_float64": float((ours_best - ref.max.detach()).abs().max()),
           "max_best_score_difference_torch_struct_float64": float((ours_best - ts_best.detach()).abs().max())}
    for side in ("supar", "torch_struct"):
        for what in ("logz_backward", "decode"):
            out[f"ratio_{side}_{what}"] = med[f"{side}_{what}"] / med[f"ours_{what}"]
            out[f"ratio_{side}_torch_{what}"] = med[f"{side}_{what}"] / med[f"ours_torch_{what}"]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small shape, 3 repeats")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", default="benchmarks/results/spans_cpu.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ts = patch_torch_struct()
    shapes = [(4, 10)] if args.quick else [(32, 20), (32, 40), (8, 80)]
    repeats = 3 if args.quick else args.repeats
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float32", "load_average_at_start": list(os.getloadavg()), "points": {}}
    for B, n in shapes:
        r = point(ts, B, n, repeats)
        result["points"][f"{B}_{n}"] = r
        ms = r["ms"]
        print(f"B {B} n {n}: log Z + backward {ms['ours_logz_backward']:.2f} ms (log space "
              f"{ms['ours_log_space_logz_backward']:.2f}, torch {ms['ours_torch_logz_backward']:.2f})"
              f" vs SuPar {ms['supar_logz_backward']:.2f} ({r['ratio_supar_logz_backward']:.1f}x) and torch-struct "
              f"{ms['torch_struct_logz_backward']:.2f} ({r['ratio_torch_struct_logz_backward']:.1f}x); decode "
              f"{ms['ours_decode']:.2f} (torch {ms['ours_torch_decode']:.2f}) vs SuPar {ms['supar_decode']:.2f} "
              f"({r['ratio_supar_decode']:.1f}x) and torch-struct {ms['torch_struct_decode']:.2f} "
              f"({r['ratio_torch_struct_decode']:.1f}x); |log Z diff| {r['max_logz_difference_supar_float64']:.1e} / "
              f"{r['max_logz_difference_torch_struct_float64']:.1e}, |best diff| "
              f"{r['max_best_score_difference_supar_float64']:.1e} / "
              f"{r['max_best_score_difference_torch_struct_float64']:.1e}", flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
