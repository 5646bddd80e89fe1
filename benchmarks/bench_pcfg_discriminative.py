"""The treebank PCFG trained by a loss of ``ssvm_torch.spans.pcfg`` on real data: the grammar of
benchmarks/bench_pcfg_treebank.py (UD English-EWT's phrase structures over gold UPOS, 35 nonterminals, 17
preterminals) with its rule and root scores as free weights, started at the relative-frequency grammar (add-alpha
log-probabilities, the alpha that bench_pcfg_treebank.py chose on dev) and trained by ``--loss`` (crf: the
conditional likelihood of the gold trees, Johnson 2001's conditional estimation; hinge: Taskar et al. 2004's
max-margin parsing; softmax_margin) with Adam over the training trees of at most ``--max-words`` words.

Model selection reads dev only: after every epoch the dev F1 of the Viterbi trees; the epoch with the best dev F1
is the one whose grammar parses test (the sentences of at most 40 words, as bench_pcfg_treebank.py scores them:
labeled bracket F1, one-word spans not counted, the <join> spans removed).

Usage: python benchmarks/bench_pcfg_discriminative.py [--loss crf] [--epochs 4]
       [--out benchmarks/results/pcfg_discriminative_{loss}.json]
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import time

import torch

from bench_pcfg_treebank import counts, evaluate, grammar, trees, write_result
from ssvm_torch.data.ud import UPOS_TAGS
from ssvm_torch.spans import pcfg_crf_nll, pcfg_hinge, pcfg_softmax_margin

LOSSES = {"crf": pcfg_crf_nll, "hinge": pcfg_hinge, "softmax_margin": pcfg_softmax_margin}


def batches(data, T: int, size: int):
    """[(terms (B, N, T), gold charts (B, N+1, N+1), lengths)] of ``data`` in batches of similar lengths."""
    order = sorted(range(len(data)), key=lambda k: len(data[k][0]))
    out = []
    for s in range(0, len(order), size):
        rows = [data[k] for k in order[s:s + size]]
        N = max(len(t) for t, _ in rows)
        terms = torch.zeros(len(rows), N, T)
        gold = torch.full((len(rows), N + 1, N + 1), -1, dtype=torch.int64)
        for b, (tags, chart) in enumerate(rows):
            n = len(tags)
            terms[b, :n] = float("-inf")
            terms[b, torch.arange(n), tags] = 0.0
            gold[b, :n + 1, :n + 1] = chart
        out.append((terms, gold, torch.tensor([len(t) for t, _ in rows])))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loss", choices=sorted(LOSSES), default="crf")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--max-words", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--alpha", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/pcfg_discriminative_{loss}.json")
    args = p.parse_args(argv)
    args.out = args.out.format(loss=args.loss)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    NT, T = 1 + 2 * len(UPOS_TAGS), len(UPOS_TAGS)
    rule_counts, root_counts = counts(trees("train"), NT, T)
    start_rules, start_roots = grammar(rule_counts, root_counts, args.alpha)
    train = batches(trees("train", args.max_words), T, args.batch)
    dev, test = trees("dev", 40), trees("test", 40)
    rules, roots = start_rules.clone().requires_grad_(), start_roots.clone().requires_grad_()
    opt = torch.optim.Adam([rules, roots], lr=args.lr)
    start = evaluate(dev, start_rules, start_roots, T, mbr=False)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_at_start": list(os.getloadavg()), "loss": args.loss,
              "lr": args.lr, "alpha": args.alpha, "batch": args.batch, "max_words": args.max_words,
              "train_sentences": sum(len(b[2]) for b in train), "dev_f1_start": start["f1"], "epochs": []}
    print(f"start (relative frequency, alpha {args.alpha:g}): dev F1 {start['f1']:.2f}", flush=True)
    best = (start["f1"], 0, start_rules.clone(), start_roots.clone())
    for epoch in range(1, args.epochs + 1):
        t0, total = time.perf_counter(), 0.0
        for k in rng.sample(range(len(train)), len(train)):
            terms, gold, lengths = train[k]
            opt.zero_grad()
            loss = LOSSES[args.loss](terms, rules, roots, gold, lengths=lengths).sum()
            (loss / len(lengths)).backward()
            opt.step()
            total += float(loss.detach())
        seconds = time.perf_counter() - t0
        d = evaluate(dev, rules.detach(), roots.detach(), T, mbr=False)
        result["epochs"].append({"epoch": epoch, "train_loss": total / result["train_sentences"], "seconds": seconds,
                                 "dev_f1": d["f1"]})
        print(f"epoch {epoch}: loss {total / result['train_sentences']:.4f} ({seconds:.0f} s), dev F1 {d['f1']:.2f}",
              flush=True)
        if d["f1"] > best[0]:
            best = (d["f1"], epoch, rules.detach().clone(), roots.detach().clone())
    result["best_epoch"], result["dev_f1"] = best[1], best[0]
    result["test_viterbi"] = evaluate(test, best[2], best[3], T, mbr=False)
    result["test_labelled_recall"] = evaluate(test, best[2], best[3], T, mbr=True)
    result["test_start"] = evaluate(test, start_rules, start_roots, T, mbr=False)
    print(f"epoch {best[1]} (dev {best[0]:.2f}): test F1 Viterbi {result['test_viterbi']['f1']:.2f}, labelled recall "
          f"{result['test_labelled_recall']['f1']:.2f} (relative frequency {result['test_start']['f1']:.2f})")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
