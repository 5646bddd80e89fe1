"""The second-order operations on a padded batch (:mod:`ssvm_torch.trees.sibling`), with the first order's
one dispatch rule (:mod:`ssvm_torch.trees.ops`): the compiled kernels (:mod:`~ssvm_torch.trees.numba_sibling`)
for CPU float32 / float64 scores outside tracing, spread over numba's threads from
:data:`~ssvm_torch.trees.checks.PARALLEL_MIN` rows when torch has several; the Triton kernels
(:mod:`~ssvm_torch.trees.triton_sibling`) for CUDA scores outside tracing; the torch recursions
(:mod:`~ssvm_torch.trees.torch_sibling`) elsewhere. Projective trees only.

Arguments, after validation by the callers: ``S`` (B, N, N) and ``SB`` (B, N, N, N) in one float dtype,
``lengths`` (B,) int64, ``gold`` (B, N) int64 heads (-1 off the words), ``cost`` (B,) the loss of one wrong
head per row. The losses, per row: the structured hinge max_y [s(y) + Delta(y)] - s(gold), softmax-margin
log sum_y exp(s(y) + Delta(y)) - s(gold) and the CRF's log Z - s(gold), Delta = cost x the wrong heads: it
decomposes over arcs, so the loss-augmented problems are the plain ones on ``ops.augment``-ed arc scores.
"""
from __future__ import annotations

import numpy as np
import torch

from ..grad_mode import records_autograd
from ..devices import from_host
from . import torch_sibling, triton_sibling
from .checks import host_batch, parallel_rows, tracing, use_numba
from .numba_sibling import sibling_inside_outside_batch, sibling_inside_outside_batch_parallel
from .numba_sibling_best import sibling_best_batch, sibling_best_batch_parallel
from .ops import fail_no_tree, augment, wrong_heads
from .sibling import sibling_score


def _recursions(S: torch.Tensor):
    """The Triton kernels for CUDA scores outside tracing (:func:`triton_sibling.available`), else torch."""
    return triton_sibling if triton_sibling.available(S) and not tracing() else torch_sibling


def best(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool, kernels: str = "auto",
         refuse: bool = True):
    """(heads (B, N) int64, -1 at 0 and beyond the length; scores (B,) in S's dtype): the best second-order
    projective tree of every row. No gradient. ``refuse``: as :func:`ssvm_torch.trees.ops.best`."""
    S, SB = S.detach(), SB.detach()
    B, N, _ = S.shape
    if use_numba(S, kernels):
        Sh, Lh = host_batch(S, lengths)
        SBh = SB.contiguous().numpy()
        heads, scores = np.empty((B, N), dtype=np.int64), np.empty(B)
        (sibling_best_batch_parallel if parallel_rows(B) else sibling_best_batch)(Sh, SBh, Lh, multiroot, heads, scores)
        heads, scores = from_host(heads, S.device), from_host(scores, S.device).to(S.dtype)
    else:
        heads, scores = _recursions(S).best_tree(S, SB, lengths, multiroot)
    if refuse:
        fail_no_tree(scores, lengths)
    return heads, scores


def _compiled(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool, want: bool):
    """log Z (B,) float64 and, if ``want``, the arc marginals (B, N, N) float64 and the sibling marginals
    (B, N, N, N) in SB's dtype by the compiled inside-outside (real space, log space on the rows where that
    underflows: :mod:`~ssvm_torch.trees.numba_sibling`)."""
    Sh, Lh = host_batch(S, lengths)
    SBh = SB.detach().contiguous().numpy()
    B, N, _ = Sh.shape
    logz = np.empty(B)
    M = np.zeros((B, N, N) if want else (B, 1, 1))
    MS = np.zeros((B, N, N, N) if want else (B, 1, 1, 1), dtype=SBh.dtype)
    kernel = sibling_inside_outside_batch_parallel if parallel_rows(B) else sibling_inside_outside_batch
    kernel(Sh, SBh, Lh, multiroot, want, logz, M, MS)
    return torch.from_numpy(logz), torch.from_numpy(M), torch.from_numpy(MS)


class _CompiledSiblingLogZ(torch.autograd.Function):
    """log Z of second-order projective trees by the compiled inside-outside; the backward multiplies the
    arc and sibling marginals that the forward pass wrote (no graph through the recursion)."""

    @staticmethod
    def forward(ctx, S, SB, lengths, multiroot):
        want = S.requires_grad or SB.requires_grad
        logz, M, MS = _compiled(S, SB, lengths, multiroot, want)
        ctx.save_for_backward(M, MS)
        ctx.dtypes = (S.dtype, SB.dtype)
        return logz.to(S.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        M, MS = ctx.saved_tensors
        g = grad.to(torch.float64)
        gS = (g[:, None, None] * M).to(ctx.dtypes[0]) if ctx.needs_input_grad[0] else None
        gSB = (grad.to(MS.dtype)[:, None, None, None] * MS).to(ctx.dtypes[1]) if ctx.needs_input_grad[1] else None
        return gS, gSB, None, None


def log_partition(S, SB, lengths, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) of the second-order projective trees of every row (0 for an empty row), differentiable in
    S and SB (the gradients: the arc and the sibling marginals). A row without a tree of finite score is
    refused by name."""
    if use_numba(S, kernels):
        logz = _CompiledSiblingLogZ.apply(S, SB, lengths, multiroot)
    else:
        logz = _recursions(S).log_partition(S, SB, lengths, multiroot)
    fail_no_tree(logz.detach(), lengths, "log Z")
    return logz


def marginals(S, SB, lengths, multiroot: bool, kernels: str = "auto"):
    """(P(h -> m) (B, N, N) [modifier, head], P(s, m adjacent dependents of h) (B, N, N, N) [modifier, head,
    sibling]) under the CRF of the scores, zero off the words. No gradient."""
    M, MS, _ = marginals_and_log_partition(S, SB, lengths, multiroot, kernels)
    return M.to(S.dtype), MS.to(SB.dtype)


@records_autograd
def marginals_and_log_partition(S, SB, lengths, multiroot: bool, kernels: str = "auto"):
    """(arc marginals (B, N, N), sibling marginals (B, N, N, N), log Z (B,) float64) from one inside-outside pass;
    no gradient. A row without a tree of finite score is refused by name."""
    S, SB = S.detach(), SB.detach()
    if use_numba(S, kernels):
        logz, M, MS = _compiled(S, SB, lengths, multiroot, True)
    else:
        with torch.enable_grad():
            s, sb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
            logz = _recursions(S).log_partition(s, sb, lengths, multiroot)
            # materialized: under three positions (N <= 2) no word has a sibling and SB is not in the graph
            M, MS = torch.autograd.grad(logz.sum(), (s, sb), allow_unused=True, materialize_grads=True)
        logz = logz.detach()
    fail_no_tree(logz, lengths, "log Z")
    return M, MS, logz.to(torch.float64)


def hinge(S, SB, gold, lengths, cost, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """max_y [s(y) + Delta(y, gold)] - s(gold) per row (B,), differentiable: its gradients the arc and sibling
    indicators of the loss-augmented tree minus those of the gold tree."""
    with torch.no_grad():
        y, _ = best(augment(S.detach(), gold, lengths, cost), SB, lengths, multiroot, kernels)
    delta = cost.to(S.dtype) * wrong_heads(y, gold, lengths).to(S.dtype)
    return sibling_score(S, SB, y, lengths) + delta - sibling_score(S, SB, gold, lengths)


def softmax_margin(S, SB, gold, lengths, cost, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """log sum_y exp(s(y) + Delta(y, gold)) - s(gold) per row: the CRF loss of the loss-augmented arc scores."""
    return (log_partition(augment(S, gold, lengths, cost), SB, lengths, multiroot, kernels)
            - sibling_score(S, SB, gold, lengths))


def nll(S, SB, gold, lengths, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """log Z - s(gold) per row: the second-order CRF's negative log-likelihood."""
    return log_partition(S, SB, lengths, multiroot, kernels) - sibling_score(S, SB, gold, lengths)
