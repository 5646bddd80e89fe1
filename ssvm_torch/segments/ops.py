"""One dispatch over the segment package's backends: the compiled numba kernels
(:mod:`ssvm_torch.segments.numba_semimarkov`, :mod:`ssvm_torch.segments.numba_nbest`) for CPU float32 / float64
scores, the torch recursions
(:mod:`ssvm_torch.segments.torch_semimarkov`) on every other device, under tracing, or when ``kernels="torch"``.
Arguments are checked by the callers (:mod:`ssvm_torch.segments.losses`)."""
from __future__ import annotations

import numba
import torch

from ..grad_mode import records_autograd
from ..devices import from_host, to_host
from . import numba_nbest
from . import numba_semimarkov as nb
from . import torch_semimarkov as tr
from .nbest import nbest as torch_nbest
from .checks import fail_no_segmentation, use_numba
from .information import information_rows, sample_rows


def _host(*tensors):
    """The tensors as numpy arrays, with numba's threads capped at torch's (a module's ``threads`` setting holds
    for these kernels too, as for the tree kernels)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    return tuple(to_host(t.detach().contiguous()) for t in tensors)


def best(S, first, last, trans, lengths, kernels: str = "auto"):
    """(segments (B, T), scores (B,)) of the best segmentations (no gradient)."""
    if not use_numba(S, kernels):
        return tr.best(S, first, last, trans, lengths)
    segments, scores = nb.best_batch(*_host(S, first, last, trans, lengths))
    return from_host(segments, S.device), from_host(scores, S.device)


def nbest(S, first, last, trans, lengths, n: int, kernels: str = "auto"):
    """(segments (B, n, T), scores (B, n)) of the n best segmentations (no gradient; :mod:`.nbest`)."""
    if not use_numba(S, kernels):
        return torch_nbest(S, first, last, trans, lengths, n)
    segments, scores = numba_nbest.nbest_batch(*_host(S, first, last, trans, lengths), n)
    return from_host(segments, S.device), from_host(scores, S.device).to(S.dtype)


class _CompiledLogZ(torch.autograd.Function):
    """log Z by the compiled forward pass; its backward is the forward-backward marginals (the gradient of log Z
    w.r.t. the segment scores, and by the same counts w.r.t. first, last and trans)."""

    @staticmethod
    def forward(ctx, S, first, last, trans, lengths):
        logz, M, MF, ML, MT = nb.marginals_batch(*_host(S, first, last, trans, lengths))
        ctx.save_for_backward(*(from_host(x, S.device) for x in (M, MF, ML, MT)))
        return from_host(logz, S.device)

    @staticmethod
    def backward(ctx, g):
        M, MF, ML, MT = ctx.saved_tensors
        return (g[:, None, None, None] * M, (g[:, None] * MF).sum(0), (g[:, None] * ML).sum(0),
                (g[:, None, None] * MT).sum(0), None)


def log_partition(S, first, last, trans, lengths, kernels: str = "auto", refuse: bool = True) -> torch.Tensor:
    """log Z (B,), differentiable w.r.t. S, first, last and trans. ``refuse``: a non-empty row without a
    segmentation of finite score (log Z -inf) is refused by name; a caller that names the row itself (the set C of
    partial annotation) passes False."""
    logz = (tr.log_partition(S, first, last, trans, lengths) if not use_numba(S, kernels)
            else _CompiledLogZ.apply(S, first, last, trans, lengths))
    if refuse:
        fail_no_segmentation(logz, lengths, "log Z")
    return logz


@records_autograd
def marginals(S, first, last, trans, lengths, kernels: str = "auto", refuse: bool = True) -> torch.Tensor:
    """The segment marginals (B, T, L, K) (no gradient). ``refuse``: a non-empty row without a segmentation of
    finite score (its marginals 0 / 0; the recursions write zeros) is refused by name; a caller that names the row
    itself passes False."""
    if use_numba(S, kernels):
        logz, M, _, _, _ = nb.marginals_batch(*_host(S, first, last, trans, lengths))
        M, logz = from_host(M, S.device), from_host(logz, S.device)
    else:
        with torch.enable_grad():
            S = S.detach().requires_grad_(True)
            logz = tr.log_partition(S, first, last, trans, lengths)
            (M,) = torch.autograd.grad(logz.sum(), S, allow_unused=True)
        M = torch.zeros_like(S) if M is None else M.detach()
    if refuse:
        fail_no_segmentation(logz, lengths, "log Z")
    return M


def information(S, first, last, trans, lengths, other=None):
    """(entropy (B,), KL(p || q) (B,) or None) of the semi-Markov CRF p of the scores (q: ``other`` = (S_q, first,
    last, trans), or None), 0 for an empty row, differentiable (the torch recursion of
    :mod:`ssvm_torch.segments.information`, any device). A row without a segmentation is refused by name."""
    H, D = information_rows(S, first, last, trans, lengths, other)
    if not torch.compiler.is_compiling() and not bool(torch.isfinite(H).all()):
        fail_no_segmentation(tr.log_partition(S.detach(), first.detach(), last.detach(), trans.detach(), lengths),
                             lengths, "log Z")
    return H, D


def sample(S, first, last, trans, lengths, n: int, generator=None):
    """n exact samples (B, n, T) of every row's semi-Markov CRF (:func:`ssvm_torch.segments.information.sample_rows`,
    any device). A row without a segmentation is refused by name."""
    out, logz = sample_rows(S, first, last, trans, lengths, n, generator)
    fail_no_segmentation(logz, lengths, "log Z")
    return out
