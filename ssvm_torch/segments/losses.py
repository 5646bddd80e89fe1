"""The segment package's public calls on padded batches: each checks its arguments (every error names the
argument and the row) and runs the recursions of :mod:`ssvm_torch.segments.ops` (one dispatch over the
backends). Losses are per row (B,) and differentiable w.r.t. every score tensor:

* hinge (the n-slack SSVM's structured hinge, Taskar et al. 2003; Sarawagi & Gupta 2008 train segmentation
  models by max-margin): max_y [s(y) + Delta(y, y_b)] - s(y_b) >= 0, its gradient the segments of the
  loss-augmented segmentation minus the gold ones;
* softmax-margin (Gimpel & Smith 2010): log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b);
* CRF (the semi-Markov CRF, Sarawagi & Cohen 2004): log Z - s(y_b), its gradient the segment marginals minus
  the gold segments.

Delta(y, y_b) = c_b x the loss ``loss`` of :mod:`ssvm_torch.segments.scoring` (``"tokens"``: positions whose BIO
tag differs; ``"segments"``: false positive plus false negative segments), c_b = 1 (``cost="hamming"``), 1 / n_b
(``"normalized"``), a number, or a given per-row tensor (B,).

Partial annotation: the training losses also take a :class:`~ssvm_torch.segments.partial.PartialSegmentation`
(labels / begins / ends observed at some positions) in place of the gold segmentation, and then compare the model
with C, the segmentations that agree with it (:mod:`ssvm_torch.segments.objectives`).
"""
from __future__ import annotations

import torch

from ..errors import check
from ..trees.losses import row_cost
from . import objectives, ops, scoring
from .checks import check_segments, check_seg_scores, check_transitions, resolve_lengths
from .mbr import mbr_decode
from .partial import check_annotation, check_partial, constraints


def _prepare(seg_scores, first, last, trans, mask, lengths):
    S = check_seg_scores(seg_scores)
    first, last, trans = check_transitions(S, first, last, trans)
    return S, first, last, trans, resolve_lengths(S, mask, lengths)


def segment_decode(seg_scores, first=None, last=None, trans=None, mask=None, lengths=None, kernels: str = "auto",
                   return_scores: bool = False, *, nbest: int = 1, mbr: str | None = None):
    """The best segmentation of every row: segments (B, T) int64, the label at each segment's first position and
    -1 elsewhere (and beyond the row); with ``return_scores`` also s(segments) (B,). No gradient.

    ``nbest=n > 1``: the n best segmentations of every row (B, n, T) in non-increasing score order (ties in any
    order), all -1 for the ranks of a row with fewer than n finite-score segmentations (score -inf); scores
    (B, n): compiled for CPU float scores (:mod:`ssvm_torch.segments.numba_nbest`), the batched torch recursion
    of :mod:`ssvm_torch.segments.nbest` elsewhere or with ``kernels="torch"``.

    ``mbr="tokens"`` or ``"segments"``: minimum-Bayes-risk decoding instead, the segmentation (or n) of least
    expected loss of that kind under the semi-Markov CRF of the scores (:mod:`ssvm_torch.segments.mbr`); the scores
    are then the summed gains (minus the expected loss, up to a constant per row)."""
    check(mbr is None or mbr in scoring.LOSSES, "mbr", f"None or one of {list(scoring.LOSSES)}", repr(mbr))
    S, first, last, trans, lengths = _prepare(seg_scores, first, last, trans, mask, lengths)
    if mbr is not None:
        segments, scores = mbr_decode(S, first, last, trans, lengths, mbr, kernels, nbest)
        return (segments, scores) if return_scores else segments
    segments, scores = objectives.decode(S, first, last, trans, lengths, kernels, nbest)
    return (segments, scores) if return_scores else segments


def segment_log_partition(seg_scores, first=None, last=None, trans=None, mask=None, lengths=None,
                          kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) = log sum over the segmentations of exp s(y) (0 for an empty row), differentiable: its gradient
    w.r.t. ``seg_scores`` is the segment marginals. A non-empty row without a segmentation of finite score is
    refused by name (as the decode and the marginals refuse it)."""
    S, first, last, trans, lengths = _prepare(seg_scores, first, last, trans, mask, lengths)
    return ops.log_partition(S, first, last, trans, lengths, kernels)


def segment_marginals(seg_scores, first=None, last=None, trans=None, mask=None, lengths=None,
                      kernels: str = "auto") -> torch.Tensor:
    """P(segment (t, l+1, k) in y) (B, T, L, K) under p(y) = exp s(y) / Z, zero for segments that end beyond the
    row. No gradient. A non-empty row without a segmentation of finite score is refused by name."""
    S, first, last, trans, lengths = _prepare(seg_scores, first, last, trans, mask, lengths)
    return ops.marginals(S.detach(), first.detach(), last.detach(), trans.detach(), lengths, kernels)


def segment_score(seg_scores, segments, first=None, last=None, trans=None, mask=None, lengths=None) -> torch.Tensor:
    """s(segments) (B,), differentiable (:func:`ssvm_torch.segments.scoring.score`)."""
    S, first, last, trans, lengths = _prepare(seg_scores, first, last, trans, mask, lengths)
    segments = check_segments(segments, lengths, S.shape[3], S.shape[2], T=S.shape[1])
    return scoring.score(S, first, last, trans, segments, lengths)


def segment_loss(pred, gold, lengths, loss: str = "tokens", cost="hamming") -> torch.Tensor:
    """Delta(pred, gold) (B,) float64 (module docstring) of two checked segmentations (B, T) of rows of
    ``lengths`` positions (any segment length)."""
    check(loss in scoring.LOSSES, "loss", f"one of {list(scoring.LOSSES)}", repr(loss))
    check(torch.is_tensor(lengths) and lengths.dim() == 1 and not lengths.is_floating_point(), "lengths",
          "an integer tensor (B,)", getattr(lengths, "shape", type(lengths).__name__))
    lengths = lengths.to(torch.int64)
    T = pred.shape[1] if torch.is_tensor(pred) and pred.dim() == 2 else 0
    check(bool(((lengths >= 0) & (lengths <= T)).all()), "lengths",
          f"integers in [0, {T}] (pred's positions)", lengths.tolist()[:8])
    pred = check_segments(pred, lengths, None, None, "pred")
    check(tuple(gold.shape) == tuple(pred.shape) if torch.is_tensor(gold) else False, "gold",
          f"a segmentation of pred's shape {tuple(pred.shape)}", getattr(gold, "shape", type(gold).__name__))
    gold = check_segments(gold, lengths, None, None, "gold")
    return scoring.loss(pred, gold, lengths, loss, row_cost(cost, lengths, torch.float64))


def segment_hinge(seg_scores, segments, first=None, last=None, trans=None, mask=None, lengths=None,
                  loss: str = "tokens", cost="hamming", kernels: str = "auto") -> torch.Tensor:
    """max_y [s(y) + Delta(y, segments)] - s(segments) (B,) >= 0, differentiable (module docstring); ``segments``
    a segmentation or a :class:`~ssvm_torch.segments.partial.PartialSegmentation` (the latent hinge)."""
    return _training_loss("hinge", seg_scores, segments, first, last, trans, mask, lengths, loss, cost, kernels)


def segment_softmax_margin(seg_scores, segments, first=None, last=None, trans=None, mask=None, lengths=None,
                           loss: str = "tokens", cost="hamming", kernels: str = "auto") -> torch.Tensor:
    """log sum_y exp(s(y) + Delta(y, segments)) - s(segments) (B,), differentiable (module docstring); with a
    PartialSegmentation, - log Z_C in place of - s(segments)."""
    return _training_loss("softmax_margin", seg_scores, segments, first, last, trans, mask, lengths, loss, cost,
                          kernels)


def segment_crf_nll(seg_scores, segments, first=None, last=None, trans=None, mask=None, lengths=None,
                    kernels: str = "auto") -> torch.Tensor:
    """log Z - s(segments) (B,), the semi-Markov CRF's negative log-likelihood, differentiable; with a
    PartialSegmentation, log Z - log Z_C (the negative likelihood of what is observed)."""
    return _training_loss("crf", seg_scores, segments, first, last, trans, mask, lengths, "tokens", "hamming",
                          kernels)


def _training_loss(kind, seg_scores, segments, first, last, trans, mask, lengths, loss, cost, kernels):
    S, first, last, trans, lengths = _prepare(seg_scores, first, last, trans, mask, lengths)
    check(loss in scoring.LOSSES, "loss", f"one of {list(scoring.LOSSES)}", repr(loss))
    c = row_cost(cost, lengths, S.dtype)
    gold = check_annotation(segments, lengths, S.shape[3], S.shape[2], S.shape[1])
    return objectives.training_loss(kind, S, first, last, trans, gold, lengths, loss, c, kernels)


def allowed_segments(seg_scores, observed, mask=None, lengths=None) -> torch.Tensor:
    """(B, T, L, K) bool: the segments that agree with a PartialSegmentation (:mod:`ssvm_torch.segments.partial`);
    ``seg_scores.masked_fill(~allowed, -inf)`` restricts every call to C (constrained decoding, log Z_C)."""
    S = check_seg_scores(seg_scores)
    lengths = resolve_lengths(S, mask, lengths)
    observed = check_partial(observed, lengths, S.shape[3], S.shape[1], field="observed")
    return constraints(observed, S.shape[2], S.shape[3])[1]
