"""The k best trees on real data: the first-order dependency SSVM of UD English-EWT (gold POS as input, the
``mcdonald`` template, projective single-root trees) trained with BCFW + gap sampling on the training split,
then its dev sentences decoded with ``dependency_decode(..., nbest=k)``: the k-best oracle UAS (per sentence the
tree of the k with the most correct heads; the ceiling a reranker of the k could reach), the mean number of
distinct heads per word among the k, and the seconds to decode all 2,001 dev sentences (batches of 64 by length,
one thread, medians of ``--repeats``; the arc scores computed once, outside the clock). Dev only: the test split
is scored by ``ssvm-train`` alone.

Usage: python benchmarks/bench_kbest_ud.py [--passes 15] [--lam 3e-3] [--trees projective]
       [--out benchmarks/results/kbest_ud_ewt.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numba
import torch

from ssvm_torch.solvers import SolverConfig, make_solver
from ssvm_torch.tasks import load_task
from ssvm_torch.trees import dependency_decode

KS = (1, 2, 5, 10, 20, 50)


def dev_batches(model, w, dev, batch: int = 64) -> list:
    """(arc scores (B, N, N), gold heads (B, N), lengths (B,)) of the dev sentences, by length."""
    order = torch.argsort(dev.lengths, stable=True)
    out = []
    for lo in range(0, dev.n, batch):
        idx = order[lo:lo + batch]
        S = model.arc_scores(w, dev, idx)
        gold = model.gt_batch(dev, idx)
        out.append((S, gold, dev.lengths[idx]))
    return out


def oracle(batches, k: int, projective: bool) -> dict:
    """Oracle UAS of the k best, the 1-best UAS, the mean distinct heads per word among the k (this k)."""
    words = correct_best = correct_oracle = 0
    distinct = 0.0
    for S, gold, lengths in batches:
        heads = dependency_decode(S, lengths=lengths, projective=projective, nbest=k)      # (B, k, N)
        if k == 1:
            heads = heads[:, None]
        on = heads >= 0
        hits = ((heads == gold[:, None]) & on).sum(2)                                    # (B, k) correct per tree
        words += int(lengths.sum())
        correct_best += int(hits[:, 0].sum())
        correct_oracle += int(hits.max(1).values.sum())
        ranks = on[:, :, 1].sum(1)                                                       # trees found per sentence
        for b in range(heads.shape[0]):
            n, r = int(lengths[b]), int(ranks[b])
            if n:
                distinct += sum(len(set(heads[b, :r, m].tolist())) for m in range(1, n + 1))
    return {"k": k, "uas": 100.0 * correct_best / words, "oracle_uas": 100.0 * correct_oracle / words,
            "distinct_heads_per_word": distinct / words}


def decode_seconds(batches, k: int, projective: bool, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):                     # the first: the compiled kernels' warm-up
        t0 = time.perf_counter()
        for S, _, lengths in batches:
            dependency_decode(S, lengths=lengths, projective=projective, nbest=k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=float, default=15)
    p.add_argument("--lam", type=float, default=3e-3)
    p.add_argument("--trees", choices=("projective", "non-projective"), default="projective")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/kbest_ud_ewt.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    problem = load_task("ud-ewt", heldout="dev", trees=args.trees)
    projective = args.trees == "projective"
    t0 = time.perf_counter()
    solver = make_solver(problem.store(args.lam), SolverConfig(solver="bcfw", sampling="gap", passes=args.passes,
                                                               gap_check=5, seed=0))
    hist = solver.run()
    w = solver.model_point()[0].detach().to("cpu", torch.float64)
    train_s = time.perf_counter() - t0
    batches = dev_batches(problem.model, w, problem.test)
    out = {"machine": platform.processor() or platform.machine(), "threads": 1, "lam": args.lam,
           "passes": hist[-1]["passes"], "gap": hist[-1]["gap"], "train_s": train_s, "trees": args.trees,
           "dev_sentences": problem.test.n, "gold_pos_input": True, "points": []}
    print(f"trained {hist[-1]['passes']:.0f} passes in {train_s:.0f} s, gap {hist[-1]['gap']:.4g}", flush=True)
    for k in KS:
        row = oracle(batches, k, projective)
        row["decode_s"] = decode_seconds(batches, k, projective, args.repeats)
        out["points"].append(row)
        print(f"k {k}: oracle UAS {row['oracle_uas']:.2f} (1-best {row['uas']:.2f}), "
              f"{row['distinct_heads_per_word']:.2f} distinct heads per word, dev decoded in {row['decode_s']:.3f} s",
              flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
