"""Solver state in a form ``torch.load(..., weights_only=True)`` accepts.

``Solver.state_dict()`` holds numpy arrays (gap estimates, sampler trees, permutations) and
active-set objects; LightningCLI reads checkpoints with ``weights_only=True`` before resuming. ``pack``
turns numpy arrays into tensors and :class:`BlockSet` objects into plain dicts (tagged so that
``unpack`` restores them exactly, dtype and values); everything else is already a tensor or a
primitive.
"""
from __future__ import annotations

import numpy as np
import torch

from .solvers.active_set import BlockSet

_NP, _SET, _TUPLE = "__ndarray__", "__blockset__", "__tuple__"


def pack(x):
    if isinstance(x, np.ndarray):
        return {_NP: torch.from_numpy(np.ascontiguousarray(x).copy())}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, BlockSet):
        return {_SET: {k: pack(getattr(x, k)) for k in ("labels", "alpha", "loss", "score")}
                | {"keys": [[pack(k), v] for k, v in x.keys.items()]}}
    if isinstance(x, dict):
        return {k: pack(v) for k, v in x.items()}
    if isinstance(x, list):
        return [pack(v) for v in x]
    if isinstance(x, tuple):
        return {_TUPLE: [pack(v) for v in x]}
    return x


def unpack(x):
    if isinstance(x, dict):
        if _NP in x and len(x) == 1:
            return x[_NP].numpy().copy()
        if _TUPLE in x and len(x) == 1:
            return tuple(unpack(v) for v in x[_TUPLE])
        if _SET in x and len(x) == 1:
            s = x[_SET]
            bs = BlockSet.__new__(BlockSet)
            for k in ("labels", "alpha", "loss", "score"):
                setattr(bs, k, unpack(s[k]))
            bs.keys = {unpack(k): v for k, v in s["keys"]}
            bs._matrix = None
            return bs
        return {k: unpack(v) for k, v in x.items()}
    if isinstance(x, list):
        return [unpack(v) for v in x]
    return x
