"""UD English-EWT as tensors for the neural parser (:mod:`ssvm_torch.deep.ud_parser`): vocabularies built on
the training file, each split as flat token tensors, and padded batches with the root at position 0 (the
layout of :class:`ssvm_torch.nn.DependencyTree`: ``arc_scores[b, m, h]``, word m of sentence b taking head h).

Inputs per word: the lower-cased form (words seen ``word_min_count`` times in training, else UNK), the
characters of the original form, and the gold UPOS (an input, as in the linear parser; every table says so).
Targets: the head of every word and its relation, the universal part of DEPREL (``nsubj:pass`` -> ``nsubj``),
on which LAS is scored (CoNLL 2018); the UPOS and the XPOS (EWT's Penn Treebank tags) of a words-only parser's
taggers. The root token has ids of its own (ROOT) in every vocabulary.
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
#: the most characters of one form on a row of a batch's character matrix (:func:`char_rows`); EWT's forms
#: reach 473 characters (a URL in test), ordinary ones stay far below
CHAR_ROW = 64
#: characters of context either side of a row: the character CNN's width 3
#: (:class:`ssvm_torch.deep.conll_tagger.CharCNN`) reads one neighbour each way
CHAR_CONTEXT = 1


@dataclass
class UDVocab:
    """Word (lower-cased, seen >= ``min_count`` times in training), character, UPOS and relation (universal
    part of DEPREL) vocabularies; ``word_counts`` the training counts of each word id (the UNK dropout);
    ``xpos`` the XPOS vocabulary (empty in a parser.pt written before the XPOS head)."""

    words: list
    word_counts: list
    chars: list
    upos: list
    rels: list
    xpos: list = field(default_factory=list)

    @classmethod
    def build(cls, train: Treebank, min_count: int) -> "UDVocab":
        check(isinstance(min_count, int) and min_count >= 1, "word_min_count", "an int >= 1", min_count)
        counts = Counter(f.lower() for f in train.forms)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        chars = sorted({c for f in train.forms for c in f})
        return cls(SPECIALS + kept, [0, 0, 0] + [counts[w] for w in kept], SPECIALS + chars,
                   SPECIALS + sorted(set(train.upos)), sorted({universal(r) for r in train.deprels}),
                   SPECIALS + sorted(set(train.xpos)))

    def state(self) -> dict:
        return {k: list(getattr(self, k)) for k in ("words", "word_counts", "chars", "upos", "rels", "xpos")}


@dataclass
class UDSplit(OffsetSentences):
    """One split as flat word tensors with sentence ``offsets`` (n + 1,): ``word`` / ``form`` / ``upos`` ids,
    gold ``head`` (within the sentence, 0 = root) and ``rel`` ids (-1 for a relation training lacks);
    ``form_chars`` the character ids of the split's distinct forms end to end, form f's at
    ``form_starts[f]:form_starts[f + 1]`` (form 0: the root's one character);
    ``rel_names`` the gold universal relations as strings; ``projective`` (n,) per sentence; ``upos_names`` the
    gold UPOS strings; ``xpos`` / ``xpos_names`` the gold XPOS as ids and strings."""

    name: str
    offsets: torch.Tensor
    word: torch.Tensor
    form: torch.Tensor
    form_chars: torch.Tensor
    form_starts: torch.Tensor
    upos: torch.Tensor
    head: torch.Tensor
    rel: torch.Tensor
    rel_names: list
    projective: torch.Tensor
    upos_names: list = field(default_factory=list)      # the gold UPOS strings (a words-only parser's accuracy)
    xpos: torch.Tensor | None = None
    xpos_names: list = field(default_factory=list)

    def gold_heads(self, i: int) -> list:
        return self.head[int(self.offsets[i]):int(self.offsets[i + 1])].tolist()

    def batch(self, idx) -> dict:
        """Sentences ``idx`` padded to N = 1 + the longest: ``mask`` (B, N) on at the words 1..n_b (off at
        the root and the padding); ``word``, ``upos``, ``xpos``, ``form`` (B, N) with the root's ids at
        position 0 and PAD after the words; ``heads`` / ``rels`` (B, N) gold, -1 at the root and the padding; ``chars``
        and ``char_rows`` the characters of the batch's U distinct forms in :func:`char_rows`' layout, ``form``
        indexing into those U forms."""
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
        chars, char_rows_per_form = char_rows(self.form_chars, self.form_starts, uniq)
        return {"rows": rows, "mask": mask, "lengths": lengths, "word": column(self.word, ROOT, PAD),
                "upos": column(self.upos, ROOT, PAD), "xpos": column(self.xpos, ROOT, PAD), "form": inverse,
                "chars": chars, "char_rows": char_rows_per_form,
                "heads": column(self.head, -1, -1), "rels": column(self.rel, -1, -1)}


def char_rows(form_chars: torch.Tensor, form_starts: torch.Tensor, forms: torch.Tensor,
              row: int = CHAR_ROW) -> tuple[torch.Tensor, torch.Tensor]:
    """The characters of ``forms`` (U form ids; form f's characters ``form_chars[form_starts[f]:form_starts[f +
    1]]``) as ``chars`` (R, W + 2 CHAR_CONTEXT): W = min(``row``, the longest form's length) characters to a row
    with CHAR_CONTEXT characters of context either side (PAD outside the form), a form of n characters on
    ceil(n / W) consecutive rows; and ``rows`` (U,), how many rows each form takes. The character CNN reads
    this layout (``CharCNN(chars, rows)``) as it reads every form padded to the longest, to the bit, but the
    matrix grows with the characters the forms hold rather than with U times the longest form: one token of
    20,000 characters (a blob in raw text) among 600 test sentences' distinct forms had made every form a
    20,000-column row, 2.6 GB more memory and twice the parse time."""
    first = form_starts[forms]
    n = form_starts[forms + 1] - first
    width = min(int(n.max()), row)
    rows = (n + width - 1) // width
    owner = torch.repeat_interleave(torch.arange(len(forms)), rows)
    k = torch.arange(len(owner)) - (rows.cumsum(0) - rows)[owner]         # each row's place within its form
    pos = (k * width - CHAR_CONTEXT)[:, None] + torch.arange(width + 2 * CHAR_CONTEXT)[None, :]
    inside = (pos >= 0) & (pos < n[owner][:, None])
    at = (first[owner][:, None] + pos).clamp(0, len(form_chars) - 1)
    return torch.where(inside, form_chars[at], torch.tensor(PAD)), rows


def make_split(name: str, bank: Treebank, vocab: UDVocab) -> UDSplit:
    """``bank``'s sentences as a :class:`UDSplit` under ``vocab`` (words, characters, UPOS and XPOS it lacks map
    to UNK, relations to -1)."""
    word_index = {w: i for i, w in enumerate(vocab.words)}
    char_index = {c: i for i, c in enumerate(vocab.chars)}
    upos_index = {p: i for i, p in enumerate(vocab.upos)}
    xpos_index = {p: i for i, p in enumerate(vocab.xpos)}
    rel_index = {r: i for i, r in enumerate(vocab.rels)}
    form_names = sorted(set(bank.forms))
    form_index = {f: i for i, f in enumerate(form_names)}
    # form 0 is the root's, whose one "character" is ROOT; forms are held end to end (char_rows)
    ends = 1 + np.cumsum([len(f) for f in form_names], dtype=np.int64)
    form_starts = torch.from_numpy(np.concatenate([[0, 1], ends]).astype(np.int64))
    form_chars = torch.tensor([ROOT] + [char_index.get(c, UNK) for f in form_names for c in f], dtype=torch.int64)
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
                   torch.tensor([form_index[f] for f in bank.forms]), form_chars, form_starts,
                   torch.tensor([upos_index.get(p, UNK) for p in bank.upos]), heads,
                   torch.tensor([rel_index.get(r, -1) for r in rel_names]), rel_names, projective, list(bank.upos),
                   torch.tensor([xpos_index.get(p, UNK) for p in bank.xpos]), list(bank.xpos))


@dataclass
class UDCorpus:
    """train / dev / test of UD English-EWT under one :class:`UDVocab` (built on train)."""

    vocab: UDVocab
    train: UDSplit
    dev: UDSplit
    test: UDSplit


def load_ud_parsing(word_min_count: int = 2, train_size: int | None = None, dev_size: int | None = None) -> UDCorpus:
    """The released splits of UD English-EWT (``train_size`` / ``dev_size``: the first sentences of train / dev only;
    the test split is always whole)."""
    banks = {s: load_ud_ewt(s) for s in ("train", "dev", "test")}
    for split, size, least in (("train", train_size, 2), ("dev", dev_size, 1)):
        if size is not None:
            check(isinstance(size, int) and not isinstance(size, bool) and least <= size <= banks[split].n,
                  f"{split}_size", f"an int in [{least}, {banks[split].n}]", size)
            banks[split] = banks[split].subset(range(size))
    vocab = UDVocab.build(banks["train"], word_min_count)
    return UDCorpus(vocab, *(make_split(s, banks[s], vocab) for s in ("train", "dev", "test")))
