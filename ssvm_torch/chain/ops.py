"""The chain package's operations on a padded batch with an arbitrary mask, each with one dispatch
rule over its backends: the structured hinge, the CRF negative log-likelihood, Viterbi decoding,
the tag marginals, log Z and the path score; the entropy and KL divergence (compiled on the CPU, torch
elsewhere: :func:`information`) and exact samples (torch: :mod:`ssvm_torch.chain.information`).

Arguments, after validation by the callers (:class:`~ssvm_torch.nn.LinearChain`,
:mod:`ssvm_torch.chain.losses`): emissions E (B, T, K) float, mask (B, T) bool, start / end (K,),
trans (K, K) [next, prev] (the package's convention, :mod:`ssvm_torch.chain`), and ``penalty`` =
(start, end, trans) additive tag-constraint scores (0 or -inf, :func:`ssvm_torch.constraints.penalties`)
or None. Row b's chain is its masked-on positions.

The rule, ``kernels`` = ``auto``: the numba backend (:mod:`ssvm_torch.chain.numba_autograd`) for CPU
float32/float64 outside tracing, the Triton backend (:mod:`ssvm_torch.chain.triton_autograd`: fused
kernels, a few launches per call) for CUDA where Triton is importable and K <= 64, the torch backend
(:mod:`ssvm_torch.chain.torch_ops`, any device, the reference) elsewhere; ``numba`` / ``triton`` /
``torch`` force one. Half-precision emissions are computed in float32.
"""
from __future__ import annotations

import torch

from ..grad_mode import records_autograd
from ..devices import to_host
from ..errors import SSVMInputError
from .checks import effective, fail_no_path, refuse_bad_scores, tracing, use_numba, use_triton
from .information import information_rows, sample_rows
from .numba_autograd import NumbaEntropy, NumbaHinge, NumbaKL, NumbaLogZ, NumbaNLL, forward_backward, numba_decode
from .numba_nbest import nb_nbest
from .torch_ops import (compact, gather_rows, log_partition_rows, padded_score, torch_decode, torch_hinge, torch_nbest,
                        torch_nll)
from .triton_autograd import TritonCRF, TritonHinge, triton_decode, triton_marginals

__all__ = ["computed_dtype", "decode", "hinge", "information", "log_partition", "marginals", "nbest", "nll",
           "refuse_bad_scores", "sample", "score", "softmax_margin", "tracing"]


def computed_dtype(E: torch.Tensor) -> torch.dtype:
    """The dtype a chain of emissions E is computed in: theirs, float32 for half precision."""
    return torch.float32 if E.dtype in (torch.float16, torch.bfloat16) else E.dtype


def _float(E):
    return E.to(computed_dtype(E))


def hinge(E, mask, start, end, trans, gold, rowc, cost, penalty=None, kernels="auto"):
    """Per-row structured hinge (B,) with Delta(y, y_b) = rowc_b sum_t cost[y_b,t, y_t]."""
    E = _float(E)
    if use_numba(E, kernels):
        return NumbaHinge.apply(E.contiguous(), start, end, trans, mask.contiguous(), gold.contiguous(),
                                rowc, cost, penalty)
    if use_triton(E, kernels):
        return TritonHinge.apply(E.contiguous(), start, end, trans, mask, gold, rowc, cost, penalty)
    return torch_hinge(E, start, end, trans, mask, gold, rowc, cost, penalty)


def nll(E, mask, start, end, trans, gold, penalty=None, kernels="auto"):
    """Per-row CRF negative log-likelihood log Z_b - s(y_b) (B,)."""
    E = _float(E)
    if use_numba(E, kernels):
        return NumbaNLL.apply(E.contiguous(), start, end, trans, mask.contiguous(), gold.contiguous(), penalty)
    if use_triton(E, kernels):
        return TritonCRF.apply(E.contiguous(), start, end, trans, mask, gold, penalty)
    return torch_nll(E, start, end, trans, mask, gold, penalty)


def softmax_margin(E, mask, start, end, trans, gold, rowc, cost, penalty=None, kernels="auto"):
    """Per-row softmax-margin loss (Gimpel & Smith 2010) log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b),
    Delta(y, y_b) = rowc_b sum_t cost[y_b,t, y_t] (the hinge's, cost with a zero diagonal): the CRF's
    NLL of the cost-augmented emissions E + rowc_b cost[y_b,t, :] (s of the gold labeling is unchanged
    by the augmentation), so its gradient is the cost-augmented marginals minus the gold statistics,
    written directly by the numba backend as the CRF's is."""
    E = _float(E)
    augmented = E + rowc.to(E.dtype)[:, None, None] * cost.to(device=E.device, dtype=E.dtype)[gold]
    return nll(augmented, mask, start, end, trans, gold, penalty, kernels)


def nbest(E, mask, start, end, trans, n: int, penalty=None, kernels="auto"):
    """(labels (B, n, T) int64, scores (B, n)): the n highest-scoring labelings of every row in
    non-increasing score order, -1 where masked off and for the ranks a row lacks (fewer than n
    allowed labelings; their scores are -inf). No gradient."""
    E = _float(E.detach())
    if use_numba(E, kernels):
        s, e, t = effective(start, end, trans, penalty, torch.float64, E.device)
        B, T, _ = E.shape
        labels = torch.full((B, n, T), -1, dtype=torch.int64)
        scores = torch.full((B, n), float("-inf"), dtype=torch.float64)
        nb_nbest(*(to_host(x.contiguous()) for x in (E, mask, s, e, t)), n, to_host(labels), to_host(scores))
        return labels, scores.to(E.dtype)
    return torch_nbest(E, mask, start, end, trans, penalty, n)


def decode(E, mask, start, end, trans, penalty=None, kernels="auto", gold=None, rowc=None, cost=None,
           refuse: bool = True):
    """(labels (B, T) int64, -1 where masked off; scores (B,)): the Viterbi labeling of every row,
    loss-augmented when ``gold`` is given. No gradient. A row without an allowed labeling is refused by name
    (``refuse``), or left with score -inf for the caller to name."""
    E = _float(E.detach())
    if use_numba(E, kernels):
        labels, scores, _ = numba_decode(E.contiguous(), mask.contiguous(), start, end, trans, penalty, gold, rowc,
                                         cost)
    elif use_triton(E, kernels):
        labels, scores = triton_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
    else:
        labels, scores, *_ = torch_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
    if refuse:
        fail_no_path(scores, mask)
    return labels, scores


@records_autograd
def marginals(E, mask, start, end, trans, penalty=None, kernels="auto"):
    """p(y_t = k) (B, T, K) under the CRF of the scores, 0 where masked off. No gradient."""
    E = _float(E.detach())
    if use_numba(E, kernels):
        E = E.contiguous()
        g = torch.ones(E.shape[0], dtype=torch.float64, device=E.device)
        buffers = forward_backward(E, mask.contiguous(), start.detach(), end.detach(), trans.detach(), penalty, g)
        out = buffers[0].to(E.dtype)
    elif use_triton(E, kernels):
        out = triton_marginals(E, mask, start, end, trans, penalty)
    else:
        order, lengths = compact(mask)
        with torch.enable_grad():
            Ec = gather_rows(E, order).requires_grad_(True)
            logz = log_partition_rows(Ec, lengths, start.detach(), end.detach(), trans.detach(), penalty)
            (grad,) = torch.autograd.grad(logz.sum(), Ec)
        valid = torch.arange(E.shape[1], device=E.device)[None, :] < lengths[:, None]
        grad = torch.where(valid[..., None], grad, torch.zeros_like(grad))
        out = torch.zeros_like(grad).scatter(1, order[..., None].expand_as(grad), grad)
    _refuse_non_finite(torch.isfinite(out), E, mask, start, end, trans, penalty, "the marginals overflowed")
    return out


def _refuse_non_finite(finite: torch.Tensor, E, mask, start, end, trans, penalty, what: str) -> None:
    """Where ``finite`` (a result's finite entries) is not all True: the row without an allowed tag sequence is
    named (by the decode), else the scores left the dtype's range (``what`` says which result). Not while
    tracing, which cannot branch on values."""
    if tracing() or bool(finite.all()):
        return
    _, scores, *_ = torch_decode(E, mask, start, end, trans, penalty)
    fail_no_path(scores, mask)
    raise SSVMInputError(f"emissions: {what} (scores out of the dtype's range)")


def log_partition(E, mask, start, end, trans, penalty=None, kernels="auto"):
    """log Z per row (B,) (0 for an empty row), differentiable: the compiled recursion on the CPU (its
    backward the compiled forward-backward), the fused Triton kernels where they apply, else the torch
    recursion (any device)."""
    if use_numba(_float(E), kernels):
        return NumbaLogZ.apply(_float(E).contiguous(), start, end, trans, mask.contiguous(), penalty)
    if use_triton(_float(E), kernels):
        return TritonCRF.apply(_float(E).contiguous(), start, end, trans, mask, None, penalty)
    order, lengths = compact(mask)
    logz = log_partition_rows(gather_rows(_float(E), order), lengths, start, end, trans, penalty)
    # refused by name, as the other two paths do
    _refuse_non_finite(torch.isfinite(logz), E, mask, start, end, trans, penalty, "log Z overflowed")
    return logz


def score(E, mask, start, end, trans, tags):
    """s(tags) per row (B,) over the masked-on positions, differentiable."""
    order, lengths = compact(mask)
    return padded_score(gather_rows(E, order), lengths, start, end, trans, tags.gather(1, order))


def information(E, mask, start, end, trans, penalty=None, other=None, kernels="auto", entropy: bool = True):
    """(entropy (B,) or None, KL(p || q) (B,) or None) of the CRF p of the scores, 0 for an empty row,
    differentiable; ``other`` = (E_q, start, end, trans, penalty) of q on the same mask, or None. On the CPU the
    entropy and the KL (constraints or not) take the compiled kernels (:mod:`ssvm_torch.chain.numba_entropy`;
    ``kernels`` as elsewhere), elsewhere the torch recursion of :mod:`ssvm_torch.chain.information` (any device:
    CUDA's path, no Triton kernel of its own). ``entropy=False`` with ``other``: the compiled path skips the
    entropy (None; the torch recursion has it on the way). A row without an allowed tag sequence is refused by
    name."""
    if use_numba(_float(E), kernels):
        H = NumbaEntropy.apply(_float(E), start, end, trans, mask, penalty) if entropy or other is None else None
        D = None if other is None else NumbaKL.apply(_float(E), start, end, trans, _float(other[0]).contiguous(),
                                                     *other[1:4], mask, penalty, other[4])
    else:
        order, lengths = compact(mask)
        oth = None if other is None else (gather_rows(_float(other[0]), order), *other[1:])
        H, D = information_rows(gather_rows(_float(E), order), lengths, start, end, trans, penalty, oth)
    # a row without a path is NaN in both (D may be +inf where q forbids what p allows, so only its NaN counts)
    _refuse_non_finite(torch.isfinite(H) if H is not None else ~torch.isnan(D), E, mask, start, end, trans, penalty,
                       "the entropy is not finite")
    return H, D


def sample(E, mask, start, end, trans, n: int, penalty=None, generator=None):
    """n exact samples of every row's CRF (B, n, T) int64, -1 where masked off (forward filtering, backward
    sampling: :func:`ssvm_torch.chain.information.sample_rows`, any device). A row without an allowed tag
    sequence is refused by name."""
    order, lengths = compact(mask)
    labels_c, logz = sample_rows(gather_rows(_float(E.detach()), order), lengths, start, end, trans, penalty, n,
                                 generator)
    fail_no_path(logz, mask)
    B, T = mask.shape
    return torch.full_like(labels_c, -1).scatter(2, order[:, None, :].expand(B, n, T), labels_c)
