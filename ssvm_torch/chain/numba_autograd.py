"""The numba backend of the chain package's masked operations (CPU float32/float64): the compiled
kernels of :mod:`ssvm_torch.chain.numba_masked` wrapped in autograd Functions whose backward
writes the gradient directly -- for the hinge the statistics of the loss-augmented labeling minus
those of the gold labeling (the subgradient), for the CRF the marginals minus the gold statistics --
so no (B, T, K, K) tensor is formed. Conventions in :mod:`ssvm_torch.chain`."""
from __future__ import annotations

import numba
import torch

from ..devices import to_host, to_host_all
from ..errors import SSVMInputError
from . import numba_masked as mc
from .numba_entropy import nb_information
from .checks import effective, fail_no_path
from .numba_viterbi import loop_order


def _host(*tensors):
    return to_host_all(*tensors)


def numba_decode(E, mask, start, end, trans, penalty, gold=None, rowc=None, cost=None):
    """Labels (B, T) (-1 where masked off), scores (B,) and s(gold) (B,) (None without gold)."""
    s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
    B, T, _ = E.shape
    labels = torch.full((B, T), -1, dtype=torch.int64, device=E.device)
    scores = torch.empty(B, dtype=torch.float64, device=E.device)
    gold_scores = torch.empty(B, dtype=torch.float64, device=E.device)
    augment = gold is not None
    g, c, r = (_host(gold, cost.to(torch.float64), rowc.to(torch.float64)) if augment
               else (mc.NO_LOSS[None], mc.NO_LOSS[None].astype(float), mc.NO_LOSS.astype(float)))
    mc.nb_decode(*_host(E, mask, s, e, t[None]), augment, g, c, r, *_host(labels, scores, gold_scores), loop_order(),
                 numba.get_num_threads())
    return labels, scores, (gold_scores if augment else None)


def _grad_buffers(shape, device):
    """float64 zeros for the gradients of (E (B, T, K), start, end, trans)."""
    K = shape[2]
    return tuple(torch.zeros(s, dtype=torch.float64, device=device) for s in (shape, (K,), (K,), (K, K)))


def _add_stats(buffers, labels, mask, coef):
    """buffers += coef_b * the statistics of labels_b (the indicator vectors of a labeling)."""
    mc.nb_add_path_stats(*_host(labels, mask, coef), *_host(*buffers))


def _add_stats_difference(buffers, labels, gold, mask, coef):
    """buffers += coef_b * (the statistics of labels_b - those of gold_b): the hinge's subgradient."""
    lab_np, gold_np, m_np, c_np, nc_np = _host(labels, gold, mask, coef, -coef)
    bufs = _host(*buffers)
    mc.nb_add_path_stats(lab_np, m_np, c_np, *bufs)
    mc.nb_add_path_stats(gold_np, m_np, nc_np, *bufs)


def _cast(buffers, dtypes):
    return tuple(b.to(d) for b, d in zip(buffers, dtypes))


class NumbaHinge(torch.autograd.Function):
    """H_b = max_y [Delta(y, y_b) + s(y)] - s(y_b) and its subgradient S(y*) - S(y_b) (CPU tensors)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, gold, rowc, cost, penalty):
        ystar, aug, gold_scores = numba_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
        fail_no_path(aug, mask)
        ctx.save_for_backward(ystar, gold, mask)
        ctx.shape = E.shape
        ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)
        return (aug - gold_scores).to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        ystar, gold, mask = ctx.saved_tensors
        buffers = _grad_buffers(ctx.shape, ystar.device)
        _add_stats_difference(buffers, ystar, gold, mask, grad.detach().to(torch.float64))
        return _cast(buffers, ctx.dtypes) + (None,) * 5


class NumbaNLL(torch.autograd.Function):
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
        buffers = forward_backward(E, mask, *ctx.params, ctx.penalty, g)
        _add_stats(buffers, gold, mask, -g)
        return _cast(buffers, ctx.dtypes) + (None,) * 3


def _keep_inputs(ctx, E, mask, start, end, trans, penalty) -> None:
    """What a backward that reruns a compiled pass needs: the emissions and mask, the parameters (detached), the
    penalties and the dtypes to cast the float64 gradients back to."""
    ctx.save_for_backward(E.detach(), mask)
    ctx.penalty = penalty
    ctx.params = (start.detach(), end.detach(), trans.detach())
    ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)


class NumbaLogZ(torch.autograd.Function):
    """log Z_b and its gradient, the marginals (CPU tensors): the compiled scaled recursion, its backward
    the compiled forward-backward (no graph through the recursion)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, penalty):
        s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
        logz = torch.empty(E.shape[0], dtype=torch.float64, device=E.device)
        mc.nb_log_partition(*_host(E, mask, s, e, t), to_host(logz))
        _fail_log_partition(logz, E, mask, start, end, trans, penalty)
        _keep_inputs(ctx, E, mask, start, end, trans, penalty)
        return logz.to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        E, mask = ctx.saved_tensors
        buffers = forward_backward(E, mask, *ctx.params, ctx.penalty, grad.detach().to(torch.float64).contiguous())
        return _cast(buffers, ctx.dtypes) + (None,) * 2


class NumbaEntropy(torch.autograd.Function):
    """The entropy H_b of each row's CRF (CPU tensors; :mod:`ssvm_torch.chain.numba_entropy`), its backward the
    compiled covariance pass -Cov_p(phi, s(y)) times the incoming gradient. A row without an allowed path is nan
    (the caller refuses it by name)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, penalty):
        H = _information(E.detach(), mask, start, end, trans, penalty, None)[0]
        _keep_inputs(ctx, E, mask, start, end, trans, penalty)
        return H.to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        E, mask = ctx.saved_tensors
        _, buffers = _information(E, mask, *ctx.params, ctx.penalty, grad.detach().to(torch.float64).contiguous())
        return _cast(buffers, ctx.dtypes) + (None,) * 2


def _information(E, mask, start, end, trans, penalty, g, other=None):
    """(H (B,) float64, or with ``other`` = (Q, start, end, trans, penalty) of q E_p[s_p - s_q] - log Z_p;
    the gradient buffers of sum_b g_b times it w.r.t. p's emissions and parameters, or None when ``g`` is None).
    The difference of two constrained scores is taken where p allows the move (0 where p forbids it: the passes
    give such moves no weight) and is +inf where only q forbids it, so the KL is +inf exactly when p gives weight
    to a sequence q forbids."""
    s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
    if other is None:
        R, rs, re, rt = E, s, e, t
    else:
        qs, qe, qt = effective(*other[1:4], other[4], torch.float64, E.device)
        rs, re, rt = (torch.where(torch.isneginf(a), torch.zeros_like(a), a - b)
                      for a, b in ((s, qs), (e, qe), (t, qt)))
        R = E.to(torch.float64) - other[0].to(torch.float64)
    H = torch.empty(E.shape[0], dtype=torch.float64, device=E.device)
    buffers = _grad_buffers(E.shape, E.device) if g is not None else _grad_buffers((1, 1, E.shape[2]), E.device)
    gg = g if g is not None else torch.zeros(E.shape[0], dtype=torch.float64)
    nb_information(*_host(E.contiguous(), mask.contiguous(), s, e, t, R.contiguous(), rs, re, rt), other is not None,
                   to_host(gg), g is not None, numba.get_num_threads(), to_host(H), *(to_host(x) for x in buffers))
    return H, (buffers if g is not None else None)


class NumbaKL(torch.autograd.Function):
    """KL(p || q)_b of two chains' CRFs on one mask (CPU tensors), each with its constraint penalties or None:
    E_p[s_p - s_q] - log Z_p from :mod:`ssvm_torch.chain.numba_entropy`, + log Z_q from the compiled forward pass;
    the backward Cov_p(phi, s_p - s_q) for p's emissions and parameters, mu_q - mu_p for q's (two compiled
    forward-backward passes)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, Q, qstart, qend, qtrans, mask, penalty=None, qpenalty=None):
        q = (Q.detach(), qstart.detach(), qend.detach(), qtrans.detach(), qpenalty)
        D = _information(E.detach(), mask, start, end, trans, penalty, None, q)[0]
        logzq = torch.empty(E.shape[0], dtype=torch.float64, device=E.device)
        mc.nb_log_partition(*_host(q[0].contiguous(), mask.contiguous(),
                                   *effective(*q[1:4], qpenalty, torch.float64, E.device)), to_host(logzq))
        _keep_inputs(ctx, E, mask, start, end, trans, penalty)
        ctx.q, ctx.qdtypes = q, (Q.dtype, qstart.dtype, qend.dtype, qtrans.dtype)
        return (D + logzq).to(E.dtype)

    @staticmethod
    def backward(ctx, grad):
        E, mask = ctx.saved_tensors
        g = grad.detach().to(torch.float64).contiguous()
        _, gp = _information(E, mask, *ctx.params, ctx.penalty, g, ctx.q)
        mu_q = forward_backward(ctx.q[0].contiguous(), mask, *ctx.q[1:], g)
        mu_p = forward_backward(E, mask, *ctx.params, ctx.penalty, g)
        gq = tuple(a - b for a, b in zip(mu_q, mu_p))
        return _cast(gp, ctx.dtypes) + _cast(gq, ctx.qdtypes) + (None,) * 3


def forward_backward(E, mask, start, end, trans, penalty, g):
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
        _, scores, _ = numba_decode(E[b:b + 1].detach(), mask[b:b + 1], start, end, trans, penalty)
        fail_no_path(scores, mask[b:b + 1])
        raise SSVMInputError(f"emissions: row {b}: the scores' spread exceeds float64's range in the "
                             "scaled forward recursion (transition scores more than ~700 apart); rescale them")
