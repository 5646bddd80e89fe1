"""The CRF negative log-likelihood of a padded chain batch, the smooth counterpart of the structured
hinge (:func:`ssvm_torch.nn.chain_hinge`): log Z - s(y_i), with log Z from the project's one
torch-struct wrapper (:mod:`ssvm_torch.oracles.crf`, re-exported here)."""
from __future__ import annotations

import torch

from ..oracles.crf import chain_expectations, chain_log_partition, chain_marginals, edge_potentials
from ..oracles.viterbi import check_chain
from .chain import chain_score

__all__ = ["chain_crf_nll", "chain_expectations", "chain_log_partition", "chain_marginals", "edge_potentials"]


def chain_crf_nll(unary, lengths, first, last, trans, gt, chunk: int = 256) -> torch.Tensor:
    """Per-example CRF negative log-likelihood log Z_i - s_i(y_i): (B,), differentiable."""
    check_chain(unary, lengths, first, last, trans, gt)
    return chain_log_partition(unary, lengths, first, last, trans, chunk) - chain_score(
        unary, lengths, first, last, trans, gt)
