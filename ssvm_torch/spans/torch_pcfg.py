"""Inside and Viterbi CKY of a probabilistic context-free grammar in Chomsky normal form, in torch: batched over
rows, vectorized over a width's spans, any device. The recursion of :mod:`ssvm_torch.spans.pcfg` (whose docstring
states the grammar's layout, torch-struct's ``SentCFG``: ``terms`` (B, N, T), ``rules`` (B, NT, S, S), ``roots``
(B, NT), S = NT + T, symbols 0..NT-1 the nonterminals and NT..S-1 the preterminals).

The inside value of a span of one word is its preterminals' scores, beta(i, i+1, P) = terms[i, P]; of a span of
w >= 2 words (Baker 1979; Lari & Young 1990; in the log semiring)

    beta(i, j, A) = span[i, j, A] + log sum_{i<k<j} sum_{B, C} exp(rules[A, B, C] + beta(i, k, B) + beta(k, j, C)),

and log Z = log sum_A exp(roots[A] + beta(0, n, A)); the max semiring gives the best tree's score. A width's
splits fall into four groups by the children's kinds (a one-word child is a preterminal, a longer one a
nonterminal), each with its block of ``rules``, as torch-struct's CKY splits them: (preterminal, preterminal) at
w = 2, (preterminal, nonterminal) and (nonterminal, preterminal) for w >= 3, (nonterminal, nonterminal) for the
splits k = i+2..j-2. Within a group the children's pairs are reduced over the splits first (B, n, SL, SR) and then
against the rules (B, n, NT); the second step's temporaries are cut in chunks of spans of at most
:data:`CHUNK` entries.

Every input enters clamped at :data:`NEG` (a finite -inf: its gradient is 0, never NaN), as in
:mod:`~ssvm_torch.spans.torch_cky`; a row whose value is below ``NEG / 2`` has no tree of finite score. log Z's
gradient (the expected counts of every rule, preterminal, root and labeled span) is autograd's through the
recursion. The best tree keeps, for every span and nonterminal, its best split and children, and reads the tree
top-down from the root as scatters into one chart (no host copy).
"""
from __future__ import annotations

import torch

from .pcfg_products import CHUNK, GroupInside

#: the stand-in for -inf (finite: its gradient is 0, never NaN)
NEG = -1e30


def _reduce(x: torch.Tensor, dim: int, semiring: str):
    """(values, argmax or None) of ``x`` over ``dim`` in the log or max semiring."""
    if semiring == "log":
        return x.logsumexp(dim), None
    return x.max(dim)


def _group(left: torch.Tensor, right: torch.Tensor, rules: torch.Tensor, semiring: str, lows=None):
    """One group of splits of a width's n spans: ``left`` (B, n, U, SL) and ``right`` (B, n, U, SR) the children's
    inside values over the group's U splits, ``rules`` (B, NT, SL, SR) the group's block. Returns (value (B, n,
    NT), split (B, n, NT) index in 0..U-1 or None, left symbol, right symbol (B, n, NT) or None)."""
    B, n, _, SL = left.shape
    SR = right.shape[-1]
    NT = rules.shape[1]
    if semiring == "log":
        return GroupInside.apply(left, right, rules, lows), None, None, None
    pairs, split = (left[..., :, None] + right[..., None, :]).max(2)                   # (B, n, SL, SR)
    pairs = pairs.reshape(B, n, SL * SR)
    flat = rules.reshape(B, NT, SL * SR)
    step = max(1, CHUNK // max(1, B * NT * SL * SR))
    values, args = [], []
    for s in range(0, n, step):
        v, a = (flat[:, None] + pairs[:, s:s + step, None]).max(3)                   # (B, chunk, NT)
        values.append(v)
        args.append(a)
    value, bc = torch.cat(values, 1), torch.cat(args, 1)
    u = split.reshape(B, n, SL * SR).gather(2, bc)
    return value, u, bc // SR, bc % SR


def rule_blocks(rules: torch.Tensor, NT: int) -> dict:
    """The rules' four blocks by the children's kinds, "N" nonterminal and "P" preterminal: (B, NT, SL, SR) each."""
    return {"NN": rules[:, :, :NT, :NT], "NP": rules[:, :, :NT, NT:], "PN": rules[:, :, NT:, :NT],
            "PP": rules[:, :, NT:, NT:]}


def split_groups(w: int, terms: torch.Tensor, charts: list) -> list:
    """[(kind, split offset, left (B, n, U, SL), right (B, n, U, SR))]: the splits of width w's n spans in their
    groups (module docstring), the children's inside values over each group's U splits, the split u (the left
    child's words) = offset + the index among them."""
    N = terms.shape[1]
    n = N - w + 1
    if w == 2:
        return [("PP", 1, terms[:, :n, None], terms[:, 1:n + 1, None])]
    groups = [("PN", 1, terms[:, :n, None], charts[w - 1][:, 1:n + 1, None]),
              ("NP", w - 1, charts[w - 1][:, :n, None], terms[:, w - 1:w - 1 + n, None])]
    if w >= 4:
        left = torch.stack([charts[u][:, :n] for u in range(2, w - 1)], 2)
        right = torch.stack([charts[w - u][:, u:u + n] for u in range(2, w - 1)], 2)
        groups.append(("NN", 2, left, right))
    return groups


def inside(terms, rules, roots, span, lengths, semiring: str, checked: bool = False):
    """The CKY of the module docstring over masked inputs (:func:`masked`). Returns (value (B,), charts, bp):
    ``charts`` a list by width w >= 2 of (B, N-w+1, NT) inside values, ``bp`` for "max" a list by width of
    (split u, left symbol, right symbol), each (B, N-w+1, NT): the best split of every span and nonterminal, u its
    left child's words and the symbols in their own kind's numbering (preterminals 0..T-1).

    In the log semiring the pass is optimistic (:class:`~ssvm_torch.spans.pcfg_products.GroupInside` with a list
    of low sums): one host check at its end, and only where a group's products fell below sqrt(tiny) the pass runs
    again ``checked``, each group recomputing its low entries in log space (on a GPU one synchronization per pass
    instead of one per group and width)."""
    B, N, T = terms.shape
    blocks = rule_blocks(rules, roots.shape[1])
    charts, bp = [None, None], [None, None]
    lows = [] if semiring == "log" and not checked else None
    for w in range(2, N + 1):
        groups = split_groups(w, terms, charts)
        out = [_group(lc, rc, blocks[kind], semiring, lows) for kind, _, lc, rc in groups]
        stacked = torch.stack([o[0] for o in out], -1)                                # (B, n, NT, groups)
        value, which = _reduce(stacked, 3, semiring)
        if span is not None:
            value = value + span.diagonal(w, 1, 2).transpose(1, 2)
        charts.append(value)
        if semiring == "max":
            pick = which[..., None]
            u = torch.stack([o[1] + g[1] for o, g in zip(out, groups)], -1).gather(3, pick)[..., 0]
            ls = torch.stack([o[2] for o in out], -1).gather(3, pick)[..., 0]
            rs = torch.stack([o[3] for o in out], -1).gather(3, pick)[..., 0]
            bp.append((u, ls, rs))
    if lows and bool(torch.cat([low.flatten() for low in lows]).any()):
        return inside(terms, rules, roots, span, lengths, semiring, checked=True)
    value, root = _reduce(root_values(charts, roots, lengths), 1, semiring)
    bp.append(root)
    return value, charts, bp


def root_values(charts: list, roots: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, NT): roots[A] + beta(0, n_b, A) of every row, from :func:`inside`'s charts."""
    top = torch.stack([charts[w][:, 0] for w in range(2, len(charts))], 1)            # (B, N - 1, NT)
    return top[torch.arange(top.shape[0], device=top.device), (lengths - 2).clamp(min=0)] + roots


def masked(terms, rules, roots, span, lengths):
    """The inputs clamped at NEG, and the words past each row's length at 0 (never read by the row's root; a
    finite value keeps the padded spans' arithmetic free of inf - inf). Differentiable."""
    N = terms.shape[1]
    inside_row = (torch.arange(N, device=terms.device)[None, :] < lengths[:, None])[..., None]
    terms = torch.where(inside_row, terms.clamp(min=NEG), terms.new_zeros(()))
    span = None if span is None else span.clamp(min=NEG)
    return terms, rules.clamp(min=NEG), roots.clamp(min=NEG), span


def best_chart(bp, lengths, N: int) -> torch.Tensor:
    """The best tree of every row as a labeled chart (B, N+1, N+1) int64: a one-word span's preterminal, a longer
    span's nonterminal, -1 off the tree; read top-down from the root by width, as scatters (``bp`` of
    :func:`inside` in the max semiring)."""
    root = bp[-1]
    B, M = root.shape[0], N + 1
    device = root.device
    chart = torch.full((B, M, M), -1, dtype=torch.int64, device=device)
    rows = torch.arange(B, device=device)
    chart[rows, 0, lengths] = root
    for w in range(N, 1, -1):
        u, ls, rs = bp[w]
        n = N - w + 1
        label = chart.diagonal(w, 1, 2).clone()                                       # (B, n)
        on = label >= 0
        pick = label.clamp(min=0)[..., None]
        k = u.gather(2, pick)[..., 0]
        i = torch.arange(n, device=device)[None, :].expand(B, n)
        b = rows[:, None].expand(B, n)
        zero = torch.zeros_like(i)
        # spans off the tree write to the unused cell (0, 0), reset below: the tree's children never collide
        chart[b, torch.where(on, i, zero), torch.where(on, i + k, zero)] = ls.gather(2, pick)[..., 0]
        chart[b, torch.where(on, i + k, zero), torch.where(on, i + w, zero)] = rs.gather(2, pick)[..., 0]
    chart[:, 0, 0] = -1
    return chart


def chart_score(terms, rules, roots, span, chart, lengths) -> torch.Tensor:
    """s(y) (B,) of labeled charts (:func:`best_chart`'s form) under masked inputs: the root's score, each word's
    preterminal score, and each span of >= 2 words' rule A -> B C (its children found as the longest span of the
    tree that starts where it starts and ends inside it) and span score. Differentiable (gathers)."""
    B, M, _ = chart.shape
    NT = roots.shape[1]
    device = chart.device
    rows = torch.arange(B, device=device)
    present = chart >= 0
    pos = torch.arange(M, device=device)
    width = pos[None, :] - pos[:, None]                                               # [i, j] -> j - i
    s = roots[rows, chart[rows, 0, lengths].clamp(min=0)]
    words = chart.diagonal(1, 1, 2)                                                   # (B, N)
    s = s + torch.where(words >= 0, terms.gather(2, words.clamp(min=0)[..., None])[..., 0], 0).sum(1)
    ends = torch.where(present, pos[None, None, :].expand(B, M, M), -1)
    split = torch.cummax(ends, 2).values                                              # max k <= j with (i, k) on
    split = torch.cat([split.new_full((B, M, 1), -1), split[:, :, :-1]], 2)           # max k < j
    inner = present & (width >= 2)[None]
    k = split.clamp(min=0)
    i_idx = pos[None, :, None].expand(B, M, M)
    j_idx = pos[None, None, :].expand(B, M, M)
    left = chart.gather(2, k)
    right = chart[rows[:, None, None], k, j_idx]
    # the symbols' numbering: nonterminals 0..NT-1, preterminals NT..S-1; cells off the tree read rule (0, 0, 0)
    ls = torch.where(inner, torch.where(k - i_idx >= 2, left, left + NT), 0)
    rs = torch.where(inner, torch.where(j_idx - k >= 2, right, right + NT), 0)
    A = torch.where(inner, chart, 0)
    S = rules.shape[-1]
    rule = rules.reshape(B, -1).gather(1, (A * S * S + ls * S + rs).reshape(B, -1)).reshape(B, M, M)
    if span is not None:
        rule = rule + span.gather(3, A[..., None])[..., 0]
    return s + torch.where(inner, rule, 0).sum((1, 2))
