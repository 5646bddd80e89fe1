"""Structures (the "what"): data-free models with one interface (:class:`StructuredModel`)."""
from .base import StructuredModel
from .chain import ChainModel
from .chain_edges import EdgeChainModel
from .constituency import ConstituencyModel
from .dependency import DependencyModel
from .explicit import ExplicitModel
from .flat import MulticlassModel, MultiLabelModel
from .graph_crf import GraphCRFModel
from .graphcut import GraphCutModel
from .matching import MatchingModel
from .pose import TreePoseModel
from .semimarkov import SemiMarkovModel
from .sibling_dependency import SiblingDependencyModel

__all__ = ["StructuredModel", "ChainModel", "ConstituencyModel", "DependencyModel", "EdgeChainModel", "ExplicitModel", "GraphCRFModel", "GraphCutModel", "MatchingModel", "MulticlassModel",
           "MultiLabelModel", "SemiMarkovModel", "SiblingDependencyModel", "TreePoseModel"]
