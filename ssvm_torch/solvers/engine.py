"""Structure-agnostic SSVM solvers over a :class:`~ssvm_torch.solvers.dual.BlockDual`.

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

Optional weighted averaging (Lacoste-Julien et al. 2013): w_avg(k+1) = k/(k+2) w_avg(k) + 2/(k+2) w(k+1)
(and ell likewise), i.e. w_avg(K) = sum_k 2k/(K(K+1)) w(k). For BCFW it is kept lazily in O(support)
per step: w_avg(K) = w(K) - R(K)/T(K) with T(j) = j(j+1)/2 and R accumulating T(j-1) dw(j) through
the dual's shadow vector, so averaging does not cost O(d) per step (CoNLL: d = 7.4M); the averaged point is dual-feasible for FW/BCFW, so its exact gap
is reported in the ``avg_*`` fields of every record, next to the current iterate's.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Callable

import numpy as np
import torch

from ..errors import SSVMInputError, check, check_choice
from .active_set import BlockSet
from .box import BoxedDual
from .dual import BlockDual, Corner
from .samplers import SAMPLERS, Sampler

SOLVERS = ("fw", "bcfw", "ssg")
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

    @classmethod
    def from_options(cls, options) -> "SolverConfig":
        """The config from an object with attributes named like the fields (argparse namespace,
        hyper-parameters); fields it lacks keep their defaults."""
        return cls(**{f.name: getattr(options, f.name) for f in fields(cls) if hasattr(options, f.name)})

    def validate(self) -> "SolverConfig":
        check_choice(self.solver, "solver", SOLVERS)
        check_choice(self.sampling, "sampling", SAMPLERS)
        check(isinstance(self.gap_check, (int, float)) and self.gap_check > 0, "gap_check", "a number > 0",
              self.gap_check)
        check(self.passes > 0, "passes", "a number > 0", self.passes)
        check(self.gap_threshold >= 0, "gap_threshold", "a number >= 0", self.gap_threshold)
        check(self.estimate_threshold >= 0, "estimate_threshold", "a number >= 0", self.estimate_threshold)
        check(self.time_budget > 0, "time_budget", "a number of seconds > 0", self.time_budget)
        check(isinstance(self.recompute_every, int) and self.recompute_every >= 1, "recompute_every",
              "an int >= 1", self.recompute_every)
        check_choice(self.step, "step", STEPS)
        check(isinstance(self.gap_refresh, int) and self.gap_refresh >= 0, "gap_refresh", "an int >= 0",
              self.gap_refresh)
        check(self.cache_F >= 0, "cache_F", "a number >= 0", self.cache_F)
        check(self.cache_nu >= 0, "cache_nu", "a number >= 0", self.cache_nu)
        check(isinstance(self.max_cache, int) and self.max_cache >= 1, "max_cache", "an int >= 1", self.max_cache)
        if self.solver != "bcfw":
            check(self.step == "fw" and not self.cache, "step", f"'fw' without cache for solver {self.solver!r} "
                  "(step types and caching are BCFW variants)", self.step + (" + cache" if self.cache else ""))
        return self

    @property
    def uses_sets(self) -> bool:
        return self.solver == "bcfw" and (self.cache or self.step != "fw")


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


class Solver:
    """Runs one of the solvers on ``dual``; ``evaluate(w)`` (optional) returns train/test errors
    at each gap check (excluded from the timing)."""

    def __init__(self, dual: BlockDual, config: SolverConfig, evaluate: Evaluator | None = None,
                 progress: Callable[[dict], None] | None = None, monitor_start: bool = True):
        self.dual, self.cfg = dual, config.validate()
        self.monitor_start = monitor_start      # record the starting point (an uncounted gap pass)
        self.evaluate, self.progress = evaluate, progress
        sampling = "uniform" if config.solver == "ssg" and config.sampling == "gap" else config.sampling
        self.sampler: Sampler = SAMPLERS[sampling](dual.n, config.seed)
        self.stale = np.full(dual.n, np.inf)      # last computed gap of every block (the gap estimate)
        self.state = SolverState(cache_limit=config.max_cache)
        self.sets = None
        self._stopping = ""                       # stop reason met inside the current interval
        if config.uses_sets:
            self.sets = [BlockSet(dual.gt_labeling(i), dual.key(dual.gt_labeling(i)), 0.0) for i in range(dual.n)]
        if config.averaging and isinstance(dual, BoxedDual):
            raise SSVMInputError("averaging: not supported with box constraints (e.g. segmentation-synth's "
                                 "w_pairwise >= 0): the average of clipped iterates is not a clipped dual point")
        self.lazy_avg = config.averaging and config.solver == "bcfw"
        self._w_avg = dual.w.clone() if config.averaging and not self.lazy_avg else None
        self.avg_R = torch.zeros_like(dual.w) if self.lazy_avg else None
        dual.shadow = self.avg_R
        self.ell_avg = dual.ell if config.averaging else 0.0

    @property
    def w_avg(self) -> torch.Tensor | None:
        """The weighted average of the iterates (None without --averaging)."""
        if self.lazy_avg:
            K = self.state.steps
            return self.dual.w.clone() if K == 0 else self.dual.w - self.avg_R / (K * (K + 1) / 2.0)
        return self._w_avg

    @property
    def passes(self) -> float:
        return self.state.oracle_calls / self.dual.n

    # -- one exact check ------------------------------------------------------------------------
    def _record(self, gp) -> dict:
        d, st = self.dual, self.state
        est = float(self.stale.sum()) if np.isfinite(self.stale).all() else None
        rec = {"passes": self.passes, "oracle_calls": st.oracle_calls, "steps": st.steps, "time_s": st.time_s,
               "primal": d.primal(gp.H)}
        if self.cfg.solver == "ssg":
            rec.update(dual=None, gap=None)
        else:
            rec.update(dual=d.dual(), gap=float(gp.block_gaps.sum()))
        rec["gap_estimate"] = est
        if self.cfg.solver != "ssg":   # step sizes since the previous record (SSG's are 1/(k+1))
            rec.update(step_size_mean=st.gamma_sum / st.gamma_n if st.gamma_n else None,
                       full_step_rate=st.gamma_full / st.gamma_n if st.gamma_n else None)
            st.gamma_sum, st.gamma_n, st.gamma_full = 0.0, 0, 0
        if self.sets is not None:
            rec.update(cache_hits=st.cache_hits,
                       cache_hit_rate=st.cache_hits / max(st.cache_hits + st.step_oracle_calls, 1),
                       fw_steps=st.fw_steps, pairwise_steps=st.pairwise_steps, away_steps=st.away_steps,
                       drop_steps=st.drop_steps, active_set_mean=float(np.mean([len(s.active()) for s in self.sets])),
                       cache_size_mean=float(np.mean([len(s) for s in self.sets])))
        w_avg = self.w_avg
        if w_avg is not None and self.cfg.solver != "ssg":
            saved_w, saved_ell = d.w.clone(), d.ell
            d.set_point(w_avg, self.ell_avg)
            gpa = d.gap_pass()
            rec.update(avg_primal=d.primal(gpa.H), avg_dual=d.dual(),
                       avg_gap=d.primal(gpa.H) - d.dual())
            d.set_point(saved_w, saved_ell)
        elif w_avg is not None:
            saved_w = d.w.clone()
            d.w.copy_(w_avg)
            rec["avg_primal"] = d.primal(d.gap_pass().H)
            d.w.copy_(saved_w)
        if self.evaluate is not None:
            rec.update(self.evaluate(d.w))
            if w_avg is not None:
                rec.update({f"avg_{k}": v for k, v in self.evaluate(w_avg).items()})
        return rec

    def _check(self) -> dict:
        """Exact gap pass at the current w; feeds the gap sampler (BCFW) and the history."""
        t0 = time.perf_counter()
        gp = self.dual.gap_pass()
        self.last_gap_pass = gp
        self.state.checks += 1
        k = self.cfg.gap_refresh
        counted = self.cfg.solver == "bcfw" and k > 0 and self.state.checks % k == 0
        if counted:
            self.state.oracle_calls += self.dual.n
            self.state.time_s += time.perf_counter() - t0
        rec = self._record(gp)
        gaps = gp.block_gaps.detach().cpu().numpy()
        if counted:
            self.sampler.set_all(gaps)
            self.stale[:] = gaps
            self.state.last_gap = rec["gap"]
        self._log(rec)
        return rec

    def _log(self, rec):
        self.state.history.append(rec)
        if self.progress is not None:
            self.progress(rec)

    def set_block_gaps(self, gaps) -> None:
        """Start from known block gaps (e.g. eq. (12) after a path step) instead of +inf."""
        gaps = np.asarray(torch.as_tensor(gaps).detach().cpu(), dtype=float)
        check(gaps.shape == (self.dual.n,), "gaps", f"shape ({self.dual.n},)", gaps.shape)
        self.sampler.set_all(gaps)
        self.stale[:] = gaps

    def _should_stop(self, rec: dict | None) -> str:
        if rec is not None and rec.get("gap") is not None and rec["gap"] <= self.cfg.gap_threshold:
            return "gap_threshold"
        if (self.cfg.estimate_threshold > 0 and np.isfinite(self.stale).all()
                and float(self.stale.sum()) <= self.cfg.estimate_threshold):
            return "estimate_threshold"
        if self.passes >= self.cfg.passes - 1e-12:
            return "passes"
        if self.state.time_s >= self.cfg.time_budget:
            return "time_budget"
        return ""

    # -- main loops -----------------------------------------------------------------------------
    def run(self) -> list:
        """Run to a stopping criterion; returns the history (one record per exact gap check)."""
        st = self.state
        self.start()
        if self.cfg.solver == "fw":
            while not st.done:
                self.fw_iterations()
            return st.history
        while not st.done:
            for size in self.chunk_sizes():
                draws = (self.sampler.next() for _ in range(size))     # lazy: each draw sees the last update
                if self.run_chunk(draws):
                    break
            self.end_interval()
        return st.history

    # The pieces of ``run`` for drivers that own the loop (the Lightning module): ``start`` once, then
    # per interval ``run_chunk`` for each of ``chunk_sizes()`` and ``end_interval``.
    def start(self) -> None:
        """Record the starting point (an uncounted gap pass) unless resuming or ``monitor_start=False``."""
        if not self.state.history and self.monitor_start:
            gp = self.dual.gap_pass()
            self._log(self._record(gp))

    def chunk_sizes(self, chunk: int | None = None) -> list[int]:
        """Block steps between two exact gap checks (``gap_check`` passes), split in chunks of
        ``chunk`` (default n): the unit of timing, drift recomputation and stop checks."""
        chunk = self.dual.n if chunk is None else chunk
        check(isinstance(chunk, int) and chunk >= 1, "chunk", "an int >= 1", chunk)
        total = max(1, round(self.cfg.gap_check * self.dual.n))
        return [chunk] * (total // chunk) + ([total % chunk] if total % chunk else [])

    @property
    def step_fn(self) -> Callable[[int], None]:
        return {"bcfw": self._step_sets if self.sets is not None else self._step_bcfw,
                "ssg": self._step_ssg}[self.cfg.solver]

    def run_chunk(self, indices) -> str:
        """Block steps on the blocks of ``indices`` (an iterable, pulled one at a time so a lazy
        sampler sees every update before its next draw) until the pass budget; then the exact
        recomputation of w if due. Returns the stop reason ("" to go on); once a chunk returned
        one, later chunks of the same interval do nothing."""
        d, st = self.dual, self.state
        if self._stopping:
            return self._stopping
        step = self.step_fn
        max_calls = math.ceil(self.cfg.passes * d.n)
        averaging, lazy = self.cfg.averaging, self.lazy_avg
        t0 = time.perf_counter()
        calls0 = st.oracle_calls
        it = iter(indices)
        while st.oracle_calls < max_calls:
            i = next(it, None)
            if i is None:
                break
            if lazy:
                d.shadow_coef = st.steps * (st.steps + 1) / 2.0      # T(j-1) for step j = steps + 1
            step(i)
            st.steps += 1
            if averaging:
                self._average()
        st.passes_since_recompute += (st.oracle_calls - calls0) / d.n
        if self.cfg.solver == "bcfw" and st.passes_since_recompute >= self.cfg.recompute_every:
            w_before = d.w.clone() if lazy else None
            d.recompute()
            if lazy:        # the drift correction belongs to the last step's change
                self.avg_R.add_(d.w - w_before, alpha=max(st.steps - 1, 0) * st.steps / 2.0)
            st.passes_since_recompute = 0.0
        st.time_s += time.perf_counter() - t0
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

    def _average(self):
        """After step K (state.steps == K): rho = 2/(K+1), i.e. 2/(k+2) with k = K-1 in the paper."""
        rho = 2.0 / (self.state.steps + 1.0)
        if self._w_avg is not None:
            self._w_avg.lerp_(self.dual.w, rho)
        self.ell_avg += rho * (self.dual.ell - self.ell_avg)

    def _step_bcfw(self, i: int) -> None:
        """Plain BCFW step (Alg. 1 of Osokin et al. 2016): oracle, exact line search, update."""
        d = self.dual
        c = d.fw_corner(i)
        g = c.gap
        st = self.state
        if c.sqnorm > 0.0 and g > 0.0:
            gamma = g / (d.lam * c.sqnorm)
            if gamma >= 1.0:
                gamma = 1.0
                st.gamma_full += 1
            d.fw_move(i, c, gamma)
            st.gamma_sum += gamma
        st.gamma_n += 1
        self.sampler.update(i, g)
        self.stale[i] = g
        st.oracle_calls += 1
        st.step_oracle_calls += 1

    def _step_ssg(self, i: int) -> None:
        d, st = self.dual, self.state
        c = d.fw_corner(i)
        gamma = 1.0 / (st.steps + 1.0)
        d.w.mul_(1.0 - gamma)
        d.add_psi(i, c, gamma / d.lam)
        st.oracle_calls += 1
        st.step_oracle_calls += 1

    def _step_sets(self, i: int) -> None:
        """BCFW step with a working set: FW corner from the cache or the oracle (Alg. 5), away corner
        from the active set, then a FW, pairwise (Alg. 3), away (Alg. 4) or best step."""
        d, st, cfg, lam = self.dual, self.state, self.cfg, self.dual.lam
        bs = self.sets[i]
        need_away = cfg.step != "fw"
        gaps = None
        corner = None
        if cfg.cache:
            gaps = d.corner_gaps(i, bs.matrix())
            j = int(np.argmax(gaps))
            g_hat = float(gaps[j])
            # F = 0 or nu = 0 switches a criterion off (F * inf would be NaN for unvisited blocks)
            local = cfg.cache_F * self.stale[i] if cfg.cache_F > 0 else 0.0
            glob = cfg.cache_nu * st.last_gap / d.n if cfg.cache_nu > 0 else 0.0
            threshold = max(local, glob)
            if g_hat >= threshold and g_hat > 0.0:
                st.cache_hits += 1
                y = bs.labels[j]
                corner = Corner(y, bs.loss[j], 0.0, d.pair_sqnorm(i, y, None), g_hat)
                fw = j
        if corner is None:
            corner = d.fw_corner(i)
            st.oracle_calls += 1
            st.step_oracle_calls += 1
            self.sampler.update(i, corner.gap)
            self.stale[i] = corner.gap
            fw = bs.add(corner.labels, d.key(corner.labels), corner.loss, corner.gap)
            if gaps is not None and fw == len(gaps):
                gaps = np.append(gaps, corner.gap)
        g_fw, sq_fw = corner.gap, corner.sqnorm
        # candidate steps: (improvement of the exact quadratic model, kind, gamma)
        cands = []
        if cfg.step in ("fw", "away", "best"):
            gam = min(g_fw / (lam * sq_fw), 1.0) if sq_fw > 0 and g_fw > 0 else 0.0
            cands.append((gam * g_fw - 0.5 * lam * gam * gam * sq_fw, "fw", gam))
        if need_away:
            active = bs.active()
            if gaps is None or len(gaps) != len(bs):
                gaps = d.corner_gaps(i, bs.matrix())
            ag = gaps[active]
            a = active[int(np.argmin(ag))]
            g_away = -float(np.min(ag))                          # <-grad, x_i - v_a> >= 0
            alpha_a = bs.alpha[a]
            if cfg.step in ("pairwise", "best") and a != fw:
                g_pw = g_fw + g_away
                sq = d.pair_sqnorm(i, bs.labels[fw], bs.labels[a])
                gam = min(g_pw / (lam * sq), alpha_a) if sq > 0 and g_pw > 0 else 0.0
                cands.append((gam * g_pw - 0.5 * lam * gam * gam * sq, "pairwise", gam))
            if cfg.step in ("away", "best") and len(active) > 1 and alpha_a < 1.0:
                sq = d.pair_sqnorm(i, None, bs.labels[a])
                gmax = alpha_a / (1.0 - alpha_a)
                gam = min(g_away / (lam * sq), gmax) if sq > 0 and g_away > 0 else 0.0
                imp = gam * g_away - 0.5 * lam * gam * gam * sq
                if cfg.step == "away":                          # Alg. 4: the steeper direction wins
                    cands = [(imp, "away", gam)] if g_away > g_fw else cands
                else:
                    cands.append((imp, "away", gam))
        st.gamma_n += 1
        if cands:
            imp, kind, gam = max(cands, key=lambda c: c[0])     # ties: first listed (FW) wins
            if gam > 0.0 and imp > 0.0:
                self._apply(i, bs, kind, gam, corner, fw, a if need_away else None)
                st.gamma_sum += gam
                st.gamma_full += kind == "fw" and gam >= 1.0
        self._trim(bs, fw)

    def _apply(self, i, bs, kind, gam, corner, fw, a):
        d, st = self.dual, self.state
        if kind == "fw":
            d.fw_move(i, corner, gam)
            st.fw_steps += 1
            if gam >= 1.0:
                bs.alpha = [0.0] * len(bs)
                bs.alpha[fw] = 1.0
                st.drop_steps += 1
            else:
                bs.alpha = [(1.0 - gam) * x for x in bs.alpha]
                bs.alpha[fw] += gam
        elif kind == "pairwise":
            d.pair_move(i, bs.labels[fw], bs.labels[a], bs.loss[fw], bs.loss[a], gam)
            st.pairwise_steps += 1
            bs.alpha[fw] += gam
            if gam >= bs.alpha[a]:
                bs.alpha[a] = 0.0
                st.drop_steps += 1
            else:
                bs.alpha[a] -= gam
        else:
            alpha_a = bs.alpha[a]
            d.pair_move(i, None, bs.labels[a], float(d.ell_i[i]), bs.loss[a], gam)
            st.away_steps += 1
            bs.alpha = [(1.0 + gam) * x for x in bs.alpha]
            if gam >= alpha_a / (1.0 - alpha_a):
                bs.alpha[a] = 0.0
                st.drop_steps += 1
            else:
                bs.alpha[a] -= gam

    def _trim(self, bs, fw):
        """Active set only (no cache): drop zero-weight corners. Cache: evict the lowest-scoring
        zero-weight entries beyond ``max_cache``; FW steps need no active set, so they may evict any
        entry, while pairwise/away steps let the cache grow by 20% rather than drop an active corner."""
        if not self.cfg.cache:
            drop = {j for j, x in enumerate(bs.alpha) if x <= 0.0}
            if drop:
                bs.remove(drop)
            return
        st = self.state
        limit = max(st.cache_limit, self.cfg.max_cache)
        if not bs.evict(limit, protect={fw}):
            if self.cfg.step == "fw":
                order = sorted((bs.score[j], j) for j in range(len(bs)) if j != fw)
                bs.remove({j for _, j in order[:len(bs) - limit]})
            else:
                st.cache_limit = int(math.ceil(1.2 * limit))

    def fw_iterations(self):
        """``gap_check`` batch FW iterations (the FW counterpart of an interval of block steps); the gap of each iteration's oracle pass is exact and free."""
        d, st, lam = self.dual, self.state, self.dual.lam
        iterations = max(1, round(self.cfg.gap_check))
        for it in range(iterations):
            t0 = time.perf_counter()
            gp = d.gap_pass()
            st.oracle_calls += d.n
            w_s, ell_s = d.corner_point(gp)
            diff = d.v - w_s
            gap = lam * float(diff @ d.w) - d.ell + ell_s
            sq = lam * float(diff @ diff)
            gamma = min(max(gap / sq, 0.0), 1.0) if sq > 0 else 0.0
            st.time_s += time.perf_counter() - t0
            st.gamma_sum, st.gamma_n, st.gamma_full = st.gamma_sum + gamma, st.gamma_n + 1, st.gamma_full + (gamma >= 1.0)
            last = it == iterations - 1
            stop = self._should_stop({"gap": float(gp.block_gaps.sum())})
            if last or stop:               # record the exact gap of this pass (at the pre-step w)
                self.stale[:] = gp.block_gaps.detach().cpu().numpy()
                rec = self._record(gp)
                self._log(rec)
                if stop:
                    st.stop_reason, st.done = stop, True
                    return
            t0 = time.perf_counter()
            d.move_all(gp, w_s, ell_s, gamma)
            st.steps += 1
            if self.cfg.averaging:
                self._average()
            st.time_s += time.perf_counter() - t0

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"config": asdict(self.cfg), "dual": self.dual.state_dict(), "sampler": self.sampler.state_dict(),
                "stale": self.stale.copy(), "state": asdict(self.state),
                "w_avg": None if self._w_avg is None else self._w_avg.clone(), "ell_avg": self.ell_avg,
                "avg_R": None if self.avg_R is None else self.avg_R.clone(),
                "sets": copy.deepcopy(self.sets)}

    def load_state_dict(self, s: dict) -> None:
        for key in ("solver", "sampling", "seed", "gap_check", "averaging", "step", "cache"):
            if s["config"][key] != getattr(self.cfg, key):
                raise SSVMInputError(f"checkpoint config.{key}: expected {getattr(self.cfg, key)!r} "
                                     f"(this run), got {s['config'][key]!r}")
        self.dual.load_state_dict(s["dual"])
        self.sampler.load_state_dict(s["sampler"])
        self.stale[:] = s["stale"]
        self.state = SolverState(**s["state"])
        self.state.done = False
        if self._w_avg is not None:
            self._w_avg.copy_(s["w_avg"])
        if self.avg_R is not None:
            self.avg_R.copy_(s["avg_R"])
        self.ell_avg = s["ell_avg"]
        self.sets = copy.deepcopy(s["sets"])
