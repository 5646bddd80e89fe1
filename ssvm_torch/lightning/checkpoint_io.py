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


# what a sealed entry's SHA-256 covers besides the module's own state: Lightning's weights and
# optimizer states in the same checkpoint (a flipped weight would otherwise resume silently)
COVERED = ("state_dict", "optimizer_states")


def _covered(checkpoint: dict) -> dict:
    return {k: checkpoint.get(k) for k in COVERED}


def seal(state: dict, checkpoint: dict | None = None) -> dict:
    """A module's own checkpoint entry: ``state`` with the SHA-256 of its content and, given the
    ``checkpoint`` it goes into (``on_save_checkpoint``), of the checkpoint's weights and optimizer
    states too."""
    if checkpoint is None:
        return {**state, "sha256": content_digest(state)}
    return {**state, "covers": list(COVERED), "sha256": content_digest({"state": state, **_covered(checkpoint)})}


def unseal(checkpoint: dict, key: str, module: str, what: str) -> dict:
    """The entry :func:`seal` stored under ``key``, verified: a checkpoint of another module or with
    changed content (the state, or the weights and optimizer states where the entry covers them) is
    refused by name (``what``: the state's name in the message)."""
    saved = checkpoint.get(key)
    if saved is None:
        raise SSVMInputError(f"checkpoint: expected a {module} checkpoint with key {key!r}, got keys {sorted(checkpoint)}")
    body = {k: v for k, v in saved.items() if k not in ("sha256", "covers")}
    if "covers" in saved:
        ok = saved.get("sha256") == content_digest({"state": body, **_covered(checkpoint)})
        damaged = f"the {what}, the weights or the optimizer states are"
    else:                                           # a checkpoint written before the weights were covered
        ok = saved.get("sha256") == content_digest(body)
        damaged = f"the {what} is"
    if not ok:
        raise SSVMInputError(f"checkpoint: {damaged} damaged: the content does not match the SHA-256 saved with "
                             "it; resume from another checkpoint")
    return body
