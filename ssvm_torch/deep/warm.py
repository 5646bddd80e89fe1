"""Warm-started BCFW after the features change (the alternating CNN + SSVM loop, issue 16).

The chain store keeps each block as expected statistics under alpha_i (per-position label marginals
and transition counts, stores/chain.py) and its loss ell_i = sum_y alpha_i(y) L_i(y) / n. None of
them depends on the features x_i, so when a network upstream changes the features the same alpha
is still a feasible dual point of the new problem: w = sum_i A_i(S(y_i) - M_i) / (lam n) and ell are
recomputed from the stored statistics and the new features (exactly, not incrementally), the block
gaps are refreshed by one exact gap pass, and the gap sampler (Osokin et al. 2016, Alg. 2) goes on
with its state (its random stream, the oracle-call count, the history).
"""
from __future__ import annotations

import dataclasses

import torch

from ..data.types import ChainData
from ..errors import check
from ..solvers.loop import Solver
from ..stores import make_store
from ..stores.base import GapPass


def with_features(data: ChainData, X: torch.Tensor) -> ChainData:
    """The same sequences and labels with new per-position features ``X`` (N, F)."""
    check(torch.is_tensor(X) and X.dim() == 2 and X.shape[0] == data.X.shape[0], "X",
          f"a (positions = {data.X.shape[0]}, features) tensor", getattr(X, "shape", type(X)))
    return ChainData(X, data.Y, data.offsets, data.n_states, data.name, data.allow_unknown, dict(data.meta))


def warm_start(solver: Solver, data: ChainData, passes: float, evaluate=None) -> tuple[Solver, GapPass]:
    """A solver on the store of ``data`` (new features, same examples) that continues ``solver``'s
    run from its dual variables, with a pass budget raised to ``passes`` (total effective passes,
    the ones already done included). Returns (the new solver, the exact gap pass at its start)."""
    old = solver.dual
    check(data.n == old.n and data.X.shape[1] == old.model.n_features, "data",
          f"{old.n} sequences with {old.model.n_features} features (the solver's problem)",
          f"{data.n} with {data.X.shape[1]}")
    state = solver.state_dict()
    store = make_store(old.model, data, old.lam, device=old.device, dtype=old.dtype, kernels=old.kernels,
                       n_objective=old.N)
    new = Solver(store, dataclasses.replace(solver.cfg, passes=passes), evaluate, monitor_start=False)
    new.load_state_dict(state)
    store.recompute()                               # w from the same statistics and the new features
    gp = store.gap_pass()
    new.set_block_gaps(gp.block_gaps)
    return new, gp
