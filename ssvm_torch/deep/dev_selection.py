"""What the text pipelines that pick their weights on dev (the CoNLL chunker, the UD parser) share beyond
Lightning's checkpoint: the history and the best dev weights sealed into it (a SHA-256 of their content,
the weights and the optimizer states; lightning/checkpoints), and the run files written once at the end
of fit, by rank 0."""
from __future__ import annotations

from ..lightning import seal, unseal
from ..portable import pack, unpack


class DevSelectedRun:
    """A LightningModule mixin (first in the bases): ``history`` (a list of records) and ``best`` (the best
    dev state, packed) go into the checkpoint under ``checkpoint_key``; a damaged or foreign entry is
    refused naming ``checkpoint_names`` = (the module, what the entry holds); ``write_outputs()`` runs
    at the end of fit on rank 0."""

    checkpoint_key: str
    checkpoint_names: tuple[str, str]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[self.checkpoint_key] = seal({"history": list(self.history), "best": pack(dict(self.best))},
                                               checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = unseal(checkpoint, self.checkpoint_key, *self.checkpoint_names)
        self.history = list(saved["history"])
        self.best = unpack(saved["best"])

    def on_fit_end(self) -> None:
        if self.trainer.is_global_zero:
            self.write_outputs()
