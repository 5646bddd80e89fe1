"""Callbacks of the Lightning loop."""
from __future__ import annotations

import math
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..errors import Terminated


def log_hp_metrics(module: L.LightningModule, metrics: dict, step: int) -> None:
    """The run's result in TensorBoard's HPARAMS view: ``metrics`` (``hp_metric`` first: the final
    exact gap of an SSVM run, the best dev score of a deep run; a test figure beside it) with the
    module's hyper-parameters, at ``step``. The CLI's logger writes no -1 placeholder at the start
    (``default_hp_metric=False``), so ``hp_metric`` holds this value only."""
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    for logger in module.loggers:
        if isinstance(logger, TensorBoardLogger) and finite:
            logger.log_hyperparams(module.hparams, finite, step=step)
            logger.save()


#: the last interrupted fit's signal and line (rank 0), for the CLI's exit status and last line
INTERRUPTED: dict = {}


def interrupt_signal(exception: BaseException) -> str | None:
    """"SIGINT" for Ctrl-C (KeyboardInterrupt), "SIGTERM" for Lightning's SIGTERMException or the CLI's
    :class:`~ssvm_torch.errors.Terminated`, None for any other exception (a fault, not a stop)."""
    if isinstance(exception, KeyboardInterrupt):
        return "SIGINT"
    if isinstance(exception, (SIGTERMException, Terminated)):
        return "SIGTERM"
    return None


class KeepWorkOnInterrupt(L.Callback):
    """On Ctrl-C or SIGTERM during fit (Lightning's ``on_exception``), rank 0 writes what the run finished
    (the module's ``write_interrupted(signal)``, e.g. :meth:`ssvm_torch.deep.dev_selection.DevSelectedRun.
    write_interrupted`) and records its line in :data:`INTERRUPTED` for the CLI's last line and exit status."""

    def on_exception(self, trainer, pl_module, exception) -> None:
        sig = interrupt_signal(exception)
        if sig is None or not trainer.is_global_zero or not hasattr(pl_module, "write_interrupted"):
            return
        INTERRUPTED.update(signal=sig, line=pl_module.write_interrupted(sig))


def save_last_checkpoint(trainer: L.Trainer) -> Path | None:
    """Write the full checkpoint (loops, callbacks, optimizers) to the ``ModelCheckpoint``'s
    ``last.ckpt`` now, from an epoch-end hook: Lightning 2.6 with ``save_top_k: 0`` writes
    ``last.ckpt`` only when training ends, and a long run must be resumable after a kill at any
    moment. The callback's public ``last_model_path`` is set to the file first (as the callback
    itself does), so its own final save overwrites it instead of versioning a ``last-v1.ckpt``."""
    cb = trainer.checkpoint_callback
    if cb is None or not getattr(cb, "dirpath", None):
        return None
    path = cb.format_checkpoint_name({}, cb.CHECKPOINT_NAME_LAST)
    cb.last_model_path = path
    trainer.save_checkpoint(path, weights_only=False)
    return Path(path)


class GapCheck(L.Callback):
    """End of every epoch (an interval of ``gap_check`` passes): the exact gap pass, which refreshes
    all block gaps of the gap sampler (Alg. 2 of Osokin et al. 2016) and evaluates the train/test
    error with the batched oracle; logs the new record(s); stops the trainer when the gap is
    <= ``gap_threshold`` or the pass / time budget is spent. At the end of fit, writes
    ``history.json`` and ``model.pt``. Runs before ``ModelCheckpoint`` (Lightning orders checkpoint
    callbacks last), so every epoch-end checkpoint holds the checked state.

    When the trainer checkpoints (a ``ModelCheckpoint`` is configured), every gap check also writes
    ``last.ckpt`` in its directory, atomically (:func:`save_last_checkpoint`): a run killed at any
    moment can be resumed from its last gap check."""

    def on_train_epoch_end(self, trainer: L.Trainer, module) -> None:
        solver = module.solver
        if solver.cfg.solver != "fw" and not solver.state.done:
            solver.end_interval()
        module.log_records()
        last = solver.state.history[-1]
        bar = {"passes": float(last["passes"]), "test_error": float(last["test_error"])}
        if last.get("gap") is not None:
            bar["gap"] = float(last["gap"])
        module.log_dict(bar, prog_bar=True, logger=False, on_epoch=True)
        if solver.state.done:
            trainer.should_stop = True
        save_last_checkpoint(trainer)

    def on_train_end(self, trainer: L.Trainer, module) -> None:
        if not trainer.is_global_zero:
            return
        out = module.write_outputs()
        last, st = module.solver.finish()[-1], module.solver.state
        log_hp_metrics(module, {"hp_metric": last.get("gap"), "hp/test_error": last["test_error"]},
                       int(last["oracle_calls"]))
        gap = "n/a (SSG keeps no dual)" if last.get("gap") is None else f"{last['gap']:.6e}"
        print(f"stopped: {st.stop_reason or 'trainer limit'} after {last['passes']:.1f} effective passes, "
              f"{last['time_s']:.2f} s solver time\nexact duality gap: {gap}\n"
              f"test error: {last['test_error']:.4f} ({module.task.error_name})\n"
              f"wrote {out / 'history.json'} and {out / 'model.pt'}", flush=True)
