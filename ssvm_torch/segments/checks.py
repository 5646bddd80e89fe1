"""What every call of the segment package checks: the segment scores, the (first, last, trans) scores, masks /
lengths and segmentations (each error names the argument, the row and what was expected). Checks on values
run as vectorized torch ops on the tensors' device with one host read of a flag per check, so they work
unchanged on CUDA."""
from __future__ import annotations

import torch

from ..chain.checks import refuse_bad_scores, tracing
from ..errors import SSVMInputError, check
from ..trees.checks import KERNELS
from ..trees.checks import use_numba as tree_use_numba


def use_numba(S: torch.Tensor, kernels: str) -> bool:
    """``kernels`` checked, then the tree package's dispatch test (CPU float32 / float64 outside tracing)."""
    check(kernels in KERNELS, "kernels", f"one of {list(KERNELS)}", repr(kernels))
    return tree_use_numba(S, kernels, "segment scores")


def check_seg_scores(S, field: str = "seg_scores") -> torch.Tensor:
    """``S`` as a (B, T, L, K) float tensor (half precision computed in float32); NaN and +inf refused, -inf
    allowed (a segment that may not be taken)."""
    check(torch.is_tensor(S) and S.is_floating_point(), field, "a float tensor (B, T, L, K)",
          getattr(S, "dtype", type(S).__name__))
    check(S.dim() == 4 and min(S.shape[2], S.shape[3]) >= 1, field,
          "shape (B, T, L, K): [batch, start position, length - 1, label] with L >= 1 and K >= 1", tuple(S.shape))
    check(S.device.type != "meta", field, "a tensor with data (on the CPU or a GPU)", "a meta tensor")
    refuse_bad_scores(S.detach(), field)
    return S.float() if S.dtype in (torch.float16, torch.bfloat16) else S


def check_transitions(S: torch.Tensor, first, last, trans):
    """(first (K,), last (K,), trans (K, K) [next, prev]) in S's dtype on S's device; None means zeros."""
    K = S.shape[3]
    out = []
    for name, value, shape in (("first", first, (K,)), ("last", last, (K,)), ("trans", trans, (K, K))):
        if value is None:
            out.append(S.new_zeros(shape))
            continue
        check(torch.is_tensor(value) and value.is_floating_point() and tuple(value.shape) == shape, name,
              f"a float tensor of shape {shape}", (getattr(value, "dtype", type(value).__name__),
                                                   tuple(getattr(value, "shape", ()))))
        check(value.device == S.device, name, f"a tensor on the segment scores' device {S.device}", value.device)
        refuse_bad_scores(value.detach(), name)
        out.append(value.to(S.dtype))
    return tuple(out)


def resolve_lengths(S: torch.Tensor, mask=None, lengths=None) -> torch.Tensor:
    """The number of positions n_b of every row (int64 on the scores' device) from ``mask`` (B, T) bool, on at
    positions 0..n_b-1 only, or ``lengths`` (B,) in [0, T]; neither means every row has T positions."""
    B, T = S.shape[0], S.shape[1]
    if mask is not None and lengths is not None:
        raise SSVMInputError("mask, lengths: expected one of them (or neither), got both")
    if lengths is not None:
        check(torch.is_tensor(lengths) and not lengths.is_floating_point() and tuple(lengths.shape) == (B,), "lengths",
              f"an integer tensor of shape ({B},)", (getattr(lengths, "dtype", type(lengths).__name__),
                                                      tuple(getattr(lengths, "shape", ()))))
        lengths = lengths.to(S.device, torch.int64)
        if not tracing():
            bad = (lengths < 0) | (lengths > T)
            if bool(bad.any()):
                b = int(bad.nonzero()[0, 0])
                raise SSVMInputError(f"lengths: expected values in [0, {T}], got {int(lengths[b])} at row {b}")
        return lengths
    if mask is None:
        return torch.full((B,), T, dtype=torch.int64, device=S.device)
    check(torch.is_tensor(mask) and tuple(mask.shape) == (B, T) and mask.device == S.device, "mask",
          f"a bool tensor (B, T) = ({B}, {T}) on {S.device}",
          (getattr(mask, "shape", type(mask).__name__), getattr(mask, "device", None)))
    check(mask.dtype == torch.bool, "mask", "a bool tensor", mask.dtype)
    lengths = mask.sum(1)
    if not tracing():
        prefix = torch.arange(T, device=S.device)[None, :] < lengths[:, None]
        bad = (prefix != mask).any(1)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise SSVMInputError(f"mask: expected a row's positions at 0..n-1 with nothing after them, row {b} has "
                                 f"on-positions {mask[b].nonzero().flatten().tolist()[:12]}")
    return lengths


def valid_positions(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) bool: positions 0..n_b-1."""
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


def segment_lengths(segments: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, T) int64: at each segment's first position the number of positions it covers (up to the next start or
    the row's end), 0 elsewhere. ``segments`` as checked by :func:`check_segments`."""
    B, T = segments.shape
    pos = torch.arange(T, device=segments.device).expand(B, T)
    starts = (segments >= 0) & valid_positions(lengths, T)
    at = torch.where(starts, pos, lengths[:, None].expand(B, T))
    after = torch.cat([at[:, 1:], lengths[:, None]], 1)          # the first start strictly after t, by a
    nxt = after.flip(1).cummin(1).values.flip(1)                  # right-to-left running minimum
    return torch.where(starts, nxt - pos, torch.zeros_like(pos))


def check_segments(segments, lengths: torch.Tensor, K: int | None, L: int | None,
                   field: str = "segments", T: int | None = None) -> torch.Tensor:
    """A segmentation (B, T) int64: at a segment's first position its label in [0, K), -1 at the other positions
    of the segment; position 0 of a non-empty row starts a segment, no segment longer than L (None: no bound on
    the labels / lengths); T the segment scores' positions when given. Values beyond a row are not read
    (returned as -1)."""
    B = lengths.shape[0]
    check(torch.is_tensor(segments) and not segments.is_floating_point() and segments.dim() == 2
          and segments.shape[0] == B and (T is None or segments.shape[1] == T), field,
          f"an integer tensor (B, T) with B = {B}" + ("" if T is None else f" and T = {T} (seg_scores' positions)"),
          (getattr(segments, "dtype", type(segments).__name__), tuple(getattr(segments, "shape", ()))))
    T = segments.shape[1]
    segments = segments.to(lengths.device, torch.int64)
    valid = valid_positions(lengths, T)
    segments = torch.where(valid, segments, torch.full_like(segments, -1))
    if tracing():
        return segments
    bad = (segments < -1) | (segments >= K) if K is not None else segments < -1
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        labels = f"in [0, {K})" if K is not None else ">= 0"
        raise SSVMInputError(f"{field}: expected a label {labels} at a segment's first position and -1 inside a "
                             f"segment, got {int(segments[b, t])} at row {b}, position {t}")
    if T > 0:
        bad = (lengths > 0) & (segments[:, 0] < 0)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise SSVMInputError(f"{field}: expected position 0 of a non-empty row to start a segment (a label), "
                                 f"got -1 at row {b}")
    if L is None:
        return segments
    seglen = segment_lengths(segments, lengths)
    bad = seglen > L
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        raise SSVMInputError(f"{field}: expected segments of at most L = {L} positions (the segment scores' third "
                             f"dimension), got {int(seglen[b, t])} positions from position {t} of row {b}")
    return segments


def fail_no_segmentation(values: torch.Tensor, lengths: torch.Tensor, what: str) -> None:
    """Refuse, naming the row, a non-empty row whose best score or log Z (``what``) is -inf (not inside a traced
    or exported graph, which cannot branch on values)."""
    if tracing():
        return
    bad = torch.isneginf(values.detach()) & (lengths > 0)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"seg_scores: row {b} has no segmentation with a finite score ({what} is -inf): every "
                             f"segmentation of its {int(lengths[b])} positions uses a -inf segment or transition")
