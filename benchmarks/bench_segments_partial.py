"""What partial annotation and n-best lists cost on semi-Markov chains (ssvm_torch.segments), one CPU thread,
float32, medians of ``--repeats`` with the compared calls alternated in every repeat:

* the training losses + backward at CoNLL-2000's chunk shape (B 32, T 50, L 15, K 12) from the full gold
  segmentation and from a PartialSegmentation that hides half of the positions (every field, drawn
  independently; :mod:`ssvm_torch.segments.objectives`): the partial CRF runs two log Z passes, the latent hinge
  two decodes, against one each;
* the 5 best segmentations, compiled (:mod:`ssvm_torch.segments.numba_nbest`) and by the batched torch ops of
  :mod:`ssvm_torch.segments.nbest` (the path of every other device), against the 1-best compiled decode at that
  shape, and against torch-struct 0.5's ``SemiMarkovCRF.topk`` (its k-max semiring) at a shape
  where torch-struct's scan fits (B 8, T 30, L 4, K 9), the lists' scores compared in float64.

Usage: python benchmarks/bench_segments_partial.py [--quick] [--out benchmarks/results/segments_partial_cpu.json]
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

from ssvm_torch.segments import (PartialSegmentation, observed_segmentation, segment_crf_nll,  # noqa: E402
                                 segment_decode, segment_hinge, segment_softmax_margin)
from ssvm_torch.segments.reference import torch_struct_potentials  # noqa: E402

FNS = {"crf": segment_crf_nll, "hinge": segment_hinge, "softmax_margin": segment_softmax_margin}


def problem(B, T, L, K, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    S = torch.randn(B, T, L, K, generator=g, dtype=dtype)
    first, last, trans = (torch.randn(K, generator=g, dtype=dtype), torch.randn(K, generator=g, dtype=dtype),
                          torch.randn(K, K, generator=g, dtype=dtype))
    return S, first, last, trans, torch.full((B,), T)


def losses_point(B, T, L, K, repeats) -> dict:
    S, first, last, trans, lengths = problem(B, T, L, K)
    gold = segment_decode(S + 3 * torch.randn_like(S), first, last, trans, lengths=lengths)
    full = observed_segmentation(gold, lengths)
    g = torch.Generator().manual_seed(1)
    half = PartialSegmentation(*(torch.where(torch.rand(x.shape, generator=g) < 0.5, -1, x) for x in full))

    def run(fn, annotation):
        def call():
            x = S.clone().requires_grad_(True)
            fn(x, annotation, first, last, trans, lengths=lengths).sum().backward()
        return call
    fns = {f"{name}_{kind}": run(fn, ann) for name, fn in FNS.items() for kind, ann in (("full", gold),
                                                                                        ("partial", half))}
    med = {k: statistics.median(v) * 1e3 for k, v in alternated(fns, repeats).items()}
    return {"B": B, "T": T, "L": L, "K": K, "hidden_fields": float(sum(int((x < 0).sum()) for x in half)
                                                                 / (3 * B * T)),
            "ms": med, "partial_over_full": {n: med[f"{n}_partial"] / med[f"{n}_full"] for n in FNS}}


def nbest_point(ts, B, T, L, K, k, repeats) -> dict:
    S, first, last, trans, lengths = problem(B, T, L, K)
    fns = {"ours_1best": lambda: segment_decode(S, first, last, trans, lengths=lengths),
           f"ours_{k}best": lambda: segment_decode(S, first, last, trans, lengths=lengths, nbest=k),
           f"ours_torch_{k}best": lambda: segment_decode(S, first, last, trans, lengths=lengths, nbest=k,
                                                         kernels="torch")}
    out = {"B": B, "T": T, "L": L, "K": K, "k": k}
    if ts is not None:
        edge = torch_struct_potentials(S, first, last, trans, lengths)
        fns[f"torch_struct_{k}best"] = lambda: ts.SemiMarkovCRF(edge.clone(), lengths=lengths + 1).topk(k)
        s64 = [x.double() for x in (S, first, last, trans)]
        e64 = torch_struct_potentials(*s64, lengths)
        top = ts.SemiMarkovCRF(e64, lengths=lengths + 1).topk(k).detach()
        theirs = (top * e64.nan_to_num(neginf=0.0)[None]).sum((2, 3, 4, 5)).t().detach()
        ours = segment_decode(*s64, lengths=lengths, nbest=k, return_scores=True)[1]
        out["max_score_difference_float64"] = float((ours - theirs).abs().max())
    med = {name: statistics.median(v) * 1e3 for name, v in alternated(fns, repeats).items()}
    out["ms"] = med
    if ts is not None:
        out["ratio_vs_torch_struct"] = med[f"torch_struct_{k}best"] / med[f"ours_{k}best"]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, 3 repeats")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="benchmarks/results/segments_partial_cpu.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ts = patch_torch_struct()
    repeats = 3 if args.quick else args.repeats
    conll, small = ((8, 20, 5, 4), (4, 12, 3, 4)) if args.quick else ((32, 50, 15, 12), (8, 30, 4, 9))
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float32", "load_average_at_start": list(os.getloadavg())}
    r = result["losses"] = losses_point(*conll, repeats)
    print(f"B {r['B']} T {r['T']} L {r['L']} K {r['K']}, loss + backward, full / half hidden: " + "; ".join(
        f"{n} {r['ms'][n + '_full']:.2f} / {r['ms'][n + '_partial']:.2f} ms ({r['partial_over_full'][n]:.2f}x)"
        for n in FNS), flush=True)
    result["nbest"] = [nbest_point(None, *conll, 5, repeats), nbest_point(ts, *small, 5, repeats)]
    for r in result["nbest"]:
        line = (f"B {r['B']} T {r['T']} L {r['L']} K {r['K']}: 1-best {r['ms']['ours_1best']:.2f} ms, "
                f"5-best {r['ms']['ours_5best']:.2f} ms (torch path {r['ms']['ours_torch_5best']:.2f})")
        if "ratio_vs_torch_struct" in r:
            line += (f", torch-struct topk(5) {r['ms']['torch_struct_5best']:.2f} ms "
                     f"({r['ratio_vs_torch_struct']:.1f}x), |score diff| {r['max_score_difference_float64']:.1e}")
        print(line, flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
