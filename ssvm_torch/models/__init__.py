"""Structures (the "what"): joint feature map, task loss, compact block storage, oracle dispatch."""
from .chain import ChainModel
from .explicit import ExplicitModel

__all__ = ["ChainModel", "ExplicitModel"]
