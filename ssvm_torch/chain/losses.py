"""The chain package's calls on padded batches given by ``lengths``, differentiable where they are
losses: the path score, the structured hinge and its decoder, the CRF negative log-likelihood, log Z,
the marginals and expectations. They check their arguments (:func:`~ssvm_torch.chain.padded.check_chain`)
and run the masked operations of :mod:`ssvm_torch.chain.ops` (one dispatch over the backends).

For a padded batch of chains with scores s(y) = sum_t U[t, y_t] + first[y_0] + last[y_{T-1}]
+ sum_t trans[y_{t+1}, y_t] (the conventions of :mod:`ssvm_torch.chain`), the
per-example structured hinge of the n-slack SSVM (objective (1) of Osokin et al. 2016) is

    H_i = max_y [ Delta(y, y_i) + s_i(y) ] - s_i(y_i)  >= 0,

Delta the Hamming loss c_i sum_t [y_t != y_i,t] with c_i = 1/T_i (normalized, the default) or a
given per-sequence ``token_loss``. H_i is convex and piecewise linear in the scores; its
subgradient w.r.t. (U, first, last, trans) is the statistics of the loss-augmented labeling y*
minus those of the ground truth. :func:`chain_hinge` finds y* with the batched max oracle on the
tensors' device (the numba kernel on CPU float64, the torch recursion elsewhere: no host round
trip on CUDA) and returns Delta(y*) + s(y*) - s(y_i) built from differentiable gathers, so
autograd yields exactly that subgradient (and any loss on top of it composes).
"""
from __future__ import annotations

import torch

from ..grad_mode import records_autograd
from . import ops
from .checks import refuse_bad_scores
from .padded import check_chain
from .torch_ops import log_partition_rows, padded_score


def chain_score(unary, lengths, first, last, trans, labels) -> torch.Tensor:
    """s_i(y) of padded labelings ``labels`` (B, T) (-1 beyond ``lengths``): (B,), differentiable
    w.r.t. the score tensors."""
    return padded_score(unary, lengths, first, last, trans, labels)


def hamming(labels, gt, lengths, token_loss=None) -> torch.Tensor:
    """Delta(y, y_i) = c_i sum_t [y_t != y_i,t], c_i = 1/T_i unless ``token_loss`` (B,) is given."""
    wrong = ((labels != gt) & (gt >= 0)).sum(1)
    c = 1.0 / lengths.to(torch.float64) if token_loss is None else token_loss.to(torch.float64)
    return wrong * c


def _mask(unary, lengths):
    return torch.arange(unary.shape[1], device=unary.device)[None, :] < lengths[:, None]


def _as_masked(unary, lengths, gt, token_loss):
    """The padded-by-lengths arguments in the masked form of :mod:`ssvm_torch.chain.ops`:
    mask (B, T), gold labels (0 where padded), per-row loss of one wrong position, Hamming costs."""
    K = unary.shape[2]
    mask = _mask(unary, lengths)
    gold = None if gt is None else gt.clamp(min=0)
    rowc = (1.0 / lengths.to(torch.float64) if token_loss is None else token_loss.to(torch.float64))
    cost = 1.0 - torch.eye(K, dtype=torch.float64, device=unary.device)
    return mask, gold, rowc, cost


def _check_scores(unary, lengths, first, last, trans, gt) -> None:
    check_chain(unary, lengths, first, last, trans, gt)
    for name, t in (("unary", unary), ("first", first), ("last", last), ("trans", trans)):
        refuse_bad_scores(t.detach(), name)


def chain_decode(unary, lengths, first, last, trans, gt=None, token_loss=None, kernels: str = "auto") -> torch.Tensor:
    """Max-scoring labelings (B, T) int64, -1 beyond ``lengths``; loss-augmented if ``gt`` is given.
    No gradient flows (use :func:`chain_hinge` for training). The oracle is
    :func:`ssvm_torch.chain.ops.decode`; ``kernels``: "auto" (compiled on CPU float32/float64,
    torch elsewhere), "numba" or "torch"."""
    _check_scores(unary, lengths, first, last, trans, gt)
    mask, gold, rowc, cost = _as_masked(unary, lengths, gt, token_loss)
    with torch.no_grad():
        labels, _ = ops.decode(unary, mask, first, last, trans, kernels=kernels, gold=gold, rowc=rowc, cost=cost)
    return labels


def chain_hinge(unary, lengths, first, last, trans, gt, token_loss=None, kernels: str = "auto") -> torch.Tensor:
    """Per-example structured hinge H_i (B,) (module docstring), differentiable w.r.t. ``unary``,
    ``first``, ``last`` and ``trans``; its gradient is the subgradient
    onehot-statistics(y*) - onehot-statistics(y_i) of the loss-augmented labeling y*
    (:func:`ssvm_torch.chain.ops.hinge`, the oracle of :class:`~ssvm_torch.nn.LinearChain` too)."""
    _check_scores(unary, lengths, first, last, trans, gt)
    mask, gold, rowc, cost = _as_masked(unary, lengths, gt, token_loss)
    return ops.hinge(unary, mask, first, last, trans, gold, rowc, cost, kernels=kernels)


def chain_crf_nll(unary, lengths, first, last, trans, gt, chunk: int = 256) -> torch.Tensor:
    """Per-example CRF negative log-likelihood log Z_i - s_i(y_i): (B,), differentiable (the smooth
    counterpart of :func:`chain_hinge`; :func:`ssvm_torch.chain.ops.nll`). ``chunk`` is kept for
    callers of the earlier torch-struct version: no recursion here needs the batch cut."""
    check_chain(unary, lengths, first, last, trans, gt)
    return ops.nll(unary, _mask(unary, lengths), first, last, trans, gt.clamp(min=0))


def chain_log_partition(unary, lengths, first, last, trans, chunk: int = 256) -> torch.Tensor:
    """log Z_i = logsumexp_y s_i(y): (B,), differentiable (the torch forward recursion,
    :func:`ssvm_torch.chain.torch_ops.log_partition_rows`); ``first``/``last`` (K,) or (B, K),
    ``trans`` (K, K) or (B, K, K). ``chunk``: kept for compatibility, unused."""
    check_chain(unary, lengths, first, last, trans, per_sequence=True)
    return log_partition_rows(unary, lengths, first, last, trans)


def chain_marginals(unary, lengths, first, last, trans, chunk: int = 256) -> torch.Tensor:
    """Per-position label marginals p(y_t = k | x) (B, T, K), zero beyond ``lengths``; no graph kept.
    Shared scores go through :func:`ssvm_torch.chain.ops.marginals` (numba on CPU), per-sequence
    ones through :func:`chain_expectations`."""
    check_chain(unary, lengths, first, last, trans, per_sequence=True)
    if first.dim() == 1 and last.dim() == 1 and trans.dim() == 2:
        return ops.marginals(unary, _mask(unary, lengths), first, last, trans)
    return chain_expectations(unary, lengths, first, last, trans)[0]


@records_autograd
def chain_expectations(unary, lengths, first, last, trans, chunk: int = 256):
    """The sufficient statistics of p(y) = exp s(y) / Z per sequence: label marginals (B, T, K) (zero
    beyond ``lengths``), expected first and last labels (B, K), expected transition counts
    (B, K, K) [next, prev] and log Z (B,), all as gradients of log Z (the torch forward recursion);
    ``first``/``last``/``trans`` shared or per sequence. No graph is kept."""
    check_chain(unary, lengths, first, last, trans, per_sequence=True)
    B, T, K = unary.shape
    with torch.enable_grad():
        leaves = [unary.detach().clone().requires_grad_(True)]
        for t, shape in ((first, (B, K)), (last, (B, K)), (trans, (B, K, K))):
            leaves.append(t.detach().expand(*shape).clone().requires_grad_(True))
        logz = log_partition_rows(leaves[0], lengths, *leaves[1:])
        grads = torch.autograd.grad(logz.sum(), leaves)
    Mu = torch.where(_mask(unary, lengths)[..., None], grads[0], torch.zeros_like(grads[0]))
    return (Mu.detach(), *(g.detach() for g in grads[1:]), logz.detach())
