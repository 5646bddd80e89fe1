"""The one run-output format, shared by ``ssvm-train``, ``ssvm-path``, the Lightning module and the
estimator.

A run directory holds
  history.json   one record per exact gap check (:mod:`ssvm_torch.solvers.history`)
  model.pt       {"w": float64 (d,), "ell": float, "lam": float, "dataset": str, "feature_layout": dict}
  checkpoint.pt  {"format": CHECKPOINT_FORMAT, "solver": packed solver state} (resumable)
  path.pt / path.json   the regularization path (``ssvm-path``)

Every ``.pt`` file is a torch zip archive of tensors and primitives (numpy arrays and active sets
are packed by :mod:`ssvm_torch.portable`), read back with ``torch.load(..., weights_only=True)``:
loading a file never runs code from it. Every file is written to a temporary name in the same
directory, fsynced and renamed over the target (``os.replace``), so a killed run leaves the
previous version intact, never a truncated one.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import torch

from .errors import SSVMInputError
from .portable import pack, unpack

CHECKPOINT_FORMAT = "ssvm_torch.checkpoint/1"


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_torch(path, obj) -> Path:
    """``torch.save`` of packed ``obj``, atomically."""
    buf = io.BytesIO()
    torch.save(pack(obj), buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_torch(path, what: str = "file", noun: str = "an ssvm_torch"):
    """A file written by :func:`save_torch`, loaded with ``weights_only=True`` and unpacked; a
    missing or damaged file raises :class:`SSVMInputError` naming the field ``what``."""
    path = Path(path)
    if not path.is_file():
        raise SSVMInputError(f"{what}: expected {noun} file, {path} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:          # torch raises several types for truncated / foreign archives
        raise SSVMInputError(f"{what}: {path} is not a readable ssvm_torch file ({type(e).__name__}: {e})") from None
    return unpack(obj)


def save_history(out, history: list) -> Path:
    return atomic_write_bytes(Path(out) / "history.json", json.dumps(history, indent=1).encode())


def save_model(out, w: torch.Tensor, ell: float, lam: float, dataset: str, layout: dict) -> Path:
    """model.pt: the weights (float64, CPU) with what is needed to use them."""
    return save_torch(Path(out) / "model.pt", {"w": w.detach().to("cpu", torch.float64), "ell": float(ell),
                                               "lam": float(lam), "dataset": dataset, "feature_layout": layout})


def load_model(path) -> dict:
    return load_torch(path, "model", "a model.pt")


def save_checkpoint(path, solver_state: dict) -> Path:
    return save_torch(path, {"format": CHECKPOINT_FORMAT, "solver": solver_state})


def load_checkpoint(path) -> dict:
    """The solver state of a checkpoint written by :func:`save_checkpoint`."""
    ck = load_torch(path, "resume", "a checkpoint")
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise SSVMInputError(f"resume: expected an ssvm_torch checkpoint ({CHECKPOINT_FORMAT}), {path} is not one")
    return ck["solver"]
