"""Solver state in a form ``torch.load(..., weights_only=True)`` accepts.

``Solver.state_dict()`` holds numpy arrays (gap estimates, sampler trees, permutations) and
active-set objects; LightningCLI reads checkpoints with ``weights_only=True`` before resuming. ``pack``
turns numpy arrays into tensors and :class:`BlockSet` objects into plain dicts (tagged so that
``unpack`` restores them exactly, dtype and values); everything else is already a tensor or a
primitive.

With ``sparse=True`` (checkpoints: the block statistics of a chain store hold one corner per position
and pass, the weights only the features that fired) a tensor of at least :data:`SPARSE_MIN` entries
whose non-zero entries fit in half its bytes as (flat index, value) pairs is stored that way. Entries are
selected by their bit pattern, so a -0.0, a NaN or a subnormal is kept as it was: ``unpack`` restores the
tensor bit for bit.
"""
from __future__ import annotations

import numpy as np
import torch

from .errors import SSVMInputError
from .solvers.active_set import BlockSet

_NP, _SET, _TUPLE, _SPARSE = "__ndarray__", "__blockset__", "__tuple__", "__sparse__"
SPARSE_MIN = 1024          # entries: below this a tensor stays dense (an index tensor costs an archive record)
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16, torch.int64: torch.int64, torch.int32: torch.int32}


def pack(x, sparse: bool = False):
    if isinstance(x, torch.Tensor):
        return _sparse(x) if sparse else x
    if isinstance(x, np.ndarray):
        return {_NP: torch.from_numpy(np.ascontiguousarray(x).copy())}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, BlockSet):
        return {_SET: {k: pack(getattr(x, k), sparse) for k in ("labels", "alpha", "loss", "score")}
                | {"keys": [[pack(k), v] for k, v in x.keys.items()]}}
    if isinstance(x, dict):
        return {k: pack(v, sparse) for k, v in x.items()}
    if isinstance(x, list):
        return [pack(v, sparse) for v in x]
    if isinstance(x, tuple):
        return {_TUPLE: [pack(v, sparse) for v in x]}
    return x


def packed_bytes(x, sparse: bool = False) -> int:
    """The tensor bytes :func:`pack` (``sparse`` as there) writes for ``x``, without building it: a sparse tensor's
    index / value pairs, a dense one's entries, numpy arrays and active sets included (the archive's records
    aside). One count of the non-zero bit patterns per large tensor."""
    if isinstance(x, torch.Tensor):
        dense = x.numel() * x.element_size()
        if not sparse or x.layout != torch.strided or x.dtype not in _BITS or x.numel() < SPARSE_MIN or x.requires_grad:
            return dense
        nnz = int(torch.count_nonzero(x.detach().contiguous().reshape(-1).view(_BITS[x.dtype])))
        pairs = nnz * ((4 if x.numel() < 2 ** 31 else 8) + x.element_size())
        return dense if pairs > dense // 2 else pairs
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, BlockSet):
        return sum(packed_bytes(getattr(x, k), sparse) for k in ("labels", "alpha", "loss", "score"))
    if isinstance(x, dict):
        return sum(packed_bytes(v, sparse) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(packed_bytes(v, sparse) for v in x)
    return 0


def _sparse(t: torch.Tensor):
    """``t`` as ``{__sparse__: {shape, index, values}}`` (the flat positions of its non-zero bit patterns and
    their values) when that takes at most half of its bytes; else ``t`` itself."""
    if t.layout != torch.strided or t.dtype not in _BITS or t.numel() < SPARSE_MIN or t.requires_grad:
        return t
    flat = t.detach().contiguous().reshape(-1)
    bits = flat.view(_BITS[t.dtype])         # counted and indexed on the bits: no mask tensor, two passes
    nnz = int(torch.count_nonzero(bits))
    index_dtype = torch.int32 if t.numel() < 2 ** 31 else torch.int64
    if nnz * (index_dtype.itemsize + t.element_size()) > t.numel() * t.element_size() // 2:
        return t
    index = torch.nonzero(bits).reshape(-1)
    return sparse_entry(t.shape, index.to(index_dtype), flat[index])


def sparse_entry(shape, index: torch.Tensor, values: torch.Tensor) -> dict:
    """What :func:`pack` writes for a mostly-zero tensor of ``shape``: ``values`` at the flat positions ``index``
    (ascending; int32 below 2^31 entries), zero elsewhere; :func:`unpack` makes the tensor."""
    return {_SPARSE: {"shape": list(shape), "index": index, "values": values}}


def _dense(s) -> torch.Tensor:
    """The tensor of a ``__sparse__`` entry, checked: a file's shape, index and values that do not make one
    tensor are refused by name (the file is untrusted)."""
    shape, index, values = (s.get(k) if isinstance(s, dict) else None for k in ("shape", "index", "values"))
    ok = (isinstance(shape, list) and all(isinstance(v, int) and v >= 0 for v in shape)
          and isinstance(index, torch.Tensor) and index.dtype in (torch.int32, torch.int64) and index.dim() == 1
          and isinstance(values, torch.Tensor) and values.dim() == 1 and values.shape == index.shape)
    numel = int(np.prod(shape, dtype=np.int64)) if ok else 0
    if ok and index.numel():
        ok = int(index.min()) >= 0 and int(index.max()) < numel
    if not ok:
        raise SSVMInputError("checkpoint: a sparse tensor's shape, index and values do not make one tensor "
                             "(a damaged or foreign file)")
    try:
        out = torch.zeros(numel, dtype=values.dtype, device=values.device)   # where the loader mapped the values
    except RuntimeError as e:                       # a shape no machine holds
        raise SSVMInputError(f"checkpoint: a sparse tensor of shape {shape} cannot be allocated ({e})") from None
    out[index.to(values.device, torch.int64)] = values
    return out.reshape(shape)


def unpack(x):
    if isinstance(x, dict):
        if _NP in x and len(x) == 1:
            return x[_NP].numpy().copy()
        if _SPARSE in x and len(x) == 1:
            return _dense(x[_SPARSE])
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
