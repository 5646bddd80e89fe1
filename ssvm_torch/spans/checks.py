"""The checks of the span package's arguments (each error names the argument, the row and what was expected):
span scores, lengths / masks and gold charts, as vectorized torch ops on the tensors' device (one host read
of a flag per check; O(B N^2) against the kernels' O(B N^3)); gold trees on the CPU by a compiled pass
(:mod:`ssvm_torch.spans.numba_checks`)."""
from __future__ import annotations

import numpy as np
import torch

from ..chain.checks import refuse_bad_scores, tracing
from ..devices import from_host, to_host_all
from ..errors import SSVMInputError, check
from ..trees.checks import use_numba
from .numba_checks import chart_fault_codes

KERNELS = ("auto", "numba", "torch")
#: an observed-bracket chart's entry at a bracket observed without its label (SpanData.labeled)
UNLABELED = -2


def check_span_scores(S, field: str = "span_scores") -> torch.Tensor:
    """``S`` as a float tensor (B, N+1, N+1) (unlabeled spans, SuPar's ConstituencyCRF layout: ``S[b, i, j]``
    the span of words i..j-1) or (B, N+1, N+1, L) (one score per span and label); half precision is computed
    in float32. NaN and +inf refused, -inf allowed (a span or label that may not be taken)."""
    check(torch.is_tensor(S) and S.is_floating_point(), field, "a float tensor (B, N+1, N+1) or (B, N+1, N+1, L)",
          getattr(S, "dtype", type(S).__name__))
    check(S.dim() in (3, 4) and S.shape[1] == S.shape[2] and S.shape[1] >= 1 and (S.dim() == 3 or S.shape[3] >= 1),
          field, "shape (B, N+1, N+1) or (B, N+1, N+1, L): [batch, span start, span end (fenceposts 0..N)(, label)]",
          tuple(S.shape))
    check(S.device.type != "meta", field, "a tensor with data (on the CPU or a GPU)", "a meta tensor")
    refuse_bad_scores(S.detach(), field)
    return S.float() if S.dtype in (torch.float16, torch.bfloat16) else S


def resolve_lengths(S: torch.Tensor, mask=None, lengths=None) -> torch.Tensor:
    """The words n_b of every row (int64 on the scores' device) from ``lengths`` (B,) in [0, N] or ``mask``
    (B, N) bool, on for words 0..n_b-1 only; neither: every row has N words."""
    N = S.shape[1] - 1
    return row_lengths(S.shape[0], N, S.device, mask, lengths, 0,
                       f"words; span_scores has N + 1 = {N + 1} fenceposts")


def row_lengths(B: int, N: int, device, mask=None, lengths=None, minimum: int = 0, why: str = "words"):
    """:func:`resolve_lengths` for B rows of N word positions on ``device``: ``lengths`` (B,) in [minimum, N] or a
    prefix ``mask`` (B, N), every field named; ``why`` says in the refusal what the range means."""
    if mask is not None and lengths is not None:
        raise SSVMInputError("mask, lengths: expected one of them (or neither), got both")
    if lengths is None and mask is None:
        lengths = torch.full((B,), N, dtype=torch.int64, device=device)
    elif lengths is None:
        check(torch.is_tensor(mask) and tuple(mask.shape) == (B, N) and not mask.is_floating_point(), "mask",
              f"a bool tensor (B, N) = ({B}, {N}) (one entry per word)",
              (getattr(mask, "dtype", type(mask).__name__), tuple(getattr(mask, "shape", ()))))
        mask = mask.to(device)
        if not tracing() and not bool(((mask == 0) | (mask == 1)).all()):
            raise SSVMInputError("mask: expected values 0 or 1 (a bool tensor, or integers 0/1)")
        mask = mask.bool()
        lengths = mask.sum(1)
        if not tracing():
            prefix = torch.arange(N, device=device)[None, :] < lengths[:, None]
            bad = (prefix != mask).any(1)
            if bool(bad.any()):
                b = int(bad.nonzero()[0, 0])
                raise SSVMInputError(f"mask: expected the words of a row at positions 0..n-1 with nothing after "
                                     f"them, row {b} has on-positions {mask[b].nonzero().flatten().tolist()[:12]}")
    check(torch.is_tensor(lengths) and not lengths.is_floating_point() and lengths.dtype != torch.bool
          and tuple(lengths.shape) == (B,), "lengths", f"an integer tensor of shape ({B},)",
          (getattr(lengths, "dtype", type(lengths).__name__), tuple(getattr(lengths, "shape", ()))))
    lengths = lengths.to(device, torch.int64)
    if not tracing():
        bad = (lengths < minimum) | (lengths > N)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise SSVMInputError(f"lengths: expected values in [{minimum}, {N}] ({why}), got {int(lengths[b])} at "
                                 f"row {b}")
    return lengths


def span_mask(lengths: torch.Tensor, M: int) -> torch.Tensor:
    """(B, M, M) bool: the spans (i, j) of every row, 0 <= i < j <= n_b."""
    pos = torch.arange(M, device=lengths.device)
    return (pos[:, None] < pos[None, :])[None] & (pos[None, None, :] <= lengths[:, None, None])


def crossing_counts(C: torch.Tensor) -> torch.Tensor:
    """(B, M, M) int64: for every span (i, j), the spans (k, l) of the 0/1 chart ``C`` (B, M, M, int64) that cross
    it (i < k < j < l or k < i < l < j), by prefix sums (O(B M^2))."""
    def right_crossings(X):                              # spans (k, l) with i < k < j < l
        after = X.flip(-1).cumsum(-1).flip(-1) - X       # after[k, j] = #spans (k, l) with l > j
        cum = after.cumsum(1)                            # cum[k, j] = sum_{k' <= k} after[k', j]
        last = torch.cat([cum.new_zeros(X.shape[0], 1), torch.diagonal(cum, 1, 1, 2)], 1)   # cum[j - 1, j]
        return last[:, None, :] - cum
    mirrored = C.flip(1, 2).transpose(1, 2)              # the span (i, j) -> (M-1-j, M-1-i)
    return right_crossings(C) + right_crossings(mirrored).flip(1, 2).transpose(1, 2)


def chart_faults(chart: torch.Tensor, lengths: torch.Tensor, compiled: bool | None = None) -> torch.Tensor:
    """(B,) int codes of the first fault of every row of a bool chart (B, N+1, N+1): 0 none, 1 a span off the
    row (i >= j or j > n), 2 a one-word span or the whole sentence missing, 3 crossing spans, 4 not 2n - 1
    spans (a span with more than two children: not binary). ``compiled`` (None: on CPU tensors) runs the compiled
    check (:mod:`ssvm_torch.spans.numba_checks`), else torch operations on the chart's device."""
    if compiled if compiled is not None else chart.device.type == "cpu":
        host, n = to_host_all(chart.to(torch.bool), lengths.to(torch.int64))
        out = np.empty(chart.shape[0], dtype=np.int64)
        chart_fault_codes(host, n, out)
        return from_host(out, chart.device)
    B, M, _ = chart.shape
    inside = span_mask(lengths, M)
    code = torch.where((chart & ~inside).flatten(1).any(1), 1, 0)
    rows = torch.arange(B, device=chart.device)
    leaves = torch.diagonal(chart, 1, 1, 2)                                  # (B, N): span (t, t + 1)
    word = torch.arange(M - 1, device=chart.device)[None, :] < lengths[:, None]
    root = chart[rows, 0, lengths]
    missing = ((word & ~leaves).any(1) | ~root) & (lengths > 0)
    code = torch.where((code == 0) & missing, 2, code)
    C = (chart & inside).to(torch.int64)
    crossing = (C > 0) & (crossing_counts(C) > 0)
    code = torch.where((code == 0) & crossing.flatten(1).any(1), 3, code)
    count = C.flatten(1).sum(1)
    code = torch.where((code == 0) & (count != (2 * lengths - 1).clamp(min=0)), 4, code)
    return code


FAULTS = {1: "a span outside 0 <= i < j <= n", 2: "a one-word span or the whole sentence missing (every binary "
          "tree holds both)", 3: "crossing spans", 4: "not 2n - 1 spans (a span with more than two children: "
          "binarize the trees first)"}


def check_charts(charts, S: torch.Tensor, lengths: torch.Tensor, field: str = "charts",
                 partial: bool = False, kernels: str = "auto") -> torch.Tensor:
    """Gold trees as charts, checked against the scores: bool (B, N+1, N+1) for unlabeled scores, int (B, N+1,
    N+1) labels in [0, L) on the spans and -1 elsewhere for labeled ones (B, N+1, N+1, L); each row a binary
    tree over its words (:func:`chart_faults`), or with ``partial`` a set of observed brackets inside the row,
    none crossing another (:mod:`ssvm_torch.spans.partial`). Returns the charts on the scores' device (bool or
    int64). Trees are checked by the compiled kernel where ``kernels`` on these scores means the compiled CKY
    kernels (:func:`ssvm_torch.trees.checks.use_numba`), else by torch operations (the path other devices and
    ``kernels="torch"`` run, which makes no host copy)."""
    B, M = S.shape[0], S.shape[1]
    labeled = S.dim() == 4
    want = "an int tensor of labels (-1: no span)" if labeled else "a bool tensor"
    check(torch.is_tensor(charts) and tuple(charts.shape) == (B, M, M), field, f"{want} of shape ({B}, {M}, {M})",
          (getattr(charts, "dtype", type(charts).__name__), tuple(getattr(charts, "shape", ()))))
    check(isinstance(partial, bool), "partial", "True or False", repr(partial))
    if labeled:
        check(not charts.is_floating_point() and charts.dtype != torch.bool, field, want, charts.dtype)
        charts = charts.to(S.device, torch.int64)
        if not tracing():
            bad = (charts < -1) | (charts >= S.shape[3])
            if bool(bad.any()):
                b, i, j = (int(v) for v in bad.nonzero()[0])
                raise SSVMInputError(f"{field}: row {b}, span ({i}, {j}): label {int(charts[b, i, j])} is out of "
                                     f"[0, {S.shape[3]}) (-1: no span)")
        present = charts >= 0
    else:
        check(charts.dtype == torch.bool, field, want, charts.dtype)
        charts = present = charts.to(S.device)
    if tracing():
        return charts
    if partial:
        code = bracket_faults(present, lengths)
        kind = "a set of nested brackets (partial=True)"
    else:
        code = chart_faults(present, lengths, compiled=use_numba(S, kernels, "span scores"))
        kind = "a binary tree"
    refuse_chart_faults(code, present, lengths, field, kind)
    return charts


def bracket_faults(present: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) fault codes (:data:`FAULTS`) of sets of observed brackets (bool (B, M, M)): 1 a bracket outside its
    row, 3 two brackets that cross, 0 nested brackets inside the row."""
    M = present.shape[1]
    off = (present & ~span_mask(lengths, M)).flatten(1).any(1)
    C = (present & span_mask(lengths, M)).to(torch.int64)
    crossing = ((C > 0) & (crossing_counts(C) > 0)).flatten(1).any(1)
    return torch.where(off, 1, torch.where(crossing, 3, 0))


def refuse_chart_faults(code: torch.Tensor, present: torch.Tensor, lengths: torch.Tensor, field: str,
                        kind: str) -> None:
    """The first row whose fault ``code`` (:data:`FAULTS`) is set, refused by ``field``: not ``kind`` over its
    words, its fault and its first spans (``present`` the charts' spans)."""
    if bool((code != 0).any()):
        b = int((code != 0).nonzero()[0, 0])
        spans = present[b].nonzero().tolist()
        raise SSVMInputError(f"{field}: row {b} is not {kind} over its {int(lengths[b])} words "
                             f"({FAULTS[int(code[b])]}); its spans: {[tuple(s) for s in spans[:16]]}"
                             + (" ..." if len(spans) > 16 else ""))
