"""Checkpoint writing that a killed run cannot corrupt."""
from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..errors import SSVMInputError
from ..atomic import atomic_write
from ..outputs import content_digest


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``path`` as a temporary file in the same directory, fsyncs it and renames it over
    ``path`` (:func:`ssvm_torch.atomic.atomic_write`): a run killed mid-write leaves the
    previous checkpoint intact and never a truncated one. The solver state inside is packed
    (``ssvm_torch.portable``) so the file loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint: storage_options is not supported")
        atomic_write(path, lambda f: torch.save(checkpoint, f))    # streamed: no in-memory copy


def seal(state: dict) -> dict:
    """A module's own checkpoint entry: ``state`` with the SHA-256 of its content."""
    return {**state, "sha256": content_digest(state)}


def unseal(checkpoint: dict, key: str, module: str, what: str) -> dict:
    """The entry :func:`seal` stored under ``key``, verified: a checkpoint of another module or with
    changed content is refused by name (``what``: the state's name in the message)."""
    saved = checkpoint.get(key)
    if saved is None:
        raise SSVMInputError(f"checkpoint: expected a {module} checkpoint with key {key!r}, got keys {sorted(checkpoint)}")
    body = {k: v for k, v in saved.items() if k != "sha256"}
    if saved.get("sha256") != content_digest(body):
        raise SSVMInputError(f"checkpoint: the {what} is damaged: its content does not match the SHA-256 saved with "
                             "it; resume from another checkpoint")
    return body
