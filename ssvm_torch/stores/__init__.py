"""Block stores: the dual variables of the n blocks and the primal point w = sum_i w_i.

:func:`make_store` assembles the store of a model and its training data: the compact
sufficient-statistics stores for chains, semi-Markov chains, dependency trees and constituency trees, the dense (n, d) store
otherwise, optionally wrapped in box constraints (App. H of Osokin et al. 2016). Stores know models only through the
:class:`~ssvm_torch.models.base.StructuredModel` interface; models import no store.
"""
from __future__ import annotations

import torch

from ..devices import KERNELS, resolve_device
from ..errors import SSVMInputError, check_choice
from ..models.base import StructuredModel
from ..models.chain import ChainModel
from ..models.chain_edges import EdgeChainModel
from ..models.constituency import ConstituencyModel
from ..models.dependency import DependencyModel
from ..models.graph_crf import GraphCRFModel
from ..models.matching import MatchingModel
from ..models.semimarkov import SemiMarkovModel
from ..models.sibling_dependency import SiblingDependencyModel
from .base import BlockDual, Corner, GapPass
from .box import BoxedDual
from .chain import ChainDual
from .chain_edges import EdgeChainDual
from .dense import DenseDual
from .dense_compiled import CompiledDenseDual, CompiledMatchingDual
from .host_structures import HOSTS
from .matching import MatchingDual
from .segments import SegmentDual
from .sibling_tree import SiblingTreeDual
from .spans import SpanDual
from .tree import TreeDual

__all__ = ["BlockDual", "BoxedDual", "ChainDual", "CompiledDenseDual", "CompiledMatchingDual", "Corner", "DenseDual", "EdgeChainDual", "GapPass", "KERNELS", "MatchingDual",
           "SegmentDual", "SiblingTreeDual", "SpanDual", "TreeDual", "make_store"]


def make_store(model: StructuredModel, data, lam: float, device=None, dtype=torch.float64, kernels: str = "auto",
               nonnegative=None, n_objective: int | None = None) -> BlockDual:
    """The block store of ``model`` on ``data`` at regularization ``lam``. ``nonnegative``: indices of
    w kept >= 0 by box constraints (e.g. ``model.pairwise_index`` for graph cuts and pose).
    ``kernels`` picks the backend (``auto``, ``numba``, ``torch``): of the chain stores, and of the
    dense store's block steps (compiled on CPU float64 for the structures of stores/host_structures.py).
    ``n_objective``: the n of objective (1) when ``data`` is one shard of a larger training set
    (ssvm_torch.distributed); default data.n."""
    check_choice(kernels, "kernels", KERNELS)
    if kernels != "auto":
        model = model.with_kernels(kernels)          # the decoders follow the store's choice
    if getattr(data, "partial", False) and not isinstance(model, (ChainModel, SemiMarkovModel, ConstituencyModel,
                                                                  DependencyModel, GraphCRFModel)):
        raise SSVMInputError(f"data.observed: unobserved positions train on the chain stores (with or without edge "
                             f"features), the semi-Markov, constituency, dependency-tree or pairwise-graph stores "
                             f"(ssvm_torch/latent.py), got {type(model).__name__}")
    if isinstance(model, EdgeChainModel):
        store = EdgeChainDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    elif isinstance(model, ChainModel):
        store = ChainDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    elif isinstance(model, SemiMarkovModel):
        store = SegmentDual(model, data, lam, device=device, dtype=dtype, n_objective=n_objective, kernels=kernels)
    elif isinstance(model, ConstituencyModel):
        store = SpanDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    elif isinstance(model, SiblingDependencyModel):
        store = SiblingTreeDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    elif isinstance(model, DependencyModel):
        store = TreeDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    else:
        store = _dense_store(model, data, lam, device, dtype, kernels, n_objective)
    if nonnegative is not None and len(nonnegative):
        store = BoxedDual(store, nonnegative, lower=0.0)
    return store


def _dense_store(model, data, lam, device, dtype, kernels, n_objective) -> BlockDual:
    """The dense store: block steps compiled (``numba``, or ``auto`` on CPU float64 for a structure with
    a host oracle), else the torch store; matchings carry their relaxation (DEG) either way."""
    matching = isinstance(model, MatchingModel)
    host = HOSTS.get(type(model))
    on_host = resolve_device(device).type == "cpu" and dtype == torch.float64
    if kernels == "numba" and (host is None or not on_host):
        raise SSVMInputError(f"kernels: 'numba' needs a CPU float64 store and a structure with compiled block steps "
                             f"({', '.join(sorted(m.__name__ for m in HOSTS))}); got {type(model).__name__} on "
                             f"{resolve_device(device)} {dtype} (use 'auto' or 'torch')")
    if kernels != "torch" and host is not None and on_host:
        compiled = CompiledMatchingDual if matching else CompiledDenseDual
        return compiled(model, data, lam, host, n_objective=n_objective)
    dense = MatchingDual if matching else DenseDual                  # + its relaxation (DEG)
    return dense(model, data, lam, device=device, dtype=dtype, n_objective=n_objective)
