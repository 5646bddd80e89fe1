"""The frame the other solvers of the field share with :class:`~ssvm_torch.solvers.loop.Solver`:
the same store seam, stopping rules, counters, history records and checkpoint envelope, so that
``ssvm-train --solver {eg,deg,cutting-plane}`` writes the same history keys as the FW family.

* ``passes`` counts effective passes: n oracle *or marginal* calls each (a marginal call is one
  forward-backward of one example, the EG/DEG analogue of one loss-augmented decoding);
* every ``gap_check`` passes an exact check records the state (``primal`` = objective (1) at the
  point :meth:`model_point` returns, the one ``model.pt`` holds).

A subclass implements :meth:`iterate` (some work, counting its calls in ``state.oracle_calls``, never
starting work past ``interval_end``),
:meth:`check` (the record of an exact check) and its own state.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Callable

import torch

from ..devices import device_clock, to_host
from ..errors import SSVMInputError
from ..stores.base import BlockDual, GapPass
from .config import SolverConfig, SolverState, resumed_stop, stop_reason
from .history import Evaluator, make_record
from .best_point import BestPoint
from .samplers import SAMPLERS, Sampler


class OuterSolver:
    """Common frame (see module docstring); ``run()`` returns the history."""

    #: config fields a checkpoint must agree on
    identity = ("solver", "seed", "gap_check", "sampling")
    #: (the store interface this solver needs, what it is called in the refusal), or None
    needs: tuple | None = None
    #: the run returns the best primal point its checks certified (solvers/best_point.py); a solver
    #: that keeps its own best point in every record (DEG) turns it off
    returns_best_check = True

    def __init__(self, dual: BlockDual, config: SolverConfig, evaluate: Evaluator | None = None,
                 progress: Callable[[dict], None] | None = None, monitor_start: bool = True,
                 interrupt: Callable[[], bool] | None = None):
        self.dual, self.cfg = dual, config.validate()
        if self.needs is not None and (not isinstance(dual, self.needs[0]) or not dual.supports_marginal_moves):
            raise SSVMInputError(f"solver: {config.solver!r} needs a store with {self.needs[1]}; "
                                 f"{dual.description or type(dual).__name__} has none")
        if not dual.supports_block_steps:
            raise SSVMInputError(f"solver: {config.solver!r} runs in one process; a store sharded over processes "
                                 "(torchrun) takes 'bcfw' mini-batches only")
        self.evaluate, self.progress, self.monitor_start = evaluate, progress, monitor_start
        self.interrupt = interrupt              # polled at every check: True stops there
        self.sampler: Sampler = SAMPLERS[config.sampling](dual.n, config.seed)
        self.state = SolverState()
        self.certified = False          # set by an iteration that met the gap threshold on its own
        self.interval_end = 0.0         # oracle calls at which the current interval's check is due
        self.best = BestPoint()

    def _now(self) -> float:
        """The timing clock: synchronizes a CUDA store first, so ``time_s`` counts its kernels."""
        return device_clock(self.dual.device)

    @property
    def passes(self) -> float:
        return self.state.oracle_calls / self.dual.n

    # -- what a subclass provides ------------------------------------------------------------
    def iterate(self) -> None:
        raise NotImplementedError

    def check(self) -> dict:
        """The record of an exact check at the current iterate (not timed, not counted)."""
        raise NotImplementedError

    def _returns_best(self) -> bool:
        return self.returns_best_check and not self.best.is_last(self.state.history)

    def model_point(self) -> tuple[torch.Tensor, float]:
        """(w, ell) that ``model.pt`` holds: the best primal point the checks certified (the last
        record's ``primal`` is objective (1) at this w) and the store's ell."""
        return (self.best.w if self._returns_best() else self.dual.w), self.dual.ell

    def model_extras(self) -> dict:
        """What ``model.pt`` holds besides (w, ell) so that the records' dual is recomputable from the
        file alone: ``w_dual`` (the store's w) when the model is an earlier check's point, the dual
        being ell - lam/2 ||w_dual||^2 (none otherwise: the file's w)."""
        return {"w_dual": self.dual.w.clone()} if self._returns_best() else {}

    def iterate_point(self) -> torch.Tensor:
        """The point a record evaluates (train / test metrics): the store's."""
        return self.dual.w

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, s: dict) -> None:
        pass

    # -- the frame ------------------------------------------------------------------------------
    def record(self, gp: GapPass, **extra) -> dict:
        """A history record from a gap pass at the store's point, plus the method's own fields."""
        rec = make_record(self.dual, gp, self.cfg, self.state, self.sampler, evaluate=None)
        rec.update(extra)
        if self.evaluate is not None:
            rec.update(self.evaluate(self.iterate_point()))
        return rec

    def exact_gap_pass(self) -> GapPass:
        """A gap pass at the store's point that also refreshes the sampler's block gaps."""
        gp = self.dual.gap_pass()
        self.sampler.set_all(to_host(gp.block_gaps))
        return gp

    def _log(self, rec: dict) -> None:
        self.state.history.append(rec)
        if self.returns_best_check:
            self.best.offer(rec, self.dual.w, len(self.state.history) - 1)
        if self.progress is not None:
            self.progress(rec)

    def _should_stop(self, rec: dict | None) -> str:
        return stop_reason(self.cfg, self.state, self.passes, rec,
                           interrupted=self.interrupt is not None and self.interrupt())

    def run(self) -> list:
        st = self.state
        if not st.history and self.monitor_start:
            self._log(self.check())
        while not st.done:
            target = self.passes + self.cfg.gap_check
            self.interval_end = target * self.dual.n          # in oracle calls: iterate() may batch up to it
            while self.passes < target - 1e-12:
                t0 = self._now()
                self.iterate()
                st.steps += 1
                st.time_s += self._now() - t0
                if self.certified or self._should_stop(None):
                    break
            st.checks += 1
            rec = self.check()
            self._log(rec)
            st.stop_reason = self._should_stop(rec)
            st.done = bool(st.stop_reason)
        return self.finish()

    def finish(self) -> list:
        """The history whose last record describes the returned model (:meth:`BestPoint.finish`)."""
        return self.best.finish(self.state.history) if self.returns_best_check else list(self.state.history)

    def state_dict(self) -> dict:
        return {"config": asdict(self.cfg), "dual": self.dual.state_dict(), "sampler": self.sampler.state_dict(),
                "stale": self.sampler.gaps.copy(), "state": asdict(self.state), "method": self.extra_state(),
                "best": self.best.state_dict()}

    def load_state_dict(self, s: dict) -> None:
        missing = {"config", "dual", "sampler", "stale", "state", "method"} - set(s)
        if missing:
            raise SSVMInputError(f"checkpoint: expected a {self.cfg.solver} solver state, missing {sorted(missing)}")
        for key in self.identity:
            if s["config"].get(key) != getattr(self.cfg, key):
                raise SSVMInputError(f"checkpoint config.{key}: expected {getattr(self.cfg, key)!r} (this run), "
                                     f"got {s['config'].get(key)!r}")
        self.dual.load_state_dict(s["dual"])
        self.sampler.load_state_dict(s["sampler"])
        self.sampler.gaps[:] = s["stale"]
        self.state = SolverState(**s["state"])
        self.state.stop_reason = resumed_stop(self.cfg, self.state, self.passes, self.monitor_start, None)
        self.state.done = bool(self.state.stop_reason)
        self.best.load_state_dict(s.get("best"))
        self.load_extra_state(s["method"])
