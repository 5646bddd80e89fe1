"""Constituency data for the span SSVM: the :class:`SpanData` container (sentences, the sparse features of every
fencepost, the gold binary trees) and the UD English-EWT loader that builds it from the treebank's dependency trees
read as phrase structures.

Sentence i has n_i words and n_i + 1 fenceposts 0..n_i (word m, 1-based, covers (m - 1, m): the layout of
:mod:`ssvm_torch.spans`). Fencepost k's features are binary indicators of the words around it (its left word
m = k, its right word m = k + 1; ``<s>`` / ``</s>`` past the ends): the surface features of Hall, Durrett & Klein
2014 ("Less grammar, more features": first, last, preceding and following word of a span) split by fencepost, so
that a span (i, j) reads the features of fencepost i as its begin point and of fencepost j as its end point
(:mod:`ssvm_torch.models.constituency`). Rows of all sentences are stacked: sentence i's are
``fence_offsets[i]:fence_offsets[i + 1]`` with ``fence_offsets = offsets + arange(n + 1)``.

Gold trees are binary and labeled: 2 n_i - 1 spans (i, j, label) per sentence, stacked in ``spans`` by
``span_offsets``, ordered by (i, j) (the canonical order of the span store's labelings).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import SSVMInputError, check
from . import feature_cache
from .types import RaggedOffsets, data_file, ptr_rows
from .ud import UD_EWT, UPOS_TAGS, Treebank, load_ud_ewt
from ..spans.checks import UNLABELED

#: the label of the binarization's joins and of one-word spans: dropped before bracket scoring
JOIN = "<join>"
#: the fencepost templates (module docstring): name -> the words it reads (-1 the left word, +1 the right one)
FENCE_TEMPLATES = ("bias", "lw", "rw", "lp", "rp", "lp,rp", "ls", "rs", "llp,lp", "rp,rrp", "lw,rp", "lp,rw", "llw", "rrw",
                   "llp,lp,rp", "lp,rp,rrp", "lw,rw")


@dataclass
class SpanData(RaggedOffsets):
    """Sentences with gold binary labeled trees and the sparse binary features of their fenceposts.

    ``offsets`` (n+1,) word offsets; ``fptr`` (P+1,) int64 and ``fidx`` (nnz,) int64 the features of the P =
    W + n fenceposts as CSR rows (ids < ``n_features``); ``spans`` (S, 3) int64 the gold (i, j, label) of every
    sentence, 2 n_i - 1 of them, ``span_offsets`` (n+1,); ``n_labels`` the label set's size; ``meta``: label
    names, the sentences' words, the featurization. ``observed`` (S,) bool (None: every span): partial brackets,
    the spans that the annotation gives; the others are a completion (a placeholder, or the latent SSVM's
    current one: ssvm_torch/latent.py) that the task loss never reads (:meth:`observed_charts`). ``labeled`` (S,)
    bool (None: every one): whether an observed bracket's label is given too; an unlabeled one (Pereira & Schabes
    1992's brackets) says only that the span is a constituent, its label is the completion's."""

    offsets: torch.Tensor
    fptr: torch.Tensor
    fidx: torch.Tensor
    spans: torch.Tensor
    n_features: int
    n_labels: int
    name: str = "spans"
    meta: dict = field(default_factory=dict)
    observed: torch.Tensor | None = None
    labeled: torch.Tensor | None = None

    def __post_init__(self):
        self.check_word_offsets()
        lengths = self.lengths
        P = int(self.offsets[-1]) + self.n
        check(tuple(self.fptr.shape) == (P + 1,) and int(self.fptr[0]) == 0, "fptr",
              f"({P + 1},) CSR row pointers of the {P} fenceposts from 0", tuple(self.fptr.shape))
        check(self.fidx.dim() == 1 and self.fidx.shape[0] == int(self.fptr[-1]), "fidx",
              f"({int(self.fptr[-1])},) feature ids (fptr[-1] of them)", tuple(self.fidx.shape))
        if self.fidx.numel() and (int(self.fidx.min()) < 0 or int(self.fidx.max()) >= self.n_features):
            raise SSVMInputError(f"fidx: expected feature ids in [0, {self.n_features}), got "
                                 f"[{int(self.fidx.min())}, {int(self.fidx.max())}]")
        S = int((2 * lengths - 1).sum())
        check(tuple(self.spans.shape) == (S, 3) and not self.spans.is_floating_point(), "spans",
              f"an int tensor ({S}, 3): 2 n_i - 1 spans (i, j, label) per sentence", tuple(self.spans.shape))
        i, j, lab = self.spans.long().unbind(1)
        row = torch.repeat_interleave(torch.arange(self.n, device=self.device), 2 * lengths - 1)
        bad = (i < 0) | (i >= j) | (j > lengths[row]) | (lab < 0) | (lab >= self.n_labels)
        if bool(bad.any()):
            k = int(bad.nonzero()[0, 0])
            raise SSVMInputError(f"spans: sentence {int(row[k])} ({int(lengths[row[k]])} words): span "
                                 f"{tuple(int(v) for v in self.spans[k])} is not 0 <= i < j <= n with a label in "
                                 f"[0, {self.n_labels})")
        from ..spans.checks import FAULTS, chart_faults
        for start in range(0, self.n, 256):                     # each sentence's spans a binary tree
            idx = torch.arange(start, min(start + 256, self.n), device=self.device)
            faults = chart_faults(self.charts(idx) >= 0, lengths[idx])
            if bool((faults != 0).any()):
                b = int((faults != 0).nonzero()[0, 0])
                raise SSVMInputError(f"spans: sentence {start + b}: not a binary tree over its words "
                                     f"({FAULTS[int(faults[b])]})")
        if self.observed is not None:
            check(isinstance(self.observed, torch.Tensor) and self.observed.dtype == torch.bool
                  and tuple(self.observed.shape) == (S,), "observed", f"None or a bool tensor ({S},): a flag per span",
                  tuple(self.observed.shape) if isinstance(self.observed, torch.Tensor) else type(self.observed).__name__)
            self.observed = self.observed.to(self.device)
        if self.labeled is not None:
            check(isinstance(self.labeled, torch.Tensor) and self.labeled.dtype == torch.bool
                  and tuple(self.labeled.shape) == (S,), "labeled", f"None or a bool tensor ({S},): a flag per span",
                  tuple(self.labeled.shape) if isinstance(self.labeled, torch.Tensor) else type(self.labeled).__name__)
            self.labeled = self.labeled.to(self.device)

    def observed_codes(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(S,) int8 per span row (or of the span ``rows``): 0 unobserved, 1 an observed labeled bracket, 2 an
        observed unlabeled one."""
        count = self.spans.shape[0] if rows is None else rows.shape[0]
        seen, labeled = (torch.ones(count, dtype=torch.bool, device=self.device) if flags is None else
                         flags if rows is None else flags[rows] for flags in (self.observed, self.labeled))
        return torch.where(seen, torch.where(labeled, 1, 2), 0).to(torch.int8)

    @property
    def span_offsets(self) -> torch.Tensor:
        return torch.nn.functional.pad(torch.cumsum(2 * self.lengths - 1, 0), (1, 0))

    @property
    def fence_offsets(self) -> torch.Tensor:
        return self.offsets + torch.arange(self.n + 1, device=self.device)

    def charts(self, idx=None, fenceposts: int | None = None, observed_only: bool = False) -> torch.Tensor:
        """The gold trees of the sentences ``idx`` (default all) as labeled charts (B, M, M), -1 off the tree;
        M = the longest sentence's n + 1 unless ``fenceposts`` is given; ``observed_only``: -1 at the unobserved
        spans too and ``UNLABELED`` (-2) at the observed unlabeled ones (:meth:`observed_charts`)."""
        idx = torch.arange(self.n, device=self.device) if idx is None else \
            torch.as_tensor(idx, device=self.device).reshape(-1)
        lengths = self.lengths[idx]
        M = int(lengths.max()) + 1 if fenceposts is None else int(fenceposts)
        count = 2 * lengths - 1
        start = self.span_offsets[idx]
        k = torch.arange(int(count.sum()), device=self.device)
        row = torch.repeat_interleave(torch.arange(idx.shape[0], device=self.device), count)
        local = k - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
        at = start[row] + local
        s = self.spans[at].long()
        out = torch.full((idx.shape[0], M, M), -1, dtype=torch.int64, device=self.device)
        lab = s[:, 2]
        if observed_only and (self.observed is not None or self.labeled is not None):
            code = self.observed_codes(at)             # the batch's rows only: charts runs per batch
            lab = torch.where(code == 1, lab, torch.full_like(lab, -1))
            lab = torch.where(code == 2, torch.full_like(lab, UNLABELED), lab)
        out[row, s[:, 0], s[:, 1]] = lab
        return out

    def observed_charts(self, idx=None, fenceposts: int | None = None) -> torch.Tensor:
        """The observed brackets O of the sentences ``idx`` as labeled charts (B, M, M), ``UNLABELED`` (-2) at an
        observed bracket without its label, -1 elsewhere: the spans that the task loss counts (the whole gold trees
        when every span is observed with its label)."""
        return self.charts(idx, fenceposts, observed_only=True)

    @property
    def partial(self) -> bool:
        """Whether some span is unobserved or observed without its label."""
        return bool((self.observed_codes() != 1).any()) if self.observed is not None or self.labeled is not None \
            else False

    def with_trees(self, spans: torch.Tensor) -> "SpanData":
        """This data with the trees ``spans`` (S, 3), each containing its sentence's observed brackets (a
        completion: ssvm_torch.latent); ``observed`` marks the rows of the new trees that are observed brackets."""
        spans = torch.as_tensor(spans, device=self.device).long()
        check(tuple(spans.shape) == tuple(self.spans.shape), "spans", f"{tuple(self.spans.shape)} rows (i, j, label)",
              tuple(spans.shape))
        observed = labeled = None
        if self.observed is not None or self.labeled is not None:
            row = torch.repeat_interleave(torch.arange(self.n, device=self.device), 2 * self.lengths - 1)
            code = self.observed_codes()
            labeled = torch.isin(self._span_keys(row, spans), self._span_keys(row, self.spans)[code == 1])
            unlabeled = torch.isin(self._span_keys(row, spans, False), self._span_keys(row, self.spans, False)[code == 2])
            observed = labeled | unlabeled
            missing = torch.zeros(self.n, dtype=torch.int64, device=self.device)
            missing.index_add_(0, row, (code != 0).long()).index_add_(0, row, -observed.long())
            if bool((missing != 0).any()):
                b = int((missing != 0).nonzero()[0, 0])
                raise SSVMInputError(f"spans: sentence {b}: the tree lacks {int(missing[b])} of its observed brackets "
                                     "(a completion holds every one)")
            labeled = labeled | ~observed if self.labeled is not None else None
        return SpanData(self.offsets, self.fptr, self.fidx, spans, self.n_features, self.n_labels, self.name,
                        dict(self.meta), observed, labeled)

    def _span_keys(self, row: torch.Tensor, spans: torch.Tensor, labels: bool = True) -> torch.Tensor:
        """One int64 per (sentence, i, j, label) row (``labels=False``: per (sentence, i, j))."""
        M = int(self.lengths.max()) + 1
        spans = spans.long()
        key = (row * M + spans[:, 0]) * M + spans[:, 1]
        return key * self.n_labels + spans[:, 2] if labels else key

    def subset(self, idx) -> "SpanData":
        """The sentences ``idx`` in that order (their fencepost rows and trees)."""
        idx = torch.as_tensor(idx, device=self.device).reshape(-1).long()
        fo, so = self.fence_offsets, self.span_offsets
        rows = torch.cat([torch.arange(int(fo[i]), int(fo[i + 1]), device=self.device) for i in idx.tolist()])
        counts, nz = ptr_rows(self.fptr, rows)
        spans = torch.cat([self.spans[int(so[i]):int(so[i + 1])] for i in idx.tolist()])
        observed, labeled = (None if flags is None else torch.cat([flags[int(so[i]):int(so[i + 1])]
                                                                  for i in idx.tolist()])
                             for flags in (self.observed, self.labeled))
        meta = {k: ([v[i] for i in idx.tolist()] if k in ("sentences", "sent_ids") and v else v)
                for k, v in self.meta.items()}
        return SpanData(torch.nn.functional.pad(torch.cumsum(self.lengths[idx], 0), (1, 0)),
                        torch.nn.functional.pad(torch.cumsum(counts, 0), (1, 0)), self.fidx[nz], spans,
                        self.n_features, self.n_labels, self.name, meta, observed, labeled)

    def to(self, device, dtype=None) -> "SpanData":
        return SpanData(self.offsets.to(device), self.fptr.to(device), self.fidx.to(device), self.spans.to(device),
                        self.n_features, self.n_labels, self.name, self.meta,
                        None if self.observed is None else self.observed.to(device),
                        None if self.labeled is None else self.labeled.to(device))


# -- featurization --------------------------------------------------------------------------------------------
def _suffix(form: str) -> str:
    return form.lower()[-3:]


def fencepost_items(forms: list, upos: list) -> list:
    """The feature strings of the n + 1 fenceposts of one sentence (the templates of FENCE_TEMPLATES)."""
    n = len(forms)
    w = ["<s2>", "<s>"] + [f.lower() for f in forms] + ["</s>", "</s2>"]     # w[k + 1]: word k (word 0: <s>)
    s = ["<s>"] + [_suffix(f) for f in forms] + ["</s>"]
    p = ["<s2>", "<s>"] + list(upos) + ["</s>", "</s2>"]
    out = []
    for k in range(n + 1):
        llw, lw, rw, rrw, ls, rs = w[k], w[k + 1], w[k + 2], w[k + 3], s[k], s[k + 1]
        llp, lp, rp, rrp = p[k], p[k + 1], p[k + 2], p[k + 3]
        out.append(["bias", f"lw={lw}", f"rw={rw}", f"lp={lp}", f"rp={rp}", f"lp,rp={lp},{rp}", f"ls={ls}",
                    f"rs={rs}", f"llp,lp={llp},{lp}", f"rp,rrp={rp},{rrp}", f"lw,rp={lw},{rp}", f"lp,rw={lp},{rw}",
                    f"llw={llw}", f"rrw={rrw}", f"llp,lp,rp={llp},{lp},{rp}", f"lp,rp,rrp={lp},{rp},{rrp}",
                    f"lw,rw={lw},{rw}"])
    return out


def featurize(sentences: list, vocabulary: dict | None = None, min_count: int = 1):
    """(fptr, fidx, vocabulary) of the fenceposts of ``sentences`` [(forms, upos)]: the vocabulary of the items
    seen at least ``min_count`` times (built here when None: training data), items outside it not coded (an
    evaluation sentence's unseen word has no weight to read)."""
    items = [fencepost_items(forms, upos) for forms, upos in sentences]
    if vocabulary is None:
        counts = Counter(x for sent in items for fence in sent for x in fence)
        vocabulary = {x: k for k, x in enumerate(sorted(x for x, c in counts.items() if c >= min_count))}
        if not vocabulary:
            most = max(counts.values(), default=0)
            raise SSVMInputError(f"min_count: expected at most {most} (the count of the most frequent fencepost item "
                                 f"of the {len(sentences)} training sentences), got {min_count}: no feature is left")
    ptr, ids = [0], []
    for sent in items:
        for fence in sent:
            coded = sorted({vocabulary[x] for x in fence if x in vocabulary})
            ids += coded
            ptr.append(len(ids))
    return np.asarray(ptr, dtype=np.int64), np.asarray(ids, dtype=np.int64), vocabulary


def gold_spans(heads, upos: list, labels: dict) -> list | None:
    """The binarized phrase structure of a projective dependency tree (``subtree_brackets``: a constituent per word
    with dependents, labeled with its UPOS; joined from the left by ``binarize``, joins and one-word spans labeled
    0 = JOIN), ordered by (i, j); None for a non-projective tree (it has no such phrase structure)."""
    from ..spans.convert import binarize, subtree_brackets
    n = len(upos)
    brackets = subtree_brackets([int(h) for h in heads], [labels[t] for t in upos])
    if brackets is None:
        return None
    return sorted(binarize(brackets, n, 0), key=lambda s: (s[0], s[1]))



def _container(tb: Treebank, keep: list, trees: list, arrays: dict, split: str, d: int, names: list, info: dict):
    lengths = [int(tb.offsets[i + 1] - tb.offsets[i]) for i in keep]
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
    spans = torch.tensor([s for t in trees for s in t], dtype=torch.int64).reshape(-1, 3)
    sentences = [tb.sentence(i) for i in keep]
    meta = {"label_names": names, "sentences": [[(w[0], w[2]) for w in s] for s in sentences],
            "sent_ids": [tb.sent_ids[i] for i in keep] if tb.sent_ids else [], "kept": len(keep), "of": tb.n,
            "featurization": info}
    return SpanData(offsets, torch.from_numpy(arrays[f"{split}_ptr"]), torch.from_numpy(arrays[f"{split}_ids"]), spans,
                    d, len(names), f"ud-ewt-spans-{split}", meta)


def load_ud_spans(min_count: int = 1, evaluate_on: str = "test", train_size: int | None = None,
                  cache: bool = True) -> tuple[SpanData, SpanData]:
    """(train, evaluation split) of UD English-EWT's phrase structures (:func:`gold_spans`; labels JOIN and the 17
    UPOS tags), fencepost features of the templates FENCE_TEMPLATES (gold UPOS; the dictionary from the training
    fenceposts, items seen ``min_count`` times). The projective sentences only (12,256 of 12,544 in train, 1,970 of
    2,001 in dev, 2,051 of 2,077 in test: a non-projective tree has no such phrase structure); ``meta["kept"]`` and
    ``meta["of"]`` say how many. ``evaluate_on`` "test" or "dev" (model selection: the test trees never scored);
    ``train_size`` keeps the first N training sentences (before the projectivity filter). The coded designs are
    cached on disk, keyed by ``min_count``, ``train_size`` and the files' checksums."""
    check(evaluate_on in ("dev", "test"), "evaluate_on", "'dev' or 'test'", repr(evaluate_on))
    check(isinstance(min_count, int) and min_count >= 1, "min_count", "an int >= 1", min_count)
    paths = {s: data_file(UD_EWT[s]) for s in ("train", evaluate_on)}
    tbs = {s: load_ud_ewt(s) for s in paths}                  # read once per process (ud.py's _SPLITS)
    if train_size is not None:
        check(isinstance(train_size, int) and 1 <= train_size <= tbs["train"].n, "train_size",
              f"an int in [1, {tbs['train'].n}]", train_size)
        tbs["train"] = tbs["train"].subset(range(train_size))
    names = [JOIN, *UPOS_TAGS]
    index = {t: k for k, t in enumerate(names)}
    kept, trees = {}, {}
    for s, tb in tbs.items():
        kept[s], trees[s] = [], []
        for i in range(tb.n):
            a, b = int(tb.offsets[i]), int(tb.offsets[i + 1])
            t = gold_spans(tb.heads[a:b], tb.upos[a:b], index)
            if t is not None:
                kept[s].append(i)
                trees[s].append(t)
    t0 = time.perf_counter()
    key = feature_cache.cache_key("ud-ewt-spans-1", ",".join(FENCE_TEMPLATES), min_count, train_size, evaluate_on,
                                  *(feature_cache.file_digest(paths[s]) for s in ("train", evaluate_on)))
    arrays = feature_cache.load(key) if cache else None
    hit = arrays is not None
    if arrays is None:
        words = {s: [([tb.forms[k] for k in range(int(tb.offsets[i]), int(tb.offsets[i + 1]))],
                       tb.upos[int(tb.offsets[i]):int(tb.offsets[i + 1])]) for i in kept[s]] for s, tb in tbs.items()}
        ptr, ids, vocabulary = featurize(words["train"], min_count=min_count)
        arrays = {"d": np.array([len(vocabulary)]), "train_ptr": ptr, "train_ids": ids}
        arrays[f"{evaluate_on}_ptr"], arrays[f"{evaluate_on}_ids"], _ = featurize(words[evaluate_on], vocabulary)
        if cache:
            feature_cache.save(key, arrays)
    d = int(arrays["d"][0])
    info = {"templates": list(FENCE_TEMPLATES), "min_count": min_count, "n_features": d,
            "seconds": time.perf_counter() - t0, "cached": hit}
    train = _container(tbs["train"], kept["train"], trees["train"], arrays, "train", d, names, info)
    other = _container(tbs[evaluate_on], kept[evaluate_on], trees[evaluate_on], arrays, evaluate_on, d, names, info)
    return train, other
