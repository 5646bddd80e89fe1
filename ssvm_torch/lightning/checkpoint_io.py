"""Checkpoint writing that a killed run cannot corrupt."""
from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..outputs import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``path`` as a temporary file in the same directory, fsyncs it and renames it over
    ``path`` (:func:`ssvm_torch.outputs.atomic_write`): a run killed mid-write leaves the
    previous checkpoint intact and never a truncated one. The solver state inside is packed
    (``ssvm_torch.portable``) so the file loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint: storage_options is not supported")
        atomic_write(path, lambda f: torch.save(checkpoint, f))    # streamed: no in-memory copy
