"""Partial annotation of segmentations: what is known at each position, and the set C of the segmentations that
agree with it (Tsuboi et al. 2008 train chains from such annotation; here the same for semi-Markov chains).

A :class:`PartialSegmentation` holds three (B, T) integer tensors, a negative entry meaning unobserved:

* ``labels``: the label of the segment that covers the position;
* ``begins``: 1 if a segment begins at the position, 0 if the segment of the position before goes on;
* ``ends`` (optional): 1 if the segment ends at the position, 0 if it goes on after it.

A BIO tag observes (label, begins), a BIOES tag all three
(:func:`~ssvm_torch.segments.convert.partial_from_tags`); a segmentation observes everything. C is the set of the
segmentations whose every segment (t, l+1, k) agrees with every observation at its positions t..t+l: the
labels there are k, ``begins`` is 1 at t and 0 after it, ``ends`` is 1 at t+l and 0 before it. Agreement is a
property of each segment alone (the next segment's first position checks the boundary from its side), so C is
the set of segmentations over the *allowed* segments, a (B, T, L, K) mask (:func:`constraints`), and its log-sum
and best member are the plain recursions on the scores with -inf at every other segment.

The task loss of the hinge and the softmax-margin is Delta_O(y), the number of observed positions whose label or
begin flag differs from y's (times the row's cost): the ``"tokens"`` loss of
:mod:`ssvm_torch.segments.scoring` restricted to what is observed, decomposed over segments in the same way.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..chain.checks import tracing
from ..errors import SSVMInputError, check
from .checks import check_segments, valid_positions
from .scoring import span_counts, starts_and_labels, windows


class PartialSegmentation(NamedTuple):
    """What is observed of a batch of segmentations (module docstring): (B, T) integer tensors, negative =
    unobserved."""

    labels: torch.Tensor
    begins: torch.Tensor
    ends: torch.Tensor | None = None


def _field(value, name: str, shape, device) -> torch.Tensor:
    check(torch.is_tensor(value) and not value.is_floating_point() and value.dtype != torch.bool
          and tuple(value.shape) == tuple(shape), name, f"an integer tensor of shape {tuple(shape)} (negative: "
          "unobserved)", (getattr(value, "dtype", type(value).__name__), tuple(getattr(value, "shape", ()))))
    return value.to(device, torch.int64)


def check_partial(observed, lengths: torch.Tensor, K: int, T: int, field: str = "segments") -> PartialSegmentation:
    """``observed`` checked against rows of ``lengths`` positions (T the scores' positions) and K labels, with -1
    beyond each row; every error names the field, the row and the position."""
    check(isinstance(observed, PartialSegmentation), field, "a PartialSegmentation (labels, begins, ends)",
          type(observed).__name__)
    B, dev = lengths.shape[0], lengths.device
    labels = _field(observed.labels, f"{field}.labels", (B, T), dev)
    begins = _field(observed.begins, f"{field}.begins", (B, T), dev)
    ends = None if observed.ends is None else _field(observed.ends, f"{field}.ends", (B, T), dev)
    valid = valid_positions(lengths, T)
    unobserved = torch.full_like(labels, -1)
    labels, begins = torch.where(valid, labels, unobserved), torch.where(valid, begins, unobserved)
    ends = unobserved if ends is None else torch.where(valid, ends, unobserved)
    if tracing():
        return PartialSegmentation(labels, begins, ends)
    for name, value, top in (("labels", labels, K - 1), ("begins", begins, 1), ("ends", ends, 1)):
        bad = value > top
        if bool(bad.any()):
            b, t = (int(i) for i in bad.nonzero()[0])
            raise SSVMInputError(f"{field}.{name}: expected values in [0, {top}] (or negative: unobserved), got "
                                 f"{int(value[b, t])} at row {b}, position {t}")
    pos = torch.arange(T, device=dev)[None, :]
    for name, value, at, what in (("begins", begins, 0, "begins a segment"),
                                  ("ends", ends, lengths[:, None] - 1, "ends a segment")):
        bad = (value == 0) & (pos == at)
        if bool(bad.any()):
            b, t = (int(i) for i in bad.nonzero()[0])
            raise SSVMInputError(f"{field}.{name}: position {t} of row {b} always {what}, got 0 (observed "
                                 "otherwise)")
    return PartialSegmentation(labels, begins, ends)


def check_annotation(segments, lengths: torch.Tensor, K: int, L: int, T: int):
    """The gold annotation of a training loss checked: a segmentation tensor (B, T) (:func:`check_segments`) or a
    PartialSegmentation (:func:`check_partial`); anything else refused by name."""
    if isinstance(segments, PartialSegmentation):
        return check_partial(segments, lengths, K, T)
    check(torch.is_tensor(segments), "segments", "a segmentation (B, T) or a PartialSegmentation (labels, begins, "
          "ends)", type(segments).__name__)
    return check_segments(segments, lengths, K, L, T=T)


def constraints(observed: PartialSegmentation, L: int, K: int):
    """(counts (B, T, L, K) int32, allowed (B, T, L, K) bool) of a checked ``observed``: per segment (t, l+1, k)
    the number of its positions whose observed label or begin flag disagrees with it (Delta_O's count) and
    whether it agrees with every observation (module docstring)."""
    labels, begins, ends = observed
    ks = torch.arange(K, device=labels.device)
    other_label = (labels[..., None] >= 0) & (labels[..., None] != ks)               # (B, T, K)
    counts = span_counts(other_label | (begins == 0)[..., None], other_label | (begins == 1)[..., None], L)
    B, T = labels.shape
    early = torch.cat([labels.new_zeros(B, 1, dtype=torch.int32), (ends == 1).cumsum(1, dtype=torch.int32)], 1)
    # the segment (t, l+1) goes on past t..t+l-1 (none may be observed ending) and ends at t+l (not observed
    # going on); positions past the row are unobserved, and the recursions never take such a segment
    end_bad = windows(early[:, :T] + (ends == 0).to(torch.int32), L) - early[:, :T, None]        # (B, T, L)
    allowed = (counts == 0) & (end_bad == 0)[..., None]
    return counts, allowed


def full_rows(observed: PartialSegmentation, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) bool: rows whose every position has its label and begin flag observed (one segmentation agrees)."""
    valid = valid_positions(lengths, observed.labels.shape[1])
    return (((observed.labels >= 0) & (observed.begins >= 0)) | ~valid).all(1)


def segmentation_of(observed: PartialSegmentation) -> torch.Tensor:
    """The segmentation (B, T) that full rows observe: the observed label where a segment begins, -1 elsewhere."""
    return torch.where(observed.begins == 1, observed.labels, torch.full_like(observed.labels, -1))


def observed_segmentation(segments: torch.Tensor, lengths: torch.Tensor) -> PartialSegmentation:
    """A checked segmentation as a PartialSegmentation that observes all of it (labels, begins and ends)."""
    begins, labels, _ = starts_and_labels(segments, lengths)
    T = segments.shape[1]
    valid = valid_positions(lengths, T)
    nxt = torch.cat([begins[:, 1:], torch.ones_like(begins[:, :1])], 1)
    last = torch.arange(T, device=segments.device)[None, :] == lengths[:, None] - 1
    minus = torch.full_like(labels, -1)
    as_int = (lambda x: torch.where(valid, x.to(torch.int64), minus))
    return PartialSegmentation(labels, as_int(begins), as_int(nxt | last))
