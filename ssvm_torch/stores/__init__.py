"""Block stores: the dual variables of the n blocks and the primal point w = sum_i w_i.

:func:`make_store` assembles the store of a model and its training data: the compact
sufficient-statistics store for chains, the dense (n, d) store otherwise, optionally wrapped in box
constraints (App. H of Osokin et al. 2016). Stores know models only through the
:class:`~ssvm_torch.models.base.StructuredModel` interface; models import no store.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check_choice
from ..models.base import StructuredModel
from ..models.chain import ChainModel
from ..models.chain_edges import EdgeChainModel
from ..models.matching import MatchingModel
from .base import BlockDual, Corner, GapPass
from .box import BoxedDual
from .chain import KERNELS, ChainDual
from .chain_edges import EdgeChainDual
from .dense import DenseDual
from .matching import MatchingDual

__all__ = ["BlockDual", "BoxedDual", "ChainDual", "Corner", "DenseDual", "EdgeChainDual", "GapPass", "KERNELS", "MatchingDual",
           "make_store"]


def make_store(model: StructuredModel, data, lam: float, device=None, dtype=torch.float64, kernels: str = "auto",
               nonnegative=None, n_objective: int | None = None) -> BlockDual:
    """The block store of ``model`` on ``data`` at regularization ``lam``. ``nonnegative``: indices of
    w kept >= 0 by box constraints (e.g. ``model.pairwise_index`` for graph cuts and pose).
    ``kernels`` picks the chain store's backend (``auto``, ``numba``, ``torch``); the dense store
    is pure torch. ``n_objective``: the n of objective (1) when ``data`` is one shard of a larger
    training set (ssvm_torch.distributed); default data.n."""
    check_choice(kernels, "kernels", KERNELS)
    if kernels != "auto":
        model = model.with_kernels(kernels)          # the decoders follow the store's choice
    if isinstance(model, EdgeChainModel):
        store = EdgeChainDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    elif isinstance(model, ChainModel):
        store = ChainDual(model, data, lam, device=device, dtype=dtype, kernels=kernels, n_objective=n_objective)
    else:
        if kernels == "numba":
            raise SSVMInputError(f"kernels: 'numba' applies to chain stores; {type(model).__name__} runs on the "
                                 "dense store, which is pure torch (use 'auto' or 'torch')")
        dense = MatchingDual if isinstance(model, MatchingModel) else DenseDual    # + its relaxation (DEG)
        store = dense(model, data, lam, device=device, dtype=dtype, n_objective=n_objective)
    if nonnegative is not None and len(nonnegative):
        store = BoxedDual(store, nonnegative, lower=0.0)
    return store
