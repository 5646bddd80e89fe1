"""Entropy, KL divergence and exact samples of the CRF of a chain's scores (torch, any device, differentiable).

The distribution is p(y) = exp s(y) / Z over the labelings of a row (the convention of :mod:`ssvm_torch.chain`).
Its forward messages a_i(k) = log sum over prefixes ending in tag k at position i give the posterior as a Markov
chain read backwards (the factorization behind forward filtering, backward sampling):

    p(y) = W(y_{L-1}) prod_{i>=1} w_i(y_{i-1} | y_i),
    W(k) = exp(a_{L-1}(k) + last[k] - log Z),  w_i(j | k) = exp(a_{i-1}(j) + trans[k, j] - a_i(k) + U[i, k]).

So -log p(y) is a sum of one term per position and the entropy follows one forward recursion of expected
prefix terms, H_i(k) = sum_j w_i(j | k) [H_{i-1}(j) - log w_i(j | k)], H = sum_k W(k) [H_{L-1}(k) - log W(k)]:
the entropy semiring of Li & Eisner 2009 ("First- and second-order expectation semirings", Table 1) in its
normalized form, where every term is a non-negative entropy and the messages are centred at every position, so
no term carries the size of log Z (log Z - E_p[s(y)] loses the digits of log Z: float32 holds 10^3 to ~1e-4).
KL(p || q) for a second chain q on the same rows sums E_p[log w^p - log w^q] the same way, q's conditionals
from q's own messages. :func:`sample_rows` draws labelings backwards from the same conditionals
(Gumbel-max on the log weights).

Zero weights (forbidden tags and moves: -inf scores) contribute exactly 0 to every sum, and no NaN enters the
values or their gradients: log-sum-exp is taken with a finite shift and log 1 where a sum is 0, and a KL made +inf
by a move q forbids keeps a finite gradient (:func:`expect_divergence` reads the +inf term as 0 in its backward).
"""
from __future__ import annotations

import torch

from .torch_ops import with_penalty


def lse(z: torch.Tensor) -> torch.Tensor:
    """log sum exp over the last dimension, -inf where every entry is -inf, with gradients free of NaN there (a
    finite shift, and log 1 substituted for log 0 in the branch the result does not take)."""
    m = z.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    total = torch.exp(z - m).sum(-1)
    some = total > 0
    return torch.where(some, torch.log(torch.where(some, total, torch.ones_like(total))) + m[..., 0],
                       torch.full_like(total, float("-inf")))


def _conditionals(prev: torch.Tensor, t: torch.Tensor):
    """(next messages without the unary (B, K), log w (B, K_next, K_prev), w): the backward conditionals
    w(j | k) = exp(prev[j] + t[k, j] - lse_j), 0 (log -inf) where k is unreachable."""
    z = prev[:, None, :] + t
    a = lse(z)
    shift = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    logw = z - shift[..., None]
    return a, logw, torch.exp(logw)


def _expect(w: torch.Tensor, term: torch.Tensor) -> torch.Tensor:
    """sum_j w_j term_j over the last dimension, a zero weight contributing 0 whatever its term (+-inf)."""
    pos = w > 0
    return (w * torch.where(pos, term, torch.zeros_like(term))).sum(-1)


class _ExpectDivergence(torch.autograd.Function):
    """sum over ``dim`` of w * term, a zero weight contributing 0: :func:`_expect`'s forward, whose backward reads
    a +inf term (q forbids what p weighs) as 0 in d/dw (0 * inf would be NaN)."""

    @staticmethod
    def forward(ctx, w, term, dim):
        safe = torch.where(w > 0, term, torch.zeros_like(term))
        ctx.save_for_backward(w, safe)
        ctx.dim = dim
        return (w * safe).sum(dim)

    @staticmethod
    def backward(ctx, g):
        w, safe = ctx.saved_tensors
        g = g.unsqueeze(ctx.dim)
        return g * torch.where(torch.isinf(safe), torch.zeros_like(safe), safe), g * w, None


def expect_divergence(w: torch.Tensor, term: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """sum over ``dim`` of w * term for a KL's expected prefix terms: a zero weight contributes 0, a positive weight
    on a +inf term (q forbids what p weighs) makes the sum +inf, and the gradient of such a sum is that of its
    finite terms, not NaN: 0 * inf in the backward of a row masked out of a loss would send NaN into every shared
    parameter. One autograd function: the forward costs what :func:`_expect` does."""
    return _ExpectDivergence.apply(w, term, dim)


def _centred(a: torch.Tensor) -> torch.Tensor:
    """Messages less their row's largest finite one: the conditionals do not change, and the log weights are
    differences of numbers of the size of one position's scores, not of log Z (float32 keeps their digits)."""
    m = a.detach().amax(-1, keepdim=True)
    return a - torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def _rows(x: torch.Tensor, d: int) -> torch.Tensor:
    return x if x.dim() == d else x.unsqueeze(0)


def information_rows(Ec, lengths, start, end, trans, penalty=None, other=None):
    """(entropy H(p) (B,), KL(p || q) (B,) or None) of compacted rows (their first ``lengths[b]`` positions;
    0 for an empty row), in Ec's dtype, differentiable by autograd. p: the chain of (Ec, start, end, trans) plus
    ``penalty``; ``other`` = (Qc, start, end, trans, penalty) of q on the same rows, or None. ``start`` / ``end``
    (K,) or (B, K), ``trans`` (K, K), (B, K, K) or per position (B, T-1, K, K) (the move into position i is
    ``trans[:, i-1]``: the edge potentials of :mod:`ssvm_torch.chain.edge_chain`) [next, prev]. A row that p gives
    no labeling of is NaN (the callers refuse it by name); KL is +inf where p gives weight to a labeling q
    forbids."""
    s, e, t = with_penalty(start, end, trans, penalty)
    s, e = _rows(s, 2), _rows(e, 2)
    t = t if t.dim() == 4 else _rows(t, 3)
    B, T, K = Ec.shape
    a = Ec[:, 0] + s
    H = Ec.new_zeros(B, K)
    if other is not None:
        Qc, qs, qe, qt = other[0], *with_penalty(*other[1:4], other[4])
        qs, qe = _rows(qs, 2), _rows(qe, 2)
        qt = qt if qt.dim() == 4 else _rows(qt, 3)
        aq, D = Qc[:, 0] + qs, Ec.new_zeros(B, K)
    for i in range(1, T):
        on = (i < lengths)[:, None]
        nxt, logw, w = _conditionals(a, t[:, i - 1] if t.dim() == 4 else t)
        H = torch.where(on, _expect(w, H[:, None, :] - logw), H)
        if other is not None:
            nq, logwq, _ = _conditionals(aq, qt[:, i - 1] if qt.dim() == 4 else qt)
            D = torch.where(on, expect_divergence(w, D[:, None, :] + logw - logwq), D)
            aq = torch.where(on, _centred(nq + Qc[:, i]), aq)
        a = torch.where(on, _centred(nxt + Ec[:, i]), a)
    last, logW, W = _conditionals(a, e[:, None, :])
    logW, W, some = logW[:, 0], W[:, 0], torch.isfinite(last[:, 0])
    nan = torch.full_like(last[:, 0], float("nan"))
    empty = lengths == 0
    H = torch.where(empty, torch.zeros_like(nan), torch.where(some, _expect(W, H - logW), nan))
    if other is None:
        return H, None
    _, logWq, _ = _conditionals(aq, qe[:, None, :])
    D = torch.where(empty, torch.zeros_like(nan), torch.where(some, expect_divergence(W, D + logW - logWq[:, 0]), nan))
    return H, D


@torch.no_grad()
def sample_rows(Ec, lengths, start, end, trans, penalty, n: int, generator=None):
    """(labels (B, n, T) int64, log Z (B,)): n exact samples of each compacted row's CRF, -1 at and beyond
    ``lengths[b]``. Forward messages, then the labels drawn from the last position back by Gumbel-max on the log
    conditionals (module docstring), uniform draws from ``torch.rand(generator=generator)`` in float64. A row
    whose log Z is -inf has no allowed labeling and draws arbitrary tags: the callers refuse it. ``trans`` as in
    :func:`information_rows`, per position too."""
    s, e, t = (x.detach().to(Ec.dtype) for x in with_penalty(start, end, trans, penalty))
    s, e = _rows(s, 2), _rows(e, 2)
    per_position = t.dim() == 4
    t = t if per_position else _rows(t, 3)
    B, T, K = Ec.shape
    msgs = [Ec[:, 0] + s]
    for i in range(1, T):
        nxt = lse(msgs[-1][:, None, :] + (t[:, i - 1] if per_position else t)) + Ec[:, i]
        msgs.append(torch.where((i < lengths)[:, None], nxt, msgs[-1]))
    rows = torch.arange(B, device=Ec.device).repeat_interleave(n)
    L = lengths[rows]
    e_r = e[rows] if e.shape[0] == B else e.expand(B * n, K)
    t_r = None if per_position else t[rows] if t.shape[0] == B else t.expand(B * n, K, K)
    out = torch.full((B * n, T), -1, dtype=torch.int64, device=Ec.device)
    nxt_tag = torch.zeros(B * n, dtype=torch.int64, device=Ec.device)
    for i in range(T - 1, -1, -1):
        a = msgs[i][rows].to(torch.float64)
        moves = t_r if not per_position else t[:, i][rows] if i < T - 1 else t.new_zeros(B * n, K, K)   # into i + 1
        into = moves.gather(1, nxt_tag[:, None, None].expand(-1, 1, K))[:, 0].to(torch.float64)
        logits = torch.where((i == L - 1)[:, None], a + e_r.to(torch.float64), a + into)
        u = torch.rand(logits.shape, dtype=torch.float64, device=Ec.device, generator=generator)
        tag = (logits - torch.log(-torch.log(u))).argmax(1)
        take = i < L
        out[:, i] = torch.where(take, tag, out[:, i])
        nxt_tag = torch.where(take, tag, nxt_tag)
    logz = lse(msgs[-1] + e)                       # each row's messages stop moving at its last position
    logz = torch.where(lengths > 0, logz, torch.zeros_like(logz))
    return out.view(B, n, T), logz
