"""The span package's operations on a padded batch, each with one dispatch rule over its backends: the best
tree (loss-augmented when a gold chart and a cost are given), log Z (differentiable), the span marginals, the
score of given trees and the three losses (structured hinge, softmax-margin, CRF).

Arguments, after validation by the callers (:mod:`ssvm_torch.spans.losses`, :class:`~ssvm_torch.nn.ConstituencyTree`):
``S`` (B, N+1, N+1) or (B, N+1, N+1, L) float, ``lengths`` (B,) int64 words per row, ``gold`` a bool chart
(unlabeled) or an int64 chart of labels with -1 off the tree (labeled), ``cost`` (B,) the loss of one wrong span.

Labels: a tree's labeled spans score S[i, j, label], and nothing else ties the labels together, so the labeled
model is the unlabeled one on the reduced scores logsumexp_l S[i, j, l] (log Z, marginals) or max_l (the best
tree, each span then taking its best label): one CKY for any number of labels.

The rule, ``kernels="auto"``: the compiled kernels (:mod:`~ssvm_torch.spans.numba_cky`) for CPU float32 / float64
scores outside tracing, spread over numba's threads when torch has more than one and the batch has at least
:data:`~ssvm_torch.trees.checks.PARALLEL_MIN` rows (the tree package's rule); the torch recursions
(:mod:`~ssvm_torch.spans.torch_cky`) elsewhere (CUDA, tracing).
"""
from __future__ import annotations

import numpy as np
import torch

from ..grad_mode import records_autograd
from ..devices import from_host
from ..errors import SSVMInputError
from ..trees.checks import host_batch, parallel_rows, tracing, use_numba
from ..trees.draws import draw_categorical, in_chunks
from . import torch_cky
from .checks import UNLABELED, span_mask
from .numba_cky import best_batch, best_batch_parallel, log_partition_batch, log_partition_batch_parallel
from .numba_sampling import sample_batch


def use_compiled(S: torch.Tensor, kernels: str) -> bool:
    """Whether the compiled CKY kernels serve these (unlabeled) span scores."""
    return use_numba(S, kernels, "span scores")


def _compiled_inside_outside(S: torch.Tensor, lengths: torch.Tensor, want_marginals: bool):
    """(log Z (B,) float64, the span marginals (B, N+1, N+1) float64 or None) by the compiled pass."""
    Sh, Lh = host_batch(S, lengths)
    B, M, _ = Sh.shape
    logz = np.empty(B)
    marg = np.zeros((B, M, M) if want_marginals else (1, 1, 1))
    (log_partition_batch_parallel if parallel_rows(B) else log_partition_batch)(Sh, Lh, want_marginals, logz, marg)
    return from_host(logz, S.device), (from_host(marg, S.device) if want_marginals else None)


def fail_no_tree(scores: torch.Tensor, lengths: torch.Tensor, what: str) -> None:
    if tracing():
        return
    bad = (~(scores > torch_cky.NEG / 2) | torch.isnan(scores)) & (lengths > 0)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"span_scores: row {b} ({int(lengths[b])} words) has no binary tree with a finite score "
                             f"(its -inf spans exclude every tree; {what} {float(scores[b]):.3g})")


def best(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto", refuse: bool = True):
    """(charts, scores (B,)): the best tree of every row, as a bool chart (B, N+1, N+1) for unlabeled scores or
    an int64 chart of labels (-1 off the tree) for labeled ones. No gradient. A row without a tree of finite
    score is refused by name (``refuse``), or left with a score below NEG / 2 for the caller to name."""
    S = S.detach()
    labeled = S.dim() == 4
    Su, label = S.max(-1) if labeled else (S, None)
    B, M, _ = Su.shape
    if use_compiled(Su, kernels):
        Sh, Lh = host_batch(Su, lengths)
        charts, scores = np.zeros((B, M, M), dtype=np.bool_), np.empty(B)
        (best_batch_parallel if parallel_rows(B) else best_batch)(Sh, Lh, charts, scores)
        charts, scores = from_host(charts, S.device), from_host(scores, S.device).to(S.dtype)
    else:
        charts, scores = torch_cky.best_tree(Su, lengths)
    if refuse:
        fail_no_tree(scores, lengths, "best-tree score")
    if labeled:
        charts = torch.where(charts, label, torch.full_like(label, -1))
    return charts, scores


def mbr_scores(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto") -> torch.Tensor:
    """The marginals of S under its CRF with S's -inf spans (labels) kept -inf: the scores whose best tree is the
    tree of the most expected correct spans (every tree holds 2n - 1 spans, so the sum of its marginals is its
    expected number of correct spans; Goodman 1996's labelled-recall parsing, SuPar's ``mbr``). No gradient."""
    return marginals(S, lengths, kernels).masked_fill(torch.isneginf(S.detach()), float("-inf"))


def mbr_best(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto"):
    """(charts, expected correct spans (B,)): the tree of the most expected correct (labeled) spans under the CRF
    of S, the best tree of :func:`mbr_scores`. Spans and labels with a -inf score stay forbidden. No gradient."""
    return best(mbr_scores(S, lengths, kernels), lengths, kernels)


def reduce_labels(S: torch.Tensor) -> torch.Tensor:
    """The unlabeled scores of the labeled model (module docstring): logsumexp over the labels, differentiable."""
    return S.clamp(min=torch_cky.NEG).logsumexp(-1) if S.dim() == 4 else S    # NEG: no -inf - -inf in backward


class _CompiledLogZ(torch.autograd.Function):
    """log Z by the compiled inside pass; the backward multiplies the span marginals that the forward wrote (no
    graph through the recursion)."""

    @staticmethod
    def forward(ctx, S, lengths):
        logz, marg = _compiled_inside_outside(S, lengths, S.requires_grad)
        ctx.save_for_backward(marg if marg is not None else S.new_zeros(0))
        ctx.dtype = S.dtype
        return logz.to(S.dtype)

    @staticmethod
    def backward(ctx, grad):
        (marg,) = ctx.saved_tensors
        return (grad.to(torch.float64)[:, None, None] * marg).to(ctx.dtype), None


def log_partition(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) over the (labeled) trees of every row (0 for an empty row), differentiable: its gradient is
    the span (and label) marginals. A row without a tree of finite score is refused by name."""
    Su = reduce_labels(S)
    if use_compiled(Su, kernels):
        logz = _CompiledLogZ.apply(Su, lengths)
    else:
        logz = torch_cky.log_partition(Su, lengths)
    fail_no_tree(logz.detach(), lengths, "log Z")
    return logz


@records_autograd
def marginals(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto") -> torch.Tensor:
    """P(span (i, j) [with label l] in the tree), the shape of S, zero off the rows' spans. No gradient."""
    with torch.enable_grad():
        leaf = S.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(log_partition(leaf, lengths, kernels).sum(), leaf)
    return grad


@records_autograd
def marginals_and_log_partition(S: torch.Tensor, lengths: torch.Tensor, kernels: str = "auto"):
    """(the span marginals (B, N+1, N+1), log Z (B,) float64) of unlabeled scores from one pass, no gradient; a
    row without a tree of finite score is refused by name."""
    S = S.detach()
    if use_compiled(S, kernels):
        logz, marg = _compiled_inside_outside(S, lengths, True)
    else:
        with torch.enable_grad():
            leaf = S.clone().requires_grad_(True)
            logz = torch_cky.log_partition(leaf, lengths)
            (marg,) = torch.autograd.grad(logz.sum(), leaf)
        logz = logz.detach()
    fail_no_tree(logz, lengths, "log Z")
    return marg, logz.to(torch.float64)


def _compiled_samples(Su: torch.Tensor, lengths: torch.Tensor, k: int, generator=None):
    """(charts (B, k, N+1, N+1) bool, log Z (B,) float64) by the compiled sampler of
    :mod:`ssvm_torch.spans.numba_sampling`, the uniforms from ``generator`` in float64."""
    B, M, _ = Su.shape
    U = torch.rand(B, k, max(M - 1, 1), dtype=torch.float64, generator=generator)
    Sh, Lh = host_batch(Su, lengths)
    charts, logz = np.zeros((B, k, M, M), dtype=np.uint8), np.empty(B)
    sample_batch(Sh, Lh, U.numpy(), charts, logz)
    return torch.from_numpy(charts).bool(), torch.from_numpy(logz)


def sample(S: torch.Tensor, lengths: torch.Tensor, n: int, generator=None, kernels: str = "auto") -> torch.Tensor:
    """n exact samples of every row's (labeled) TreeCRF: bool charts (B, n, N+1, N+1), or for labeled scores
    (B, N+1, N+1, L) int64 label charts with -1 off the tree (the tree from the labels' logsumexp, then each of its
    spans' label from the softmax of its scores: labels are free given the spans). The trees by the compiled
    sampler for CPU float32 / float64 scores (:func:`use_compiled`), else by the torch one of
    :func:`ssvm_torch.spans.torch_cky.sample_trees` in chunks of samples
    (:func:`ssvm_torch.trees.sampling.in_chunks`). A row without a tree of finite score is refused by name. No
    gradient."""
    S = S.detach()
    Su = reduce_labels(S)
    compiled = use_compiled(Su, kernels)
    logz = []

    def draw(k):
        charts, z = (_compiled_samples if compiled else torch_cky.sample_trees)(Su, lengths, k, generator)
        logz.append(z)
        if S.dim() == 3:
            return charts
        labels = draw_categorical(S, k, generator)                            # (B, k, N+1, N+1)
        return torch.where(charts, labels, torch.full_like(labels, -1))

    out = in_chunks(draw, n, S.numel())
    fail_no_tree(logz[0].to(torch.float64), lengths, "log Z")
    return out


def indicators(charts: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """The 0/1 tensor of a (labeled) chart in the shape of S: 1 at each of the tree's (span, label)."""
    if S.dim() == 3:
        return charts.to(S.dtype)
    present = charts >= 0
    onehot = torch.zeros_like(S).scatter_(3, charts.clamp(min=0)[..., None], 1.0)
    return onehot * present[..., None].to(S.dtype)


def parts(charts: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """The bool tensor of a (labeled) chart in the shape of S: True at each of the tree's (span, label)."""
    if S.dim() == 3:
        return charts.to(torch.bool)
    onehot = torch.zeros(S.shape, dtype=torch.bool, device=S.device).scatter_(3, charts.clamp(min=0)[..., None], True)
    return onehot & (charts >= 0)[..., None]


def score(S: torch.Tensor, charts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """s(tree) = the sum of the tree's (labeled) span scores: (B,), differentiable. -inf scores of spans off the
    tree do not enter (selected, not multiplied)."""
    inside = span_mask(lengths, S.shape[1])
    if S.dim() == 3:
        on = charts.to(torch.bool) & inside
        return torch.where(on, S, torch.zeros_like(S)).flatten(1).sum(1)
    # labeled: each span's score of its label by one gather (no (B, N+1, N+1, L) one-hot; the backward one scatter)
    taken = S.gather(3, charts.clamp(min=0)[..., None])[..., 0]
    return torch.where((charts >= 0) & inside, taken, torch.zeros_like(taken)).flatten(1).sum(1)


def wrong_spans(charts: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The spans of ``charts`` that are not in ``gold`` (labeled: a span with another label counts): (B,)
    int64. Both trees hold 2n - 1 spans, so it is also the number of gold spans missed."""
    inside = span_mask(lengths, charts.shape[1])
    if charts.dtype == torch.bool:
        return (charts & ~gold & inside).flatten(1).sum(1)
    return ((charts >= 0) & (charts != gold) & inside).flatten(1).sum(1)


def missed_spans(charts: torch.Tensor, observed: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The spans of ``observed`` (a labeled chart of observed brackets, ``UNLABELED`` at a bracket observed without
    its label, -1 elsewhere) that ``charts`` lacks or labels otherwise (an unlabeled one: lacks): (B,) int64. For a
    whole gold tree it equals :func:`wrong_spans` (both trees hold 2n - 1 spans)."""
    missed = ((observed >= 0) & (charts != observed)) | ((observed == UNLABELED) & (charts < 0))
    return (missed & span_mask(lengths, charts.shape[1])).flatten(1).sum(1)


def augment(S: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """S + cost_b on every (span, label) of the rows that the gold tree lacks: the scores whose best tree is the
    loss-augmented one (the span Hamming loss decomposes over spans). Differentiable in S. A chart of observed
    brackets (``SpanData.observed_charts``) may hold ``UNLABELED`` spans: none of their labels takes the cost."""
    inside = span_mask(lengths, S.shape[1])
    if S.dim() == 4:                       # an observed bracket without its label: no label of it is wrong
        inside = (inside & (gold != UNLABELED))[..., None]
    c = cost.to(S.dtype).view(-1, *([1] * (S.dim() - 1)))
    return torch.where(inside & ~parts(gold, S), S + c, S)          # selected: the gold parts keep S's bits


def hinge(S, gold, lengths, cost, kernels: str = "auto") -> torch.Tensor:
    """max_y [s(y) + Delta(y, gold)] - s(gold) per row (B,), Delta = cost_b x the wrong spans; differentiable,
    its gradient the (span, label) indicators of the loss-augmented tree minus those of the gold tree."""
    with torch.no_grad():
        y, _ = best(augment(S.detach(), gold, lengths, cost), lengths, kernels)
    delta = cost.to(S.dtype) * wrong_spans(y, gold, lengths).to(S.dtype)
    return score(S, y, lengths) + delta - score(S, gold, lengths)


def softmax_margin(S, gold, lengths, cost, kernels: str = "auto") -> torch.Tensor:
    """log sum_y exp(s(y) + Delta(y, gold)) - s(gold) per row (Gimpel & Smith 2010): the CRF loss of the
    loss-augmented scores (s(gold) is unchanged by the augmentation)."""
    return log_partition(augment(S, gold, lengths, cost), lengths, kernels) - score(S, gold, lengths)


def nll(S, gold, lengths, kernels: str = "auto") -> torch.Tensor:
    """log Z - s(gold) per row: the TreeCRF's negative log-likelihood (Finkel et al. 2008; Zhang et al. 2020)."""
    return log_partition(S, lengths, kernels) - score(S, gold, lengths)
