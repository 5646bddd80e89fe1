"""A digest of a training container's contents: an estimator's warm start continues only on the data it was
fitted on (estimator.py)."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch

from .devices import to_host


def data_fingerprint(data) -> str:
    """A digest of a training container's contents (every tensor's dtype, shape and bytes, every other
    field's repr): a warm start continues only on the data it was fitted on."""
    h = hashlib.blake2b(digest_size=20)
    fields = ([(f.name, getattr(data, f.name)) for f in dataclasses.fields(data)] if dataclasses.is_dataclass(data)
              else sorted(vars(data).items()))
    for name, value in fields:
        h.update(name.encode())
        if isinstance(value, torch.Tensor):
            if value.layout == torch.sparse_csr:
                parts = (value.crow_indices(), value.col_indices(), value.values())
            elif value.is_sparse:
                value = value.coalesce()
                parts = (value.indices(), value.values())
            else:
                parts = (value,)
            for t in parts:
                a = np.ascontiguousarray(to_host(t))
                h.update(f"{a.dtype}{a.shape}".encode())
                h.update(a.tobytes())
        elif isinstance(value, np.ndarray):
            a = np.ascontiguousarray(value)
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()
