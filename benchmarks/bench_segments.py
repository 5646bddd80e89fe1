"""The semi-Markov recursions (ssvm_torch.segments) against torch-struct 0.5's ``SemiMarkovCRF`` on one CPU
thread (torch.set_num_threads(1), numba.set_num_threads(1)), float32 scores of B full-length rows of T positions,
segments of at most L positions with K labels:

* log Z + backward (the segment marginals as the gradient): ours by the compiled forward-backward (``auto``) and
  by the torch recursion with autograd (``torch``, the code every other device runs) vs torch-struct's
  ``partition`` + autograd (its parallel scan over log T levels of (L K) x (L K) products);
* best segmentation: ours (compiled max-plus with back pointers; torch) vs torch-struct's ``argmax`` (the
  gradient of its max-plus partition);

both sides on the same scores (:func:`ssvm_torch.segments.reference.torch_struct_potentials`), the values and
the best segmentations' scores compared. Rows of one length only: torch-struct's batch of mixed lengths is
wrong (tests/test_segments.py). torch-struct's parallel scan multiplies (L K) x (L K) matrices in the log
semiring, which materializes B T/2 (L K)^3 floats at its first level: a shape past ``--ts-gib`` of that runs
ours alone (at CoNLL-2000's chunk shape, K 12 and L 15, B 32 and T 50, it is 22 GiB; the process was killed
for memory on a 23 GiB machine). Shapes: NER-like (K 9, L 4 and 8; B 32, T 50) and CoNLL-2000's chunking (K 12:
11 chunk types and O; L 15, its longest chunk) at B 8, T 30 (where torch-struct fits) and at B 32, T 50.
Medians of ``--repeats``; our two backends alternated in every repeat, torch-struct timed after them
(alternated with it, the call after each of its multi-GiB calls ran several times slower).

Usage: python benchmarks/bench_segments.py [--quick] [--out benchmarks/results/segments_cpu.json]
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

from ssvm_torch.segments import segment_decode, segment_log_partition, segment_score  # noqa: E402
from ssvm_torch.segments.reference import torch_struct_potentials  # noqa: E402


def scan_gib(B: int, T: int, L: int, K: int) -> float:
    """GiB of float32 that torch-struct's first log-semiring product materializes: B T/2 (L K)^3 (T rounded up to
    a power of two, as its scan pads)."""
    n = 1 << max(0, (T - 1).bit_length())
    return B * n / 2 * (L * K) ** 3 * 4 / 2 ** 30


def point(ts, B: int, T: int, L: int, K: int, repeats: int, ts_gib: float) -> dict:
    g = torch.Generator().manual_seed(0)
    S = torch.randn(B, T, L, K, generator=g)
    first, last, trans = torch.randn(K, generator=g), torch.randn(K, generator=g), torch.randn(K, K, generator=g)
    lengths = torch.full((B,), T)
    edge = torch_struct_potentials(S, first, last, trans, lengths)

    def ours(kernels):
        def run():
            x = S.clone().requires_grad_(True)
            segment_log_partition(x, first, last, trans, lengths=lengths, kernels=kernels).sum().backward()
        return run

    def theirs():
        x = edge.clone().requires_grad_(True)
        ts.SemiMarkovCRF(x, lengths=lengths + 1).partition.sum().backward()

    def decode(kernels):
        return lambda: segment_decode(S, first, last, trans, lengths=lengths, kernels=kernels)

    def theirs_decode():
        return ts.SemiMarkovCRF(edge.clone(), lengths=lengths + 1).argmax

    fns = {"ours_logz_backward": ours("auto"), "ours_torch_logz_backward": ours("torch"),
           "ours_decode": decode("auto"), "ours_torch_decode": decode("torch")}
    need = scan_gib(B, T, L, K)
    if need > ts_gib:
        times = alternated(fns, repeats)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        return {"B": B, "T": T, "L": L, "K": K, "ms": med, "seconds": times,
                "torch_struct_skipped": f"its scan would materialize {need:.1f} GiB (--ts-gib {ts_gib})"}
    # torch-struct apart: each of its calls allocates and frees GiBs, which slowed the call after it several-fold
    # when the two sides were alternated (our log Z + backward at B 32, T 50, L 8, K 9: 18 ms after it, 4.0 ms
    # alone); at 100x-1000x the ratio needs no alternation against drift
    times = {**alternated(fns, repeats),
             **alternated({"torch_struct_logz_backward": theirs, "torch_struct_decode": theirs_decode}, repeats)}
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    s64 = [x.double() for x in (S, first, last, trans)]
    e64 = torch_struct_potentials(*s64, lengths)
    logz = segment_log_partition(*s64, lengths=lengths)
    ts_logz = ts.SemiMarkovCRF(e64, lengths=lengths + 1).partition.detach()
    best = segment_decode(*s64, lengths=lengths)
    ts_best = (ts.SemiMarkovCRF(e64, lengths=lengths + 1).argmax * e64.nan_to_num(neginf=0.0)).sum((1, 2, 3, 4))
    ours_best = segment_score(s64[0], best, *s64[1:], lengths=lengths)
    return {"B": B, "T": T, "L": L, "K": K, "ms": med, "seconds": times,
            "ratio_logz_backward": med["torch_struct_logz_backward"] / med["ours_logz_backward"],
            "ratio_torch_logz_backward": med["torch_struct_logz_backward"] / med["ours_torch_logz_backward"],
            "ratio_decode": med["torch_struct_decode"] / med["ours_decode"],
            "ratio_torch_decode": med["torch_struct_decode"] / med["ours_torch_decode"],
            "max_logz_difference_float64": float((logz - ts_logz).abs().max()),
            "max_best_score_difference_float64": float((ours_best - ts_best).abs().max())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small shape, 3 repeats")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--ts-gib", type=float, default=4.0, help="largest torch-struct scan to run (GiB, see above)")
    p.add_argument("--out", default="benchmarks/results/segments_cpu.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ts = patch_torch_struct()
    shapes = [(8, 20, 4, 5)] if args.quick else [(32, 50, 4, 9), (32, 50, 8, 9), (8, 30, 15, 12), (32, 50, 15, 12)]
    repeats = 3 if args.quick else args.repeats
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float32", "load_average_at_start": list(os.getloadavg()), "points": {}}
    for B, T, L, K in shapes:
        r = point(ts, B, T, L, K, repeats, args.ts_gib)
        result["points"][f"{B}_{T}_{L}_{K}"] = r
        if "torch_struct_skipped" in r:
            print(f"B {B} T {T} L {L} K {K}: log Z + backward {r['ms']['ours_logz_backward']:.2f} ms (torch "
                  f"{r['ms']['ours_torch_logz_backward']:.2f}); decode {r['ms']['ours_decode']:.2f} (torch "
                  f"{r['ms']['ours_torch_decode']:.2f}); torch-struct skipped: {r['torch_struct_skipped']}", flush=True)
            continue
        print(f"B {B} T {T} L {L} K {K}: log Z + backward {r['ms']['ours_logz_backward']:.2f} ms (torch "
              f"{r['ms']['ours_torch_logz_backward']:.2f}) vs torch-struct {r['ms']['torch_struct_logz_backward']:.2f} "
              f"({r['ratio_logz_backward']:.1f}x / {r['ratio_torch_logz_backward']:.1f}x); decode "
              f"{r['ms']['ours_decode']:.2f} (torch {r['ms']['ours_torch_decode']:.2f}) vs "
              f"{r['ms']['torch_struct_decode']:.2f} ms ({r['ratio_decode']:.1f}x / {r['ratio_torch_decode']:.1f}x); "
              f"|log Z diff| {r['max_logz_difference_float64']:.1e}, |best diff| "
              f"{r['max_best_score_difference_float64']:.1e}", flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
