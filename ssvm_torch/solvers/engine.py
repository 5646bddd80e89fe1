"""Structure-agnostic SSVM solvers over a :class:`~ssvm_torch.solvers.dual.BlockDual`.

* ``fw``   -- batch Frank-Wolfe, Alg. 2 of Lacoste-Julien et al. 2013 (n oracle calls per
  iteration, one exact line search over all blocks). The oracle pass gives the exact duality gap
  for free, so FW's gap checks cost nothing extra.
* ``bcfw`` -- block-coordinate FW, Alg. 1 of Osokin et al. 2016 (Alg. 3 of Lacoste-Julien et al.),
  exact line search gamma = g_i / (lam ||w_i - w_s||^2) clipped to [0, 1], with uniform,
  per-pass permutation or gap sampling (Alg. 2 of Osokin et al.). Every ``gap_check`` effective
  passes an exact gap pass refreshes all block gaps; it is n oracle calls and counts as one
  effective pass (and its time counts).
* ``ssg``  -- stochastic subgradient, w <- (1 - gamma) w + gamma psi_i(y*)/lam with gamma = 1/(k+1)
  (Shalev-Shwartz et al. 2011 in the form of Lacoste-Julien et al. 2013). SSG keeps no dual, so
  its records carry the primal only (``dual``/``gap`` are None); its gap checks are monitoring and
  are not counted as passes.

Optional weighted averaging (Lacoste-Julien et al. 2013): w_avg <- (1 - rho) w_avg + rho w with
rho = 2/(k+2) (and ell likewise); the averaged point is dual-feasible for FW/BCFW, so its exact gap
is reported in the ``avg_*`` fields of every record, next to the current iterate's.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from ..errors import SSVMInputError, check, check_choice
from .dual import BlockDual
from .samplers import SAMPLERS, Sampler

SOLVERS = ("fw", "bcfw", "ssg")


@dataclass
class SolverConfig:
    solver: str = "bcfw"
    sampling: str = "gap"
    gap_check: int = 10          # effective passes between exact gap checks (FW: iterations)
    passes: float = 50.0         # stop after this many effective passes
    gap_threshold: float = 0.0   # stop when the exact duality gap <= this
    time_budget: float = math.inf
    seed: int = 0
    averaging: bool = False
    recompute_every: int = 10    # BCFW: passes between exact recomputations of w, ell from the blocks

    def validate(self) -> "SolverConfig":
        check_choice(self.solver, "solver", SOLVERS)
        check_choice(self.sampling, "sampling", SAMPLERS)
        check(isinstance(self.gap_check, int) and self.gap_check >= 1, "gap_check", "an int >= 1", self.gap_check)
        check(self.passes > 0, "passes", "a number > 0", self.passes)
        check(self.gap_threshold >= 0, "gap_threshold", "a number >= 0", self.gap_threshold)
        check(self.time_budget > 0, "time_budget", "a number of seconds > 0", self.time_budget)
        check(isinstance(self.recompute_every, int) and self.recompute_every >= 1, "recompute_every",
              "an int >= 1", self.recompute_every)
        return self


Evaluator = Callable[[torch.Tensor], dict]


@dataclass
class SolverState:
    steps: int = 0
    oracle_calls: int = 0
    time_s: float = 0.0
    passes_since_recompute: float = 0.0
    history: list = field(default_factory=list)
    done: bool = False
    stop_reason: str = ""


class Solver:
    """Runs one of the solvers on ``dual``; ``evaluate(w)`` (optional) returns train/test errors
    at each gap check (excluded from the timing)."""

    def __init__(self, dual: BlockDual, config: SolverConfig, evaluate: Evaluator | None = None,
                 progress: Callable[[dict], None] | None = None):
        self.dual, self.cfg = dual, config.validate()
        self.evaluate, self.progress = evaluate, progress
        sampling = "uniform" if config.solver == "ssg" and config.sampling == "gap" else config.sampling
        self.sampler: Sampler = SAMPLERS[sampling](dual.n, config.seed)
        self.stale = np.full(dual.n, np.inf)      # last computed gap of every block (the gap estimate)
        self.state = SolverState()
        self.w_avg = dual.w.clone() if config.averaging else None
        self.ell_avg = dual.ell if config.averaging else 0.0

    @property
    def passes(self) -> float:
        return self.state.oracle_calls / self.dual.n

    # -- one exact check ------------------------------------------------------------------------
    def _record(self, gp, counted: bool) -> dict:
        d, lam, st = self.dual, self.dual.lam, self.state
        est = float(self.stale.sum()) if np.isfinite(self.stale).all() else None
        rec = {"passes": self.passes, "oracle_calls": st.oracle_calls, "steps": st.steps, "time_s": st.time_s,
               "primal": d.primal(gp.H)}
        if self.cfg.solver == "ssg":
            rec.update(dual=None, gap=None)
        else:
            rec.update(dual=d.dual(), gap=float(gp.block_gaps.sum()))
        rec["gap_estimate"] = est
        if self.w_avg is not None and self.cfg.solver != "ssg":
            saved_w, saved_ell = d.w.clone(), d.ell
            d.set_point(self.w_avg, self.ell_avg)
            gpa = d.gap_pass()
            rec.update(avg_primal=d.primal(gpa.H), avg_dual=d.dual(),
                       avg_gap=d.primal(gpa.H) - d.dual())
            d.set_point(saved_w, saved_ell)
        elif self.w_avg is not None:
            saved_w = d.w.clone()
            d.w.copy_(self.w_avg)
            rec["avg_primal"] = d.primal(d.gap_pass().H)
            d.w.copy_(saved_w)
        if self.evaluate is not None:
            rec.update(self.evaluate(d.w))
            if self.w_avg is not None:
                rec.update({f"avg_{k}": v for k, v in self.evaluate(self.w_avg).items()})
        return rec

    def _check(self) -> dict:
        """Exact gap pass at the current w; feeds the gap sampler (BCFW) and the history."""
        t0 = time.perf_counter()
        gp = self.dual.gap_pass()
        counted = self.cfg.solver == "bcfw"
        if counted:
            self.state.oracle_calls += self.dual.n
            self.state.time_s += time.perf_counter() - t0
        rec = self._record(gp, counted)
        gaps = gp.block_gaps.detach().cpu().numpy()
        if self.cfg.solver == "bcfw":
            self.sampler.set_all(gaps)
            self.stale[:] = gaps
        self._log(rec)
        return rec

    def _log(self, rec):
        self.state.history.append(rec)
        if self.progress is not None:
            self.progress(rec)

    def _should_stop(self, rec: dict | None) -> str:
        if rec is not None and rec.get("gap") is not None and rec["gap"] <= self.cfg.gap_threshold:
            return "gap_threshold"
        if self.passes >= self.cfg.passes - 1e-12:
            return "passes"
        if self.state.time_s >= self.cfg.time_budget:
            return "time_budget"
        return ""

    # -- main loops -----------------------------------------------------------------------------
    def run(self) -> list:
        st = self.state
        if not st.history:                  # monitoring record of the starting point (not counted)
            gp = self.dual.gap_pass()
            self._log(self._record(gp, counted=False))
        run = {"fw": self._run_fw, "bcfw": self._run_bcfw, "ssg": self._run_ssg}[self.cfg.solver]
        while not st.done:
            run()
        return st.history

    def _average(self):
        if self.w_avg is not None:
            rho = 2.0 / (self.state.steps + 2.0)
            self.w_avg.lerp_(self.dual.w, rho)
            self.ell_avg += rho * (self.dual.ell - self.ell_avg)

    def _run_bcfw(self):
        """One chunk of ``gap_check`` passes of BCFW steps, then an exact gap check."""
        d, st, lam = self.dual, self.state, self.dual.lam
        sampler, stale = self.sampler, self.stale
        target_calls = st.oracle_calls + self.cfg.gap_check * d.n
        max_calls = math.ceil(self.cfg.passes * d.n)
        reason = ""
        while st.oracle_calls < target_calls and not reason:
            t0 = time.perf_counter()
            steps = min(d.n, target_calls - st.oracle_calls, max(max_calls - st.oracle_calls, 0))
            for _ in range(steps):
                i = sampler.next()
                c = d.fw_corner(i)
                g = c.gap
                if c.sqnorm > 0.0 and g > 0.0:
                    gamma = g / (lam * c.sqnorm)
                    d.fw_move(i, c, 1.0 if gamma > 1.0 else gamma)
                sampler.update(i, g)
                stale[i] = g
                st.steps += 1
                if self.w_avg is not None:
                    self._average()
            st.oracle_calls += steps
            st.passes_since_recompute += steps / d.n
            if st.passes_since_recompute >= self.cfg.recompute_every:
                d.recompute()
                st.passes_since_recompute = 0.0
            st.time_s += time.perf_counter() - t0
            reason = self._should_stop(None) if steps else "passes"
        rec = self._check()
        st.stop_reason = self._should_stop(rec)
        st.done = bool(st.stop_reason)

    def _run_fw(self):
        """Batch FW iterations; the gap of each iteration's oracle pass is exact and free."""
        d, st, lam = self.dual, self.state, self.dual.lam
        for it in range(self.cfg.gap_check):
            t0 = time.perf_counter()
            gp = d.gap_pass()
            st.oracle_calls += d.n
            w_s, ell_s = d.corner_point(gp)
            diff = d.w - w_s
            gap = lam * float(diff @ d.w) - d.ell + ell_s
            sq = lam * float(diff @ diff)
            gamma = min(max(gap / sq, 0.0), 1.0) if sq > 0 else 0.0
            st.time_s += time.perf_counter() - t0
            last = it == self.cfg.gap_check - 1
            stop = self._should_stop({"gap": float(gp.block_gaps.sum())})
            if last or stop:               # record the exact gap of this pass (at the pre-step w)
                self.stale[:] = gp.block_gaps.detach().cpu().numpy()
                rec = self._record(gp, counted=True)
                self._log(rec)
                if stop:
                    st.stop_reason, st.done = stop, True
                    return
            t0 = time.perf_counter()
            d.move_all(gp, w_s, ell_s, gamma)
            st.steps += 1
            self._average()
            st.time_s += time.perf_counter() - t0

    def _run_ssg(self):
        d, st, lam = self.dual, self.state, self.dual.lam
        target_calls = st.oracle_calls + self.cfg.gap_check * d.n
        max_calls = math.ceil(self.cfg.passes * d.n)
        reason = ""
        while st.oracle_calls < target_calls and not reason:
            t0 = time.perf_counter()
            steps = min(d.n, target_calls - st.oracle_calls, max(max_calls - st.oracle_calls, 0))
            for _ in range(steps):
                i = self.sampler.next()
                c = d.fw_corner(i)
                gamma = 1.0 / (st.steps + 1.0)
                d.w.mul_(1.0 - gamma)
                d.add_psi(i, c, gamma / lam)
                st.steps += 1
                self._average()
            st.oracle_calls += steps
            st.time_s += time.perf_counter() - t0
            reason = self._should_stop(None) if steps else "passes"
        rec = self._check()
        st.stop_reason = self._should_stop(rec)
        st.done = bool(st.stop_reason)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"config": asdict(self.cfg), "dual": self.dual.state_dict(), "sampler": self.sampler.state_dict(),
                "stale": self.stale.copy(), "state": asdict(self.state),
                "w_avg": None if self.w_avg is None else self.w_avg.clone(), "ell_avg": self.ell_avg}

    def load_state_dict(self, s: dict) -> None:
        for key in ("solver", "sampling", "seed", "gap_check", "averaging"):
            if s["config"][key] != getattr(self.cfg, key):
                raise SSVMInputError(f"checkpoint config.{key}: expected {getattr(self.cfg, key)!r} "
                                     f"(this run), got {s['config'][key]!r}")
        self.dual.load_state_dict(s["dual"])
        self.sampler.load_state_dict(s["sampler"])
        self.stale[:] = s["stale"]
        self.state = SolverState(**s["state"])
        self.state.done = False
        if self.w_avg is not None:
            self.w_avg.copy_(s["w_avg"])
        self.ell_avg = s["ell_avg"]
