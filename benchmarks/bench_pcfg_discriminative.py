"""The treebank PCFG trained by a loss of ``ssvm_torch.spans.pcfg`` on real data: the grammar of
benchmarks/bench_pcfg_treebank.py (UD English-EWT's phrase structures over gold UPOS, 35 nonterminals, 17
preterminals) with its rule and root scores as free weights, started at the relative-frequency grammar (add-alpha
log-probabilities, the alpha that bench_pcfg_treebank.py chose on dev) and trained by ``--loss`` (crf: the
conditional likelihood of the gold trees, Johnson 2001's conditional estimation; hinge: Taskar et al. 2004's
max-margin parsing; softmax_margin) with Adam over the training trees of at most ``--max-words`` words. With
``--observed`` < 1 each training tree keeps only that share of its constituents (partial brackets: the losses'
``partial=True``, against the trees that hold them) and the grammar starts at zero (``--start zero``; the relative
frequencies would count the hidden brackets).

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

from bench_pcfg_treebank import counts, evaluate, grammar, length_batches, padded, trees, write_result
from ssvm_torch.data.ud import UPOS_TAGS
from ssvm_torch.spans import pcfg_crf_nll, pcfg_hinge, pcfg_softmax_margin

LOSSES = {"crf": pcfg_crf_nll, "hinge": pcfg_hinge, "softmax_margin": pcfg_softmax_margin}


def batches(data, T: int, size: int, observed: float = 1.0, seed: int = 0):
    """[(terms (B, N, T), gold charts (B, N+1, N+1), lengths)] of ``data`` in batches of similar lengths; with
    ``observed`` < 1 each chart keeps that share of its constituents of two or more words below the root (drawn at
    random once, with their labels), the words and the root always: partial brackets."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for rows in length_batches(data, size):
        terms, gold, lengths = padded(rows, T)
        N = terms.shape[1]
        if observed < 1:
            pos = torch.arange(N + 1)
            inner = (pos[None, :] - pos[:, None] >= 2)[None] & (gold >= 0)
            inner[torch.arange(len(rows)), 0, lengths] = False
            gold[inner & (torch.rand(gold.shape, generator=g) >= observed)] = -1
        out.append((terms, gold, lengths))
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
    p.add_argument("--observed", type=float, default=1.0,
                   help="the share of each training tree's constituents kept (< 1: partial brackets, partial=True)")
    p.add_argument("--start", choices=("frequency", "zero"), default="frequency")
    p.add_argument("--out", default="benchmarks/results/pcfg_discriminative_{loss}{suffix}.json")
    args = p.parse_args(argv)
    if not 0 <= args.observed <= 1:
        p.error(f"--observed: a share in [0, 1], got {args.observed}")
    if args.observed < 1 and args.start == "frequency":
        p.error("--observed < 1 needs --start zero: the relative frequencies count the hidden brackets")
    suffix = "" if args.observed == 1 and args.start == "frequency" else f"_{args.start}_observed{args.observed:g}"
    args.out = args.out.format(loss=args.loss, suffix=suffix)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    NT, T = 1 + 2 * len(UPOS_TAGS), len(UPOS_TAGS)
    rule_counts, root_counts = counts(trees("train"), NT, T)
    start_rules, start_roots = grammar(rule_counts, root_counts, args.alpha)
    train = batches(trees("train", args.max_words), T, args.batch, args.observed, args.seed + 1)
    if args.start == "zero":
        start_rules, start_roots = torch.zeros_like(start_rules), torch.zeros_like(start_roots)
    dev, test = trees("dev", 40), trees("test", 40)
    rules, roots = start_rules.clone().requires_grad_(), start_roots.clone().requires_grad_()
    opt = torch.optim.Adam([rules, roots], lr=args.lr)
    start = evaluate(dev, start_rules, start_roots, T, mbr=False)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_at_start": list(os.getloadavg()), "loss": args.loss,
              "lr": args.lr, "alpha": args.alpha, "batch": args.batch, "max_words": args.max_words,
              "observed": args.observed, "start": args.start,
              "observed_spans": sum(int((b[1] >= 0).sum()) for b in train),
              "train_sentences": sum(len(b[2]) for b in train), "dev_f1_start": start["f1"], "epochs": []}
    print(f"start ({args.start}): dev F1 {start['f1']:.2f}", flush=True)
    best = (start["f1"], 0, start_rules.clone(), start_roots.clone())
    for epoch in range(1, args.epochs + 1):
        t0, total = time.perf_counter(), 0.0
        for k in rng.sample(range(len(train)), len(train)):
            terms, gold, lengths = train[k]
            opt.zero_grad()
            loss = LOSSES[args.loss](terms, rules, roots, gold, lengths=lengths, partial=args.observed < 1).sum()
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
          f"{result['test_labelled_recall']['f1']:.2f} (start {result['test_start']['f1']:.2f})")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
