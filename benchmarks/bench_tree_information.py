"""DependencyTree's entropy and KL divergence (ssvm_torch/trees/information.py) against the peers, one CPU thread,
float32 random arc scores of B sentences of n words (full length), single root:

* projective: ours vs SuPar 1.1.4's ``DependencyCRF`` (``entropy`` / ``kl`` by its entropy / KL semirings over
  Eisner's chart) and torch-struct 0.5's ``DependencyCRF.entropy`` (its entropy semiring; its ``kl`` raises
  AttributeError: the KL semiring hands ``logpartition`` a list);
* non-projective: ours vs SuPar's ``MatrixTree`` (log Z - <marginals, scores>, the marginals by autograd with
  ``create_graph``); torch-struct 0.5's ``NonProjectiveDependencyCRF.entropy`` is not implemented (returns None);
* second order (adjacent siblings, ``sib_scores``): ours vs SuPar's ``Dependency2oCRF`` (its entropy / KL
  semirings over the second-order Eisner chart);
* labeled projective trees (``label_scores``, 40 relations): ours against our unlabeled entropy / KL, what the
  relation terms cost (no peer has them);
* binary span trees (``ConstituencyTree``, random span scores (B, n+1, n+1)): ours vs SuPar's ``ConstituencyCRF``
  (its entropy semiring over CKY).

Each measured as the value alone and as value + backward (w.r.t. both score tensors for KL). Our values come
from the compiled log Z and marginals, the backward from Hessian-vector products of a torch log Z
(Eisner's torch inside pass, or a log-determinant). Medians of repeats after a warm-up, the libraries
alternated in every repeat. torch-struct's length masking is patched as in benchmarks/bench_trees.py.

Usage: python benchmarks/bench_tree_information.py [--quick] [--out benchmarks/results/tree_information_cpu.json]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_chain_information import write_rows  # noqa: E402
from bench_trees import alternated, patch_torch_struct, to_torch_struct  # noqa: E402

from ssvm_torch.nn import DependencyTree  # noqa: E402

GRID = ((32, 20), (32, 40))
#: relations of the labeled rows (UD English-EWT's parser has 37 to 50, by the treebank's version and subtypes)
RELATIONS = 40


def medians(fns: dict, repeats: int) -> dict:
    """Median milliseconds of each function over ``repeats`` alternated rounds after a warm-up."""
    return {k: 1e3 * statistics.median(v) for k, v in alternated(fns, repeats).items()}


def grad_of(f, *xs):
    def run():
        leaves = [x.detach().clone().requires_grad_() for x in xs]
        f(*leaves).sum().backward()
    return run


def point(ts, B: int, n: int, repeats: int) -> dict:
    from supar.structs import ConstituencyCRF, Dependency2oCRF, DependencyCRF, MatrixTree
    from ssvm_torch.nn import ConstituencyTree
    g = torch.Generator().manual_seed(0)
    S, Q = torch.randn(B, n + 1, n + 1, generator=g), torch.randn(B, n + 1, n + 1, generator=g)
    lengths = torch.full((B,), n)
    proj, nonproj = DependencyTree(projective=True), DependencyTree(projective=False)

    def ts_crf(x):
        return ts.DependencyCRF(to_torch_struct(x), multiroot=False)

    groups = {
        "proj_entropy_ms": {"ours": lambda: proj.entropy(S, lengths=lengths),
                            "supar": lambda: DependencyCRF(S, lengths).entropy,
                            "torch_struct": lambda: ts_crf(S).entropy},
        "proj_entropy_backward_ms": {"ours": grad_of(lambda x: proj.entropy(x, lengths=lengths), S),
                                     "supar": grad_of(lambda x: DependencyCRF(x, lengths).entropy, S),
                                     "torch_struct": grad_of(lambda x: ts_crf(x).entropy, S)},
        "proj_kl_backward_ms": {"ours": grad_of(lambda x, y: proj.kl(x, y, lengths=lengths), S, Q),
                                "supar": grad_of(lambda x, y: DependencyCRF(x, lengths).kl(DependencyCRF(y, lengths)),
                                                 S, Q)},
        "nonproj_entropy_ms": {"ours": lambda: nonproj.entropy(S, lengths=lengths),
                               "supar": lambda: MatrixTree(S, lengths).entropy},
        "nonproj_entropy_backward_ms": {"ours": grad_of(lambda x: nonproj.entropy(x, lengths=lengths), S),
                                        "supar": grad_of(lambda x: MatrixTree(x, lengths).entropy, S)},
        "nonproj_kl_backward_ms": {"ours": grad_of(lambda x, y: nonproj.kl(x, y, lengths=lengths), S, Q),
                                   "supar": grad_of(lambda x, y: MatrixTree(x, lengths).kl(MatrixTree(y, lengths)),
                                                    S, Q)},
    }
    SB, QB = (torch.randn(B, n + 1, n + 1, n + 1, generator=g) for _ in range(2))

    def supar_2o(x, xb):
        return Dependency2oCRF((x, xb), lengths)

    groups["proj2o_entropy_ms"] = {"ours": lambda: proj.entropy(S, lengths=lengths, sib_scores=SB),
                                   "supar": lambda: supar_2o(S, SB).entropy}
    groups["proj2o_entropy_backward_ms"] = {
        "ours": grad_of(lambda x, xb: proj.entropy(x, lengths=lengths, sib_scores=xb), S, SB),
        "supar": grad_of(lambda x, xb: supar_2o(x, xb).entropy, S, SB)}
    groups["proj2o_kl_backward_ms"] = {
        "ours": grad_of(lambda x, xb, y, yb: proj.kl(x, y, lengths=lengths, sib_scores=xb, other_sib_scores=yb),
                        S, SB, Q, QB),
        "supar": grad_of(lambda x, xb, y, yb: supar_2o(x, xb).kl(supar_2o(y, yb)), S, SB, Q, QB)}
    spans = ConstituencyTree()
    LAB, LABQ = (torch.randn(B, n + 1, n + 1, RELATIONS, generator=g) for _ in range(2))
    groups["proj_labeled_entropy_backward_ms"] = {
        "ours": grad_of(lambda x, lab: proj.entropy(x, lengths=lengths, label_scores=lab), S, LAB),
        "ours_unlabeled": grad_of(lambda x: proj.entropy(x, lengths=lengths), S)}
    groups["proj_labeled_kl_backward_ms"] = {
        "ours": grad_of(lambda x, lab, y, labq: proj.kl(x, y, lengths=lengths, label_scores=lab,
                                                        other_label_scores=labq), S, LAB, Q, LABQ),
        "ours_unlabeled": grad_of(lambda x, y: proj.kl(x, y, lengths=lengths), S, Q)}
    groups["spans_entropy_ms"] = {"ours": lambda: spans.entropy(S, lengths=lengths),
                                  "supar": lambda: ConstituencyCRF(S, lengths).entropy}
    groups["spans_entropy_backward_ms"] = {"ours": grad_of(lambda x: spans.entropy(x, lengths=lengths), S),
                                           "supar": grad_of(lambda x: ConstituencyCRF(x, lengths).entropy, S)}
    groups["spans_kl_backward_ms"] = {
        "ours": grad_of(lambda x, y: spans.kl(x, y, lengths=lengths), S, Q),
        "supar": grad_of(lambda x, y: ConstituencyCRF(x, lengths).kl(ConstituencyCRF(y, lengths)), S, Q)}
    row = {"B": B, "n": n}
    for name, fns in groups.items():
        med = medians(fns, repeats)
        row[name] = {**med, **{f"{k}_over_ours": v / med["ours"] for k, v in med.items() if k != "ours"}}
    # the values agree (float32 peers against our float64-accumulated ones)
    row["max_abs_diff_entropy_vs_supar"] = {
        "projective": float((proj.entropy(S, lengths=lengths) - DependencyCRF(S, lengths).entropy).abs().max()),
        "non_projective": float((nonproj.entropy(S, lengths=lengths) - MatrixTree(S, lengths).entropy).abs().max()),
        "spans": float((spans.entropy(S, lengths=lengths) - ConstituencyCRF(S, lengths).entropy).abs().max()),
        "second_order": float((proj.entropy(S, lengths=lengths, sib_scores=SB) - supar_2o(S, SB).entropy).abs().max())}
    return row


def one_thread_run(doc: str, quick: str, repeats: int, out: str):
    """(args, torch_struct): the command line of a tree benchmark (--quick, --repeats, --out) parsed, torch and
    numba on one thread, warnings off, torch-struct's length masking patched (benchmarks/bench_trees.py)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--out", default=out)
    args = ap.parse_args()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore")
    return args, patch_torch_struct()


def print_timings(prefix: str, row: dict) -> None:
    """One line per timed group of a row: each library's median milliseconds and its ratio to ours."""
    for name, med in row.items():
        if isinstance(med, dict) and "ours" in med:
            print(f"{prefix} {name}: " + "  ".join(f"{k} {v:.2f}" for k, v in med.items()))


def main() -> None:
    args, ts = one_thread_run(__doc__, "B 32, n 20, 2 repeats", 5, "benchmarks/results/tree_information_cpu.json")
    rows = []
    for B, n in (GRID[:1] if args.quick else GRID):
        row = point(ts, B, n, 2 if args.quick else args.repeats)
        rows.append(row)
        print_timings(f"B {B} n {n}", row)
        print(f"B {B} n {n} |H - SuPar's H|: {row['max_abs_diff_entropy_vs_supar']}")
    write_rows(args.out, rows, args.repeats)


if __name__ == "__main__":
    main()
