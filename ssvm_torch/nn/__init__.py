"""Autograd layers: the drop-in linear-chain layer (:class:`LinearChain`, pytorch-crf's parameters,
structured hinge or CRF, arbitrary masks, tag constraints), the dependency-tree layer (:class:`DependencyTree`:
hinge, softmax-margin or CRF over projective or non-projective trees), the semi-Markov layer
(:class:`SemiMarkovChain`: segmentations with the same three losses), the constituency layer
(:class:`ConstituencyTree`: binary span trees, CKY, the same three losses), the alignment layer
(:class:`MonotonicAlignment`: DTW / Needleman-Wunsch / Smith-Waterman paths, the same three losses), the structured hinge of chains and
pose trees, their decoders, and the CRF negative log-likelihood of the same chain scores. The chain and
dependency functions are those of :mod:`ssvm_torch.chain` and :mod:`ssvm_torch.trees`, re-exported."""
from ..constraints import allowed_transitions
from ..chain import (chain_crf_nll, chain_decode, chain_expectations, chain_hinge, chain_log_partition, chain_marginals,
                     chain_score, edge_potentials, hamming)
from ..trees import (dependency_crf_nll, dependency_decode, dependency_hinge, dependency_log_partition,
                     dependency_marginals, dependency_score, dependency_softmax_margin)
from .alignment import MonotonicAlignment, from_similarity
from .chain import ChainSSVMHead
from .constituency import ConstituencyTree
from .dependency import DependencyTree
from .linear_chain import LinearChain
from .semimarkov import SemiMarkovChain, span_sums
from .tree import TreeSSVMHead, tree_decode, tree_hinge, tree_score

__all__ = ["ChainSSVMHead", "MonotonicAlignment", "from_similarity", "ConstituencyTree", "DependencyTree", "LinearChain", "SemiMarkovChain", "span_sums", "dependency_crf_nll", "dependency_decode", "dependency_hinge",
           "dependency_log_partition", "dependency_marginals", "dependency_score", "dependency_softmax_margin", "TreeSSVMHead", "allowed_transitions", "chain_crf_nll", "chain_decode",
           "chain_expectations", "chain_hinge", "chain_log_partition", "chain_marginals", "chain_score",
           "edge_potentials", "hamming", "tree_decode", "tree_hinge", "tree_score"]
