"""Entropy, cross-entropy and KL divergence of PCFGs' tree distributions (:mod:`ssvm_torch.spans.pcfg`'s grammars),
per row (B,), differentiable.

p(y) = exp(s_p(y) - log Z_p) is an exponential family whose sufficient statistics are the tree's parts (rules,
preterminals, the root, labeled spans), so with mu_p = E_p[parts] = d log Z_p / d theta_p (the expected counts):

    H(p) = log Z_p - <mu_p, theta_p>,   H(p, q) = log Z_q - <mu_p, theta_q>,   KL(p || q) = H(p, q) - H(p).

mu_p is autograd's gradient of the inside pass, taken with ``create_graph`` where a gradient is wanted: the
results' gradients are then second derivatives of log Z (the inside pass's recomputing backward is itself
differentiable, :mod:`~ssvm_torch.spans.pcfg_products`). Parts that -inf forbids have mu = 0 and enter as 0. A row
where p weighs a part that q forbids has H(p, q) = KL(p || q) = +inf; its gradient is 0 (the finite formula runs on
q's forbidden parts read as 0, so no inf reaches the other rows' gradients).
"""
from __future__ import annotations

import torch

from ..errors import check
from ..grad_mode import records_autograd
from .pcfg import check_grammar, refuse_no_tree, restrict
from .torch_pcfg import NEG, inside, masked


def _expected_counts(terms, rules, roots, span, lengths):
    """(log Z (B,), the masked parts [terms, rules, roots, span], mu of each): mu differentiable w.r.t. the inputs
    when any of them requires a gradient and grad mode is on."""
    create = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (terms, rules, roots, span))
    with torch.enable_grad():
        inputs = [x if x is None or x.requires_grad else x.detach().requires_grad_(True)
                  for x in (terms, rules, roots, span)]
        masked_parts = masked(*inputs, lengths)
        value, _, _ = inside(*masked_parts, lengths, "log")
        parts = [p for p in masked_parts if p is not None]
        mus = torch.autograd.grad(value.sum(), parts, create_graph=create)
    if not create:
        value, parts = value.detach(), [p.detach() for p in parts]
    return value, parts, list(mus)


def _dot(mus, thetas) -> torch.Tensor:
    return sum((m * t).flatten(1).sum(1) for m, t in zip(mus, thetas))


@records_autograd
def pcfg_entropy(terms, rules, roots, span_scores=None, mask=None, lengths=None, observed=None) -> torch.Tensor:
    """H(p) (B,) of every row's tree distribution (module docstring); with ``observed`` brackets that of p(y | y
    holds them) (:mod:`~ssvm_torch.spans.pcfg_partial`): what the brackets leave open."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    terms, span = restrict(terms, roots, span, lengths, observed)
    if terms.shape[0] == 0:
        return terms.new_zeros(0) + terms.sum() * 0
    log_z, parts, mus = _expected_counts(terms, rules, roots, span, lengths)
    refuse_no_tree(log_z)
    return log_z - _dot(mus, parts)


def _other(q, like: tuple, mask, lengths):
    check(isinstance(q, (tuple, list)) and len(q) in (3, 4), "other", "a tuple (terms, rules, roots[, span_scores]) "
          "of q's grammar", type(q).__name__)
    q = (*q, None) if len(q) == 3 else tuple(q)
    got = check_grammar(*q, mask=mask, lengths=lengths)
    for name, a, b in zip(("other terms", "other rules", "other roots"), got[:3], like[:3]):
        check(a.shape == b.shape, name, f"p's shape {tuple(b.shape)}", tuple(a.shape))
    return got


def _against(terms, rules, roots, other, span_scores, mask, lengths, kl: bool) -> torch.Tensor:
    """H(p, q), or KL(p || q) with ``kl`` (module docstring)."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    q_terms, q_rules, q_roots, q_span, _ = _other(other, (terms, rules, roots), mask, lengths)
    if terms.shape[0] == 0:
        return terms.new_zeros(0) + terms.sum() * 0 + q_terms.sum() * 0
    if (span is None) != (q_span is None):         # one side's span scores: the other's are 0
        span, q_span = (torch.zeros_like(q_span), q_span) if span is None else (span, torch.zeros_like(span))
    log_zp, parts_p, mus = _expected_counts(terms, rules, roots, span, lengths)
    refuse_no_tree(log_zp)
    q_masked = masked(q_terms, q_rules, q_roots, q_span, lengths)
    log_zq, _, _ = inside(*q_masked, lengths, "log")
    q_parts = [x for x in q_masked if x is not None]
    forbidden = [x <= NEG / 2 for x in q_parts]
    infinite = sum((m.detach() * f).flatten(1).sum(1) for m, f in zip(mus, forbidden)) > 0
    value = log_zq - _dot(mus, [torch.where(f, 0, x) for x, f in zip(q_parts, forbidden)])
    if kl:
        value = value - (log_zp - _dot(mus, parts_p))
    return torch.where(infinite, torch.full_like(value, float("inf")), value)


@records_autograd
def pcfg_cross_entropy(terms, rules, roots, other, span_scores=None, mask=None, lengths=None) -> torch.Tensor:
    """H(p, q) = -E_p[log q(y)] (B,) of p's grammar against ``other`` = (terms, rules, roots[, span_scores]) of q
    over the same rows; +inf where p weighs a part q forbids (module docstring)."""
    return _against(terms, rules, roots, other, span_scores, mask, lengths, kl=False)


@records_autograd
def pcfg_kl(terms, rules, roots, other, span_scores=None, mask=None, lengths=None) -> torch.Tensor:
    """KL(p || q) = H(p, q) - H(p) (B,) >= 0 (:func:`pcfg_cross_entropy`'s arguments)."""
    return _against(terms, rules, roots, other, span_scores, mask, lengths, kl=True)
