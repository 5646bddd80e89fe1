"""The constituency layer on real sentences: a span parser trained with :class:`ssvm_torch.nn.ConstituencyTree` on
UD English-EWT's dependency trees read as phrase structures (the flattest conversion: a constituent per word
with dependents, the span of its subtree, labeled with the head's UPOS; ``ssvm_torch.spans.subtree_brackets``),
binarized from the left (``binarize``; joins and one-word spans labeled 0), scored by labeled bracket F1 after
``debinarize`` (evalb's counts, ``bracket_counts``: one-word spans excluded). The projective sentences only
(12,256 of 12,544 in train, 1,970 of 2,001 in dev, 2,051 of 2,077 in test; a non-projective tree has no such
phrase structure), the released splits, dev to choose the
epoch, test decoded once at the end.

The network is the biaffine parser's encoder (``ssvm_torch.deep.biaffine.BiaffineParser.encode``: word, character
and gold-UPOS embeddings, a 3-layer BiLSTM) with a span head as in SuPar's CRF constituency parser (Zhang et al.
2020): fencepost k reads the forward state at word k and the backward state at word k + 1 (position 0 is the root
token), a biaffine span scorer and a biaffine label scorer over two MLPs of the fenceposts each; the layer's
``loss`` (``crf``, ``hinge``, ``softmax_margin``) over labeled binary trees, Adam (2e-3, betas 0.9 / 0.9), gradient
norm clipped at 5.

Run directory (``--out``): ``config.json``, ``history.json`` (per epoch: mean training loss, dev labeled and
unlabeled P / R / F1, seconds), ``spans.pt`` (the best epoch's weights, a plain state dict: ``torch.load(...,
weights_only=True)``), ``test_predictions.json`` (each test sentence's debinarized labeled spans), ``results.json``
(dev / test figures of the chosen epoch; and the share of dev rows whose compiled log Z under the trained scores
took the real-space pass, ssvm_torch/spans/numba_cky.py).

``--mbr-of`` decodes a finished run's dev and test again by max and by MBR (the tree of the most expected correct
labeled spans, ``ConstituencyTree.decode(mbr=True)``) into ``results_decodes.json``, the decode chosen on dev.

Usage: python benchmarks/bench_spans_ud.py --loss crf --epochs 10 --out /path/run [--train-size 500]
       python benchmarks/bench_spans_ud.py --out /path/run --mbr-of
       python benchmarks/bench_spans_ud.py --pairs RUN_A[,RUN_A2] RUN_B[,RUN_B2]
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.deep.biaffine import MLP, BiaffineParser
from ssvm_torch.deep.ud_text import PAD, load_ud_parsing
from ssvm_torch.nn import ConstituencyTree
from ssvm_torch.spans import binarize, bracket_counts, chart_from_spans, debinarize, spans_of_chart, subtree_brackets
from ssvm_torch.spans import numba_cky

FILL = PAD          # label 0: the binarization's joins and one-word spans (dropped before scoring)


class SpanParser(nn.Module):
    """Span scores (B, N, N) and label scores (B, N, N, L) over the fenceposts 0..n of a padded UD batch."""

    def __init__(self, vocab, span_dim: int = 256, label_dim: int = 64, hidden: int = 200, dropout: float = 0.33):
        super().__init__()
        self.encoder = BiaffineParser(len(vocab.words), len(vocab.chars), len(vocab.upos), 1, hidden=hidden,
                                      layers=3, dropout=dropout)
        self.hidden = hidden
        L = len(vocab.upos)
        self.span_l, self.span_r = MLP(2 * hidden, span_dim, dropout), MLP(2 * hidden, span_dim, dropout)
        self.label_l, self.label_r = MLP(2 * hidden, label_dim, dropout), MLP(2 * hidden, label_dim, dropout)
        self.span_U = nn.Parameter(torch.zeros(span_dim + 1, span_dim))
        self.label_W = nn.Parameter(torch.zeros(L, label_dim + 1, label_dim + 1))

    def forward(self, batch: dict):
        states = self.encoder.encode(batch)                      # (B, n_max + 1, 2H): root, words
        fwd, bwd = states[..., :self.hidden], states[..., self.hidden:]
        bwd = torch.cat([bwd[:, 1:], bwd.new_zeros(bwd.shape[0], 1, bwd.shape[2])], 1)   # word k + 1's
        fence = torch.cat([fwd, bwd], -1)                        # (B, N, 2H), N = n_max + 1 fenceposts
        one = fence.new_ones(*fence.shape[:2], 1)
        sl = torch.cat([self.span_l(fence), one], -1)
        span = torch.einsum("bix,xy,bjy->bij", sl, self.span_U, self.span_r(fence))
        ll = torch.cat([self.label_l(fence), one], -1)
        lr = torch.cat([self.label_r(fence), one], -1)
        label = torch.einsum("bix,lxy,bjy->bijl", ll, self.label_W, lr)
        return span, label


def gold_brackets(split, i: int) -> list | None:
    """Sentence i's constituents (labels: its heads' UPOS ids), None when its tree is not projective."""
    s, e = int(split.offsets[i]), int(split.offsets[i + 1])
    return subtree_brackets(split.head[s:e].tolist(), split.upos[s:e].tolist())


def evaluate(model, split, idx, layer, batch_size: int, mbr: bool = False) -> tuple[dict, list, float]:
    """Labeled and unlabeled bracket P / R / F1 over the sentences ``idx`` (decoded by max or ``mbr``), their
    predicted debinarized spans, and the share of rows whose compiled log Z took the real-space pass."""
    model.eval()
    counts = {"labeled": torch.zeros(3, dtype=torch.int64), "unlabeled": torch.zeros(3, dtype=torch.int64)}
    predictions, real_rows, rows = [], 0, 0
    with torch.no_grad():
        for start in range(0, len(idx), batch_size):
            chunk = idx[start:start + batch_size]
            batch = split.batch(chunk)
            span, label = model(batch)
            lengths = batch["lengths"]
            charts = layer.decode(span, label_scores=label, lengths=lengths, mbr=mbr)
            M = span.shape[1]
            pred = [debinarize(s, FILL) for s in spans_of_chart(charts)]
            gold = [gold_brackets(split, int(i)) for i in chunk]
            predictions += pred
            P = chart_from_spans(pred, M, labeled=True)
            G = chart_from_spans(gold, M, labeled=True)
            counts["labeled"] += bracket_counts(P, G, lengths)
            counts["unlabeled"] += bracket_counts(P >= 0, G >= 0, lengths)
            reduced = (span[..., None] + label).logsumexp(-1).double().numpy()
            for b, n in enumerate(lengths.tolist()):
                if n >= 2:
                    I, X = np.empty((n + 1, n)), np.empty((n + 1, n))
                    _, Z = numba_cky.inside_real(reduced[b], n, I, X)
                    real_rows += Z > 0 and math.log(Z) >= numba_cky.LOG_REAL_MIN + n * math.log(4.0)
                    rows += 1
    out = {}
    for kind, (matched, predicted, gold) in counts.items():
        p, r = float(matched) / max(int(predicted), 1), float(matched) / max(int(gold), 1)
        out[kind] = {"precision": 100 * p, "recall": 100 * r, "f1": 100 * (2 * p * r / (p + r) if p + r else 0.0)}
    return out, predictions, real_rows / max(rows, 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loss", choices=["crf", "hinge", "softmax_margin"], default="crf")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--train-size", type=int, default=None, help="the first sentences of train only (a smoke run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="the run directory (required but with --pairs)")
    p.add_argument("--pairs", nargs=2, metavar=("RUNS_A", "RUNS_B"), help="no training: a paired bootstrap over the "
                   "test sentences of two sides' labeled F1 (B minus A; a side: one run or comma-separated seeds' runs, "
                   "F1 averaged), from their test_predictions.json")
    p.add_argument("--mbr-of", action="store_true", help="no training: decode --out's dev and test with its spans.pt "
                   "by max and by MBR (expected correct labeled spans), into results_decodes.json")
    args = p.parse_args(argv)
    if args.pairs:
        return pairs(*args.pairs)
    if not args.out:
        p.error("--out is required")
    if args.mbr_of:
        return decodes(args)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_ud_parsing(train_size=args.train_size)
    keep = {}
    for name in ("train", "dev", "test"):
        split = getattr(corpus, name)
        keep[name] = [i for i in range(split.n) if gold_brackets(split, i) is not None]
    config = {**vars(args), "sentences": {k: len(v) for k, v in keep.items()},
              "all_sentences": {k: getattr(corpus, k).n for k in keep}, "labels": len(corpus.vocab.upos)}
    atomic_write_bytes(out / "config.json", json.dumps(config, indent=1).encode())
    print(json.dumps(config), flush=True)
    model = SpanParser(corpus.vocab)
    layer = ConstituencyTree(loss=args.loss)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.9))
    train = corpus.train
    order = np.array(keep["train"])
    lengths = train.lengths.numpy()[order]
    history, best = [], None
    rng = np.random.default_rng(args.seed)
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        # batches of similar length (sorted within random pools of 50 batches), in random order
        perm = rng.permutation(len(order))
        pool = 50 * args.batch_size
        batches = []
        for s in range(0, len(perm), pool):
            part = perm[s:s + pool]
            part = part[np.argsort(lengths[part], kind="stable")]
            batches += [part[k:k + args.batch_size] for k in range(0, len(part), args.batch_size)]
        total = 0.0
        for b in rng.permutation(len(batches)):
            chunk = order[batches[b]]
            batch = train.batch(chunk)
            span, label = model(batch)
            M = span.shape[1]
            gold = chart_from_spans([binarize(gold_brackets(train, int(i)), int(n), FILL)
                                     for i, n in zip(chunk, batch["lengths"])], M, labeled=True)
            loss = layer(span, gold, label_scores=label, lengths=batch["lengths"], reduction="mean")
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += float(loss.detach()) * len(chunk)
        dev, _, real = evaluate(model, corpus.dev, keep["dev"], layer, 64)
        record = {"epoch": epoch, "train_loss": total / len(order), "dev": dev, "dev_real_space_rows": real,
                  "seconds": time.perf_counter() - t0}
        history.append(record)
        atomic_write_bytes(out / "history.json", json.dumps(history, indent=1).encode())
        print(json.dumps(record), flush=True)
        if best is None or dev["labeled"]["f1"] > best["dev"]["labeled"]["f1"]:
            best = record
            torch.save(model.state_dict(), out / "spans.pt.tmp")
            (out / "spans.pt.tmp").replace(out / "spans.pt")
    model.load_state_dict(torch.load(out / "spans.pt", weights_only=True))
    test, predictions, real = evaluate(model, corpus.test, keep["test"], layer, 64)
    atomic_write_bytes(out / "test_predictions.json", json.dumps(
        {str(i): [list(s) for s in spans] for i, spans in zip(keep["test"], predictions)}).encode())
    results = {"loss": args.loss, "best_epoch": best["epoch"], "dev": best["dev"], "test": test,
               "test_real_space_rows": real, "dev_real_space_rows": best["dev_real_space_rows"],
               "seconds_per_epoch": float(np.median([h["seconds"] for h in history]))}
    atomic_write_bytes(out / "results.json", json.dumps(results, indent=1).encode())
    print(json.dumps(results), flush=True)


def pairs(runs_a: str, runs_b: str, resamples: int = 1000) -> None:
    """Labeled test F1 of side B minus side A and its 95% paired bootstrap interval over the test sentences (seed
    0; each side one run or several seeds' runs, comma-separated, its F1 the mean over them; every resample draws
    the same sentences for all runs), from the runs' ``test_predictions.json`` against the gold brackets; printed
    as JSON."""
    corpus = load_ud_parsing()
    test = corpus.test
    sides = [[Path(r) for r in runs.split(",")] for runs in (runs_a, runs_b)]
    preds = [[json.loads((r / "test_predictions.json").read_text()) for r in side] for side in sides]
    keys = sorted(preds[0][0], key=int)
    gold = [{tuple(s) for s in gold_brackets(test, int(key))} for key in keys]
    counts = []                                      # per side: (runs, sentences, 3)
    for side in preds:
        c = np.zeros((len(side), len(keys), 3))
        for r, run in enumerate(side):
            if sorted(run, key=int) != keys:
                raise SystemExit("--pairs: the runs decoded different test sentences")
            for k, key in enumerate(keys):
                pred = {tuple(s) for s in run[key] if s[1] - s[0] > 1}     # evalb's: no one-word spans
                c[r, k] = (len(pred & gold[k]), len(pred), len(gold[k]))
        counts.append(c)

    def f1(c):                                       # (..., 3) summed counts -> F1, mean over the runs axis
        return (200 * c[..., 0] / (c[..., 1] + c[..., 2])).mean(-1)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(keys), size=(resamples, len(keys)))
    whole = [f1(c.sum(1)) for c in counts]
    diffs = f1(counts[1][:, draws].sum(2).transpose(1, 0, 2)) - f1(counts[0][:, draws].sum(2).transpose(1, 0, 2))
    out = {"a": [str(r) for r in sides[0]], "b": [str(r) for r in sides[1]], "sentences": len(keys),
           "f1_a": float(whole[0]), "f1_b": float(whole[1]), "difference": float(whole[1] - whole[0]),
           "interval_95": [float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))], "resamples": resamples}
    print(json.dumps(out), flush=True)


def decodes(args) -> None:
    """Dev and test of a finished run under both decodes (``--mbr-of``); the decode to use is the one with the
    higher dev labeled F1 (recorded as ``chosen_on_dev``)."""
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    config = json.loads((out / "config.json").read_text())
    corpus = load_ud_parsing(train_size=config["train_size"])
    model = SpanParser(corpus.vocab)
    model.load_state_dict(torch.load(out / "spans.pt", weights_only=True))
    layer = ConstituencyTree(loss=config["loss"])
    result = {}
    for mbr in (False, True):
        row = {}
        for name in ("dev", "test"):
            split = getattr(corpus, name)
            idx = [i for i in range(split.n) if gold_brackets(split, i) is not None]
            row[name] = evaluate(model, split, idx, layer, 64, mbr=mbr)[0]
        result["mbr" if mbr else "max"] = row
    result["chosen_on_dev"] = max(("max", "mbr"), key=lambda k: result[k]["dev"]["labeled"]["f1"])
    atomic_write_bytes(out / "results_decodes.json", json.dumps(result, indent=1).encode())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
