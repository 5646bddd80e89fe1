"""A treebank PCFG on real data: the relative-frequency grammar of UD English-EWT's phrase structures (the span
task's trees, ``ssvm_torch.data.span_data.gold_spans``: a constituent per word with dependents, labeled with its
UPOS, binarized from the left with <join> spans), parsing the test sentences from their gold UPOS tags with
``ssvm_torch.spans.pcfg``: the Viterbi tree and Goodman's labelled recall parse (``mbr=True``).

Grammar: nonterminals = the 18 span labels (<join> and the 17 UPOS) and a <join> of each phrase label (a join
carries the label of its phrase, the smallest labeled span above it: the intermediate symbols of a markovized
binarization, Klein & Manning 2003's @X), preterminals = the 17 UPOS; rules[A, B, C] and
roots[A] = log (count + alpha) / (total + alpha x outcomes) over the training trees (the 11,735 projective
sentences of two or more words);
terms[i, P] = 0 for word i's gold tag, -inf for the others. alpha is chosen on the dev sentences of at most
``--max-words`` words (the test trees are never read for it), then the test sentences of at most ``--max-words``
words are parsed. Labeled bracket F1 as evalb counts it (one-word spans not counted) with the <join> spans removed.

Usage: python benchmarks/bench_pcfg_treebank.py [--max-words 40] [--out benchmarks/results/pcfg_treebank.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from ssvm_torch.data.span_data import JOIN, gold_spans
from ssvm_torch.data.ud import UPOS_TAGS, load_ud_ewt
from ssvm_torch.spans import bracket_counts, pcfg_decode

ALPHAS = (1e-3, 1e-2, 1e-1, 1.0)


def trees(split: str, max_words: int | None = None):
    """[(upos indices (n,), labeled chart (n+1, n+1) int64)] of the projective sentences of ``split``: one-word spans
    hold their word's UPOS (the preterminal), longer spans their span label (0 = <join>, 1 + UPOS)."""
    tb = load_ud_ewt(split)
    names = [JOIN, *UPOS_TAGS]
    index = {t: k for k, t in enumerate(names)}
    tag = {t: k for k, t in enumerate(UPOS_TAGS)}
    out = []
    for i in range(tb.n):
        a, b = int(tb.offsets[i]), int(tb.offsets[i + 1])
        n = b - a
        if n < 2 or (max_words is not None and n > max_words):
            continue
        spans = gold_spans(tb.heads[a:b], tb.upos[a:b], index)
        if spans is None:
            continue
        tags = torch.tensor([tag[t] for t in tb.upos[a:b]])
        chart = torch.full((n + 1, n + 1), -1, dtype=torch.int64)
        for s, e, lab in spans:
            chart[s, e] = lab if e - s >= 2 else int(tags[s])
        for s, e, lab in sorted(spans, key=lambda x: x[0] - x[1]):        # widest first: parents before joins
            if e - s >= 2 and lab == 0:
                parent = [(s2, e2) for s2, e2, _ in spans if s2 <= s and e <= e2 and (s2, e2) != (s, e)]
                if parent:
                    s2, e2 = min(parent, key=lambda x: x[1] - x[0])
                    up = int(chart[s2, e2])            # a phrase label 1..17, a join of one (18..34), or 0
                    chart[s, e] = up if up >= len(names) or up == 0 else len(names) + up - 1
        out.append((tags, chart))
    return out


def counts(data, NT: int, T: int):
    """(rule counts (NT, S, S), root counts (NT,)) of the gold trees: each constituent's children are its longest
    span starting where it starts and the rest."""
    S = NT + T
    rules, roots = torch.zeros(NT, S, S, dtype=torch.float64), torch.zeros(NT, dtype=torch.float64)
    for tags, chart in data:
        n = len(tags)
        roots[chart[0, n]] += 1
        for i, j in (chart >= 0).nonzero().tolist():
            if j - i < 2:
                continue
            k = max(kk for kk in range(i + 1, j) if chart[i, kk] >= 0)
            left = int(chart[i, k]) + (NT if k - i == 1 else 0)
            right = int(chart[k, j]) + (NT if j - k == 1 else 0)
            rules[chart[i, j], left, right] += 1
    return rules, roots


def grammar(rule_counts, root_counts, alpha: float):
    NT = rule_counts.shape[0]
    flat = rule_counts.reshape(NT, -1) + alpha
    rules = (flat / flat.sum(1, keepdim=True)).log().reshape(rule_counts.shape)
    roots = ((root_counts + alpha) / (root_counts + alpha).sum()).log()
    return rules.float(), roots.float()


def length_batches(data, size: int) -> list:
    """The (tags, chart) rows of ``data`` sorted by length, in batches of ``size``."""
    order = sorted(range(len(data)), key=lambda k: len(data[k][0]))
    return [[data[k] for k in order[s:s + size]] for s in range(0, len(order), size)]


def padded(rows, T: int, dtype=torch.float32):
    """(terms (B, N, T): 0 on each word's gold tag, -inf on the other tags, 0 past a row; the gold labeled charts
    (B, N+1, N+1), -1 past a row; lengths (B,)) of (tags, chart) rows."""
    N = max(len(t) for t, _ in rows)
    terms = torch.zeros(len(rows), N, T, dtype=dtype)
    charts = torch.full((len(rows), N + 1, N + 1), -1, dtype=torch.int64)
    for b, (tags, chart) in enumerate(rows):
        n = len(tags)
        terms[b, :n] = float("-inf")
        terms[b, torch.arange(n), tags] = 0.0
        charts[b, :n + 1, :n + 1] = chart
    return terms, charts, torch.tensor([len(t) for t, _ in rows])


def evaluate(data, rules, roots, T: int, mbr: bool, batch: int = 32) -> dict:
    """Labeled bracket F1 (module docstring) of the parses of ``data``, in batches of similar lengths."""
    total = torch.zeros(3, dtype=torch.int64)
    t0 = time.perf_counter()
    for rows in length_batches(data, batch):
        terms, gold, lengths = padded(rows, T)
        N = terms.shape[1]
        pred, _ = pcfg_decode(terms, rules, roots, lengths=lengths, mbr=mbr)
        drop = lambda c: torch.where((c == 0) | (c > len(UPOS_TAGS)), -1, c)      # noqa: E731 - joins removed
        wide = (torch.arange(N + 1)[None, :] - torch.arange(N + 1)[:, None] >= 2)[None]
        total += bracket_counts(torch.where(wide, drop(pred), -1), torch.where(wide, drop(gold), -1), lengths)
    matched, predicted, in_gold = (int(x) for x in total)
    p, r = matched / max(predicted, 1), matched / max(in_gold, 1)
    return {"f1": 100 * 2 * p * r / max(p + r, 1e-12), "precision": 100 * p, "recall": 100 * r,
            "sentences": len(data), "seconds": time.perf_counter() - t0}


def write_result(result: dict, out: str) -> None:
    """The benchmark's figures as JSON at ``out`` (the PCFG benchmarks' one format)."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    print(f"wrote {out}", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-words", type=int, default=40)
    p.add_argument("--out", default="benchmarks/results/pcfg_treebank.json")
    args = p.parse_args(argv)
    NT, T = 1 + 2 * len(UPOS_TAGS), len(UPOS_TAGS)
    train = trees("train")
    rule_counts, root_counts = counts(train, NT, T)
    dev = trees("dev", args.max_words)
    selection = {}
    for alpha in ALPHAS:
        rules, roots = grammar(rule_counts, root_counts, alpha)
        selection[alpha] = evaluate(dev, rules, roots, T, mbr=False)
        print(f"alpha {alpha:g}: dev F1 {selection[alpha]['f1']:.2f} (Viterbi)", flush=True)
    best = max(ALPHAS, key=lambda a: selection[a]["f1"])
    rules, roots = grammar(rule_counts, root_counts, best)
    test = trees("test", args.max_words)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_at_start": list(os.getloadavg()),
              "train_trees": len(train), "rules_seen": int((rule_counts > 0).sum()), "max_words": args.max_words,
              "dev_f1_by_alpha": {str(a): v["f1"] for a, v in selection.items()}, "alpha": best,
              "dev_labelled_recall": evaluate(dev, rules, roots, T, mbr=True),
              "test_viterbi": evaluate(test, rules, roots, T, mbr=False),
              "test_labelled_recall": evaluate(test, rules, roots, T, mbr=True)}
    print(f"alpha {best:g} (dev); test F1 Viterbi {result['test_viterbi']['f1']:.2f}, labelled recall parse "
          f"{result['test_labelled_recall']['f1']:.2f} ({len(test)} sentences of <= {args.max_words} words)")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
