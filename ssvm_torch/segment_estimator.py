"""A scikit-learn estimator for segmentations: the linear semi-Markov SSVM (models/semimarkov.py) on the data users
hold, sentences as (T_i, F) feature arrays and their chunk tags (BIO or BIOES strings, e.g. "B-NP", "I-NP", "O").

    from ssvm_torch import SegmentSSVM
    est = SegmentSSVM(lam=1e-2, passes=20).fit(X_train, tags_train)    # X: list of (T_i, F), tags: lists of str
    est.predict(X_test)                  # lists of tags, in the training scheme
    est.score(X_test, tags_test)         # chunk F1 in [0, 1] (conlleval's exact chunks, "O" not counted)

The segment labels are "O" (one-position segments, the model's ``outside``) and the chunk types of the training
tags (``labels_``); a segment is at most ``max_length`` positions (None: the longest training chunk). The solver
parameters are :class:`~ssvm_torch.estimator.StructuredSVM`'s; ``task_loss`` is the model's loss (``normalized``:
the share of positions whose (chunk type, begins) state is wrong, per sentence; ``hamming``: their count).
"""
from __future__ import annotations

import numpy as np
import torch

from .data.types import ChainData
from .devices import to_host
from .errors import check, check_choice
from .estimator import StructuredSVM
from .models.semimarkov import SemiMarkovModel
from .segments import segment_states, segments_from_tags, spans, tags_from_segments
from .segments.scoring import loss as segment_loss

OUTSIDE = "O"


def chunk_f1(pred_tags: list, gold_tags: list, scheme: str = "BIO") -> float:
    """Micro F1 in [0, 1] of the exact chunks (start, end, type) of predicted against gold tag lists, the outside
    tag not counted: conlleval's chunk F1 (chunk types of either side are read, none is refused)."""
    types = sorted({t.partition("-")[2] for s in (*pred_tags, *gold_tags) for t in s if t != OUTSIDE})
    labels = [OUTSIDE, *types]
    chunks = []
    for tags in (pred_tags, gold_tags):
        segs, lengths = segments_from_tags(list(tags), labels, scheme)
        chunks.append({(b, s, e, k) for b, row in enumerate(spans(segs, lengths)) for s, e, k in row if k != 0})
    both = len(chunks[0] & chunks[1])
    p = both / len(chunks[0]) if chunks[0] else 0.0
    r = both / len(chunks[1]) if chunks[1] else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


class SegmentSSVM(StructuredSVM):
    """The linear semi-Markov SSVM as a scikit-learn estimator (module docstring): ``fit(X, tags)``,
    ``predict(X)`` -> tag lists, ``score(X, tags)`` -> chunk F1, ``loss(X, tags)`` -> the task loss per sentence;
    ``get_params`` / ``set_params`` / ``clone`` as scikit-learn's."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "fw",
                 cache: bool = False, passes: float = 50, gap_check: float = 10, gap_threshold: float = 0.0,
                 averaging: bool = False, seed: int = 0, max_length: int | None = None, task_loss: str = "normalized",
                 scheme: str = "BIO", warm_start: bool = False, device: str = "cpu", dtype: str = "float64",
                 kernels: str = "auto"):
        super().__init__("custom", lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging,
                         seed, None, None, None, warm_start, device, dtype, kernels)
        self.max_length = max_length
        self.task_loss = task_loss
        self.scheme = scheme

    def _labels_inside(self, X) -> bool:
        return isinstance(X, ChainData)

    def _tags(self, X, tags, unknown: bool = False) -> list:
        """The tag lists of ``tags``, checked against X (one string per position; ``unknown``: None allowed, a tag
        not known: LatentSegmentSSVM's partly tagged sentences)."""
        check(isinstance(tags, (list, tuple)) and len(tags) == len(X), "Y", f"a list of {len(X)} tag lists",
              type(tags).__name__ if not isinstance(tags, (list, tuple)) else f"{len(tags)} lists")
        none = ", or None: unknown" if unknown else ""
        out = []
        for i, (x, t) in enumerate(zip(X, tags)):
            sequence = isinstance(t, (list, tuple)) or (isinstance(t, np.ndarray) and t.ndim == 1)
            check(sequence and len(t) == x.shape[0], f"Y[{i}]",
                  f"{x.shape[0]} tags (strings such as 'B-NP', 'O'{none}), one per position of X[{i}]",
                  f"{len(t)} tags" if sequence else type(t).__name__)
            bad = next((j for j, tag in enumerate(t) if not (isinstance(tag, str) or (unknown and tag is None))),
                       None)
            check(bad is None, f"Y[{i}][{bad}]", "a chunk tag string such as 'B-NP' or 'O'" + (" or None (unknown)"
                                                                                              if unknown else ""),
                  None if bad is None else repr(t[bad]))
            out.append([None if tag is None else str(tag) for tag in t])        # NumPy's str_ as plain strings
        return out

    def _data(self, X, Y=None, fitting: bool = False):
        """ChainData with 2K segment states (models/semimarkov.py); without Y (prediction) every position is a
        one-position "O" segment (a placeholder the decoder never reads)."""
        check_choice(self.scheme, "scheme", ("BIO", "BIOES"))
        if isinstance(X, ChainData):
            return X
        xs, _ = self._chain_arrays(X, None, fitting)
        if fitting:
            self.n_features_in_ = xs[0].shape[1]
        if Y is None:
            states = [np.zeros(x.shape[0], dtype=np.int64) for x in xs]
            return ChainData.from_sequences(xs, states, 2 * len(self.labels_), dtype=torch.float64)
        tags = self._tags(xs, Y)
        if fitting:
            self.labels_ = [OUTSIDE] + sorted({t.partition("-")[2] for s in tags for t in s if t != OUTSIDE})
        segments, lengths = segments_from_tags(tags, self.labels_, self.scheme)
        K = len(self.labels_)
        states = segment_states(segments, lengths, K)
        return ChainData.from_sequences(xs, [states[b, :len(t)].numpy() for b, t in enumerate(tags)], 2 * K,
                                        dtype=torch.float64)

    def _make_model(self, data) -> SemiMarkovModel:
        return SemiMarkovModel.for_data(data, self.max_length, self.task_loss, outside=0)

    def _segments(self, X):
        """(the best segmentations (B, T_max), lengths (B,)) of X at the fitted weights."""
        self._check_fitted()
        data = self._data(X)
        self.model_.check_data(data, "X")
        return self.model_.predict(self._coef_for(data), data).cpu(), data.lengths.cpu()

    def predict(self, X) -> list:
        """The chunk tags of every sentence (lists of strings, the training scheme)."""
        segments, lengths = self._segments(X)
        return tags_from_segments(segments, lengths, self.labels_, self.scheme)

    def loss(self, X, Y=None) -> np.ndarray:
        """The task loss of each sentence's prediction (``task_loss``), read against its gold tags; a chunk type
        unseen in fit reads as "O" segments there (never right)."""
        self._require_labels(X, Y, "loss")
        segments, lengths = self._segments(X)
        if isinstance(X, ChainData):
            gold = self.model_.gt_batch(X, torch.arange(X.n))
        else:
            known = set(self.labels_)
            tags = [[t if t == OUTSIDE or t.partition("-")[2] in known else OUTSIDE for t in s]
                    for s in self._tags(X, Y)]
            gold = segments_from_tags(tags, self.labels_, self.scheme)[0]
        return to_host(segment_loss(segments, gold, lengths, "tokens", self.model_.token_loss(lengths)))

    def score(self, X, Y=None) -> float:
        """Chunk F1 in [0, 1] against the gold tags (:func:`chunk_f1`)."""
        if isinstance(X, ChainData):
            segments, lengths = self._segments(X)
            gold = self.model_.gt_batch(X, torch.arange(X.n))
            return self.model_.segment_counts(segments, gold, lengths)["segment_f1"] / 100.0
        self._require_labels(X, Y, "score")
        return chunk_f1(self.predict(X), self._tags(X, Y), self.scheme)
