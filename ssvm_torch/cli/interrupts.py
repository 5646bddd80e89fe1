"""Ctrl-C and SIGTERM as a request to stop, not a crash: the first signal sets a flag that the solver
polls after every pass (``make_solver(..., interrupt=...)``); the loop then closes its interval with
an exact gap check at the current point and stops (stop reason "interrupted"), so the command writes
``history.json`` and ``model.pt`` of that point as after any other stop. A second signal aborts at
once (the previous handlers are back)."""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """True (when called) once SIGINT or SIGTERM arrived; ``signal`` is the first one's name ("SIGINT" until
    one arrives), which sets the interrupted command's exit status (130 / 143)."""

    def __init__(self):
        self.event = threading.Event()
        self.signal = "SIGINT"

    def __call__(self) -> bool:
        return self.event.is_set()


@contextmanager
def stop_on_signal(prog: str, abort_on_repeat: bool = True, announce: bool = True,
                   stopping: str = "stopping after the current pass and its exact gap check"):
    """Yield a :class:`StopRequest` that is True once SIGINT or SIGTERM arrived (outside the main thread, where
    Python cannot install handlers, it stays False and signals act as usual). ``abort_on_repeat``
    False (a rank under torchrun): later signals are the same request, not an abort, because the
    launcher passes the user's Ctrl-C on to the ranks (or sends SIGTERM when a rank dies) right after
    the terminal's own, and ends the ranks itself (SIGKILL) if they outlast its timeout.
    ``announce``: print the line that says the run is ``stopping`` (rank 0 only under torchrun)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def handler(signum, frame):
        first = not request.event.is_set()
        if first:
            request.signal = signal.Signals(signum).name
        request.event.set()
        if abort_on_repeat:
            for s, h in previous.items():          # a second signal: the usual behaviour (abort)
                signal.signal(s, h)
        if announce and first:
            print(f"{prog}: {request.signal} received: {stopping} "
                  + ("(again to abort at once)" if abort_on_repeat else "(on every rank)"), file=sys.stderr,
                  flush=True)

    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield request
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def agreed_stop(requested, device):
    """Under torchrun: the ranks' stop requests agreed by one all-reduce per poll (so they stop at the same pass),
    SIGTERM over SIGINT; every rank then carries the agreed signal (its exit status), a rank that received
    none included."""
    from ..distributed.collectives import any_rank
    codes = any_rank(lambda: 0 if not requested() else 2 if requested.signal == "SIGTERM" else 1, device)

    def agreed() -> bool:
        code = codes()
        if code:
            requested.signal = "SIGTERM" if code == 2 else "SIGINT"
        return bool(code)
    return agreed
