"""English-French word alignment data (HLT-NAACL 2003 Hansards gold standard, Och & Ney) and the
edge features of the matching model.

Data (``datasets/hansards_naacl2003/``): 447 test + 37 trial sentence pairs, lower-cased and
tokenised, with Sure and Probable links (P includes S; unlinked words are NULL-aligned).
Split (documented, fixed): **train** = the 37 trial pairs + test pairs 1-200 (237 pairs),
**test** = test pairs 201-447 (247 pairs).

Features (all from the 484 sentence pairs themselves; no external dictionary):
  edge (i, j):  bias; Dice(e_i, f_j) = 2 c(e, f) / (c(e) + c(f)) with c = number of sentence pairs
                containing the word(s); Dice of the neighbours (i-1, j-1) and (i+1, j+1), averaged;
                j is the best-Dice French word for e_i / i the best-Dice English word for f_j; identical
                strings; common prefix of >= 4 characters; difflib similarity ratio; relative position
                distortion |i/m - j/n| and its square; both punctuation and equal; both numbers;
                exactly one punctuation; |len(e) - len(f)| / max length.
  NULL(e_i) and NULL(f_j): bias; punctuation; the word's best Dice in the sentence; a function word
                (among the 30 most frequent words of its language).
The Dice statistics use the text of all pairs (train and test), no labels: the unsupervised
co-occurrence counts an aligner computes from its corpus (Taskar et al. 2005 used the whole
1.1M-pair Hansards; only these 484 pairs ship here).
"""
from __future__ import annotations

import difflib
import gzip
import re
import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SSVMInputError
from .types import data_file

EDGE_FEATURES = ("bias", "dice", "dice_neighbours", "best_for_e", "best_for_f", "identical", "prefix4",
                 "similarity", "distortion", "distortion_sq", "same_punct", "both_numbers", "one_punct",
                 "length_diff")
NULL_FEATURES = ("bias", "punct", "best_dice", "function_word")


@dataclass
class SentencePair:
    """Tokens, gold links as sets of (i, j) 0-based (sure, probable with sure included), and features:
    edge (m, n, Fe), null_e (m, Fn), null_f (n, Fn)."""

    snum: int
    e: list
    f: list
    sure: set
    probable: set
    edge: torch.Tensor | None = None
    null_e: torch.Tensor | None = None
    null_f: torch.Tensor | None = None


def _lines(path):
    """(line number, stripped line) of a gzipped UTF-8 text file; a damaged file is one error naming it and the line
    after which it broke (a data folder without SHA256SUMS is not checked before reading: types.data_file)."""
    lineno = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                yield lineno, line.strip()
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise SSVMInputError(f"data file: {path} is damaged or unreadable after line {lineno} "
                             f"({type(e).__name__}: {e}); copy it again") from None


def _read_sents(path):
    out = {}
    for lineno, line in _lines(path):
        m = re.fullmatch(r"<s snum=([0-9]+)>(.*)</s>", line)
        if m is None:
            raise SSVMInputError(f"{path.name} line {lineno}: expected '<s snum=N> tokens </s>', got {line[:60]!r}")
        out[int(m.group(1))] = m.group(2).split()
    return out


def _read_links(path):
    """{sentence: [(English position, French position, S or P), ...]} (0-based) of a NAACL 2003 link file, whose
    lines are 'sentence english french S|P' with 1-based positions (0: NULL)."""
    links = {}
    for lineno, line in _lines(path):
        m = re.fullmatch(r"([0-9]+) ([0-9]+) ([0-9]+) ([SP])", " ".join(line.split()))
        if m is None:
            raise SSVMInputError(f"{path.name} line {lineno}: expected 'sentence english french S|P' (integers, then "
                                 f"S or P), got {line[:60]!r}")
        s, i, j, t = m.groups()
        links.setdefault(int(s), []).append((int(i) - 1, int(j) - 1, t))
    return links


def _pairs(prefix):
    root = "hansards_naacl2003/"
    wa = "test.wa.nonullalign.gz" if prefix == "test" else "trial.wa.gz"
    E, F = _read_sents(data_file(root + f"{prefix}.e.gz")), _read_sents(data_file(root + f"{prefix}.f.gz"))
    links = _read_links(data_file(root + wa))
    pairs = []
    for s in sorted(E):
        sure, prob = set(), set()
        for i, j, t in links.get(s, []):
            if i < 0 or j < 0:                      # explicit NULL links: the same as no link
                continue
            if i >= len(E[s]) or j >= len(F[s]):
                raise SSVMInputError(f"{prefix} links of sentence {s}: position ({i + 1}, {j + 1}) outside the "
                                     f"{len(E[s])} x {len(F[s])} sentence pair")
            (sure if t == "S" else prob).add((i, j))
        pairs.append(SentencePair(s, E[s], F[s], sure, prob | sure))
    return pairs


def _punct(w):
    return not any(ch.isalnum() for ch in w)


def _number(w):
    return bool(re.fullmatch(r"[0-9][0-9.,]*", w))


def featurize(pairs: list[SentencePair]) -> None:
    """Fill ``edge``, ``null_e``, ``null_f`` of every pair (statistics over all of ``pairs``)."""
    ce, cf, cef = Counter(), Counter(), Counter()
    fe, ff = Counter(), Counter()
    for p in pairs:
        se, sf = set(p.e), set(p.f)
        ce.update(se)
        cf.update(sf)
        cef.update((a, b) for a in se for b in sf)
        fe.update(p.e)
        ff.update(p.f)
    func_e = {w for w, _ in fe.most_common(30)}
    func_f = {w for w, _ in ff.most_common(30)}
    for p in pairs:
        m, n = len(p.e), len(p.f)
        dice = np.array([[2.0 * cef[(a, b)] / (ce[a] + cf[b]) for b in p.f] for a in p.e])
        pad = np.pad(dice, 1)
        neigh = 0.5 * (pad[:-2, :-2] + pad[2:, 2:])
        best_e = (dice == dice.max(1, keepdims=True)) & (dice > 0)
        best_f = (dice == dice.max(0, keepdims=True)) & (dice > 0)
        X = np.zeros((m, n, len(EDGE_FEATURES)))
        for i, a in enumerate(p.e):
            for j, b in enumerate(p.f):
                dist = abs((i + 0.5) / m - (j + 0.5) / n)
                pa, pb = _punct(a), _punct(b)
                X[i, j] = (1.0, dice[i, j], neigh[i, j], best_e[i, j], best_f[i, j], a == b,
                           len(a) >= 4 and len(b) >= 4 and a[:4] == b[:4],
                           difflib.SequenceMatcher(None, a, b).ratio(), dist, dist * dist,
                           pa and pb and a == b, _number(a) and _number(b), pa != pb,
                           abs(len(a) - len(b)) / max(len(a), len(b)))
        p.edge = torch.tensor(X)
        p.null_e = torch.tensor([[1.0, _punct(a), dice[i].max(), a in func_e] for i, a in enumerate(p.e)])
        p.null_f = torch.tensor([[1.0, _punct(b), dice[:, j].max(), b in func_f] for j, b in enumerate(p.f)])


def load_hansards() -> tuple[list[SentencePair], list[SentencePair]]:
    """(train, test) featurized sentence pairs; the split of the module docstring."""
    trial, test = _pairs("trial"), _pairs("test")
    featurize(trial + test)
    train = trial + [p for p in test if p.snum <= 200]
    return train, [p for p in test if p.snum > 200]


def aer(pairs: list[SentencePair], predicted: list[set]) -> dict:
    """Alignment error rate (Och & Ney 2003) over a corpus: AER = 1 - (|A&S| + |A&P|) / (|A| + |S|),
    precision = |A&P| / |A|, recall = |A&S| / |S| (NULL links are not links)."""
    a = s = a_s = a_p = 0
    for p, A in zip(pairs, predicted):
        a += len(A)
        s += len(p.sure)
        a_s += len(A & p.sure)
        a_p += len(A & p.probable)
    return {"aer": 1.0 - (a_s + a_p) / max(a + s, 1), "precision": a_p / max(a, 1), "recall": a_s / max(s, 1)}
