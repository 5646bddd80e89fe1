"""Training from partial brackets (Pereira & Schabes 1992's partially bracketed corpora): a chart row that is not
a whole binary tree gives the observed brackets O (bool; or labeled, each with its label), the rest unobserved;
C = the binary trees that contain every observed bracket (with its label). A binary tree contains a span exactly
when none of its spans crosses it (the smallest tree span around it is it), so C's scores are the scores with
-inf at every span that crosses an observed one (and, labeled, at the other labels of an observed span): C is
never empty. The losses of a row, each 0 for a row with nothing observed:

* ``"crf"``: log Z - log Z_C, the negative marginal likelihood of the observed brackets;
* ``"hinge"``: max_y [s(y) + Delta_O(y)] - max_{y in C} s(y), the latent structured hinge (Yu & Joachims 2009),
  Delta_O = c_b x (the observed brackets that y lacks, or labels differently);
* ``"softmax_margin"``: log sum_y exp(s(y) + Delta_O(y)) - log Z_C.

Delta_O(y) = c_b |O| - c_b (the observed (span, label) pairs in y): the augmented scores are S - c_b at O's
entries, plus the constant c_b |O|. For a whole tree Delta_O is the full loss (both trees hold 2n - 1 spans), and
the callers send such rows to the full-annotation operations (bit for bit).
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from ..trees.checks import tracing
from ..trees.partial import join_rows
from . import ops, torch_cky
from .checks import UNLABELED, crossing_counts, span_mask


def observed(charts: torch.Tensor) -> torch.Tensor:
    """(B, M, M) bool: the observed brackets of a (labeled) chart."""
    return charts if charts.dtype == torch.bool else charts >= 0


def is_whole(charts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the rows whose observed brackets are a whole binary tree (2n - 1 of them; the callers have
    checked that they are nested)."""
    count = (observed(charts) & span_mask(lengths, charts.shape[1])).flatten(1).sum(1)
    return count == (2 * lengths - 1).clamp(min=0)


def allowed(S: torch.Tensor, charts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The shape of S, bool: the (span, label) entries that a tree of C may take (module docstring); a labeled
    chart's ``UNLABELED`` entries are brackets observed without their labels (every label of them allowed)."""
    O = (observed(charts) | (charts == UNLABELED)) & span_mask(lengths, S.shape[1])
    ok = crossing_counts(O.to(torch.int64)) == 0
    if S.dim() == 3:
        return ok
    L = S.shape[3]
    other = torch.arange(L, device=S.device)[None, None, None, :] != charts.clamp(min=0)[..., None]
    labeled = observed(charts) & span_mask(lengths, S.shape[1])
    return ok[..., None] & ~(labeled[..., None] & other)


def partial_loss(loss: str, S: torch.Tensor, charts: torch.Tensor, lengths: torch.Tensor, cost: torch.Tensor,
                 kernels: str = "auto", rows=None) -> torch.Tensor:
    """The per-row loss (B,) of rows with partial brackets (module docstring), differentiable in S; ``rows`` the
    rows' indices in the caller's batch (for the refusal of a row whose C has no tree of finite score)."""
    S_C = S.masked_fill(~allowed(S, charts, lengths), float("-inf"))
    with torch.no_grad():
        y_c, best_c = ops.best(S_C.detach(), lengths, kernels, refuse=False)
    bad = ~(best_c > torch_cky.NEG / 2) & (lengths > 0)
    if not tracing() and bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"charts: row {int(rows[b]) if rows is not None else b}: every tree that contains the "
                             "observed brackets takes a span (or label) whose score is -inf (C has no tree of "
                             "finite score)")
    if loss == "crf":
        return ops.log_partition(S, lengths, kernels) - ops.log_partition(S_C, lengths, kernels)
    on = ops.indicators(charts, S)          # O's entries (checked charts hold nothing off their rows)
    c = cost.to(S.dtype)
    first = S - c.view(-1, *([1] * (S.dim() - 1))) * on
    constant = c * on.flatten(1).sum(1)
    if loss == "softmax_margin":
        return ops.log_partition(first, lengths, kernels) + constant - ops.log_partition(S_C, lengths, kernels)
    with torch.no_grad():
        y_star, _ = ops.best(first.detach(), lengths, kernels)
    return ops.score(first, y_star, lengths) + constant - ops.score(S, y_c, lengths)


def loss_rows(loss: str, S, charts, lengths, cost, kernels: str, full_fn) -> torch.Tensor:
    """Per-row losses: the whole-tree rows by ``full_fn(idx)`` (the full-annotation operation, bit for bit), the
    others by :func:`partial_loss`."""
    whole = is_whole(charts, lengths)
    if tracing() or bool(whole.all()):
        return full_fn(None)
    return join_rows(whole, full_fn,
                     lambda idx: partial_loss(loss, S[idx], charts[idx], lengths[idx], cost[idx], kernels, idx), S)
