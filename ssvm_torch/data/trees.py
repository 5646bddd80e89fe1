"""Dependency-tree data: the :class:`DependencyData` container (sentences with gold trees and the sparse
features of every possible arc) and the UD English-EWT loader that builds it.

Sentence i has n_i words and n_i^2 possible arcs h -> m (m = 1..n_i, h = 0..n_i, h != m; 0 is the root),
stored row by row: arc (m, h) is number ``arc_off[i] + (m - 1) n_i + (h if h < m else h - 1)`` of the split.
Arc a's features are ``ids[ptr[a]:ptr[a + 1]]`` plus those of its head token, ``tok_ids[tok_ptr[t]:tok_ptr[t + 1]]``
with t = offsets[i] + i + h (token h of sentence i, h = 0 the root: the items of the head alone, shared by every
arc it heads), all binary indicators (:mod:`ssvm_torch.data.arc_features`).
Gold heads are kept per word (flat, ``offsets`` like the words of :class:`~ssvm_torch.data.ud.Treebank`),
with the universal part of each word's DEPREL as a label id (what LAS compares).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import SSVMInputError, check
from . import feature_cache
from .arc_features import code_columns, featurize, get_arc_template
from .sibling_features import SiblingDesign, build_designs, get_sibling_template
from .ud import UD_EWT, Treebank, load_ud_ewt, universal
from .types import RaggedOffsets, data_file, ptr_rows


@dataclass
class DependencyData(RaggedOffsets):
    """Sentences with gold dependency trees and their arcs' sparse features (module docstring).

    ``offsets`` (n+1,) word offsets; ``heads`` (W,) gold heads within the sentence (0 = the root);
    ``labels`` (W,) gold universal relation ids (-1 where the relation is unknown to the label set);
    ``arc_off`` (n+1,), ``ptr`` (A+1,) int64 and ``ids`` (nnz,) int32 the arc design, ``tok_ptr`` (W+n+1,) and
    ``tok_ids`` the head tokens' design (None: no token features); ``n_features`` the dictionary size (ids are <
    it); ``meta``: label names, the treebank's words, the featurization."""

    offsets: torch.Tensor
    heads: torch.Tensor
    labels: torch.Tensor
    arc_off: torch.Tensor
    ptr: torch.Tensor
    ids: torch.Tensor
    n_features: int
    name: str = "trees"
    meta: dict = field(default_factory=dict)
    tok_ptr: torch.Tensor | None = None
    tok_ids: torch.Tensor | None = None
    observed: torch.Tensor | None = None
    sib: SiblingDesign | None = None            # second-order (sibling) features: models/sibling_dependency.py

    def __post_init__(self):
        self.check_word_offsets()
        lengths = self.lengths
        W = int(self.offsets[-1])
        check(tuple(self.heads.shape) == (W,) and not self.heads.is_floating_point(), "heads",
              f"an integer tensor of one head per word ({W},)", tuple(self.heads.shape))
        check(tuple(self.labels.shape) == (W,), "labels", f"one label per word ({W},)", tuple(self.labels.shape))
        check(tuple(self.arc_off.shape) == (self.n + 1,) and bool(torch.equal(
            self.arc_off[1:] - self.arc_off[:-1], lengths * lengths)), "arc_off",
            "the arc offsets of n_i^2 arcs per sentence", tuple(self.arc_off.shape))
        A = int(self.arc_off[-1])
        check(tuple(self.ptr.shape) == (A + 1,) and int(self.ptr[-1]) == self.ids.shape[0], "ptr",
              f"({A + 1},) CSR offsets ending at the {self.ids.shape[0]} feature ids", tuple(self.ptr.shape))
        if self.ids.numel():
            check(int(self.ids.min()) >= 0 and int(self.ids.max()) < self.n_features, "ids",
                  f"feature ids in [0, {self.n_features - 1}]", (int(self.ids.min()), int(self.ids.max())))
        T = W + self.n
        if self.tok_ptr is None:
            self.tok_ptr = torch.zeros(T + 1, dtype=torch.int64, device=self.offsets.device)
            self.tok_ids = torch.zeros(0, dtype=torch.int32, device=self.offsets.device)
        check(tuple(self.tok_ptr.shape) == (T + 1,) and int(self.tok_ptr[-1]) == self.tok_ids.shape[0], "tok_ptr",
              f"({T + 1},) CSR offsets of the n_i + 1 tokens of every sentence", tuple(self.tok_ptr.shape))
        if self.tok_ids.numel():
            check(int(self.tok_ids.min()) >= 0 and int(self.tok_ids.max()) < self.n_features, "tok_ids",
                  f"feature ids in [0, {self.n_features - 1}]", (int(self.tok_ids.min()), int(self.tok_ids.max())))
        self.heads = self.heads.to(torch.int64)
        from ..trees.checks import tree_faults
        N = int(lengths.max()) + 1
        padded = torch.full((self.n, N), -1, dtype=torch.int64, device=self.offsets.device)
        pos = torch.arange(1, N, device=self.offsets.device)
        valid = pos[None, :] <= lengths[:, None]
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.offsets.device), lengths)
        padded[:, 1:][valid] = self.heads
        code = tree_faults(padded, lengths, multiroot=True, projective=False)
        if bool((code != 0).any()):
            i = int(torch.nonzero(code != 0)[0])
            raise SSVMInputError(f"heads: sentence {i} is not a dependency tree (heads of its words: "
                                 f"{self.heads[rows == i].tolist()[:20]})")
        if self.observed is not None:
            check(isinstance(self.observed, torch.Tensor) and self.observed.dtype == torch.bool
                  and tuple(self.observed.shape) == (W,), "observed", f"None or a bool tensor ({W},): a flag per word",
                  tuple(self.observed.shape) if isinstance(self.observed, torch.Tensor) else type(self.observed).__name__)
            self.observed = self.observed.to(self.offsets.device)
        if self.sib is not None:
            check(isinstance(self.sib, SiblingDesign) and tuple(self.sib.codes.shape)[:1] == (W,), "sib",
                  f"None or a SiblingDesign with the codes of the {W} words", getattr(self.sib, "codes", self.sib))
            check(self.sib.offset + self.sib.n_features <= self.n_features, "n_features",
                  f">= {self.sib.offset + self.sib.n_features} (the sibling features' ids end there)", self.n_features)

    def arc_words(self) -> torch.Tensor:
        """(A,) the word (an index into ``heads``) that each arc enters: arc k of sentence i is an arc into word
        offsets[i] + k // n_i (modifier-major, the layout of ``arc_off``)."""
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths * self.lengths)
        k = torch.arange(int(self.arc_off[-1]), device=self.device) - self.arc_off[rows]
        return self.offsets[rows] + torch.div(k, self.lengths[rows], rounding_mode="floor")

    @property
    def partial(self) -> bool:
        """Whether some word's head is unobserved."""
        return self.observed is not None and not bool(self.observed.all())

    @property
    def loss_heads(self) -> torch.Tensor:
        """(W,) the heads that the task loss reads: the gold heads, -1 at the unobserved words."""
        return self.heads if self.observed is None else \
            torch.where(self.observed, self.heads, torch.full_like(self.heads, -1))

    def padded_loss_heads(self, idx=None) -> torch.Tensor:
        """:meth:`padded_heads` with -1 at the unobserved words too."""
        return self.padded_heads(idx, self.loss_heads)

    def with_heads(self, heads: torch.Tensor) -> "DependencyData":
        """This data with the trees ``heads`` (W,) (a completion: ssvm_torch.latent), which must keep every observed
        head."""
        heads = torch.as_tensor(heads, device=self.device).long()
        check(tuple(heads.shape) == tuple(self.heads.shape), "heads", f"{tuple(self.heads.shape)} heads", tuple(heads.shape))
        if self.observed is not None:
            moved = self.observed & (heads != self.heads)
            if bool(moved.any()):
                k = int(moved.nonzero()[0, 0])
                i = int(torch.searchsorted(self.offsets, torch.tensor(k, device=self.device), right=True)) - 1
                raise SSVMInputError(f"heads: sentence {i}: word {k - int(self.offsets[i]) + 1} has the observed head "
                                     f"{int(self.heads[k])}, the tree gives it {int(heads[k])} (a completion keeps "
                                     "every observed head)")
        return DependencyData(self.offsets, heads, self.labels, self.arc_off, self.ptr, self.ids, self.n_features,
                              self.name, dict(self.meta), self.tok_ptr, self.tok_ids, self.observed, self.sib)

    def padded_heads(self, idx=None, heads: torch.Tensor | None = None) -> torch.Tensor:
        """Gold heads of the sentences ``idx`` (default all) in the tree package's layout (B, N): -1 at the
        root position and beyond each sentence (``heads``: another (W,) vector laid out so)."""
        idx = torch.arange(self.n, device=self.device) if idx is None else torch.as_tensor(idx, device=self.device)
        idx = idx.reshape(-1)
        lengths = self.lengths[idx]
        N = int(lengths.max()) + 1 if len(idx) else 1
        out = torch.full((len(idx), N), -1, dtype=torch.int64, device=self.device)
        pos = torch.arange(1, N, device=self.device)
        valid = pos[None, :] <= lengths[:, None]
        words = self.offsets[idx][:, None] + pos[None, :] - 1
        out[:, 1:][valid] = (self.heads if heads is None else heads)[words[valid]]
        return out

    def to(self, device, dtype=None) -> "DependencyData":
        """The container on ``device`` (its tensors are integers: ``dtype`` is accepted and ignored)."""
        return DependencyData(self.offsets.to(device), self.heads.to(device), self.labels.to(device),
                              self.arc_off.to(device), self.ptr.to(device), self.ids.to(device), self.n_features,
                              self.name, self.meta, self.tok_ptr.to(device), self.tok_ids.to(device),
                              None if self.observed is None else self.observed.to(device),
                              None if self.sib is None else self.sib.to(device))

    def subset(self, idx) -> "DependencyData":
        """The sentences ``idx`` in that order (their arcs' features carried along)."""
        idx = torch.as_tensor(idx, dtype=torch.int64, device=self.device).reshape(-1)
        lengths = self.lengths[idx]
        words = torch.cat([torch.arange(int(self.offsets[i]), int(self.offsets[i + 1]), device=self.device)
                           for i in idx.tolist()])
        arcs = torch.cat([torch.arange(int(self.arc_off[i]), int(self.arc_off[i + 1]), device=self.device)
                          for i in idx.tolist()])
        counts, nz = ptr_rows(self.ptr, arcs)
        tokens = torch.cat([torch.arange(int(self.offsets[i]) + i, int(self.offsets[i + 1]) + i + 1, device=self.device)
                            for i in idx.tolist()])
        tcounts, tnz = ptr_rows(self.tok_ptr, tokens)
        zero = torch.zeros(1, dtype=torch.int64, device=self.device)
        meta = {k: ([v[i] for i in idx.tolist()] if k in ("sentences", "sent_ids") else v) for k, v in self.meta.items()}
        return DependencyData(torch.cat([zero, torch.cumsum(lengths, 0)]), self.heads[words], self.labels[words],
                              torch.cat([zero, torch.cumsum(lengths * lengths, 0)]), torch.cat([zero, torch.cumsum(counts, 0)]),
                              self.ids[nz], self.n_features, self.name, meta, torch.cat([zero, torch.cumsum(tcounts, 0)]),
                              self.tok_ids[tnz], None if self.observed is None else self.observed[words],
                              None if self.sib is None else self.sib.with_words(words))



def label_set(treebank: Treebank) -> list[str]:
    """The universal relations of a (training) treebank, sorted."""
    return sorted({universal(r) for r in treebank.deprels})


def _container(tb: Treebank, arrays: dict, split: str, d: int, names: list[str], name: str, info: dict) -> DependencyData:
    index = {r: k for k, r in enumerate(names)}
    labels = torch.tensor([index.get(universal(r), -1) for r in tb.deprels], dtype=torch.int64)
    sentences = [[(tb.forms[k], tb.upos[k], tb.xpos[k], tb.lemmas[k]) for k in range(int(tb.offsets[i]), int(tb.offsets[i + 1]))]
                 for i in range(tb.n)]
    return DependencyData(torch.from_numpy(tb.offsets.copy()), torch.from_numpy(tb.heads.copy()), labels,
                          torch.from_numpy(arrays[f"{split}_arc_off"]), torch.from_numpy(arrays[f"{split}_ptr"]),
                          torch.from_numpy(arrays[f"{split}_ids"]), d, name,
                          {"label_names": names, "sentences": sentences, "sent_ids": list(tb.sent_ids),
                           "deprels": [[tb.deprels[k] for k in range(int(tb.offsets[i]), int(tb.offsets[i + 1]))]
                                       for i in range(tb.n)], "featurization": info},
                          torch.from_numpy(arrays[f"{split}_tptr"]), torch.from_numpy(arrays[f"{split}_tids"]))


def load_ud_dependencies(features="mcdonald", min_count: int = 1, evaluate_on: str = "test",
                         train_size: int | None = None, cache: bool = True,
                         siblings=None) -> tuple[DependencyData, DependencyData]:
    """(train, evaluation split) of UD English-EWT under the arc template ``features``: ``evaluate_on``
    "test" (the final evaluation) or "dev" (model selection: the test file's trees are then never scored).
    ``train_size`` keeps the first N training sentences. The designs of the training and the evaluated split are
    featurized together once (one coding of the columns of all three splits, the dictionary from the training gold
    arcs; the other split is never featurized) and cached on disk, keyed by the template, ``min_count``,
    ``train_size``, ``evaluate_on`` and the files' checksums; ``meta
    ["featurization"]`` says how long building took and whether the cache answered. ``siblings``: a sibling
    template (:mod:`ssvm_torch.data.sibling_features`, e.g. ``"mcdonald-pereira"``) adds the second-order
    features, their ids after the arc features' (its dictionary from the training gold trees too)."""
    check(evaluate_on in ("dev", "test"), "evaluate_on", "'dev' or 'test'", repr(evaluate_on))
    template = get_arc_template(features)
    paths = {s: data_file(p) for s, p in UD_EWT.items()}
    tbs = {s: load_ud_ewt(s) for s in paths}                  # read once per process (ud.py's _SPLITS)
    if train_size is not None:
        check(isinstance(train_size, int) and 1 <= train_size <= tbs["train"].n, "train_size",
              f"an int in [1, {tbs['train'].n}]", train_size)
        tbs["train"] = tbs["train"].subset(range(train_size))
    t0 = time.perf_counter()
    key = feature_cache.cache_key("ud-ewt-arcs-4", template.key(), min_count, train_size, evaluate_on,
                                  *(feature_cache.file_digest(paths[s]) for s in ("train", "dev", "test")))
    arrays = feature_cache.load(key) if cache else None
    hit = arrays is not None
    if arrays is None:            # the split not evaluated is coded with the others but never featurized
        splits = ("train", "dev", "test")
        designs, d, per_item = featurize(template, [tbs[s] for s in splits], min_count,
                                         designs_of=(0, splits.index(evaluate_on)))
        arrays = {"d": np.array([d]), "per_item": np.array(list(per_item.values()), dtype=np.int64)}
        for s, des in ((s, des) for s, des in zip(splits, designs) if des is not None):
            arrays.update({f"{s}_arc_off": des.arc_off, f"{s}_ptr": des.ptr, f"{s}_ids": des.ids,
                           f"{s}_tptr": des.tptr, f"{s}_tids": des.tids})
        if cache:
            feature_cache.save(key, arrays)
    d = int(arrays["d"][0])
    info = {"template": template.name, "items": template.text(), "min_count": min_count, "n_features": d,
            "seconds": time.perf_counter() - t0, "cached": hit}
    names = label_set(tbs["train"])
    train = _container(tbs["train"], arrays, "train", d, names, "ud-ewt-train", info)
    other = _container(tbs[evaluate_on], arrays, evaluate_on, d, names, f"ud-ewt-{evaluate_on}", info)
    if siblings is None:
        return train, other
    stemplate = get_sibling_template(siblings)
    codes, radix = code_columns([tbs["train"], tbs[evaluate_on]])
    sib_train, sib_other = build_designs(stemplate, codes, radix, tbs["train"].offsets, tbs["train"].heads, d,
                                         min_count)
    total = d + sib_train.n_features
    info = {**info, "sibling_template": stemplate.name, "sibling_items": stemplate.text(),
            "n_sibling_features": sib_train.n_features, "n_features": total,
            "seconds": time.perf_counter() - t0}
    return tuple(DependencyData(x.offsets, x.heads, x.labels, x.arc_off, x.ptr, x.ids, total, x.name,
                                {**x.meta, "featurization": info}, x.tok_ptr, x.tok_ids, None, sib)
                 for x, sib in ((train, sib_train), (other, sib_other)))
