"""Entropy, KL divergence and cross-entropy of the span-tree CRF (binary trees over n words, each span scoring
S[i, j]: :mod:`ssvm_torch.spans`), unlabeled. The spans enter p linearly, so the identities and the
:class:`~ssvm_torch.trees.information.Information` function of :mod:`ssvm_torch.trees.information` apply as they
are: H = log Z - <mu, S> from one compiled inside-outside (float64), the gradients Hessian-vector products: on the
CPU CKY's inside-outside in the expectation semiring (:mod:`ssvm_torch.spans.numba_expectation`), elsewhere
autograd twice through CKY's log-semiring inside pass in torch
(:func:`ssvm_torch.spans.torch_cky.log_partition_autograd`, float64; each width one batched step)."""
from __future__ import annotations

import numpy as np
import torch

from . import ops, torch_cky
from .numba_expectation import hessian_vector_batch


class SpanTrees:
    """The binary span trees as a log-linear structure for :class:`~ssvm_torch.trees.information.Information`."""

    def __init__(self, kernels: str):
        self.kernels = kernels

    def marginals_and_log_partition(self, S, lengths):
        """(the span marginals (B, N+1, N+1), log Z (B,) float64), no gradient; a row without a tree refused."""
        return ops.marginals_and_log_partition(S, lengths, self.kernels)

    def hessian_product(self, S, lengths, v, autograd: bool = False):
        """Hess v (B, N+1, N+1) float64, sum_b d^2 log Z_b / dS_b^2 v_b: compiled on the CPU
        (:mod:`ssvm_torch.spans.numba_expectation`), else (or with ``autograd``, the tests' reference) autograd
        twice through the torch inside pass."""
        if ops.use_compiled(S, self.kernels) and not autograd:
            Sh, Vh = (x.detach().to(torch.float64).contiguous().numpy() for x in (S, v))
            out = np.zeros(Sh.shape)
            hessian_vector_batch(Sh, Vh, lengths.to(torch.int64).contiguous().numpy(), out)
            return torch.from_numpy(out)
        with torch.enable_grad():
            leaf = S.detach().to(torch.float64).requires_grad_(True)
            (mu,) = torch.autograd.grad(torch_cky.log_partition_autograd(leaf, lengths).sum(), leaf,
                                        create_graph=True)
            (hv,) = torch.autograd.grad((mu * v.to(torch.float64)).sum(), leaf)
        return hv
