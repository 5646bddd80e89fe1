"""The Triton backend of the chain package's masked operations (CUDA; any device under
``TRITON_INTERPRET=1``): the kernels of :mod:`ssvm_torch.chain.triton_viterbi` and
:mod:`ssvm_torch.chain.triton_crf` wrapped in autograd Functions whose backward writes the gradient
directly, as the numba backend's (:mod:`ssvm_torch.chain.numba_autograd`) does: for the hinge the
statistics of the loss-augmented labeling minus the gold ones, for the CRF the marginals minus the
gold statistics. Each call is a few launches whatever T is (the torch backend launches a few per
position). Conventions in :mod:`ssvm_torch.chain`; half-precision input is computed in float32 by
the callers (:mod:`ssvm_torch.chain.ops`)."""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from .checks import effective, fail_no_path
from .triton_crf import crf_backward, crf_forward, path_stats
from .triton_viterbi import decode_masked


def triton_decode(E, mask, start, end, trans, penalty, gold=None, rowc=None, cost=None):
    """(labels (B, T) -1 where masked off, scores (B,)): the masked Viterbi kernel, loss-augmented
    with rowc_b cost[gold_t, k] when ``gold`` is given."""
    s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
    labels, scores, _ = decode_masked(E.detach(), mask, s, e, t, gold=gold, rowc=rowc, cost=cost)
    return labels, scores


def _refuse_bad_log_partition(logz, E, mask, start, end, trans, penalty, what: str) -> None:
    """A non-finite log Z: a row without an allowed tag sequence (named by the decode check), else
    scores out of the dtype's range."""
    if not bool(torch.isfinite(logz).all()):
        _, scores = triton_decode(E, mask, start, end, trans, penalty)
        fail_no_path(scores, mask)
        raise SSVMInputError(f"emissions: {what} overflowed (scores out of the dtype's range)")


class TritonHinge(torch.autograd.Function):
    """H_b = max_y [Delta(y, y_b) + s(y)] - s(y_b) (one kernel: the loss-augmented Viterbi and s(y_b)
    in the same walk) and its subgradient S(y*) - S(y_b) (one kernel)."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, gold, rowc, cost, penalty):
        s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
        ystar, aug, gold_s = decode_masked(E.detach(), mask, s, e, t, gold=gold, rowc=rowc.to(E.dtype),
                                           cost=cost.to(device=E.device, dtype=E.dtype), gold_score=True)
        fail_no_path(aug, mask)
        ctx.save_for_backward(ystar, gold, mask)
        ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)
        ctx.K = E.shape[2]
        return aug - gold_s

    @staticmethod
    def backward(ctx, grad):
        ystar, gold, mask = ctx.saved_tensors
        stats = path_stats(ystar, gold, mask, grad.detach(), ctx.K, ctx.dtypes[0])
        return tuple(x.to(d) for x, d in zip(stats, ctx.dtypes)) + (None,) * 5


class TritonCRF(torch.autograd.Function):
    """log Z_b - s(y_b) (log Z_b alone when ``gold`` is None) by the fused forward kernel, and its
    gradient E_p[S(y)] - S(y_b) by the fused backward kernel."""

    @staticmethod
    def forward(ctx, E, start, end, trans, mask, gold, penalty):
        s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
        E = E.detach().contiguous()
        logz, alpha, gold_s = crf_forward(E, mask, s, e, t, gold)
        _refuse_bad_log_partition(logz, E, mask, start, end, trans, penalty, "log Z")
        ctx.save_for_backward(E, mask, alpha, logz, e, t, gold if gold is not None else logz)
        ctx.has_gold = gold is not None
        ctx.dtypes = (E.dtype, start.dtype, end.dtype, trans.dtype)
        return logz - gold_s if gold is not None else logz

    @staticmethod
    def backward(ctx, grad):
        E, mask, alpha, logz, e, t, gold = ctx.saved_tensors
        grads = crf_backward(E, mask, e, t, alpha, logz, grad.detach(), gold if ctx.has_gold else None)
        return tuple(x.to(d) for x, d in zip(grads, ctx.dtypes)) + (None,) * 3


def triton_marginals(E, mask, start, end, trans, penalty):
    """p(y_t = k) (B, T, K), 0 where masked off: the forward and backward kernels with g = 1."""
    s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
    E = E.detach().contiguous()
    logz, alpha, _ = crf_forward(E, mask, s, e, t)
    _refuse_bad_log_partition(logz, E, mask, start, end, trans, penalty, "the marginals")
    return crf_backward(E, mask, e, t, alpha, logz, torch.ones_like(logz))[0]
