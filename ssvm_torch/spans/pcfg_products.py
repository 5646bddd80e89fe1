"""The log-semiring step of a PCFG's inside pass (:mod:`~ssvm_torch.spans.torch_pcfg`) for one group of splits, as
two matrix products in scaled real space with an exact log-space fallback:

    out[b, i, A] = log sum_{B, C} exp(rules[b, A, B, C] + log sum_u exp(left[b, i, u, B] + right[b, i, u, C])).

Each factor is shifted by its maximum so that its exponentials lie in (0, 1] (the children's pair of each split u
by its own maximum, the rules of each A by theirs): the children's pairs are P = sum_u el_u^T er_u, one batched
product over the splits (B n, SL, U) x (B n, U, SR), and the sums are P (B, n, K) x exp(rules)^T (B, K, NT), K =
SL SR; out = log(sum) + the shifts. A product of two factors in (0, 1] that the float format would flush is below
its smallest normal number, so a sum at or above ``sqrt(tiny)`` (1e-19 in float32) has lost at most K tiny / sum of
its value; an entry below it (a span whose likely children only meet unlikely rules: forbidden rules at -1e30
make such exact zeros) is recomputed in log space (:class:`RuleStep`, logsumexp over K) for its rows, gradient
included. This is the inside pass's dominant cost (N^3 NT S^2 / 6 terms): as matrix products it runs as multiply-adds
instead of one exp, one add and one max per term (the explicit logsumexp of torch-struct's ``SentCFG``).

The backward recomputes the factors: with h = grad / sum, d rules = exp(rules) * (h^T P), d P = h exp(rules), and
d left, d right the two products of d P with the split factors (the shifts cancel: a log-sum-exp is shift
invariant), the fallback rows' gradients by autograd through their log-space recomputation.
"""
from __future__ import annotations

import torch

#: the most entries one temporary of the log-space step holds (cut over a width's spans)
CHUNK = 1 << 22


class RuleStep(torch.autograd.Function):
    """out[b, i, A] = log sum_K exp(rules[b, A, K] + pairs[b, i, K]) in log space, in chunks of spans of at most
    :data:`CHUNK` entries; the backward recomputes each chunk's weights exp(rules + pairs - out) instead of keeping
    them (autograd through the chunks kept every (B, n, NT, K) temporary)."""

    @staticmethod
    def forward(ctx, rules, pairs):
        B, NT, K = rules.shape
        step = max(1, CHUNK // max(1, B * NT * K))
        out = torch.cat([(rules[:, None] + pairs[:, s:s + step, None]).logsumexp(3)
                         for s in range(0, pairs.shape[1], step)], 1)
        ctx.save_for_backward(rules, pairs, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        rules, pairs, out = ctx.saved_tensors
        B, NT, K = rules.shape
        step = max(1, CHUNK // max(1, B * NT * K))
        g_rules = torch.zeros_like(rules)
        g_pairs = torch.empty_like(pairs)
        for s in range(0, pairs.shape[1], step):
            # out of place: under create_graph (a double backward: the entropy's gradient) autograd records it
            w = (rules[:, None] + pairs[:, s:s + step, None] - out[:, s:s + step, :, None]).exp()
            w = w * grad[:, s:s + step, :, None]                                          # (B, chunk, NT, K)
            g_rules = g_rules + w.sum(1)
            g_pairs[:, s:s + step] = w.sum(2)
        return g_rules, g_pairs


def log_space(left, right, rules):
    """The group's step in log space (the fallback, and the reference): (B, n, NT)."""
    B, n, _, SL = left.shape
    pairs = (left[..., :, None] + right[..., None, :]).logsumexp(2).reshape(B, n, -1)
    return RuleStep.apply(rules.reshape(B, rules.shape[1], -1), pairs)


def _factors(left, right, rules):
    """(el (B, n, U, SL), er (B, n, U, SR), P (B, n, K), shift (B, n, 1), e_rules (B, NT, K), rule shift (B, 1, NT),
    sums (B, n, NT)) of the module docstring."""
    B, n, U, SL = left.shape
    ml = left.amax(3, keepdim=True)
    mr = right.amax(3, keepdim=True)
    m = (ml + mr).amax(2, keepdim=True)                                                  # (B, n, 1, 1)
    el = torch.exp(left + mr - m)                                                        # el_u er_u = exp(l + r - m)
    er = torch.exp(right - mr)
    P = (el.transpose(2, 3) @ er).reshape(B, n, -1)                                      # (B, n, SL SR)
    flat = rules.reshape(B, rules.shape[1], -1)
    mrule = flat.amax(2, keepdim=True)                                                   # (B, NT, 1)
    e_rules = torch.exp(flat - mrule)
    sums = P @ e_rules.transpose(1, 2)                                                   # (B, n, NT)
    return el, er, P, m[..., 0], e_rules, mrule.transpose(1, 2), sums


def _flagged(sums: torch.Tensor):
    """(b, i) of the spans with a sum below sqrt(tiny) (module docstring), or None."""
    low = (sums < torch.finfo(sums.dtype).tiny ** 0.5).any(2)
    if not bool(low.any()):
        return None
    return low.nonzero(as_tuple=True)


def _fallback(left, right, rules, rows, grad=None, create: bool = False):
    """The log-space values (R, NT) of the flagged spans ``rows`` = (b, i), or with ``grad`` (R, NT) their gradients
    (d left, d right (R, U, S.), d rules (R, NT, SL, SR)), differentiable with ``create`` (a double backward); in
    chunks of rows of at most :data:`CHUNK` entries."""
    b, i = rows
    step = max(1, CHUNK // max(1, rules[0].numel()))
    out = []
    for s in range(0, b.shape[0], step):
        bs, is_ = b[s:s + step], i[s:s + step]
        parts = (left[bs, is_], right[bs, is_], rules[bs])
        if grad is None:
            out.append(log_space(parts[0][:, None], parts[1][:, None], parts[2])[:, 0])
            continue
        with torch.enable_grad():
            leaves = [x if create and x.requires_grad else x.detach().requires_grad_(True) for x in parts]
            value = log_space(leaves[0][:, None], leaves[1][:, None], leaves[2])[:, 0]
            out.append(torch.autograd.grad(value, leaves, grad[bs, is_], create_graph=create))
    if grad is None:
        return torch.cat(out)
    return [torch.cat(g) for g in zip(*out)]


class GroupInside(torch.autograd.Function):
    """The module docstring's step: (left (B, n, U, SL), right (B, n, U, SR), rules (B, NT, SL, SR)) -> (B, n, NT).
    With a list ``lows`` it is optimistic: the spans whose sums fall below sqrt(tiny) are appended to it as a (B, n)
    mask and left as the products give them (no host check: the caller checks every group's masks at once and
    recomputes the pass with ``lows`` None if any is set, :func:`~ssvm_torch.spans.torch_pcfg.inside`)."""

    @staticmethod
    def forward(ctx, left, right, rules, lows=None):
        with torch.autocast(left.device.type, enabled=False):      # under AMP too: the products in the inputs' dtype
            _, _, _, m, _, mrule, sums = _factors(left, right, rules)
        out = torch.log(sums) + m + mrule
        if lows is not None:
            lows.append((sums < torch.finfo(sums.dtype).tiny ** 0.5).any(2))
            rows = None
        else:
            rows = _flagged(sums)
            if rows is not None:
                out[rows] = _fallback(left, right, rules, rows)
        ctx.save_for_backward(left, right, rules)
        ctx.rows = rows
        return out

    @staticmethod
    def backward(ctx, grad):
        with torch.autocast(grad.device.type, enabled=False):
            return (*GroupInside._backward(ctx, grad), None)

    @staticmethod
    def _backward(ctx, grad):
        left, right, rules = ctx.saved_tensors
        B, n, U, SL = left.shape
        SR = right.shape[3]
        el, er, P, _, e_rules, _, sums = _factors(left, right, rules)
        rows = ctx.rows
        if rows is None:
            h = grad / sums
        else:                  # their gradient below; 1 in the division keeps a double backward free of 0 * inf
            keep = torch.ones_like(sums, dtype=torch.bool)
            keep[rows] = False
            h = torch.where(keep, grad / torch.where(keep, sums, 1), 0)
        d_rules = (e_rules * (h.transpose(1, 2) @ P)).reshape(rules.shape)
        dP = (h @ e_rules).reshape(B, n, SL, SR)
        d_left = el * (er @ dP.transpose(2, 3))                                          # (B, n, U, SL)
        d_right = er * (el @ dP)                                                         # (B, n, U, SR)
        if rows is not None:
            gl, gr, gu = _fallback(left, right, rules, rows, grad, create=torch.is_grad_enabled())
            d_left = d_left.index_put(rows, gl, accumulate=True)
            d_right = d_right.index_put(rows, gr, accumulate=True)
            d_rules = d_rules.index_add(0, rows[0], gu)
        return d_left, d_right, d_rules
