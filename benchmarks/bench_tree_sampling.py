"""DependencyTree.sample (ssvm_torch/trees/sampling.py) against torch-struct 0.5, one CPU thread, float32 random arc
scores of B sentences of n words (full length), single root, k samples per sentence:

* projective: ours (the compiled sampler: one inside pass, O(n^2) per sample; and the torch path,
  ``kernels="torch"``, what runs on a GPU) vs torch-struct's ``DependencyCRF.sample`` (its sampled semiring's
  backward, ten samples per inside + backward pass);
* non-projective: ours (Colbourn's sequential algorithm, Sherman-Morrison updates of the inverse Laplacian,
  compiled; and its torch path); the same with the scores x 20 (a range of about 160 nats, where some samples
  fail the fast path's checks and finish on the matrix-tree fallback, O(n^4));
  torch-struct 0.5's ``NonProjectiveDependencyCRF.sample`` raises NotImplementedError (below), so the row reports
  ours alone, with the cost of one matrix-tree log Z + marginals for scale;
* second order (adjacent siblings, ``sib_scores``): ours (compiled, top-down over the second-order chart; and the
  torch path, what runs on a GPU), with the cost of one second-order log Z + marginals for scale;
* binary span trees (``ConstituencyTree``, the same scores as span scores): ours (compiled; and the torch path,
  every device) vs torch-struct's ``TreeCRF.sample`` (one label).

SuPar 1.1.4's ``sample`` (``DependencyCRF``, ``Dependency2oCRF``, ``ConstituencyCRF``) raises AttributeError
('tuple' object has no attribute 'movedim') and its ``MatrixTree.sample`` NotImplementedError: each row records
every peer sampler's outcome.

Medians of repeats after a warm-up, the libraries alternated in every repeat; torch-struct's length masking is
patched as in benchmarks/bench_trees.py. The draws' arc frequencies are checked against the marginals in
tests/test_tree_sampling.py, not here.

Usage: python benchmarks/bench_tree_sampling.py [--quick] [--out benchmarks/results/tree_sampling_cpu.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_chain_information import write_rows  # noqa: E402
from bench_tree_information import medians, one_thread_run, print_timings  # noqa: E402
from bench_spans import inclusive  # noqa: E402
from bench_trees import to_torch_struct  # noqa: E402

from ssvm_torch.nn import ConstituencyTree, DependencyTree  # noqa: E402

GRID = ((32, 20, 1), (32, 20, 16), (32, 40, 1), (32, 40, 16))


def point(ts, B: int, n: int, k: int, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    S = torch.randn(B, n + 1, n + 1, generator=g)
    lengths = torch.full((B,), n)
    proj, proj_torch = DependencyTree(projective=True), DependencyTree(projective=True, kernels="torch")
    SB = torch.randn(B, n + 1, n + 1, n + 1, generator=g)
    nonproj, spans = DependencyTree(projective=False), ConstituencyTree()
    nonproj_torch = DependencyTree(projective=False, kernels="torch")
    spans_torch = ConstituencyTree(kernels="torch")
    I = inclusive(S)
    groups = {
        "proj_sample_ms": {"ours": lambda: proj.sample(S, lengths=lengths, n=k),
                           "ours_torch_path": lambda: proj_torch.sample(S, lengths=lengths, n=k),
                           "torch_struct": lambda: ts.DependencyCRF(to_torch_struct(S), multiroot=False).sample((k,))},
        "spans_sample_ms": {"ours": lambda: spans.sample(S, lengths=lengths, n=k),
                            "ours_torch_path": lambda: spans_torch.sample(S, lengths=lengths, n=k),
                            "torch_struct": lambda: ts.TreeCRF(I.clone().requires_grad_(True)).sample((k,))},
        "nonproj_sample_ms": {"ours": lambda: nonproj.sample(S, lengths=lengths, n=k),
                              "ours_torch_path": lambda: nonproj_torch.sample(S, lengths=lengths, n=k),
                              "ours_marginals_once": lambda: nonproj.marginals(S, lengths=lengths)},
        "nonproj_sample_scores_x20_ms": {"ours": lambda: nonproj.sample(S * 20, lengths=lengths, n=k)},
        "proj2o_sample_ms": {"ours": lambda: proj.sample(S, lengths=lengths, n=k, sib_scores=SB),
                             "ours_torch_path": lambda: proj_torch.sample(S, lengths=lengths, n=k, sib_scores=SB),
                             "ours_marginals_once": lambda: proj.marginals(S, lengths=lengths, sib_scores=SB)},
    }
    row = {"B": B, "n": n, "samples": k}
    for name, fns in groups.items():
        med = medians(fns, repeats)
        row[name] = {**med, **{f"{key}_over_ours": v / med["ours"] for key, v in med.items() if key != "ours"}}
    from supar.structs import ConstituencyCRF, Dependency2oCRF, DependencyCRF, MatrixTree
    peers = {"torch_struct NonProjectiveDependencyCRF": lambda: ts.NonProjectiveDependencyCRF(
                 to_torch_struct(S), multiroot=False).sample((k,)),
             "supar DependencyCRF": lambda: DependencyCRF(S.clone().requires_grad_(), lengths).sample(),
             "supar Dependency2oCRF": lambda: Dependency2oCRF((S.clone().requires_grad_(), SB.clone().requires_grad_()),
                                                              lengths).sample(),
             "supar MatrixTree": lambda: MatrixTree(S.clone().requires_grad_(), lengths).sample(),
             "supar ConstituencyCRF": lambda: ConstituencyCRF(S.clone().requires_grad_(), lengths).sample()}
    row["peer_samplers"] = {}
    for name, fn in peers.items():
        try:
            fn()
            row["peer_samplers"][name] = "available"
        except Exception as e:                          # the peers' failures, recorded as they are
            row["peer_samplers"][name] = f"{type(e).__name__}: {str(e)[:60]}"
    return row


def main() -> None:
    args, ts = one_thread_run(__doc__, "B 32, n 20, one sample, 2 repeats", 7,
                              "benchmarks/results/tree_sampling_cpu.json")
    rows = []
    for B, n, k in (GRID[:1] if args.quick else GRID):
        row = point(ts, B, n, k, 2 if args.quick else args.repeats)
        rows.append(row)
        print_timings(f"B {B} n {n} k {k}", row)
        print(f"B {B} n {n} k {k} the peers' samplers: {row['peer_samplers']}")
    write_rows(args.out, rows, args.repeats)


if __name__ == "__main__":
    main()
