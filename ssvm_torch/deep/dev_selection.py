"""What the text pipelines that pick their weights on dev (the CoNLL chunker, the UD parser) share beyond
Lightning's checkpoint: the history and the best dev weights sealed into it (a SHA-256 of their content,
the weights and the optimizer states; lightning/checkpoints), and the run files written once at the end
of fit, by rank 0."""
from __future__ import annotations

from ..errors import check
from ..lightning import AtomicCheckpointIO, seal, unseal
from ..portable import pack, unpack


class DevSelectedRun:
    """A LightningModule mixin (first in the bases): ``history`` (a list of records) and ``best`` (the best
    dev state, packed) go into the checkpoint under ``checkpoint_key``; a damaged or foreign entry is
    refused naming ``checkpoint_names`` = (the module, what the entry holds); ``write_outputs()`` runs
    at the end of fit on rank 0. The module's ``build()`` makes its corpus and network (``corpus`` None
    until then); ``selected_by`` says in errors which dev score picks the weights."""

    checkpoint_key: str
    checkpoint_names: tuple[str, str]
    selected_by: str

    def setup(self, stage: str) -> None:
        """Fit: refuse a trainer that cannot finish an epoch (the weights are chosen on dev after one: none
        means no model); then, once, the trainer's atomic checkpoint writer and :meth:`build`."""
        if stage == "fit":
            trainer = self.trainer
            check(trainer.max_epochs is None or trainer.max_epochs != 0, "trainer.max_epochs",
                  f"at least 1 (or -1: until early stopping); {self.selected_by}", trainer.max_epochs)
            check(trainer.max_steps != 0, "trainer.max_steps", "at least 1 (or -1: no limit)", trainer.max_steps)
        if self.corpus is not None:
            return
        strategy = self.trainer.strategy
        if type(strategy.checkpoint_io).__name__ == "TorchCheckpointIO":
            strategy.checkpoint_io = AtomicCheckpointIO()
        self.build()

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
