"""Callbacks of the Lightning loop."""
from __future__ import annotations

from pathlib import Path

import lightning as L


class GapCheck(L.Callback):
    """End of every epoch (an interval of ``gap_check`` passes): the exact gap pass, which refreshes
    all block gaps of the gap sampler (Alg. 2 of Osokin et al. 2016) and evaluates the train/test
    error with the batched oracle; logs the new record(s); stops the trainer when the gap is
    <= ``gap_threshold`` or the pass / time budget is spent. At the end of fit, writes
    ``history.json`` and ``model.pt``. Runs before ``ModelCheckpoint`` (Lightning orders checkpoint
    callbacks last), so every epoch-end checkpoint holds the checked state.

    When the trainer checkpoints (a ``ModelCheckpoint`` is configured), every gap check also writes
    ``last.ckpt`` in its directory, atomically: a run killed at any moment can be resumed from its
    last gap check, whatever the ``ModelCheckpoint`` options (with ``save_top_k: 0`` some Lightning
    versions write ``last.ckpt`` only when training ends)."""

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
        cb = trainer.checkpoint_callback
        if cb is not None and getattr(cb, "dirpath", None):
            # weights_only=False: the full checkpoint (loops, callbacks, optimizer), which resuming needs
            trainer.save_checkpoint(Path(cb.dirpath) / f"{cb.CHECKPOINT_NAME_LAST}{cb.FILE_EXTENSION}",
                                    weights_only=False)

    def on_train_end(self, trainer: L.Trainer, module) -> None:
        if not trainer.is_global_zero:
            return
        out = module.write_outputs()
        last, st = module.history[-1], module.solver.state
        gap = "n/a (SSG keeps no dual)" if last.get("gap") is None else f"{last['gap']:.6e}"
        print(f"stopped: {st.stop_reason or 'trainer limit'} after {last['passes']:.1f} effective passes, "
              f"{last['time_s']:.2f} s solver time\nexact duality gap: {gap}\n"
              f"test error: {last['test_error']:.4f} ({module.task.error_name})\n"
              f"wrote {out / 'history.json'} and {out / 'model.pt'}", flush=True)
