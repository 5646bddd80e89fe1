"""Exact samples of a PCFG's trees (:mod:`ssvm_torch.spans.pcfg`'s grammars), on any device: the inside pass in the
log semiring once, then every sample drawn top-down (Goodman 1998's sampling from the inside chart): the root's
nonterminal A ~ roots[A] + beta(0, n, A), and for every constituent (i, j) labeled A of two or more words its split
k and children (B, C) ~ rules[A, B, C] + beta(i, k, B) + beta(k, j, C) over every split and pair of children (the
four groups of :mod:`~ssvm_torch.spans.torch_pcfg`; a constituent's own span score is in its inside value and
its children's in theirs), one width at a time for the constituents of every row and sample at once, the
children written into the samples' charts.
"""
from __future__ import annotations

import torch

from ..chain.checks import check_draws
from ..trees.draws import draw_categorical, in_chunks
from .pcfg import check_grammar, refuse_no_tree, restrict
from .torch_pcfg import inside, masked, root_values, rule_blocks, split_groups


def _draw(parts, charts, value_top, lengths, k: int, generator) -> torch.Tensor:
    """k samples of every row: labeled charts (B, k, N+1, N+1) int64. Each width draws only for the constituents
    the samples hold there (found by one nonzero per width, a host synchronization on a GPU): drawing for every span
    of the width cost (N - w + 1) / (the samples' constituents there) times the work."""
    terms, rules, roots, _ = parts
    B, N, _ = terms.shape
    M, device = N + 1, terms.device
    chart = torch.full((B, k, M, M), -1, dtype=torch.int64, device=device)
    rows = torch.arange(B, device=device)
    chart[rows[:, None], torch.arange(k, device=device)[None, :], 0, lengths[:, None]] = \
        draw_categorical(value_top, k, generator)
    blocks = rule_blocks(rules, roots.shape[1])
    for w in range(N, 1, -1):
        b, s, i = (chart.diagonal(w, 2, 3) >= 0).nonzero(as_tuple=True)                 # the constituents, R
        if b.numel() == 0:
            continue
        A = chart[b, s, i, i + w]
        logits, us, ls, rs = [], [], [], []
        for kind, offset, left, right in split_groups(w, terms, charts):
            U, SL, SR = left.shape[2], left.shape[3], right.shape[3]
            x = blocks[kind][b, A][:, None] + left[b, i][..., :, None] + right[b, i][..., None, :]   # (R, U, SL, SR)
            logits.append(x.reshape(-1, U * SL * SR))
            flat = torch.arange(U * SL * SR, device=device)
            us.append(flat // (SL * SR) + offset)
            ls.append(flat // SR % SL)
            rs.append(flat % SR)
        pick = draw_categorical(torch.cat(logits, 1), 1, generator)[:, 0]              # (R,)
        u, lsym, rsym = (torch.cat(t)[pick] for t in (us, ls, rs))
        chart[b, s, i, i + u] = lsym
        chart[b, s, i + u, i + w] = rsym
    return chart


def pcfg_sample(terms, rules, roots, span_scores=None, mask=None, lengths=None, n: int = 1,
                generator: torch.Generator | None = None, observed=None) -> torch.Tensor:
    """n exact samples y ~ p(y) = exp(s(y) - log Z) of every row: labeled charts (B, n, N+1, N+1) int64 (the
    module docstring of :mod:`~ssvm_torch.spans.pcfg`: preterminals on the one-word spans, nonterminals on the
    longer ones, -1 off the tree); ``generator`` (on the scores' device) makes them reproducible. A row without
    a tree of finite score is refused by name. No gradient (a score-function estimator uses ``pcfg_score``). With
    ``observed`` brackets the samples are of p(y | y holds them) (:mod:`~ssvm_torch.spans.pcfg_partial`: the
    completions of a partially bracketed sentence)."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    terms, span = restrict(terms, roots, span, lengths, observed)
    check_draws(n, generator, terms.device)
    B, N, T = terms.shape
    if B == 0:
        return torch.full((0, n, N + 1, N + 1), -1, dtype=torch.int64, device=terms.device)
    with torch.no_grad():
        parts = masked(terms, rules, roots, span, lengths)
        value, charts, _ = inside(*parts, lengths, "log")
        refuse_no_tree(value)
        value_top = root_values(charts, parts[2], lengths)                              # (B, NT)
        S = rules.shape[-1]
        per_sample = B * N * S * S           # a width's logits: (its constituents) x (splits x children pairs)
        return in_chunks(lambda k: _draw(parts, charts, value_top, lengths, k, generator), n, per_sample)
