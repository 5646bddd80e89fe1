"""Input validation helpers: every check names the offending field and what was expected."""
from __future__ import annotations

import math
import os

import torch


class SSVMInputError(ValueError):
    """Raised when user input (data, hyper-parameters, options) is invalid."""


def check(cond: bool, field: str, expected: str, got: object = None) -> None:
    if not cond:
        msg = f"{field}: expected {expected}"
        if got is not None:
            msg += f", got {got}"
        raise SSVMInputError(msg)


def check_positive(value: float, field: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SSVMInputError(f"{field}: expected a positive number, got {value!r}") from None
    check(math.isfinite(v) and v > 0, field, "a finite number > 0", value)
    return v


def check_finite(t: torch.Tensor, field: str) -> None:
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise SSVMInputError(f"{field}: expected finite values, found {bad} NaN/inf entries")


def warn_scale(t: torch.Tensor, field: str, limit: float = 1e100) -> None:
    """Warn when values are so large that products of them with w overflow or swamp float64."""
    if t.numel() and t.is_floating_point():
        top = float(t.detach().abs().max())
        if top > limit:
            import warnings
            warnings.warn(f"{field}: values up to {top:.3g}; scores <w, phi> of such features overflow or lose all "
                          "precision in float64 and the steps stall; rescale the features", stacklevel=3)


def env_choice(name: str, choices: tuple, default: str) -> str:
    """The environment variable ``name`` (``default`` when unset), refused by name unless one of ``choices``."""
    choice = os.environ.get(name, default)
    if choice not in choices:
        raise SSVMInputError(f"{name}: expected one of {tuple(choices)}, got {choice!r}")
    return choice


def check_choice(value: str, field: str, choices) -> str:
    check(value in choices, field, f"one of {sorted(choices)}", repr(value))
    return value


class DistributedError(RuntimeError):
    """A collective failed (a rank died or timed out): the run stops instead of hanging."""


class RunInterrupted(Exception):
    """A run stopped by Ctrl-C / SIGTERM after writing what it had computed; the message says what.
    ``signal``: the signal's name ("SIGINT" or "SIGTERM"), which sets the exit status (130 / 143)."""

    def __init__(self, message: str, signal: str = "SIGINT"):
        super().__init__(message)
        self.signal = signal


class Terminated(BaseException):
    """SIGTERM where no run handles it (start-up, data loading, compilation): raised by :func:`run_cli`'s
    handler like KeyboardInterrupt for Ctrl-C, so context managers release their locks on the way out."""


#: the exit status of a command stopped by each signal: 128 + its number, as a shell reports it
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def interrupted_line(signal: str, since: int = 0) -> str:
    """The one line of a command stopped by ``signal`` outside a run's own handling: what it had written since
    the write mark ``since`` (every file whole: atomic writes), or that it had written nothing."""
    from .atomic import written_files
    what = "Ctrl-C" if signal == "SIGINT" else "SIGTERM"
    files = written_files(since)
    if not files:
        return f"interrupted ({what}) before the run had written anything"
    shown = ", ".join(str(f) for f in files[-6:]) + (f" and {len(files) - 6} earlier files" if len(files) > 6 else "")
    return f"interrupted ({what}); it had written {shown} (each file whole: every write is atomic)"


def run_cli(prog: str, fn, args) -> int:
    """Run a command's ``fn(args)``; bad input (SSVMInputError) prints ``prog: error: ...`` and
    returns exit code 2 instead of a traceback; an interrupted run (RunInterrupted, or Ctrl-C / SIGTERM
    where no run is in progress, e.g. while numba compiles) prints its one line and returns 130 for Ctrl-C
    (SIGINT), 143 for SIGTERM, the shell's codes; a rank of a torchrun run whose peer died (DistributedError)
    prints its one line and returns 1."""
    import signal as signals
    import sys
    import threading

    def say(line: str) -> None:
        # one write of the whole line: the ranks of a torchrun run share one stderr, and print's two writes
        # (the text, then the newline) interleave with another rank's under PYTHONUNBUFFERED
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def terminate(signum, frame):
        if isinstance(sys.exc_info()[1], DistributedError):
            return              # already stopping because a peer died: torchrun's agent now stops this rank too
        raise Terminated()

    def last_line(line: str, code: int) -> int:
        # the process is ending: a SIGTERM from here on (torchrun's agent stopping the ranks once one has died)
        # must not raise inside this line or after it, which would print a traceback instead
        if main_thread:
            signals.signal(signals.SIGTERM, signals.SIG_IGN)
        say(line)
        return code
    from .atomic import writes_so_far
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signals.signal(signals.SIGTERM, terminate) if main_thread else None
    mark = writes_so_far()                          # this command's files only (a process may run several)
    try:
        fn(args)
    except SSVMInputError as e:
        return last_line(f"{prog}: error: {e}", 2)
    except RunInterrupted as e:
        return last_line(f"{prog}: {e}", EXIT_CODES.get(e.signal, 130))
    except DistributedError as e:                   # another rank died: this one's line, not a traceback
        return last_line(f"{prog}: {e}", 1)
    except KeyboardInterrupt:                       # Ctrl-C outside a run's signal handling (start-up, compilation)
        return last_line(f"{prog}: {interrupted_line('SIGINT', mark)}", 130)
    except Terminated:
        return last_line(f"{prog}: {interrupted_line('SIGTERM', mark)}", 143)
    finally:
        if main_thread:
            signals.signal(signals.SIGTERM, previous)
    return 0


def human_bytes(n: float) -> str:
    """A byte count for messages: "512 B", "4.0 kB", "12.3 MB", "1.20 GB" (never "0 MB" for a few bytes)."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
