"""Structures (the "what"): joint feature map, task loss, compact block storage, oracle dispatch."""
from .chain import ChainModel
from .dense import DenseDual
from .explicit import ExplicitModel
from .flat import MulticlassModel, MultiLabelModel
from .graphcut import GraphCutModel, GraphExample

__all__ = ["ChainModel", "DenseDual", "ExplicitModel", "GraphCutModel", "GraphExample", "MulticlassModel",
           "MultiLabelModel"]
