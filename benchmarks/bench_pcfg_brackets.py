"""Pereira & Schabes 1992 on real data: a PCFG induced by the inside-outside algorithm from part-of-speech tags alone
and from partially bracketed text, ``ssvm_torch.spans.pcfg_marginals(observed=...)``'s bracket-constrained expected
counts as the E-step.

Data: UD English-EWT's phrase structures (the span task's binarized trees, benchmarks/bench_pcfg_treebank.py's
``trees``), their gold UPOS as the words (terms[i, P] = 0 for word i's tag, -inf for the others; P&S parsed tag
sequences too). Grammar: ``--nonterminals`` symbols (P&S used 15) over the 17 UPOS, every binary rule allowed,
initialized at random (one seed for every condition). Training sentences: 2..``--max-words`` words of train; each
condition observes a share of every sentence's nontrivial phrases (of two or more words, not the sentence; the
binarization's joins are not phrases), drawn at random once, without labels (P&S's bracketings): 0 = raw tag
sequences (Lari & Young's inside-outside), 1 = every phrase of the treebank, the binarization inside it free.
EM: the expected rule and root counts over the trees that hold the observed brackets, normalized (a 1e-9 pseudo
count keeps unused rules finite), for ``--iterations`` rounds; no step reads dev or test.

Evaluation (dev after every ``--every`` rounds, test at the end): the Viterbi trees of the sentences of
2..``--eval-words`` words against the treebank's phrases (the binarization's joins removed), over the nontrivial
brackets: unlabeled precision, recall and F1 (the binary predictions against n-ary gold trees, as unsupervised
parsing is scored: Klein & Manning 2002) and, as P&S measure it, the share of predicted brackets that cross no gold
bracket (``consistent``). Right- and left-branching trees are the baselines, the gold trees' binarization the
bound (a binary tree holds more brackets than the n-ary gold one: its precision is below 100).

Usage: python benchmarks/bench_pcfg_brackets.py [--iterations 30] [--fractions 0 0.25 1]
       [--out benchmarks/results/pcfg_brackets.json]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from bench_pcfg_treebank import length_batches, padded, trees, write_result
from ssvm_torch.data.ud import UPOS_TAGS
from ssvm_torch.spans import pcfg_decode, pcfg_marginals
from ssvm_torch.spans.checks import crossing_counts, span_mask


def batches(data, T: int, size: int, fraction: float | None = None, seed: int = 0):
    """[(terms (B, N, T), observed bool (B, N+1, N+1) or None, gold bool (B, N+1, N+1), lengths, binary)] of
    ``data`` sorted by length: ``gold`` the treebank's phrases (the binarization's joins removed), ``binary`` the
    binarized trees (a binary prediction's best: its F1 bounds the induced grammars'); with ``fraction`` each
    sentence keeps that share of its nontrivial phrases (at random) as its observed brackets."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for rows in length_batches(data, size):
        terms, charts, lengths = padded(rows, T, torch.float64)
        gold = (charts >= 1) & (charts <= len(UPOS_TAGS))                  # the phrases, the joins removed
        binary = charts >= 0
        observed = None
        if fraction is not None:
            keep = torch.rand(gold.shape, generator=g) < fraction
            observed = gold & nontrivial(gold, lengths) & keep
        out.append((terms, observed, gold, lengths, binary))
    return out


def nontrivial(charts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The spans of two or more words that are not the whole sentence, inside each row."""
    M = charts.shape[1]
    pos = torch.arange(M)
    wide = (pos[None, :] - pos[:, None] >= 2)[None]
    whole = torch.zeros_like(charts)
    whole[torch.arange(charts.shape[0]), 0, lengths] = True
    return wide & span_mask(lengths, M) & ~whole


def random_grammar(NT: int, T: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    S = NT + T
    return normalize(torch.rand(NT, S, S, generator=g, dtype=torch.float64) + 0.5,
                     torch.rand(NT, generator=g, dtype=torch.float64) + 0.5)


def normalize(rule_counts: torch.Tensor, root_counts: torch.Tensor, pseudo: float = 0.0):
    """log-probabilities: each nonterminal's rules sum to one, the roots too."""
    NT = rule_counts.shape[0]
    flat = rule_counts.reshape(NT, -1) + pseudo
    roots = root_counts + pseudo
    return (flat / flat.sum(1, keepdim=True)).log().reshape(rule_counts.shape), (roots / roots.sum()).log()


def em_round(train, rules, roots):
    """One round of inside-outside (P&S's reestimation): (rules, roots, the log-likelihood of the training
    sentences' observed brackets before the round, seconds)."""
    t0 = time.perf_counter()
    rule_counts, root_counts = torch.zeros_like(rules), torch.zeros_like(roots)
    loglik = 0.0
    for terms, observed, _, lengths, _ in train:
        m = pcfg_marginals(terms, rules, roots, lengths=lengths, observed=observed)
        rule_counts += m["rules"].sum(0)
        root_counts += m["roots"].sum(0)
        loglik += float(m["log_z"].detach().sum())
    rules, roots = normalize(rule_counts, root_counts, 1e-9)
    return rules, roots, loglik, time.perf_counter() - t0


def scores(pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(matched, predicted, gold, consistent) nontrivial brackets of predicted binary trees and gold phrases (bool
    charts); consistent: the predicted ones that cross no gold one."""
    keep = nontrivial(gold, lengths)
    p, g = pred & keep, gold & keep
    consistent = p & (crossing_counts(g.to(torch.int64)) == 0)
    return torch.tensor([int((p & g).sum()), int(p.sum()), int(g.sum()), int(consistent.sum())])


def branching(lengths: torch.Tensor, M: int, right: bool) -> torch.Tensor:
    """The right- (or left-) branching trees: (i, n) (or (0, j)) for every i (j), and the words."""
    out = torch.zeros(lengths.shape[0], M, M, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for k in range(n):
            out[b, k, k + 1] = True
            if right:
                out[b, k, n] = True
            else:
                out[b, 0, k + 1] = True
    return out


def evaluate(data, rules=None, roots=None, baseline: str | None = None) -> dict:
    total = torch.zeros(4, dtype=torch.int64)
    for terms, _, gold, lengths, binary in data:
        if baseline is None:
            pred = pcfg_decode(terms, rules, roots, lengths=lengths)[0] >= 0
        elif baseline == "gold binarized":
            pred = binary
        else:
            pred = branching(lengths, gold.shape[1], baseline == "right")
        total += scores(pred, gold, lengths)
    matched, predicted, in_gold, consistent = (int(x) for x in total)
    precision, recall = matched / max(predicted, 1), matched / max(in_gold, 1)
    return {"f1": 100 * 2 * precision * recall / max(precision + recall, 1e-12), "precision": 100 * precision,
            "recall": 100 * recall, "consistent": 100 * consistent / max(predicted, 1), "predicted": predicted,
            "gold": in_gold}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nonterminals", type=int, default=15)
    p.add_argument("--max-words", type=int, default=15)
    p.add_argument("--eval-words", type=int, default=15)
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.25, 1.0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/pcfg_brackets.json")
    args = p.parse_args(argv)
    bad = [f for f in args.fractions if not 0 <= f <= 1]
    if bad:
        p.error(f"--fractions: shares in [0, 1], got {bad}")
    NT, T = args.nonterminals, len(UPOS_TAGS)
    train_trees = trees("train", args.max_words)
    dev, test = (batches(trees(split, args.eval_words), T, args.batch) for split in ("dev", "test"))
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_at_start": list(os.getloadavg()),
              "nonterminals": NT, "preterminals": T, "max_words": args.max_words, "eval_words": args.eval_words,
              "train_sentences": len(train_trees), "iterations": args.iterations, "seed": args.seed,
              "baselines": {side: {split: evaluate(data, baseline=side) for split, data in (("dev", dev),
                                                                                         ("test", test))}
                            for side in ("right", "left", "gold binarized")}, "runs": {}}
    print(f"{len(train_trees)} training sentences of 2..{args.max_words} words; baselines {result['baselines']}",
          flush=True)
    for fraction in args.fractions:
        train = batches(train_trees, T, args.batch, fraction, seed=args.seed + 1)
        observed = sum(int(o.sum()) for _, o, _, _, _ in train)
        rules, roots = random_grammar(NT, T, args.seed)
        run = {"observed_brackets": observed, "curve": []}
        for it in range(1, args.iterations + 1):
            rules, roots, loglik, seconds = em_round(train, rules, roots)
            point = {"iteration": it, "train_loglik": loglik, "seconds": seconds}
            if it % args.every == 0 or it == args.iterations:
                point["dev"] = evaluate(dev, rules, roots)
            run["curve"].append(point)
            print(f"fraction {fraction:g} round {it}: log-likelihood {loglik:.1f} ({seconds:.1f} s)"
                  + (f", dev F1 {point['dev']['f1']:.2f} consistent {point['dev']['consistent']:.2f}"
                     if "dev" in point else ""), flush=True)
        run["dev"], run["test"] = evaluate(dev, rules, roots), evaluate(test, rules, roots)
        print(f"fraction {fraction:g}: test F1 {run['test']['f1']:.2f}, consistent {run['test']['consistent']:.2f}",
              flush=True)
        result["runs"][str(fraction)] = run
        write_result(result, args.out)


if __name__ == "__main__":
    main()
