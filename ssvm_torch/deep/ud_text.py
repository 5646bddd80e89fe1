"""UD English-EWT as tensors for the neural parser (:mod:`ssvm_torch.deep.ud_parser`): vocabularies built on
the training file, each split as flat token tensors, and padded batches with the root at position 0 (the
layout of :class:`ssvm_torch.nn.DependencyTree`: ``arc_scores[b, m, h]``, word m of sentence b taking head h).

Inputs per word: the lower-cased form (words seen ``word_min_count`` times in training, else UNK), the
characters of the original form, and the gold UPOS (an input, as in the linear parser; every table says so).
Targets: the head of every word and its relation, the universal part of DEPREL (``nsubj:pass`` -> ``nsubj``),
on which LAS is scored (CoNLL 2018). The root token has ids of its own (ROOT) in every vocabulary.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ..data.ud import Treebank, load_ud_ewt, universal
from ..errors import check
from ..trees.checks import tree_faults
from .sentences import OffsetSentences

PAD, UNK, ROOT = 0, 1, 2
SPECIALS = ["<pad>", "<unk>", "<root>"]


@dataclass
class UDVocab:
    """Word (lower-cased, seen >= ``min_count`` times in training), character, UPOS and relation (universal
    part of DEPREL) vocabularies; ``word_counts`` the training counts of each word id (the UNK dropout)."""

    words: list
    word_counts: list
    chars: list
    upos: list
    rels: list

    @classmethod
    def build(cls, train: Treebank, min_count: int) -> "UDVocab":
        check(isinstance(min_count, int) and min_count >= 1, "word_min_count", "an int >= 1", min_count)
        counts = Counter(f.lower() for f in train.forms)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        chars = sorted({c for f in train.forms for c in f})
        return cls(SPECIALS + kept, [0, 0, 0] + [counts[w] for w in kept], SPECIALS + chars,
                   SPECIALS + sorted(set(train.upos)), sorted({universal(r) for r in train.deprels}))

    def state(self) -> dict:
        return {k: list(getattr(self, k)) for k in ("words", "word_counts", "chars", "upos", "rels")}


@dataclass
class UDSplit(OffsetSentences):
    """One split as flat word tensors with sentence ``offsets`` (n + 1,): ``word`` / ``form`` / ``upos`` ids,
    gold ``head`` (within the sentence, 0 = root) and ``rel`` ids (-1 for a relation training lacks);
    ``forms`` the character ids (n_forms, L) of the split's distinct forms, PAD-padded (row 0: the root's);
    ``rel_names`` the gold universal relations as strings; ``projective`` (n,) per sentence; ``upos_names`` the
    gold UPOS strings."""

    name: str
    offsets: torch.Tensor
    word: torch.Tensor
    form: torch.Tensor
    forms: torch.Tensor
    upos: torch.Tensor
    head: torch.Tensor
    rel: torch.Tensor
    rel_names: list
    projective: torch.Tensor
    upos_names: list = field(default_factory=list)      # the gold UPOS strings (a words-only parser's accuracy)

    def gold_heads(self, i: int) -> list:
        return self.head[int(self.offsets[i]):int(self.offsets[i + 1])].tolist()

    def batch(self, idx) -> dict:
        """Sentences ``idx`` padded to N = 1 + the longest: ``mask`` (B, N) on at the words 1..n_b (off at
        the root and the padding); ``word``, ``upos``, ``form`` (B, N) with the root's ids at position 0 and
        PAD after the words; ``heads`` / ``rels`` (B, N) gold, -1 at the root and the padding; ``chars``
        (U, L) the character ids of the batch's distinct forms, ``form`` indexing into them."""
        idx = torch.as_tensor(idx, dtype=torch.int64)
        lengths = self.lengths[idx]
        N = int(lengths.max()) + 1
        steps = torch.arange(N)
        mask = (steps[None, :] >= 1) & (steps[None, :] <= lengths[:, None])
        rows = torch.where(mask, self.offsets[idx][:, None] + steps[None, :] - 1, -1)
        safe = rows.clamp(min=0)
        root = torch.zeros_like(mask)
        root[:, 0] = True

        def column(values, at_root, pad):
            return torch.where(mask, values[safe], torch.where(root, torch.tensor(at_root), torch.tensor(pad)))

        form_ids = column(self.form + 1, 0, 0)             # forms row 0 is the root's; PAD rows map to it too
        uniq, inverse = torch.unique(form_ids, return_inverse=True)
        chars = self.forms[uniq]
        chars = chars[:, :int((chars != PAD).sum(1).max())]
        return {"rows": rows, "mask": mask, "lengths": lengths, "word": column(self.word, ROOT, PAD),
                "upos": column(self.upos, ROOT, PAD), "form": inverse, "chars": chars,
                "heads": column(self.head, -1, -1), "rels": column(self.rel, -1, -1)}


def make_split(name: str, bank: Treebank, vocab: UDVocab) -> UDSplit:
    """``bank``'s sentences as a :class:`UDSplit` under ``vocab`` (words, characters and UPOS it lacks map to
    UNK, relations to -1)."""
    word_index = {w: i for i, w in enumerate(vocab.words)}
    char_index = {c: i for i, c in enumerate(vocab.chars)}
    upos_index = {p: i for i, p in enumerate(vocab.upos)}
    rel_index = {r: i for i, r in enumerate(vocab.rels)}
    form_names = sorted(set(bank.forms))
    form_index = {f: i for i, f in enumerate(form_names)}
    L = max(len(f) for f in form_names)
    forms = torch.full((len(form_names) + 1, L), PAD, dtype=torch.int64)
    forms[0, 0] = ROOT                                       # the root's one "character"
    for i, f in enumerate(form_names):
        forms[i + 1, :len(f)] = torch.tensor([char_index.get(c, UNK) for c in f])
    rel_names = [universal(r) for r in bank.deprels]
    offsets = torch.from_numpy(bank.offsets.astype(np.int64))
    heads = torch.from_numpy(bank.heads.astype(np.int64))
    lengths = offsets[1:] - offsets[:-1]
    N = int(lengths.max()) + 1
    padded = torch.full((len(lengths), N), -1, dtype=torch.int64)
    steps = torch.arange(N)
    on = (steps[None, :] >= 1) & (steps[None, :] <= lengths[:, None])
    padded[on] = heads
    projective = tree_faults(padded, lengths, False, True) == 0
    return UDSplit(name, offsets, torch.tensor([word_index.get(f.lower(), UNK) for f in bank.forms]),
                   torch.tensor([form_index[f] for f in bank.forms]), forms,
                   torch.tensor([upos_index.get(p, UNK) for p in bank.upos]), heads,
                   torch.tensor([rel_index.get(r, -1) for r in rel_names]), rel_names, projective, list(bank.upos))


@dataclass
class UDCorpus:
    """train / dev / test of UD English-EWT under one :class:`UDVocab` (built on train)."""

    vocab: UDVocab
    train: UDSplit
    dev: UDSplit
    test: UDSplit


def load_ud_parsing(word_min_count: int = 2, train_size: int | None = None) -> UDCorpus:
    """The released splits of UD English-EWT (``train_size``: the first sentences of train only)."""
    banks = {s: load_ud_ewt(s) for s in ("train", "dev", "test")}
    if train_size is not None:
        check(isinstance(train_size, int) and 2 <= train_size <= banks["train"].n, "train_size",
              f"an int in [2, {banks['train'].n}]", train_size)
        banks["train"] = banks["train"].subset(range(train_size))
    vocab = UDVocab.build(banks["train"], word_min_count)
    return UDCorpus(vocab, *(make_split(s, banks[s], vocab) for s in ("train", "dev", "test")))
