"""PCFGs from partial brackets (Pereira & Schabes 1992's partially bracketed corpora): a row's ``observed`` chart
gives some brackets of its tree, each with its label (a one-word span's preterminal, a longer span's nonterminal) or
without one, and C = the trees of the grammar that contain every observed bracket (with its label where it is given).
A binary tree contains a span exactly when none of its spans crosses it (:mod:`ssvm_torch.spans.partial`), so C's
trees are those of the grammar with -inf at every constituent that crosses an observed bracket and at the other
labels of a labeled one: the inside algorithm over those scores gives log Z_C, its gradient the expected counts
under p(y | y in C) (Pereira & Schabes's E-step: the inside-outside algorithm restricted to the trees consistent
with the bracketing), its max semiring the best tree of C (the latent SSVM's completion).

Observed charts (B, N+1, N+1): int, a label or -1 (no bracket) or ``UNLABELED`` (-2: a bracket without its label),
or bool (unlabeled brackets); the brackets of a row lie inside it and none crosses another. A whole tree (2n - 1
labeled brackets) is a full annotation.

The losses against partial charts (:func:`partial_loss`), each 0 for a row with nothing observed:

* ``"crf"``: log Z - log Z_C, the negative conditional likelihood of the observed brackets;
* ``"hinge"``: max_y [s(y) + Delta_O(y)] - max_{y in C} s(y), the latent structured hinge (Yu & Joachims 2009);
* ``"softmax_margin"``: log sum_y exp(s(y) + Delta_O(y)) - log Z_C;

Delta_O(y) = c_b (|O| - the observed brackets y holds with their given labels): the augmented scores are the
scores - c_b at the observed (span, label) entries (every label of an unlabeled bracket), plus c_b |O|. A one-word
bracket without a label is in every tree (it adds c_b to |O| and takes it back). For a whole tree Delta_O is the full
loss of :mod:`ssvm_torch.spans.pcfg`, and its rows go to the full-annotation losses (bit for bit).
"""
from __future__ import annotations

import torch

from ..chain.checks import tracing
from ..errors import SSVMInputError, check
from ..trees.losses import row_cost
from ..trees.partial import join_rows
from .checks import UNLABELED, bracket_faults, refuse_chart_faults, span_mask
from .partial import allowed


def check_observed(observed, terms: torch.Tensor, roots: torch.Tensor, lengths: torch.Tensor,
                   field: str = "observed") -> torch.Tensor:
    """Observed brackets (module docstring) checked, every fault named: int64 charts (B, N+1, N+1) on the terms'
    device, -1 off the brackets, ``UNLABELED`` on a bracket without its label (a bool chart's brackets)."""
    B, N, T = terms.shape
    NT, M = roots.shape[-1], N + 1
    check(torch.is_tensor(observed) and tuple(observed.shape) == (B, M, M) and not observed.is_floating_point(),
          field, f"an int tensor ({B}, {M}, {M}) of labels (-1: no bracket, -2: a bracket without its label) or a "
          "bool tensor of unlabeled brackets", (getattr(observed, "dtype", type(observed).__name__),
                                                tuple(getattr(observed, "shape", ()))))
    if observed.dtype == torch.bool:
        charts = torch.where(observed.to(terms.device), UNLABELED, -1)
    else:
        charts = observed.to(terms.device, torch.int64)
    if tracing() or B == 0:
        return charts
    pos = torch.arange(M, device=terms.device)
    width = (pos[None, :] - pos[:, None])[None]
    bad = (charts < UNLABELED) | ((width == 1) & (charts >= T)) | ((width >= 2) & (charts >= NT))
    if bool(bad.any()):
        b, i, j = (int(v) for v in bad.nonzero()[0])
        kind = f"a preterminal in [0, {T})" if j - i == 1 else f"a nonterminal in [0, {NT})"
        raise SSVMInputError(f"{field}: row {b}, span ({i}, {j}): label {int(charts[b, i, j])}, expected {kind}, "
                             "-1 (no bracket) or -2 (a bracket without its label)")
    present = charts != -1
    refuse_chart_faults(bracket_faults(present, lengths), present, lengths, field, "a set of nested brackets")
    return charts


def is_whole(charts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the rows whose observed brackets are a whole labeled tree (2n - 1 labeled brackets, nested)."""
    labeled = ((charts >= 0) & span_mask(lengths, charts.shape[1])).flatten(1).sum(1)
    return labeled == (2 * lengths - 1).clamp(min=0)


def constrained(terms, span, charts, lengths, NT: int):
    """(terms, span scores (B, N+1, N+1, NT)) with -inf at the parts no tree of C takes (module docstring):
    differentiable where they are kept (``masked_fill``: a removed part's gradient is 0)."""
    B, N, T = terms.shape
    M = N + 1
    ok = allowed(terms.new_zeros(()).expand(B, M, M, max(NT, T)), charts, lengths)          # (B, M, M, max(NT, T))
    pos = torch.arange(N, device=terms.device)
    terms = terms.masked_fill(~ok[:, pos, pos + 1, :T], float("-inf"))
    span = terms.new_zeros(B, M, M, NT) if span is None else span
    return terms, span.masked_fill(~ok[..., :NT], float("-inf"))


def observed_indicators(charts, lengths, NT: int, T: int, dtype):
    """(terms (B, N, T), spans (B, N+1, N+1, NT)) 0 / 1: the (span, label) entries of the observed brackets, every
    label of a bracket without its label; and |O| (B,), the brackets of each row."""
    B, M, _ = charts.shape
    N = M - 1
    inside_rows = span_mask(lengths, M)
    on = (charts != -1) & inside_rows
    labels = torch.arange(max(NT, T), device=charts.device)
    hit = on[..., None] & ((charts[..., None] == labels) | (charts[..., None] == UNLABELED))
    pos = torch.arange(N, device=charts.device)
    return hit[:, pos, pos + 1, :T].to(dtype), hit[..., :NT].to(dtype), on.flatten(1).sum(1).to(dtype)


def augmented(terms, span, charts, lengths, NT: int, cost):
    """(terms, span scores, constant (B,)): the scores of max / log-sum over y of s(y) + Delta_O(y) (module
    docstring), Delta_O's constant c_b |O| apart."""
    T = terms.shape[2]
    c = row_cost(cost, lengths, terms.dtype)
    on_t, on_s, count = observed_indicators(charts, lengths, NT, T, terms.dtype)
    base = terms.new_zeros(on_s.shape) if span is None else span
    return terms - c[:, None, None] * on_t, base - c[:, None, None, None] * on_s, c * count


def partial_loss(loss: str, log_z, best, terms, rules, roots, span, charts, lengths, cost, rows=None,
                 field: str = "charts"):
    """The per-row loss (B,) of rows with partial brackets (module docstring), differentiable in every score.
    ``log_z(terms, rules, roots, span, lengths)`` -> log Z (B,) and ``best(...)`` -> s(y*) (B,) of the best tree
    (differentiable as its parts' scores), the grammar's inside pass in the log and max semirings over checked
    inputs; ``rows`` the rows' indices in the caller's batch and ``field`` the charts' name (for the refusal of a
    row whose C has no tree of finite score)."""
    NT = roots.shape[1]
    terms_c, span_c = constrained(terms, span, charts, lengths, NT)
    if loss == "crf":
        first = log_z(terms, rules, roots, span, lengths)
        second = log_z(terms_c, rules, roots, span_c, lengths)
    else:
        aug_terms, aug_span, constant = augmented(terms, span, charts, lengths, NT, cost)
        if loss == "softmax_margin":
            first = log_z(aug_terms, rules, roots, aug_span, lengths) + constant
            second = log_z(terms_c, rules, roots, span_c, lengths)
        else:
            first = best(aug_terms, rules, roots, aug_span, lengths) + constant
            second = best(terms_c, rules, roots, span_c, lengths)
    bad = ~torch.isfinite(second)
    if not tracing() and bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"{field}: row {int(rows[b]) if rows is not None else b}: every tree that contains the "
                             "observed brackets takes a part whose score is -inf (C has no tree of finite score)")
    return first - second


def loss_rows(charts, lengths, full_fn, partial_fn, like) -> torch.Tensor:
    """Per-row losses: the whole-tree rows by ``full_fn(idx)`` (bit for bit the full-annotation loss), the others by
    ``partial_fn(idx)``."""
    whole = is_whole(charts, lengths)
    if tracing() or bool(whole.all()):
        return full_fn(None)
    return join_rows(whole, full_fn, partial_fn, like)
