"""The span package's public calls on padded batches: each checks its arguments (every error names the
argument and the row) and runs the operation of :mod:`ssvm_torch.spans.ops` (one dispatch over the backends).
Losses are per row (B,) and differentiable w.r.t. the span scores:

* hinge (the n-slack SSVM's structured hinge, Taskar et al. 2004's max-margin parsing): max_y [s(y) +
  Delta(y, y_b)] - s(y_b) >= 0, its gradient the spans of the loss-augmented tree minus the gold spans;
* softmax-margin (Gimpel & Smith 2010): log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b);
* CRF (the TreeCRF of Finkel et al. 2008, Zhang et al. 2020): log Z - s(y_b), gradient the span marginals minus
  the gold spans.

Delta(y, y_b) = c_b x (the spans of y not in y_b; labeled: a span with another label counts), c_b = 1
(``cost="hamming"``), 1 / n_b (``"normalized"``), a number or a per-row tensor (B,). Trees are charts: bool
(B, N+1, N+1) with ``chart[b, i, j]`` on for the span of words i..j-1 (SuPar's ConstituencyCRF charts), or for
labeled scores (B, N+1, N+1, L) an int64 chart holding each span's label and -1 elsewhere.

Partial brackets (``partial=True``): a row's chart may hold only the observed brackets (nested, none crossing);
the losses then compare with C, the trees that contain them (:mod:`ssvm_torch.spans.partial`: log Z - log Z_C, the
latent hinge, the softmax-margin with log Z_C); a row whose chart is a whole tree gives the full loss bit for bit.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from ..trees.losses import row_cost
from . import ops
from .checks import KERNELS, check_charts, check_span_scores, resolve_lengths
from ..trees.lawler import check_nbest
from .kbest import span_kbest
from .partial import loss_rows


def _kernels(kernels: str) -> str:
    check(kernels in KERNELS, "kernels", f"one of {list(KERNELS)}", repr(kernels))
    return kernels


def _prepare(span_scores, mask, lengths):
    S = check_span_scores(span_scores)
    return S, resolve_lengths(S, mask, lengths)


def span_decode(span_scores, mask=None, lengths=None, kernels: str = "auto", return_scores: bool = False,
                mbr: bool = False, *, nbest: int = 1):
    """The best binary tree of every row as a chart (bool, or int labels with -1 off the tree for labeled
    scores; each span then takes its best label); with ``return_scores`` also its score (B,). With ``mbr`` the
    tree of the most expected correct spans under the CRF of the scores (its "score": that expectation).
    ``nbest=k > 1``: the k best trees of every row, charts (B, k, N+1, N+1) and scores (B, k) in non-increasing
    order, empty charts (score -inf) at the ranks past a row's number of trees (:mod:`ssvm_torch.spans.kbest`;
    with ``mbr`` ranked by expected correct spans). No gradient."""
    check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
    check_nbest(nbest)
    S, lengths = _prepare(span_scores, mask, lengths)
    with torch.no_grad():
        if nbest > 1:
            charts, scores = span_kbest(ops.mbr_scores(S, lengths, _kernels(kernels)) if mbr else S, lengths, nbest,
                                        _kernels(kernels))
        else:
            charts, scores = (ops.mbr_best if mbr else ops.best)(S, lengths, _kernels(kernels))
    return (charts, scores) if return_scores else charts


def span_log_partition(span_scores, mask=None, lengths=None, kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) = log sum over the (labeled) binary trees of exp s(y), differentiable (its gradient: the span
    marginals)."""
    S, lengths = _prepare(span_scores, mask, lengths)
    return ops.log_partition(S, lengths, _kernels(kernels))


def span_marginals(span_scores, mask=None, lengths=None, kernels: str = "auto") -> torch.Tensor:
    """P(span (i, j) [with label l] in the tree), the shape of the scores, zero off the rows' spans. No
    gradient."""
    S, lengths = _prepare(span_scores, mask, lengths)
    return ops.marginals(S, lengths, _kernels(kernels))


def span_score(span_scores, charts, mask=None, lengths=None) -> torch.Tensor:
    """s(tree) (B,) = the sum of the tree's (labeled) span scores, differentiable; each row of ``charts`` must
    be a binary tree over its words."""
    S, lengths = _prepare(span_scores, mask, lengths)
    return ops.score(S, check_charts(charts, S, lengths), lengths)


def _loss_inputs(span_scores, charts, mask, lengths, cost, kernels, partial):
    S, lengths = _prepare(span_scores, mask, lengths)
    kernels = _kernels(kernels)
    gold = check_charts(charts, S, lengths, partial=partial, kernels=kernels)
    refuse_infinite_gold(S, gold, lengths)
    return S, gold, lengths, row_cost("hamming" if cost is None else cost, lengths, S.dtype), kernels


def refuse_infinite_gold(S: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> None:
    """A gold tree (or observed bracket) on a -inf (span, label) score is refused by name: no tree with it has a
    finite score, so the loss would be infinite."""
    bad = torch.isinf(ops.score(S.detach(), gold, lengths))
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"charts: row {b}'s gold tree takes a span (or label) whose score is -inf: the loss "
                             "would be infinite")


def row_losses(loss: str, S, gold, lengths, c, k, partial: bool) -> torch.Tensor:
    """Per-row losses (B,) of checked inputs (``loss`` "hinge", "softmax_margin" or "crf"; ``c`` (B,) the cost of a
    wrong span; ``k`` the kernels): the full-annotation operation, or with ``partial`` the rows whose charts are not
    whole trees by :mod:`ssvm_torch.spans.partial` (the whole ones still bit for bit by the full operation)."""
    def full(idx):
        take = (lambda x: x) if idx is None else (lambda x: x[idx])
        if loss == "crf":
            return ops.nll(take(S), take(gold), take(lengths), k)
        fn = ops.hinge if loss == "hinge" else ops.softmax_margin
        return fn(take(S), take(gold), take(lengths), take(c), k)
    if not partial:
        return full(None)
    return loss_rows(loss, S, gold, lengths, c, k, full)


def span_hinge(span_scores, charts, mask=None, lengths=None, cost="hamming", kernels: str = "auto",
               partial: bool = False) -> torch.Tensor:
    """The structured hinge per row (module docstring); with ``partial`` a row's chart may hold only the observed
    brackets (the latent hinge against the trees that contain them, :mod:`ssvm_torch.spans.partial`)."""
    return row_losses("hinge", *_loss_inputs(span_scores, charts, mask, lengths, cost, kernels, partial), partial)


def span_softmax_margin(span_scores, charts, mask=None, lengths=None, cost="hamming", kernels: str = "auto",
                        partial: bool = False) -> torch.Tensor:
    """The softmax-margin loss per row (module docstring; ``partial`` as in :func:`span_hinge`)."""
    return row_losses("softmax_margin", *_loss_inputs(span_scores, charts, mask, lengths, cost, kernels, partial),
                 partial)


def span_crf_nll(span_scores, charts, mask=None, lengths=None, kernels: str = "auto",
                 partial: bool = False) -> torch.Tensor:
    """The TreeCRF's negative log-likelihood log Z - s(gold) per row (module docstring); with ``partial`` the
    negative marginal likelihood log Z - log Z_C of the observed brackets."""
    return row_losses("crf", *_loss_inputs(span_scores, charts, mask, lengths, None, kernels, partial), partial)


def bracket_counts(charts, gold, lengths, unary: bool = False) -> torch.Tensor:
    """(matched, predicted, gold) (3,) int64 bracket counts over the rows (labeled charts: span and label must
    match), the numerators and denominators of bracketing precision / recall / F1 (evalb's, which counts neither
    the one-word spans, the preterminals, unless ``unary``). Charts are compared as given (not checked)."""
    check(torch.is_tensor(charts) and torch.is_tensor(gold) and charts.shape == gold.shape and charts.dim() == 3,
          "charts, gold", "two charts of one shape (B, N+1, N+1)",
          (tuple(getattr(charts, "shape", ())), tuple(getattr(gold, "shape", ()))))
    M = charts.shape[1]
    keep = ops.span_mask(torch.as_tensor(lengths, device=charts.device).to(torch.int64), M)
    if not unary:
        pos = torch.arange(M, device=charts.device)
        keep = keep & ((pos[None, :] - pos[:, None]) > 1)[None]
    if charts.dtype == torch.bool:
        p, g = charts & keep, gold & keep
        matched = p & g
    else:
        p, g = (charts >= 0) & keep, (gold >= 0) & keep
        matched = p & g & (charts == gold)
    return torch.stack([matched.sum(), p.sum(), g.sum()])
