"""Autograd layers: the drop-in linear-chain layer (:class:`LinearChain`, pytorch-crf's parameters,
structured hinge or CRF, arbitrary masks, tag constraints), the structured hinge of chains and trees,
their decoders, and the CRF negative log-likelihood of the same chain scores. The chain functions are
those of :mod:`ssvm_torch.chain`, re-exported."""
from ..constraints import allowed_transitions
from ..chain import (chain_crf_nll, chain_decode, chain_expectations, chain_hinge, chain_log_partition, chain_marginals,
                     chain_score, edge_potentials, hamming)
from .chain import ChainSSVMHead
from .linear_chain import LinearChain
from .tree import TreeSSVMHead, tree_decode, tree_hinge, tree_score

__all__ = ["ChainSSVMHead", "LinearChain", "TreeSSVMHead", "allowed_transitions", "chain_crf_nll", "chain_decode",
           "chain_expectations", "chain_hinge", "chain_log_partition", "chain_marginals", "chain_score",
           "edge_potentials", "hamming", "tree_decode", "tree_hinge", "tree_score"]
