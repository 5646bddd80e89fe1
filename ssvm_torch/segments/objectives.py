"""The three training losses of a segmentation model per row, on checked tensors (the calls of
:mod:`ssvm_torch.segments.losses` and the :class:`~ssvm_torch.nn.SemiMarkovChain` layer run them):

* full annotation (gold segmentation y_b): hinge max_y [s(y) + Delta(y, y_b)] - s(y_b), softmax-margin
  log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b), CRF log Z - s(y_b);
* partial annotation (C, the segmentations that agree with the observations, :mod:`ssvm_torch.segments.partial`):
  the latent hinge max_y [s(y) + Delta_O(y)] - max_{y in C} s(y) (Yu & Joachims 2009), softmax-margin
  log sum_y exp(s(y) + Delta_O(y)) - log Z_C, CRF log Z - log Z_C (the negative marginal likelihood of what is
  observed, Tsuboi et al. 2008). Each is 0 for a row with nothing observed; a row that observes every label and
  begin flag takes the full-annotation loss of the segmentation it observes, bit for bit.
"""
from __future__ import annotations

import torch

from ..chain.checks import tracing
from ..errors import SSVMInputError, check
from ..trees.partial import join_rows
from . import ops, scoring
from .checks import fail_no_segmentation
from .partial import PartialSegmentation, constraints, full_rows, segmentation_of

LOSSES = ("hinge", "crf", "softmax_margin")


def full_loss(kind: str, S, first, last, trans, gold, lengths, seg_loss: str, c, kernels: str) -> torch.Tensor:
    """The loss ``kind`` (B,) of the gold segmentations ``gold`` (module docstring), differentiable."""
    gold_score = scoring.score(S, first, last, trans, gold, lengths)
    if kind == "crf":
        return ops.log_partition(S, first, last, trans, lengths, kernels) - gold_score
    SA, const = scoring.augmented(S, gold, lengths, seg_loss, c)
    if kind == "softmax_margin":
        top = ops.log_partition(SA, first, last, trans, lengths, kernels)
    else:
        ystar, value = ops.best(SA.detach(), first.detach(), last.detach(), trans.detach(), lengths, kernels)
        fail_no_segmentation(value, lengths, "the loss-augmented best score")
        top = scoring.score(SA, first, last, trans, ystar, lengths)
    return top + const - gold_score


def _refuse_empty(values, lengths, rows, field):
    bad = torch.isneginf(values.detach()) & (lengths > 0)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"{field}: row {int(rows[b])}: no segmentation with a finite score agrees with the "
                             "observed labels, begins and ends (C is empty: the observations contradict each "
                             "other, need a segment longer than the scores' L, or every segmentation that agrees "
                             "uses a -inf score)")


def _partial(kind, S, first, last, trans, counts, allowed, lengths, c, kernels, rows, field):
    """The partial-annotation loss ``kind`` (B,) of rows with something unobserved (module docstring)."""
    S_C = S.masked_fill(~allowed, float("-inf"))
    if kind != "hinge":
        # log Z_C is -inf exactly when C has no segmentation of finite score: the emptiness check costs nothing
        log_c = ops.log_partition(S_C, first, last, trans, lengths, kernels, refuse=False)
        if not tracing():
            _refuse_empty(log_c, lengths, rows, field)
        if kind == "crf":
            return ops.log_partition(S, first, last, trans, lengths, kernels) - log_c
        SA = S + c.to(S.dtype)[:, None, None, None] * counts.to(S.dtype)
        return ops.log_partition(SA, first, last, trans, lengths, kernels, refuse=False) - log_c
    with torch.no_grad():
        y_c, best_c = ops.best(S_C.detach(), first.detach(), last.detach(), trans.detach(), lengths, kernels)
    if not tracing():
        _refuse_empty(best_c, lengths, rows, field)
    SA = S + c.to(S.dtype)[:, None, None, None] * counts.to(S.dtype)
    ystar, value = ops.best(SA.detach(), first.detach(), last.detach(), trans.detach(), lengths, kernels)
    fail_no_segmentation(value, lengths, "the loss-augmented best score")
    return scoring.score(SA, first, last, trans, ystar, lengths) - scoring.score(S, first, last, trans, y_c, lengths)


def partial_loss(kind: str, S, first, last, trans, observed: PartialSegmentation, lengths, c, kernels: str,
                 seg_loss: str = "tokens", field: str = "segments") -> torch.Tensor:
    """The loss ``kind`` (B,) of a checked PartialSegmentation (module docstring); ``seg_loss`` is the full
    rows' Delta ("tokens" is Delta_O's own; partial rows count observed positions)."""
    B, T, L, K = S.shape
    counts, allowed = constraints(observed, L, K)
    full = full_rows(observed, lengths)
    if kind != "crf" and seg_loss != "tokens" and not tracing() and not bool(full.all()):
        raise SSVMInputError(f"seg_loss: expected 'tokens' with partial annotation (Delta_O counts the observed "
                             f"positions; a segment-level loss needs every segment observed), got {seg_loss!r}")
    # every row by the C formula, without a split: inside a graph (no data-dependent split there) and when no row
    # is full (the usual batch when tags are hidden)
    if tracing() or not bool(full.any()):
        return _partial(kind, S, first, last, trans, counts, allowed, lengths, c, kernels, torch.arange(B), field)
    gold = segmentation_of(observed)
    # a full row's C is its one segmentation, if that agrees with the rest of what is observed (the inner
    # positions' labels, the ends): every one of its segments allowed
    begins, labels, seglen = scoring.starts_and_labels(gold, lengths)
    width = (seglen - 1).clamp(min=0, max=L - 1)
    ok = allowed.gather(2, width[:, :, None, None].expand(B, T, 1, K))[:, :, 0]
    ok = (ok.gather(2, labels.clamp(min=0)[..., None])[..., 0] & (seglen <= L)) | ~begins
    bad = full & ~ok.all(1)
    if bool(bad.any()):
        raise SSVMInputError(f"{field}: row {int(bad.nonzero()[0, 0])}: the observed labels and begins give a "
                             f"segmentation that disagrees with the rest of what is observed (a label inside "
                             f"a segment, an end) or has a segment longer than L = {L}")
    return join_rows(
        full,
        lambda i: full_loss(kind, S[i], first, last, trans, gold[i], lengths[i], seg_loss, c[i], kernels),
        lambda i: _partial(kind, S[i], first, last, trans, counts[i], allowed[i], lengths[i], c[i], kernels, i,
                           field),
        S)


def training_loss(kind: str, S, first, last, trans, gold, lengths, seg_loss: str, c, kernels: str) -> torch.Tensor:
    """The loss ``kind`` (B,) of a checked annotation (:func:`~ssvm_torch.segments.partial.check_annotation`): a
    segmentation (:func:`full_loss`) or a PartialSegmentation (:func:`partial_loss`)."""
    if isinstance(gold, PartialSegmentation):
        return partial_loss(kind, S, first, last, trans, gold, lengths, c, kernels, seg_loss)
    return full_loss(kind, S, first, last, trans, gold, lengths, seg_loss, c, kernels)


def decode(S, first, last, trans, lengths, kernels: str, nbest: int, what: str = "the best segmentation's score"):
    """(segments, scores) of checked scores: the best segmentation (B, T) and its score (B,), or with ``nbest``
    > 1 the n best (B, n, T) and theirs (B, n); a non-empty row without a segmentation of finite score refused
    (``what`` names the score in the message)."""
    check(isinstance(nbest, int) and not isinstance(nbest, bool) and nbest >= 1, "nbest", "an int >= 1",
          repr(nbest))
    if nbest > 1:
        segments, scores = ops.nbest(S, first, last, trans, lengths, nbest, kernels)
        fail_no_segmentation(scores[:, 0], lengths, what)
        return segments, scores
    segments, scores = ops.best(S.detach(), first.detach(), last.detach(), trans.detach(), lengths, kernels)
    fail_no_segmentation(scores, lengths, what)
    return segments, scores
