"""Scores and task losses of segmentations, as torch ops on any device: s(y) of a segmentation (differentiable),
the loss Delta(y, y_b) between two segmentations, and the loss-augmented segment scores that turn the
max / log-sum over segmentations of s(y) + Delta(y, y_b) into the plain recursions (Delta decomposes over the
segments of y, as loss-augmented decoding needs: Sarawagi & Gupta 2008 discuss such decomposable losses for
segmentations). Conventions in
:mod:`ssvm_torch.segments`.

Two losses, each times a per-row cost c_b:

* ``"tokens"``: the positions whose (label, begins-a-segment) pair differs, i.e. the Hamming loss of the BIO
  tags of the two segmentations (zero iff they are equal; two adjacent segments of one label differ from their
  union at the second one's first position);
* ``"segments"``: the segments of y that are not in y_b plus those of y_b not in y (false positives plus false
  negatives, the errors behind segment F1): per predicted segment 1 - 2 [it is a gold segment], plus |y_b|.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from .checks import segment_lengths, valid_positions

LOSSES = ("tokens", "segments")


def starts_and_labels(segments: torch.Tensor, lengths: torch.Tensor):
    """(begins (B, T) bool, labels (B, T) int64 (each position's segment label, -1 beyond the row), seglen (B, T)),
    the segments' lengths at their first positions."""
    B, T = segments.shape
    seglen = segment_lengths(segments, lengths)
    begins = seglen > 0
    pos = torch.arange(T, device=segments.device).expand(B, T)
    latest = torch.where(begins, pos, torch.full_like(pos, -1)).cummax(1).values
    labels = segments.clamp(min=0).gather(1, latest.clamp(min=0))
    labels = torch.where(valid_positions(lengths, T), labels, torch.full_like(labels, -1))
    return begins, labels, seglen


def score(S, first, last, trans, segments, lengths) -> torch.Tensor:
    """s(y) (B,) = sum over the segments (t, l, k) of y of S[t, l-1, k] + first[k_1] + last[k_J] + sum_j
    trans[k_j, k_{j-1}] (0 for an empty row), differentiable w.r.t. every score tensor."""
    B, T, L, K = S.shape
    if T == 0:
        return S.new_zeros(B)
    begins, labels, seglen = starts_and_labels(segments, lengths)
    lab = labels.clamp(min=0)
    width = (seglen - 1).clamp(min=0)
    seg = S.gather(2, width[:, :, None, None].expand(B, T, 1, K))[:, :, 0].gather(2, lab[..., None])[..., 0]
    zero = S.new_zeros(())
    s = torch.where(begins, seg, zero).sum(1)
    if T > 1:
        prev = torch.cat([lab.new_zeros(B, 1), lab[:, :-1]], 1)             # the label just before each start
        inner = begins.clone()
        inner[:, 0] = False
        s = s + torch.where(inner, trans[lab, prev], zero).sum(1)
    end = lab.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    return s + torch.where(lengths > 0, first[lab[:, 0]] + last[end], zero)


def _observed_tokens(kind: str, observed, shape) -> None:
    if observed is not None and (kind != "tokens" or tuple(observed.shape) != tuple(shape)):
        raise SSVMInputError(f"observed: a ({shape[0]}, {shape[1]}) bool mask for the 'tokens' loss (partial "
                             f"annotation counts the observed positions only), got kind {kind!r}, shape "
                             f"{tuple(observed.shape)}")


def loss(pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor, kind: str, c: torch.Tensor,
         observed: torch.Tensor | None = None) -> torch.Tensor:
    """Delta(pred, gold) (B,) in c's dtype, ``kind`` one of LOSSES (module docstring); ``observed`` (B, T) bool:
    the "tokens" loss counts only these positions (partial annotation: gold is a completion there)."""
    _observed_tokens(kind, observed, pred.shape)
    pb, pl, plen = starts_and_labels(pred, lengths)
    gb, gl, glen = starts_and_labels(gold, lengths)
    if kind == "tokens":
        wrong = ((pl != gl) | (pb != gb)) & valid_positions(lengths, pred.shape[1])
        if observed is not None:
            wrong &= observed
        return c * wrong.sum(1).to(c.dtype)
    both = pb & gb & (plen == glen) & (pl == gl)
    return c * (pb.sum(1) + gb.sum(1) - 2 * both.sum(1)).to(c.dtype)


def windows(x: torch.Tensor, L: int) -> torch.Tensor:
    """(B, M, L, ...) view-backed windows of ``x`` (B, M, ...): [b, t, l] = x[b, min(t + l, M - 1)], by ``unfold``
    (a strided view: no (B, M, L) index tensor to gather by, which costs several times more on the CPU)."""
    B, M = x.shape[0], x.shape[1]
    if M == 0:
        return x.new_zeros(B, 0, L, *x.shape[2:])
    padded = torch.cat([x, x[:, -1:].expand(B, L - 1, *x.shape[2:])], 1)
    return padded.unfold(1, L, 1).movedim(-1, 2)


def span_counts(at_start: torch.Tensor, inside: torch.Tensor, L: int) -> torch.Tensor:
    """(B, T, L, K) int32: for the segment (t, l+1, k), ``at_start[b, t, k]`` + the number of positions j in
    t+1..t+l with ``inside[b, j, k]`` (two (B, T, K) bool tensors; positions past T count 0), by one cumulative
    sum: the per-segment count of a per-position loss or violation."""
    B, T, K = inside.shape
    # int32 counts (a row has < 2^31 positions): half the memory traffic of int64
    prefix = torch.cat([inside.new_zeros(B, 1, K, dtype=torch.int32), inside.cumsum(1, dtype=torch.int32)], 1)
    inner = windows(prefix[:, 1:], L) - prefix[:, 1:, None, :]             # prefix[min(t+l+1, T)] - prefix[t+1]
    return at_start[:, :, None, :].to(torch.int32) + inner


def augmented(S: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor, kind: str, c: torch.Tensor,
              observed: torch.Tensor | None = None):
    """(S + c Delta_seg, constant (B,)): segment scores whose segmentation scores are s(y) + Delta(y, gold) - const,
    so that max_y / log sum_y of s(y) + Delta(y, gold) = the plain recursion on them + const. Differentiable
    w.r.t. S (the added costs are constants). ``observed``: as for :func:`loss`."""
    B, T, L, K = S.shape
    _observed_tokens(kind, observed, (B, T))
    gb, gl, glen = starts_and_labels(gold, lengths)
    ks = torch.arange(K, device=S.device)
    if kind == "tokens":
        begin_wrong = (gl[..., None] != ks) | ~gb[..., None]                     # (B, T, K): a segment starts here
        inner_wrong = (gl[..., None] != ks) | gb[..., None]                      # a segment goes on here
        if observed is not None:
            begin_wrong &= observed[..., None]
            inner_wrong &= observed[..., None]
        delta = span_counts(begin_wrong, inner_wrong, L)
        return S + c.to(S.dtype)[:, None, None, None] * delta.to(S.dtype), torch.zeros_like(c).to(S.dtype)
    onehot = torch.zeros(B, T, L, K, dtype=S.dtype, device=S.device)          # the gold segments (checked <= L)
    width = (glen - 1).clamp(min=0)
    onehot.scatter_(2, width[:, :, None, None].expand(B, T, 1, K),
                    torch.nn.functional.one_hot(gl.clamp(min=0), K).to(S.dtype)[:, :, None, :])
    onehot = onehot * gb[:, :, None, None].to(S.dtype)
    cc = c.to(S.dtype)[:, None, None, None]
    return S + cc * (1 - 2 * onehot), c.to(S.dtype) * gb.sum(1).to(S.dtype)
