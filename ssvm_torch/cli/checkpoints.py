"""The checkpoint file of a command's run (``--checkpoint``, ``--checkpoint-every``), written at the run's checks.

Every command that checkpoints (plain training, the latent SSVM, ``--select-lam``, ``ssvm-path`` and its grids)
offers its state at each check; :class:`CheckpointWrites` decides whether this check writes, keeps the last
good write and a failed one (a full disk: ``torch.save`` raises ``RuntimeError("unexpected pos")``), and names
both in the command's error. A failed write stops the run at its next check (the commands poll ``failed`` with
their interrupt), so a run never goes on past a state it could not save.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..errors import SSVMInputError
from ..outputs import save_checkpoint


def check_every(every: float | None, checkpoint: bool = True) -> None:
    """``--checkpoint-every``: seconds > 0, and only with ``--checkpoint``."""
    if every is None:
        return
    if not checkpoint:
        raise SSVMInputError("checkpoint_every: sets how often --checkpoint writes; add --checkpoint")
    if not (isinstance(every, (int, float)) and every > 0):
        raise SSVMInputError(f"checkpoint_every: expected seconds > 0 between checkpoint writes, got {every!r}")


def check_resume_file(path) -> None:
    """``--resume``: None (a new run) or an existing checkpoint file (a directory or a missing path refused by
    name before the run directory is touched)."""
    if path is not None and not Path(path).is_file():
        what = "is a directory (pass its checkpoint.pt)" if Path(path).is_dir() else "does not exist"
        raise SSVMInputError(f"resume: expected a checkpoint file, {path} {what}")


class CheckpointWrites:
    """Writes ``path`` (:func:`ssvm_torch.outputs.save_checkpoint` with the run's ``identity``) at the checks a run
    offers. With ``every`` (seconds) a check writes only once ``every`` seconds have passed since the last write
    (or the run's start); the state of a skipped check stays pending and :meth:`flush` writes it when the run ends
    (finished, stopped by a criterion or interrupted), so the file always ends at the run's last state and a
    resume of a finished run goes on from its end. Resuming from a checkpoint of an earlier check is exact too:
    ``every`` trades the work a ``kill -9`` loses against the time spent writing.

    ``agree`` (under torchrun: :func:`ssvm_torch.distributed.collectives.any_rank` around the local decision) makes
    every rank decide the same at the same check, since the solver's ``state_dict`` is a collective there; only
    the rank with a ``path`` (rank 0) writes the file, the others (``path=None``) only take part."""

    def __init__(self, path: Path | None, identity: dict, every: float | None = None,
                 agree: Callable[[Callable[[], bool]], Callable[[], int]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        check_every(every)
        self.path, self.identity, self.every, self.clock = path, identity, every, clock
        self._due = agree(self._locally_due) if agree is not None and every is not None else self._locally_due
        self.last_write = clock()
        self.written: str | None = None          # where the last good checkpoint was taken ("at 3.0 passes", ...)
        self.failure: tuple[str, BaseException] | None = None
        self.pending: tuple[Callable[[], dict], str] | None = None
        self.count = 0                           # files written
        self.seconds = 0.0                       # spent making and writing them

    def _locally_due(self) -> bool:
        return self.every is None or self.clock() - self.last_write >= self.every

    @property
    def failed(self) -> bool:
        """A write failed: the run stops at its next check."""
        return self.failure is not None

    def offer(self, state: Callable[[], dict], at: str) -> None:
        """The state of a check (``state()`` is called only if this check writes; ``at`` says where the run is,
        e.g. ``"at 3.0 effective passes"``): written now if due, else kept for :meth:`flush`."""
        if self.failed:
            return
        if self._due():
            self.pending = None
            self._write(state, at)
        else:
            self.pending = (state, at)

    def flush(self) -> None:
        """Write the last offered state if its check did not (the run has ended: nothing changed it since)."""
        if self.pending is not None and not self.failed:
            state, at = self.pending
            self.pending = None
            self._write(state, at)

    def _write(self, state: Callable[[], dict], at: str) -> None:
        t = self.clock()
        made = state()                           # a collective under torchrun: every rank makes it
        if self.path is None:                    # a rank that only took part: its interval restarts with rank 0's
            self.last_write = self.clock()
            return
        try:
            save_checkpoint(self.path, made, self.identity)
        except (OSError, RuntimeError) as e:        # e.g. a full disk (torch.save: "unexpected pos")
            self.failure = (at, e)
            return
        finally:
            self.seconds += self.clock() - t
        self.written, self.last_write, self.count = at, self.clock(), self.count + 1

    def summary(self) -> str:
        """One line for the command's report: how many checkpoints, the time they took, the last one."""
        return (f"checkpoint.pt: {self.count} write{'s' if self.count != 1 else ''} in {self.seconds:.1f} s"
                + (f", the last {self.written}" if self.written else ""))

    def error(self, stopped: str) -> SSVMInputError:
        """The command's error after a failed write: where it failed and why, ``stopped`` (what the run did then:
        "the run stopped there and wrote ..."), and the last good checkpoint."""
        at, e = self.failure
        kept = (f"{self.path} holds the last good one (taken {self.written})" if self.written is not None
                else "no checkpoint was written")
        return SSVMInputError(f"out: writing the checkpoint {at} failed ({getattr(e, 'strerror', None) or e}); "
                              f"{stopped}; {kept}")
