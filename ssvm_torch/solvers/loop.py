"""The one solver loop, structure-agnostic, over a block store (:class:`~ssvm_torch.stores.base.BlockDual`).

* ``fw``   -- batch Frank-Wolfe, Alg. 2 of Lacoste-Julien et al. 2013 (n oracle calls per
  iteration, one exact line search over all blocks). The oracle pass gives the exact duality gap
  for free, so FW's gap checks cost nothing extra.
* ``bcfw`` -- block-coordinate FW, Alg. 1 of Osokin et al. 2016 (Alg. 3 of Lacoste-Julien et al.),
  exact line search gamma = g_i / (lam ||w_i - w_s||^2) clipped to [0, 1], with uniform,
  per-pass permutation or gap sampling (Alg. 2 of Osokin et al.). Every ``gap_check`` effective
  passes an exact gap pass refreshes all block gaps; it is n oracle calls and counts as one
  effective pass (and its time counts).
  Step types (Osokin et al. 2016): ``fw`` (Alg. 1), ``pairwise`` (BCPFW, Alg. 3: move mass
  gamma in [0, alpha(y_a)] from the away corner to the FW corner), ``away`` (BCAFW, Alg. 4: the FW
  step or an away step x_i += gamma (x_i - v_a), gamma in [0, alpha_a/(1-alpha_a)], whichever
  direction is steeper) and ``best`` (the reference code's stepType 0: the best of the three by dual
  improvement). Pairwise/away keep explicit active sets of labelings. ``cache`` (Alg. 5) keeps a
  working set per block; the best cached corner is used instead of the oracle iff its gap
  g_hat >= max(F g_i, nu/n g), g_i the block's last oracle gap, g the last exact global gap
  (so no hit before the first gap check). Cache hits are not oracle calls, not passes, and do
  not refresh g_i.
* ``ssg``  -- stochastic subgradient, w <- (1 - gamma) w + gamma psi_i(y*)/lam with gamma = 1/(k+1)
  (Shalev-Shwartz et al. 2011 in the form of Lacoste-Julien et al. 2013). SSG keeps no dual, so
  its records carry the primal only (``dual``/``gap`` are None); its gap checks are monitoring and
  are not counted as passes.

The pieces: step rules (:mod:`.steps`), the sampler that owns the block gaps (:mod:`.samplers`),
weighted averaging (:mod:`.averaging`) and history records (:mod:`.history`) are objects this loop
calls; none of them calls back into it.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict
from typing import Callable

import numpy as np
import torch

from ..devices import device_clock, to_host
from ..errors import SSVMInputError, check
from ..stores.base import BlockDual
from .averaging import Averager
from .best_point import BestPoint
from .config import SOLVERS, STEPS, SolverConfig, SolverState, resumed_stop, stop_reason
from .history import Evaluator, make_record
from .samplers import SAMPLERS, Sampler
from .steps import SetStep, make_step_rule

__all__ = ["Solver", "SolverConfig", "SolverState", "SOLVERS", "STEPS"]


class LazyDraws:
    """``size`` draws of ``draw()``, each made only when iterated (a live sampler sees the last step's update
    before its next draw); sized, so that a round whose steps the ranks share (the shared-memory exchange)
    knows each rank's share."""

    def __init__(self, draw: Callable[[], int], size: int):
        self.draw, self.size = draw, size

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return (self.draw() for _ in range(self.size))


class Solver:
    """Runs one of the solvers on ``dual``; ``evaluate(w)`` (optional) returns train/test errors
    at each gap check (excluded from the timing); ``progress(record)`` is called with every new
    history record."""

    def __init__(self, dual: BlockDual, config: SolverConfig, evaluate: Evaluator | None = None,
                 progress: Callable[[dict], None] | None = None, monitor_start: bool = True,
                 interrupt: Callable[[], bool] | None = None, keep_best: bool = True, sets: list | None = None):
        self.dual, self.cfg = dual, config.validate()
        self.interrupt = interrupt              # polled after every chunk: True stops at the next gap check
        check(config.solver in ("fw", "bcfw", "ssg"), "solver", "'fw', 'bcfw' or 'ssg' for Solver (solvers.make_solver "
              "builds the others)", config.solver)
        self.monitor_start = monitor_start      # record the starting point (an uncounted gap pass)
        self.evaluate, self.progress = evaluate, progress
        # the batch FW draws no block; its sampler only holds the block gaps
        self.sampler: Sampler = SAMPLERS[config.block_sampling or config.sampling](dual.n, config.seed)
        self.state = SolverState(cache_limit=config.max_cache)
        check(config.batch_size <= dual.n, "batch_size", f"an int in [1, n = {dual.n}] (blocks per step)",
              config.batch_size)
        if not dual.supports_block_steps:
            check(config.solver == "bcfw" and config.step == "fw" and not config.cache, "solver",
                  "'bcfw' with step 'fw' and no cache for a store sharded over processes (mini-batch BCFW)",
                  f"{config.solver!r}, step {config.step!r}" + (", cache" if config.cache else ""))
        if dual.only_fw_block_steps:
            check(config.solver == "bcfw" and config.step == "fw" and not config.cache,
                  "solver", f"'bcfw' with step 'fw' and no cache for {dual.description or type(dual).__name__}",
                  f"{config.solver!r}, step {config.step!r}" + (", cache" if config.cache else ""))
        self.rule = make_step_rule(dual, config, self.sampler, sets)   # sets: a warm start's working sets
        self.averager = Averager(dual, lazy=config.solver == "bcfw") if config.averaging else None
        self.best = BestPoint(keep_best)   # the model a run returns (solvers/best_point.py); off with averaging
        if self.averager is None:
            dual.shadow = None
        self.last_gap_pass = None                 # the GapPass of the last exact check
        self._stopping = ""                       # stop reason met inside the current interval

    def _now(self) -> float:
        """The timing clock: synchronizes a CUDA store first, so ``time_s`` counts its kernels."""
        return device_clock(self.dual.device)

    @property
    def sets(self) -> list | None:
        """The per-block working sets of pairwise / away / cache steps (None otherwise)."""
        return self.rule.sets if isinstance(self.rule, SetStep) else None

    @property
    def block_gaps(self) -> np.ndarray:
        """The stale block gap estimates (owned by the sampler)."""
        return self.sampler.gaps

    @property
    def w_avg(self) -> torch.Tensor | None:
        """The weighted average of the iterates (None without averaging)."""
        return None if self.averager is None else self.averager.w_avg(self.state.steps)

    @property
    def passes(self) -> float:
        return self.state.oracle_calls / self.dual.n

    def _returns_best(self) -> bool:
        return self.averager is None and not self.best.is_last(self.state.history)

    def model_point(self) -> tuple[torch.Tensor, float]:
        """(w, ell) that ``model.pt`` holds: the best primal point the checks certified
        (solvers/best_point.py; the store's point when that is the last check's, or with averaging)
        and the store's ell."""
        return (self.best.w if self._returns_best() else self.dual.w), self.dual.ell

    def model_extras(self) -> dict:
        """``w_dual`` (the store's w) when the model is an earlier check's point: the records' dual is
        ell - lam/2 ||w_dual||^2 (App. H stores add the box term, which needs v; their files are not
        dual-recomputable). The store's own tensor, not a copy (d floats; save or copy it before
        further steps)."""
        return {"w_dual": self.dual.w} if self._returns_best() else {}

    def finish(self) -> list:
        """The history whose last record describes the returned model (:meth:`BestPoint.finish`)."""
        return self.best.finish(self.state.history) if self.averager is None else list(self.state.history)

    # -- one exact check ------------------------------------------------------------------------
    def _record(self, gp) -> dict:
        return make_record(self.dual, gp, self.cfg, self.state, self.sampler, self.sets, self.averager,
                           self.evaluate)

    def _check(self) -> dict:
        """Exact gap pass at the current w; feeds the gap sampler (BCFW) and the history."""
        t0 = self._now()
        gp = self.dual.gap_pass()
        self.last_gap_pass = gp
        self.state.checks += 1
        k = self.cfg.gap_refresh
        counted = self.cfg.solver == "bcfw" and k > 0 and self.state.checks % k == 0
        if counted:
            self.state.oracle_calls += self.dual.n
            self.state.time_s += self._now() - t0
        rec = self._record(gp)
        if counted:
            self.sampler.set_all(to_host(gp.block_gaps))
            self.state.last_gap = rec["gap"]
        self._log(rec)
        return rec

    def _log(self, rec):
        self._keep(rec)
        self._report(rec)

    def _keep(self, rec):
        """Append a check's record and offer the point it certifies (the store's, now) to the best point."""
        self.state.history.append(rec)
        self.best.offer(rec, self.dual.w, len(self.state.history) - 1)

    def _report(self, rec):
        if self.progress is not None:
            self.progress(rec)

    def set_block_gaps(self, gaps) -> None:
        """Start from known block gaps (e.g. eq. (12) after a path step) instead of +inf."""
        gaps = np.asarray(to_host(gaps) if torch.is_tensor(gaps) else gaps, dtype=float)
        check(gaps.shape == (self.dual.n,), "gaps", f"shape ({self.dual.n},)", gaps.shape)
        self.sampler.set_all(gaps)

    def _should_stop(self, rec: dict | None) -> str:
        estimate = self.sampler.estimate() if self.cfg.estimate_threshold > 0 else None
        return stop_reason(self.cfg, self.state, self.passes, rec, estimate,
                           interrupted=self.interrupt is not None and self.interrupt())

    # -- main loops -----------------------------------------------------------------------------
    def run(self) -> list:
        """Run to a stopping criterion; returns the history (one record per exact gap check)."""
        self.start()
        while not self.state.done:
            self.interval()
        return self.finish()

    def interval(self) -> None:
        """One interval: ``gap_check`` passes of steps (batch FW: iterations) closed by the exact gap
        check, which may set ``state.done``."""
        if self.cfg.solver == "fw":
            self.fw_iterations()
            return
        self._steps_of_interval()
        if self.cfg.check_below > 0:
            # the estimate decides when the exact pass is worth paying (at most one pass more)
            extra = 0.0
            while not self._stopping and extra < 1.0 and self._estimate_above(self.cfg.check_below):
                self._steps_of_interval()
                extra += self.cfg.gap_check
        self.end_interval()

    def _steps_of_interval(self) -> None:
        for size in self.chunk_sizes():
            if self.run_chunk(LazyDraws(self.draw, size)):
                break

    def _estimate_above(self, level: float) -> bool:
        estimate = self.sampler.estimate()
        return estimate is None or estimate > level

    # The pieces of ``run`` for drivers that own the loop (the Lightning module): ``start`` once, then
    # per interval ``run_chunk`` for each of ``chunk_sizes()`` and ``end_interval``.
    def start(self) -> None:
        """Record the starting point (an uncounted gap pass) unless resuming or ``monitor_start=False``."""
        if not self.state.history and self.monitor_start:
            gp = self.dual.gap_pass()
            self._log(self._record(gp))

    def draw(self):
        """What the next step works on, drawn from the live sampler: a block (an int), or for
        mini-batch BCFW a list of ``batch_size`` distinct blocks."""
        tau = self.cfg.batch_size
        return self.sampler.next() if tau == 1 and self.dual.supports_block_steps else self.sampler.draw(tau)

    def chunk_sizes(self, chunk: int | None = None) -> list[int]:
        """Steps between two exact gap checks (``gap_check`` passes, i.e. gap_check n / batch_size
        steps), split in chunks of ``chunk`` steps (default one pass): the unit of timing, drift
        recomputation and stop checks."""
        per_pass = self.dual.n / self.cfg.batch_size
        chunk = max(1, math.ceil(per_pass)) if chunk is None else chunk
        check(isinstance(chunk, int) and chunk >= 1, "chunk", "an int >= 1", chunk)
        total = max(1, round(self.cfg.gap_check * self.dual.n) if self.cfg.batch_size == 1
                    else math.ceil(self.cfg.gap_check * per_pass))       # a mini-batch interval covers its passes
        return [chunk] * (total // chunk) + ([total % chunk] if total % chunk else [])

    def run_chunk(self, indices) -> str:
        """Steps on the draws of ``indices`` (an iterable of blocks, or of block lists for mini-batch
        BCFW, pulled one at a time so a lazy sampler sees every update before its next draw) until
        the pass budget (a last mini-batch is cut to the calls left); then the exact
        recomputation of w if due. Returns the stop reason ("" to go on); once a chunk returned
        one, later chunks of the same interval do nothing."""
        d, st = self.dual, self.state
        if self._stopping:
            return self._stopping
        step, avg = self.rule.step, self.averager
        max_calls = math.ceil(self.cfg.passes * d.n)
        t0 = self._now()
        calls0 = st.oracle_calls
        it = iter(indices)
        while st.oracle_calls < max_calls:
            i = next(it, None)
            if i is None:
                break
            if isinstance(i, list) and len(i) > max_calls - st.oracle_calls:
                i = i[:max_calls - st.oracle_calls]
            if avg is not None:
                avg.before_step(st.steps)
            step(i, st)
            st.steps += 1
            if avg is not None:
                avg.after_step(st.steps)
        st.passes_since_recompute += (st.oracle_calls - calls0) / d.n
        if self.cfg.solver == "bcfw" and st.passes_since_recompute >= self.cfg.recompute_every:
            w_before = d.w.clone() if avg is not None and avg.lazy else None
            d.recompute()
            if w_before is not None:
                avg.after_recompute(w_before, st.steps)
            st.passes_since_recompute = 0.0
        st.time_s += self._now() - t0
        self._stopping = self._should_stop(None)
        return self._stopping

    def end_interval(self) -> dict:
        """The exact gap check closing an interval of block steps; sets ``state.done`` when a
        stopping criterion holds. Returns the new history record."""
        st = self.state
        rec = self._check()
        st.stop_reason = self._should_stop(rec)
        st.done = bool(st.stop_reason)
        self._stopping = ""
        return rec

    def fw_iterations(self):
        """``gap_check`` batch FW iterations (Alg. 2 of Lacoste-Julien et al. 2013: one oracle pass,
        one exact line search on all blocks); the gap of each iteration's oracle pass is exact and free."""
        d, st, lam = self.dual, self.state, self.dual.lam
        iterations = max(1, round(self.cfg.gap_check))
        for it in range(iterations):
            t0 = self._now()
            gp = d.gap_pass()
            st.oracle_calls += d.n
            w_s, ell_s = d.corner_point(gp)
            diff = d.v - w_s
            gap = lam * float(diff @ d.w) - d.ell + ell_s
            sq = lam * float(diff @ diff)
            gamma = min(max(gap / sq, 0.0), 1.0) if sq > 0 else 0.0
            st.time_s += self._now() - t0
            st.gamma_sum, st.gamma_n, st.gamma_full = st.gamma_sum + gamma, st.gamma_n + 1, st.gamma_full + (gamma >= 1.0)
            last = it == iterations - 1
            stop = self._should_stop({"gap": float(gp.block_gaps.sum())})
            rec = None
            if last or stop:               # record the exact gap of this pass (at the pre-step w)
                self.sampler.gaps[:] = to_host(gp.block_gaps)
                self.last_gap_pass = gp
                rec = self._record(gp)
                self._keep(rec)
                if stop:
                    self._report(rec)
                    st.stop_reason, st.done = stop, True
                    return
            t0 = self._now()
            d.move_all(gp, w_s, ell_s, gamma)
            st.steps += 1
            if self.averager is not None:
                self.averager.after_step(st.steps)
            st.time_s += self._now() - t0
            if rec is not None:            # after the step: a checkpoint written here resumes at the next iteration
                self._report(rec)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        avg = self.averager.state_dict() if self.averager is not None else {"w_avg": None, "ell_avg": 0.0,
                                                                             "avg_R": None}
        return {"config": asdict(self.cfg), "dual": self.dual.state_dict(), "sampler": self.sampler.state_dict(),
                "stale": self.sampler.gaps.copy(), "state": asdict(self.state), **avg,
                "sets": copy.deepcopy(self.sets), "best": self.best.state_dict()}

    def load_state_dict(self, s: dict) -> None:
        missing = {"config", "dual", "sampler", "stale", "state"} - set(s)
        if missing:
            raise SSVMInputError(f"checkpoint: expected a solver state, missing {sorted(missing)}")
        for key in ("solver", "sampling", "seed", "gap_check", "averaging", "step", "cache", "batch_size"):
            saved = s["config"].get(key, 1 if key == "batch_size" else None)    # older checkpoints: tau = 1
            if saved != getattr(self.cfg, key):
                raise SSVMInputError(f"checkpoint config.{key}: expected {getattr(self.cfg, key)!r} "
                                     f"(this run), got {saved!r}")
        try:
            self.dual.load_state_dict(s["dual"])
        except KeyError as e:
            raise SSVMInputError(f"checkpoint: its block state lacks {e} (a checkpoint of another structure: "
                                 f"this run's store is {type(self.dual).__name__})") from None
        self.sampler.load_state_dict(s["sampler"])
        self.sampler.gaps[:] = s["stale"]
        self.state = SolverState(**s["state"])
        self.state.stop_reason = resumed_stop(self.cfg, self.state, self.passes, self.monitor_start, self.sampler.estimate() if self.cfg.estimate_threshold > 0 else None)
        self.state.done = bool(self.state.stop_reason)
        self.best.load_state_dict(s.get("best"))
        if self.averager is not None:
            self.averager.load_state_dict(s)
        if isinstance(self.rule, SetStep):
            self.rule.load_state_dict({"sets": copy.deepcopy(s["sets"])})
