"""Entropy, KL divergence and cross-entropy of the span-tree CRF (binary trees over n words, each span scoring
S[i, j]: :mod:`ssvm_torch.spans`), unlabeled. The spans enter p linearly, so the identities and the
:class:`~ssvm_torch.trees.information.Information` function of :mod:`ssvm_torch.trees.information` apply as they
are: H = log Z - <mu, S> from one compiled inside-outside (float64), the gradients Hessian-vector products: on the
CPU CKY's inside-outside in the expectation semiring (:mod:`ssvm_torch.spans.numba_expectation`), elsewhere
autograd twice through CKY's log-semiring inside pass in torch (:func:`ssvm_torch.spans.torch_cky._charts`,
float64; each width one batched step)."""
from __future__ import annotations

import numpy as np
import torch

from ..devices import from_host
from ..trees.checks import host_batch, parallel_rows
from . import torch_cky
from .numba_cky import log_partition_batch, log_partition_batch_parallel
from .numba_expectation import hessian_vector_batch
from .ops import _compiled, fail_no_tree


def inside_log_partition(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z (B,) by the torch inside pass with plain autograd (differentiable twice): the products' path."""
    if S.shape[1] == 1:
        return S.new_zeros(S.shape[0])
    L, _, _ = torch_cky._charts(torch_cky._masked(S, lengths), "log")
    return torch.where(lengths > 0, torch_cky._roots(L, lengths), S.new_zeros(()))


class SpanTrees:
    """The binary span trees as a log-linear structure for :class:`~ssvm_torch.trees.information.Information`."""

    def __init__(self, kernels: str):
        self.kernels = kernels

    def marginals_and_log_partition(self, S, lengths):
        """(the span marginals (B, N+1, N+1), log Z (B,) float64), no gradient; a row without a tree refused."""
        if _compiled(S, self.kernels):
            Sh, Lh = host_batch(S, lengths)
            B, M, _ = Sh.shape
            logz, marg = np.empty(B), np.zeros((B, M, M))
            (log_partition_batch_parallel if parallel_rows(B) else log_partition_batch)(Sh, Lh, True, logz, marg)
            logz, marg = from_host(logz, S.device), from_host(marg, S.device)
        else:
            with torch.enable_grad():
                leaf = S.detach().clone().requires_grad_(True)
                logz = torch_cky.log_partition(leaf, lengths)
                (marg,) = torch.autograd.grad(logz.sum(), leaf)
            logz = logz.detach()
        fail_no_tree(logz, lengths, "log Z")
        return marg, logz.to(torch.float64)

    def hessian_product(self, S, lengths, v, autograd: bool = False):
        """Hess v (B, N+1, N+1) float64, sum_b d^2 log Z_b / dS_b^2 v_b: compiled on the CPU
        (:mod:`ssvm_torch.spans.numba_expectation`), else (or with ``autograd``, the tests' reference) autograd
        twice through the torch inside pass."""
        if _compiled(S, self.kernels) and not autograd:
            Sh, Vh = (x.detach().to(torch.float64).contiguous().numpy() for x in (S, v))
            out = np.zeros(Sh.shape)
            hessian_vector_batch(Sh, Vh, lengths.to(torch.int64).contiguous().numpy(), out)
            return torch.from_numpy(out)
        with torch.enable_grad():
            leaf = S.detach().to(torch.float64).requires_grad_(True)
            (mu,) = torch.autograd.grad(inside_log_partition(leaf, lengths).sum(), leaf, create_graph=True)
            (hv,) = torch.autograd.grad((mu * v.to(torch.float64)).sum(), leaf)
        return hv
