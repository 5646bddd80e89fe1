"""Solver options (:class:`SolverConfig`, validated with named-field errors) and the loop's counters
(:class:`SolverState`, saved in checkpoints)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ..errors import check, check_choice
from .samplers import SAMPLERS

SOLVERS = ("fw", "bcfw", "ssg", "eg", "deg", "cutting-plane")
#: the solvers that visit every block at each iteration and so sample none (SolverConfig.block_sampling)
BATCH_SOLVERS = ("fw", "deg", "cutting-plane")
STEPS = ("fw", "pairwise", "away", "best")


@dataclass
class SolverConfig:
    solver: str = "bcfw"
    sampling: str = "gap"
    gap_check: float = 10        # passes of block steps between exact gap checks, may be fractional
                                 # (e.g. 0.1: every n/10 steps); FW: iterations (rounded, >= 1)
    passes: float = 50.0         # stop after this many effective passes
    gap_threshold: float = 0.0   # stop when the exact duality gap <= this
    time_budget: float = math.inf
    seed: int = 0
    averaging: bool = False
    recompute_every: int = 10    # BCFW: passes between exact recomputations of w, ell from the blocks
    step: str = "fw"             # BCFW step type: fw, pairwise, away, best
    cache: bool = False          # gap-based caching (Alg. 5)
    cache_F: float = 0.25
    cache_nu: float = 0.01
    max_cache: int = 50
    gap_refresh: int = 1         # BCFW: every k-th gap check refreshes the block gaps (0: never);
                                 # the others are monitoring only (not counted, not timed)
    estimate_threshold: float = 0.0   # BCFW: also stop when the gap estimate (sum of the stale block
                                      # gaps) is <= this (the heuristic path's stopping rule, App. K)
    check_below: float = 0.0     # BCFW: after the gap_check passes of an interval, go on in steps of
                                 # gap_check passes (up to one pass more) until the gap estimate is <= this,
                                 # then pay the exact check (0: check every gap_check passes)
    step_size: float = 0.0       # EG / DEG: first try's multiple of the safe step (0 = the solver's default)
    eg_start: str = "margin"     # EG: "margin" (theta_i = m S(y_i), m from solvers.eg.start_margin) or "uniform" (theta_i = 0,
                                 # Collins et al.'s uniform alpha_i); solvers/eg.py says why margin is the default
    qp_solver: str = "daqp"      # cutting plane: the qpsolvers backend of the working-set QP
    inactive_window: int = 50    # cutting plane: QP solves a constraint may stay at alpha = 0 before pruning
    working_set: str = "auto"    # cutting plane: constraints as "dense" rows or joint "labelings" (large chain
                                 # models); "auto" picks (solvers/working_set.py)
    batch_size: int = 1          # BCFW: blocks per step (mini-batch BCFW): tau distinct blocks decoded in
                                 # one batched oracle call, one exact line search on the joint direction

    @classmethod
    def from_mapping(cls, options) -> "SolverConfig":
        """The config from a mapping with keys named like the fields (hyper-parameters, estimator
        parameters); fields it lacks keep their defaults."""
        return cls(**{f.name: options[f.name] for f in fields(cls) if f.name in options})

    @classmethod
    def from_options(cls, options) -> "SolverConfig":
        """The config from an object with attributes named like the fields (an argparse namespace)."""
        return cls.from_mapping(vars(options))

    def validate(self) -> "SolverConfig":
        check_choice(self.solver, "solver", SOLVERS)
        check_choice(self.sampling, "sampling", SAMPLERS)
        check(isinstance(self.gap_check, (int, float)) and math.isfinite(self.gap_check) and self.gap_check > 0,
              "gap_check", "a finite number > 0", self.gap_check)
        # the pass budget becomes an oracle-call count: it must be finite
        check(isinstance(self.passes, (int, float)) and math.isfinite(self.passes) and self.passes > 0, "passes",
              "a finite number > 0 (use --gap-threshold or --time-budget to stop otherwise)", self.passes)
        check(isinstance(self.gap_threshold, (int, float)) and math.isfinite(self.gap_threshold)
              and self.gap_threshold >= 0, "gap_threshold", "a finite number >= 0", self.gap_threshold)
        check(isinstance(self.seed, int) and 0 <= self.seed < 2 ** 63, "seed", "an int in [0, 2^63)", self.seed)
        check(self.estimate_threshold >= 0, "estimate_threshold", "a number >= 0", self.estimate_threshold)
        check(isinstance(self.check_below, (int, float)) and math.isfinite(self.check_below) and self.check_below >= 0,
              "check_below", "a finite number >= 0", self.check_below)
        check(self.time_budget > 0, "time_budget", "a number of seconds > 0", self.time_budget)
        check(isinstance(self.recompute_every, int) and self.recompute_every >= 1, "recompute_every",
              "an int >= 1", self.recompute_every)
        check_choice(self.step, "step", STEPS)
        check(isinstance(self.gap_refresh, int) and self.gap_refresh >= 0, "gap_refresh", "an int >= 0",
              self.gap_refresh)
        check(self.cache_F >= 0, "cache_F", "a number >= 0", self.cache_F)
        check(self.cache_nu >= 0, "cache_nu", "a number >= 0", self.cache_nu)
        check(isinstance(self.max_cache, int) and self.max_cache >= 1, "max_cache", "an int >= 1", self.max_cache)
        check(isinstance(self.batch_size, int) and not isinstance(self.batch_size, bool) and self.batch_size >= 1,
              "batch_size", "an int >= 1 (blocks per step)", self.batch_size)
        if self.batch_size > 1:
            check(self.solver == "bcfw" and self.step == "fw" and not self.cache, "batch_size",
                  "1 unless solver 'bcfw' with step 'fw' and no cache (mini-batch BCFW moves tau blocks along their "
                  "joint FW direction)", f"{self.batch_size} with solver {self.solver!r}, step {self.step!r}"
                  + (", cache" if self.cache else ""))
        check(isinstance(self.step_size, (int, float)) and math.isfinite(self.step_size) and self.step_size >= 0,
              "step_size", "a finite number >= 0 (0 = the solver's default multiple of the safe step)", self.step_size)
        check(isinstance(self.inactive_window, int) and self.inactive_window >= 1, "inactive_window", "an int >= 1",
              self.inactive_window)
        check_choice(self.eg_start, "eg_start", ("margin", "uniform"))
        check_choice(self.qp_solver, "qp_solver", ("daqp", "quadprog", "clarabel", "osqp"))
        check_choice(self.working_set, "working_set", ("auto", "dense", "labelings"))
        if self.solver == "cutting-plane":              # cache: its inference cache (solvers/cutting_plane.py)
            check(self.step == "fw", "step", "'fw' for the cutting plane (step types are BCFW variants)", self.step)
        elif self.solver != "bcfw":
            check(self.step == "fw" and not self.cache, "step", f"'fw' without cache for solver {self.solver!r} "
                  "(step types and caching are BCFW variants)", self.step + (" + cache" if self.cache else ""))
        return self

    @property
    def block_sampling(self) -> str | None:
        """The block sampling the solver runs: None for the batch solvers, which visit every block at each
        iteration (FW, the dual extragradient, the cutting plane); "uniform" for SSG asked for gap sampling (its
        steps leave no block gaps to sample by); else ``sampling``."""
        if self.solver in BATCH_SOLVERS:
            return None
        return "uniform" if self.solver == "ssg" and self.sampling == "gap" else self.sampling

    @property
    def uses_sets(self) -> bool:
        return self.solver == "bcfw" and (self.cache or self.step != "fw")


@dataclass
class SolverState:
    steps: int = 0
    oracle_calls: int = 0
    time_s: float = 0.0
    passes_since_recompute: float = 0.0
    history: list = field(default_factory=list)
    done: bool = False
    stop_reason: str = ""
    checks: int = 0
    cache_hits: int = 0
    step_oracle_calls: int = 0
    fw_steps: int = 0
    pairwise_steps: int = 0
    away_steps: int = 0
    drop_steps: int = 0
    last_gap: float = math.inf    # last exact global gap (the cache's nu-criterion)
    cache_limit: int = 0          # grows by 20% when every cached corner is active
    gamma_sum: float = 0.0        # step sizes since the last gap check (monitoring)
    gamma_n: int = 0
    gamma_full: int = 0           # FW steps with gamma = 1 (the block jumps to its corner)


def resumed_stop(cfg: SolverConfig, st: SolverState, passes: float, monitor_start: bool,
                 estimate: float | None = None) -> str:
    """The stopping criterion a loaded state already meets at its last gap check (:func:`stop_reason` without an
    interrupt), so that a state saved by ``progress`` at a run's last check resumes stopped, as the run that saved
    it stopped there, not one interval later; "" for a state with only its start record (``monitor_start``)."""
    if len(st.history) <= (1 if monitor_start else 0):
        return ""
    return stop_reason(cfg, st, passes, st.history[-1], estimate)


def stop_reason(cfg: SolverConfig, st: SolverState, passes: float, rec: dict | None = None,
                estimate: float | None = None, interrupted: bool = False) -> str:
    """The stopping criterion met, in order: the exact gap of ``rec``, an interrupt the caller saw
    (e.g. Ctrl-C in ``ssvm-train``: the loop closes its interval with an exact gap check and stops),
    the gap ``estimate`` (when ``estimate_threshold`` is set), the pass budget, the time budget; ""
    to go on."""
    if rec is not None and rec.get("gap") is not None and rec["gap"] <= cfg.gap_threshold:
        return "gap_threshold"
    if interrupted:
        return "interrupted"
    if cfg.estimate_threshold > 0 and estimate is not None and estimate <= cfg.estimate_threshold:
        return "estimate_threshold"
    if passes >= cfg.passes - 1e-12:
        return "passes"
    if st.time_s >= cfg.time_budget:
        return "time_budget"
    return ""
