"""CoNLL-2000 sentences as tensors for neural taggers: vocabularies built on the fit split only, padded
batches of word, character, POS and tag ids, and (for the hybrid models) the bags of sparse template
attribute ids the linear model uses.

Splits: ``fit`` and ``dev`` come from :func:`ssvm_torch.data.conll.split_heldout` (the split of
``ssvm-train --select-lam --heldout``), ``test`` is the official test file, read only to predict once
at the end. Nothing of dev or test enters a vocabulary or an attribute dictionary: their unseen words
map to UNK, unseen characters to the unknown character, unseen attributes are dropped (the linear
model's rule, :func:`ssvm_torch.data.templates.featurize`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from ..constraints import bio_to_bioes
from ..data.conll import read_conll, split_heldout
from ..data.templates import featurize, get_template
from ..data.types import data_file
from ..errors import SSVMInputError, check
from .sentences import OffsetSentences

PAD, UNK = 0, 1          # ids 0 and 1 of the word, character and POS vocabularies


@dataclass
class Vocab:
    """Word (lower-cased, seen >= ``min_count`` times in fit), character, POS and tag vocabularies;
    ``word_counts`` the fit counts of each word id (for the UNK dropout), ``tags`` the training tag
    names in the scheme trained on (BIO or BIOES)."""

    words: list
    word_counts: list
    chars: list
    pos: list
    tags: list

    @classmethod
    def build(cls, sents, tag_seqs, min_count: int) -> "Vocab":
        check(isinstance(min_count, int) and min_count >= 1, "word_min_count", "an int >= 1", min_count)
        counts = Counter(t[0].lower() for s in sents for t in s)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        chars = sorted({c for s in sents for t in s for c in t[0]})
        pos = sorted({t[1] for s in sents for t in s})
        tags = sorted({t for seq in tag_seqs for t in seq})
        return cls(["<pad>", "<unk>"] + kept, [0, 0] + [counts[w] for w in kept], ["<pad>", "<unk>"] + chars,
                   ["<pad>", "<unk>"] + pos, tags)

    def state(self) -> dict:
        return {k: list(getattr(self, k)) for k in ("words", "word_counts", "chars", "pos", "tags")}


@dataclass
class Split(OffsetSentences):
    """One split as flat token tensors with sentence ``offsets`` (n + 1,): ``word`` ids, ``form`` ids
    (index into ``forms``, the split's distinct original word forms, as character ids (n_forms, L)
    padded with PAD), ``pos`` ids, ``tag`` ids (-1 for a tag the training set lacks), the gold BIO
    tag strings ``gold``, and the attribute bags (``attr_crow``, ``attr_cols``) or None."""

    name: str
    offsets: torch.Tensor
    word: torch.Tensor
    form: torch.Tensor
    forms: torch.Tensor
    pos: torch.Tensor
    tag: torch.Tensor
    gold: list
    attr_crow: torch.Tensor | None = None
    attr_cols: torch.Tensor | None = None

    def batch(self, idx: torch.Tensor) -> dict:
        """The sentences ``idx`` as a padded batch (batch-first): ``rows`` (B, T) token rows, -1 padded;
        ``mask`` (B, T); ``word``, ``pos``, ``tag`` (B, T) ids (PAD / -1 at padding); ``chars`` (U, L)
        the character ids of the batch's U distinct forms and ``form`` (B, T) indices into them;
        ``bag`` = (ids, offsets) of the tokens' attributes in row-major token order, or None."""
        idx = torch.as_tensor(idx, dtype=torch.int64)
        lengths = self.lengths[idx]
        T = int(lengths.max())
        steps = torch.arange(T)
        mask = steps[None, :] < lengths[:, None]
        rows = torch.where(mask, self.offsets[idx][:, None] + steps[None, :], -1)
        safe = rows.clamp(min=0)
        uniq, form = torch.unique(self.form[safe[mask]], return_inverse=True)
        chars = self.forms[uniq]
        chars = chars[:, :int((chars != PAD).sum(1).max())]
        out = {"rows": rows, "mask": mask, "word": torch.where(mask, self.word[safe], PAD),
               "pos": torch.where(mask, self.pos[safe], PAD), "tag": torch.where(mask, self.tag[safe], -1),
               "chars": chars, "form": torch.zeros_like(rows).masked_scatter_(mask, form), "bag": None}
        if self.attr_crow is not None:
            tok = rows[mask]
            start, stop = self.attr_crow[tok], self.attr_crow[tok + 1]
            counts = stop - start
            base = torch.repeat_interleave(start - torch.cumsum(counts, 0) + counts, counts)
            ids = self.attr_cols[base + torch.arange(int(counts.sum()))]
            out["bag"] = (ids, torch.cumsum(counts, 0) - counts)
        return out


def _split(name, sents, vocab: Vocab, tag_seqs, design=None) -> Split:
    word_index = {w: i for i, w in enumerate(vocab.words)}
    char_index = {c: i for i, c in enumerate(vocab.chars)}
    pos_index = {p: i for i, p in enumerate(vocab.pos)}
    tag_index = {t: i for i, t in enumerate(vocab.tags)}
    tokens = [t for s in sents for t in s]
    form_names = sorted({t[0] for t in tokens})
    form_index = {f: i for i, f in enumerate(form_names)}
    L = max(len(f) for f in form_names)
    forms = torch.full((len(form_names), L), PAD, dtype=torch.int64)
    for i, f in enumerate(form_names):
        forms[i, :len(f)] = torch.tensor([char_index.get(c, UNK) for c in f])
    offsets = torch.zeros(len(sents) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor([len(s) for s in sents]), 0)
    split = Split(name, offsets, torch.tensor([word_index.get(t[0].lower(), UNK) for t in tokens]),
                  torch.tensor([form_index[t[0]] for t in tokens]), forms,
                  torch.tensor([pos_index.get(t[1], UNK) for t in tokens]),
                  torch.tensor([tag_index.get(t, -1) for seq in tag_seqs for t in seq]),
                  [[t[2] for t in s] for s in sents])
    if design is not None:
        split.attr_crow, split.attr_cols = torch.from_numpy(design.crow), torch.from_numpy(design.cols)
    return split


@dataclass
class ChunkingCorpus:
    """fit / dev / test splits of CoNLL-2000 under one :class:`Vocab`; ``n_attributes`` > 0 when the
    splits carry attribute bags of ``features`` (a template name of :mod:`ssvm_torch.data.templates`)."""

    vocab: Vocab
    fit: Split
    dev: Split
    test: Split
    scheme: str
    n_attributes: int = 0


def load_chunking(tags: str = "bioes", heldout: float = 0.1, word_min_count: int = 2, features: str | None = None,
                  attr_min_count: int = 1, train_size: int | None = None) -> ChunkingCorpus:
    """CoNLL-2000 for neural taggers. ``tags``: train on the file's BIO tags or on them converted to
    BIOES (scores are always on the BIO chunks); ``train_size`` keeps the first N training sentences
    before the dev split; ``features``: also the attribute bags of that template (node attributes:
    an ``edge:`` item is refused, the network's emissions are per token)."""
    check(tags in ("bio", "bioes"), "tags", "'bio' or 'bioes'", repr(tags))
    train = read_conll(data_file("conll2000_train.txt.gz"))
    if train_size is not None:
        check(isinstance(train_size, int) and 2 <= train_size <= len(train), "train_size",
              f"an int in [2, {len(train)}]", train_size)
        train = train[:train_size]
    fit, dev = split_heldout(train, heldout)
    test = read_conll(data_file("conll2000_test.txt.gz"))
    convert = bio_to_bioes if tags == "bioes" else list
    tag_seqs = [[convert([t[2] for t in s]) for s in part] for part in (fit, dev, test)]
    vocab = Vocab.build(fit, tag_seqs[0], word_min_count)
    designs, n_attr = [None] * 3, 0
    if features is not None:
        template = get_template(features)
        designs, n_attr, n_edge = featurize(template, [fit, dev, test], attr_min_count)
        if n_edge:
            raise SSVMInputError(f"features: expected a template without edge: items (the network's emissions "
                                 f"are per token), got {template.name!r}")
    parts = [_split(name, sents, vocab, seqs, design)
             for name, sents, seqs, design in zip(("fit", "dev", "test"), (fit, dev, test), tag_seqs, designs)]
    return ChunkingCorpus(vocab, *parts, scheme=tags.upper(), n_attributes=int(n_attr))


def word_dropout(word: torch.Tensor, counts: torch.Tensor, alpha: float, generator: torch.Generator) -> torch.Tensor:
    """UNK dropout (Kiperwasser & Goldberg 2016, Sec. 6): each token's word id becomes UNK with
    probability alpha / (alpha + count(word)), so rare words teach the UNK embedding."""
    if alpha <= 0:
        return word
    c = counts[word].to(torch.float64)
    p = torch.where(word > UNK, alpha / (alpha + c), torch.zeros_like(c))
    drop = torch.rand(word.shape, generator=generator, dtype=torch.float64) < p
    return torch.where(drop, torch.full_like(word, UNK), word)


def tags_to_bio(names: list, scheme: str) -> list:
    """Tag names of the scheme trained on as BIO names (identity for BIO)."""
    from ..constraints import bioes_to_bio
    return bioes_to_bio(list(names)) if scheme == "BIOES" else list(names)


