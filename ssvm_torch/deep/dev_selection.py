"""What the text pipelines that pick their weights on dev (the CoNLL chunker, the UD parser) share beyond
Lightning's checkpoint: the history and the best dev weights sealed into it (a SHA-256 of their content,
the weights and the optimizer states; lightning/checkpoints), the run files written once at the end
of fit, by rank 0, and an interrupted fit (Ctrl-C, SIGTERM) that keeps what it finished: the history and
the best epoch's weights, with one line that says what was written and how to resume
(:class:`ssvm_torch.lightning.KeepWorkOnInterrupt`)."""
from __future__ import annotations

from pathlib import Path

from ..errors import check
from ..lightning import AtomicCheckpointIO, KeepWorkOnInterrupt, seal, unseal
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
    weights_file: str                       # the run's weights file (parser.pt, chunker.pt)

    def check_trainer(self, trainer) -> None:
        """Refuse by name a trainer this run cannot use: one that cannot finish an epoch (the weights are chosen
        on dev after one: none means no model). :meth:`setup` checks it, and the CLI before fit launches any
        process or loads any data (``SSVMCLI.before_fit``, ssvm_torch/lightning/cli.py)."""
        check(trainer.max_epochs is None or trainer.max_epochs != 0, "trainer.max_epochs",
              f"at least 1 (or -1: until early stopping); {self.selected_by}", trainer.max_epochs)
        check(trainer.max_steps != 0, "trainer.max_steps", "at least 1 (or -1: no limit)", trainer.max_steps)

    def setup(self, stage: str) -> None:
        """Fit: :meth:`check_trainer`; then, once, the trainer's atomic checkpoint writer and :meth:`build`."""
        if stage == "fit":
            self.check_trainer(self.trainer)
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

    def configure_callbacks(self):
        return [KeepWorkOnInterrupt()]

    def write_interrupted(self, signal: str) -> str:
        """Write the history and the best dev epoch's weights of an interrupted fit (``write_outputs(final=
        False)``: no test decoding) and return the line that says what was written and how to resume: the
        epoch reached, the best dev figure, the last checkpoint and the command."""
        what = "Ctrl-C" if signal == "SIGINT" else "SIGTERM"
        trainer = self.trainer
        where = f"interrupted ({what}) in epoch {trainer.current_epoch}"
        written = self.write_outputs(final=False) if self.best["state"] is not None else None
        cb = trainer.checkpoint_callback
        ckpt = Path(cb.last_model_path) if cb is not None and getattr(cb, "last_model_path", "") else None
        log_dir = Path(trainer.logger.log_dir) if trainer.logger is not None and getattr(trainer.logger, "log_dir",
                                                                                          None) else None
        config = log_dir / "config.yaml" if log_dir is not None and (log_dir / "config.yaml").is_file() else None
        if ckpt is not None and ckpt.is_file():
            resume = (f"resume with python -m ssvm_torch.deep fit --config {config or '<the recipe>'} --ckpt_path {ckpt}"
                      " (it continues from the last finished epoch)")
        else:
            resume = "no checkpoint was written yet (one is written at the end of every epoch)"
        if written is None:
            return f"{where}, before any epoch ended: no model was selected on dev, nothing written; {resume}"
        out, metric, value, epoch = written
        return (f"{where}; best dev {metric} {value:.2f} at epoch {epoch}: wrote {out / 'history.json'}, "
                f"{out / self.weights_file} (that epoch's weights) and {out / 'results.json'} (no test figures: a "
                f"finished run decodes the test set once); {resume}")
