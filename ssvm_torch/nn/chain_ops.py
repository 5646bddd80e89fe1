"""Differentiable chain operations on a padded batch with an arbitrary mask: the structured hinge,
the CRF negative log-likelihood, Viterbi decoding and the tag marginals.

Arguments, after validation by the callers (:class:`~ssvm_torch.nn.LinearChain`,
:func:`~ssvm_torch.nn.chain_hinge`): emissions E (B, T, K) float, mask (B, T) bool, start / end
(K,), trans (K, K) indexed [next, prev] (the project's internal orientation), and ``penalty`` =
(start, end, trans) additive tag-constraint scores (0 or -inf, :func:`ssvm_torch.constraints.penalties`)
or None. Row b's chain is its masked-on positions (see :mod:`ssvm_torch.oracles.masked_chain`).

Two implementations of every operation, chosen by ``kernels``:

* ``numba`` (CPU float32/float64): the compiled kernels of :mod:`ssvm_torch.oracles.masked_chain`,
  wrapped in autograd Functions whose backward writes the gradient directly -- for the hinge the
  statistics of the loss-augmented labeling minus those of the gold labeling (the subgradient),
  for the CRF the marginals minus the gold statistics -- so no (B, T, K, K) tensor is formed;
* ``torch`` (any device, CUDA included, no host round trip): the rows are compacted to the left
  (their masked-on positions first, in order), then the padded Viterbi of
  :func:`ssvm_torch.oracles.viterbi.viterbi` and a scaled forward recursion differentiated by autograd.

``auto`` takes numba where it applies. Half-precision emissions are computed in float32.
"""
from __future__ import annotations

import numba
import torch

from ..devices import to_host
from ..errors import SSVMInputError
from ..oracles import masked_chain as mc
from ..oracles.viterbi import viterbi

NUMBA_DTYPES = (torch.float32, torch.float64)


def tracing() -> bool:
    """Under torch.compile / torch.export: the torch path only, and no data-dependent checks
    (a traced graph cannot branch on values)."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def use_numba(E: torch.Tensor, kernels: str) -> bool:
    ok = E.device.type == "cpu" and E.dtype in NUMBA_DTYPES and not tracing()
    if kernels == "numba" and not ok:
        raise SSVMInputError(f"kernels: 'numba' needs CPU float32/float64 emissions, got {E.device} {E.dtype}")
    return ok and kernels != "torch"


def effective(start, end, trans, penalty, dtype, device):
    """The scores the oracles see: parameters plus the constraint penalties, in ``dtype``."""
    s, e, t = (x.detach().to(device=device, dtype=dtype) for x in (start, end, trans))
    if penalty is not None:
        s, e, t = s + penalty[0].to(device, dtype), e + penalty[1].to(device, dtype), t + penalty[2].to(device, dtype)
    return s, e, t


def _host(*tensors):
    return [to_host(t.detach().contiguous()) for t in tensors]


def refuse_bad_scores(t: torch.Tensor, field: str, allow_neg_inf: bool = True) -> None:
    """NaN and +inf scores are refused (they would decode to arbitrary labels and NaN gradients);
    -inf is allowed where it marks a forbidden tag or move (``allow_neg_inf``). On CUDA an
    asynchronous device assertion (no host sync; the error surfaces at the next sync); elsewhere a
    host check that counts the bad entries. One elementwise pass, O(B T K) against the decoders'
    O(B T K^2)."""
    if tracing():
        return
    bad = torch.isnan(t) | (t == float("inf")) if allow_neg_inf else ~torch.isfinite(t)
    what = "NaN or +inf (-inf marks a forbidden tag or move)" if allow_neg_inf else "NaN or inf"
    if t.is_cuda:
        torch._assert_async(~bad.any(), f"{field}: expected scores without {what}")
    elif bool(bad.any()):
        raise SSVMInputError(f"{field}: expected scores without {what}, found {int(bad.sum())} such entries")


def _fail_no_path(scores: torch.Tensor, mask: torch.Tensor):
    if tracing():
        return
    bad = torch.nonzero(~torch.isfinite(scores) & mask.any(1))
    if len(bad):
        b = int(bad[0, 0])
        raise SSVMInputError(f"constraints: expected at least one allowed tag sequence for every row, "
                             f"row {b} ({int(mask[b].sum())} masked-on positions) has none")


# --------------------------------------------------------------------------------------- numba path


def _numba_decode(E, mask, start, end, trans, penalty, gold=None, rowc=None, cost=None):
    """Labels (B, T) (-1 where masked off), scores (B,) and s(gold) (B,) (None without gold)."""
    s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
    B, T, _ = E.shape
    labels = torch.full((B, T), -1, dtype=torch.int64, device=E.device)
    scores = torch.empty(B, dtype=torch.float64, device=E.device)
    gold_scores = torch.empty(B, dtype=torch.float64, device=E.device)
    augment = gold is not None
    g, c, r = (_host(gold, cost.to(torch.float64), rowc.to(torch.float64)) if augment
               else (mc.NO_LOSS[None], mc.NO_LOSS[None].astype(float), mc.NO_LOSS.astype(float)))
    e_np, m_np, s_np, en_np, t_np = _host(E, mask, s, e, t[None])
    mc.nb_decode(e_np, m_np, s_np, en_np, t_np, augment, g, c, r, *_host(labels, scores, gold_scores))
    return labels, scores, (gold_scores if augment else None)


def _grad_buffers(shape, device):
    """float64 zeros for the gradients of (E (B, T, K), start, end, trans)."""
    K = shape[2]
    return tuple(torch.zeros(s, dtype=torch.float64, device=device) for s in (shape, (K,), (K,), (K, K)))


def _add_stats(buffers, labels, mask, coef):
    """buffers += coef_b * the statistics of labels_b (the indicator vectors of a labeling)."""
    mc.nb_add_path_stats(*_host(labels, mask, coef), *(to_host(x) for x in buffers))


def _cast(buffers, dtypes):
    return tuple(b.to(d) for b, d in zip(buffers, dtypes))


class _NumbaHinge(torch.autograd.Function):
    """H_b = max_y [Delta(y, y_b) + s(y)] - s(y_b) and its subgradient S(y*) - S(y_b) (CPU tensors)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, gold, rowc, cost, penalty):
        ystar, aug, gold_scores = _numba_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
        _fail_no_path(aug, mask)
        ctx.save_for_backward(ystar, gold, mask)
        ctx.shape = E.shape
        ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)
        return (aug - gold_scores).to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        ystar, gold, mask = ctx.saved_tensors
        buffers = _grad_buffers(ctx.shape, ystar.device)
        g = grad.detach().to(torch.float64)
        _add_stats(buffers, ystar, mask, g)
        _add_stats(buffers, gold, mask, -g)
        return _cast(buffers, ctx.dtypes) + (None,) * 5


class _NumbaNLL(torch.autograd.Function):
    """log Z_b - s(y_b) and its gradient E_p[S(y)] - S(y_b) (CPU tensors)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, gold, penalty):
        s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
        B = E.shape[0]
        logz, gold_scores = (torch.empty(B, dtype=torch.float64, device=E.device) for _ in range(2))
        e_np, m_np, s_np, en_np, t_np = _host(E, mask, s, e, t)
        mc.nb_log_partition(e_np, m_np, s_np, en_np, t_np, to_host(logz))
        mc.nb_path_scores(e_np, m_np, to_host(gold.contiguous()), s_np, en_np, t_np, to_host(gold_scores))
        _fail_log_partition(logz, E, mask, start, end, trans, penalty)
        ctx.save_for_backward(E.detach(), gold, mask)
        ctx.penalty = penalty
        ctx.params = (start.detach(), end.detach(), trans.detach())
        ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)
        return (logz - gold_scores).to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        E, gold, mask = ctx.saved_tensors
        g = grad.detach().to(torch.float64).contiguous()
        buffers = _forward_backward(E, mask, *ctx.params, ctx.penalty, g)
        _add_stats(buffers, gold, mask, -g)
        return _cast(buffers, ctx.dtypes) + (None,) * 3


def _forward_backward(E, mask, start, end, trans, penalty, g):
    """Gradient buffers of sum_b g_b log Z_b: (marginals (B, T, K), start, end, trans [next, prev]);
    a row without an allowed path (or that underflows) is refused by name."""
    s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
    buffers = _grad_buffers(E.shape, E.device)
    logz = torch.empty(E.shape[0], dtype=torch.float64, device=E.device)
    mc.nb_forward_backward(*_host(E, mask, s, e, t, g), numba.get_num_threads(), to_host(logz),
                           *(to_host(x) for x in buffers))
    _fail_log_partition(logz, E, mask, start, end, trans, penalty)
    return buffers


def _fail_log_partition(logz, E, mask, start, end, trans, penalty):
    """A nan log Z: no allowed tag sequence (named by the Viterbi check), else float64 underflow."""
    if bool(torch.isnan(logz).any()):
        b = int(torch.nonzero(torch.isnan(logz))[0, 0])
        _, scores, _ = _numba_decode(E[b:b + 1].detach(), mask[b:b + 1], start, end, trans, penalty)
        _fail_no_path(scores, mask[b:b + 1])
        raise SSVMInputError(f"emissions: row {b}: the scores' spread exceeds float64's range in the "
                             "scaled forward recursion (transition scores more than ~700 apart); rescale them")


# --------------------------------------------------------------------------------------- torch path


def compact(mask: torch.Tensor):
    """(order (B, T), lengths (B,)): order lists each row's masked-on positions first, in order,
    then the others; lengths counts the masked-on positions."""
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
    return order, mask.sum(1)


def _gather_rows(E, order):
    return E.gather(1, order[..., None].expand(-1, -1, E.shape[2]))


def _padded_score(Ec, lengths, start, end, trans, labels):
    """s(y) of compacted rows (0 for empty rows), differentiable."""
    B, T, _ = Ec.shape
    valid = torch.arange(T, device=Ec.device)[None, :] < lengths[:, None]
    lab = labels.clamp(min=0)
    s = torch.where(valid, Ec.gather(2, lab[..., None])[..., 0], Ec.new_zeros(())).sum(1)
    last = lab.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    s = s + torch.where(lengths > 0, start[lab[:, 0]] + end[last], Ec.new_zeros(()))
    if T > 1:
        s = s + torch.where(valid[:, 1:], trans[lab[:, 1:], lab[:, :-1]], Ec.new_zeros(())).sum(1)
    return s


def _torch_decode(E, mask, start, end, trans, penalty, gold=None, rowc=None, cost=None):
    """(labels (B, T) -1 where masked off, scores (B,), compacted labels, order, lengths)."""
    s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
    order, lengths = compact(mask)
    U = _gather_rows(E.detach(), order)
    if gold is not None:
        gc = gold.gather(1, order).clamp(min=0)
        U = U + rowc.to(U.dtype)[:, None, None] * cost.to(U.dtype)[gc]
    lab_c, scores = viterbi(U, lengths.clamp(min=1), s, e, t)
    empty = lengths == 0
    lab_c = torch.where(empty[:, None], torch.full_like(lab_c, -1), lab_c)
    scores = torch.where(empty, torch.zeros_like(scores), scores)
    labels = torch.full_like(lab_c, -1).scatter(1, order, lab_c)
    return labels, scores, lab_c, order, lengths


def _torch_hinge(E, start, end, trans, mask, gold, rowc, cost, penalty):
    _, aug, ystar_c, order, lengths = _torch_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
    _fail_no_path(aug, mask)
    Ec = _gather_rows(E, order)
    gold_c = gold.gather(1, order)
    valid = torch.arange(E.shape[1], device=E.device)[None, :] < lengths[:, None]
    delta = rowc.to(E.dtype) * torch.where(valid, cost.to(E.dtype)[gold_c.clamp(min=0), ystar_c.clamp(min=0)],
                                           E.new_zeros(())).sum(1)
    return delta + _padded_score(Ec, lengths, start, end, trans, ystar_c) - _padded_score(
        Ec, lengths, start, end, trans, gold_c)


def _log_partition_rows(Ec, lengths, start, end, trans, penalty):
    """log Z of compacted rows (0 for an empty row) by the scaled forward recursion (the numba
    kernel's), in Ec's dtype; differentiable by autograd; -inf penalties become exact zeros of
    exp(trans), so no nan arises."""
    s, e, t = with_penalty(start, end, trans, penalty)
    B, T, K = Ec.shape
    tm = t.detach().masked_fill(~torch.isfinite(t.detach()), float("-inf")).max()
    tm = torch.where(torch.isfinite(tm), tm, tm.new_zeros(()))     # all forbidden: any shift will do
    X = torch.exp(t - tm)                                            # [next, prev]
    v = Ec[:, 0] + s
    m = v.detach().max(1, keepdim=True).values
    alpha = torch.exp(v - m)
    c = alpha.sum(1, keepdim=True)
    logz = torch.log(c[:, 0]) + m[:, 0]
    alpha = alpha / c
    for i in range(1, T):
        on = (i < lengths)[:, None]
        mi = Ec[:, i].detach().max(1, keepdim=True).values
        nxt = torch.exp(Ec[:, i] - mi) * (alpha @ X.t())
        ci = nxt.sum(1, keepdim=True)
        ci_safe = torch.where(on, ci, torch.ones_like(ci))
        alpha = torch.where(on, nxt / ci_safe, alpha)
        logz = logz + torch.where(on[:, 0], torch.log(ci_safe[:, 0]) + mi[:, 0] + tm, logz.new_zeros(()))
    me = e.detach().max()
    logz = logz + torch.log((alpha * torch.exp(e - me)).sum(1)) + me
    return torch.where(lengths > 0, logz, torch.zeros_like(logz))


def _torch_nll(E, start, end, trans, mask, gold, penalty):
    order, lengths = compact(mask)
    Ec = _gather_rows(E, order)
    logz = _log_partition_rows(Ec, lengths, start, end, trans, penalty)
    if not bool(torch.isfinite(logz).all()):
        _, scores, _, _, _ = _torch_decode(E, mask, start, end, trans, penalty)
        _fail_no_path(scores, mask)
        raise SSVMInputError("emissions: the scores' spread exceeds the dtype's range in the scaled forward "
                             "recursion; rescale them or use float64")
    gold_s = _padded_score(Ec, lengths, *with_penalty(start, end, trans, penalty), gold.gather(1, order))
    return logz - gold_s


def with_penalty(start, end, trans, penalty):
    """Parameters plus penalties, keeping the graph (a gold labeling that breaks a constraint scores -inf)."""
    if penalty is None:
        return start, end, trans
    return tuple(x + p.to(x.device, x.dtype) for x, p in zip((start, end, trans), penalty))


# --------------------------------------------------------------------------------------- dispatch


def _float(E):
    return E.float() if E.dtype in (torch.float16, torch.bfloat16) else E


def hinge(E, mask, start, end, trans, gold, rowc, cost, penalty=None, kernels="auto"):
    """Per-row structured hinge (B,) with Delta(y, y_b) = rowc_b sum_t cost[y_b,t, y_t]."""
    E = _float(E)
    if use_numba(E, kernels):
        return _NumbaHinge.apply(E.contiguous(), start, end, trans, mask.contiguous(), gold.contiguous(),
                                 rowc, cost, penalty)
    return _torch_hinge(E, start, end, trans, mask, gold, rowc, cost, penalty)


def nll(E, mask, start, end, trans, gold, penalty=None, kernels="auto"):
    """Per-row CRF negative log-likelihood log Z_b - s(y_b) (B,)."""
    E = _float(E)
    if use_numba(E, kernels):
        return _NumbaNLL.apply(E.contiguous(), start, end, trans, mask.contiguous(), gold.contiguous(), penalty)
    return _torch_nll(E, start, end, trans, mask, gold, penalty)


def decode(E, mask, start, end, trans, penalty=None, kernels="auto", gold=None, rowc=None, cost=None):
    """(labels (B, T) int64, -1 where masked off; scores (B,)): the Viterbi labeling of every row,
    loss-augmented when ``gold`` is given. No gradient."""
    E = _float(E.detach())
    if use_numba(E, kernels):
        labels, scores, _ = _numba_decode(E.contiguous(), mask.contiguous(), start, end, trans, penalty, gold, rowc,
                                          cost)
    else:
        labels, scores, *_ = _torch_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
    _fail_no_path(scores, mask)
    return labels, scores


def marginals(E, mask, start, end, trans, penalty=None, kernels="auto"):
    """p(y_t = k) (B, T, K) under the CRF of the scores, 0 where masked off. No gradient."""
    E = _float(E.detach())
    if use_numba(E, kernels):
        E = E.contiguous()
        g = torch.ones(E.shape[0], dtype=torch.float64, device=E.device)
        buffers = _forward_backward(E, mask.contiguous(), start.detach(), end.detach(), trans.detach(), penalty, g)
        out = buffers[0].to(E.dtype)
    else:
        order, lengths = compact(mask)
        with torch.enable_grad():
            Ec = _gather_rows(E, order).requires_grad_(True)
            logz = _log_partition_rows(Ec, lengths, start.detach(), end.detach(), trans.detach(), penalty)
            (grad,) = torch.autograd.grad(logz.sum(), Ec)
        valid = torch.arange(E.shape[1], device=E.device)[None, :] < lengths[:, None]
        grad = torch.where(valid[..., None], grad, torch.zeros_like(grad))
        out = torch.zeros_like(grad).scatter(1, order[..., None].expand_as(grad), grad)
    if not tracing() and not bool(torch.isfinite(out).all()):
        _, scores, *_ = _torch_decode(E, mask, start, end, trans, penalty)
        _fail_no_path(scores, mask)
        raise SSVMInputError("emissions: the marginals overflowed (scores out of the dtype's range)")
    return out


def log_partition(E, mask, start, end, trans, penalty=None):
    """log Z per row (B,) (0 for an empty row), differentiable (the torch recursion on any device)."""
    order, lengths = compact(mask)
    return _log_partition_rows(_gather_rows(_float(E), order), lengths, start, end, trans, penalty)


def score(E, mask, start, end, trans, tags):
    """s(tags) per row (B,) over the masked-on positions, differentiable."""
    order, lengths = compact(mask)
    return _padded_score(_gather_rows(E, order), lengths, start, end, trans, tags.gather(1, order))
