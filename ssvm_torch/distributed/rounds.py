"""Communication-efficient BCFW rounds: CoCoA+ (Ma et al., ICML 2015; Smith et al., JMLR 2018) with BCFW
(Lacoste-Julien et al. 2013) as each rank's local solver, for the structured SVM's block-separable dual
D(alpha) = -lam/2 ||w||^2 + ell, w = sum_i w_i, ell = sum_i ell_i.

Rank k owns the round-robin shard of n_k blocks (:func:`~ssvm_torch.distributed.collectives.shard_of`).
A round: from the shared point w, every rank runs BCFW steps on its own blocks against its local point
w + sigma'_k dw_k (dw_k: the change of its blocks so far in the round), the oracle at that point and the
line search gamma = g_i / (lam sigma'_k ||w_i - w_s||^2), i.e. BCFW on the local subproblem
    max  -lam/2 ||w||^2 - lam <w, dw_k> - lam sigma'_k / 2 ||dw_k||^2 + sum_{i in k} d ell_i;
then one all-reduce adds every rank's dw_k and d ell_k to w and ell. With sigma'_k = n / n_k (CoCoA+'s
"adding" with sigma' = P for equal shards) the local subproblems' sum bounds the dual's change from
below: ||sum_k dw_k||^2 <= (sum_k n_k / n) (sum_k sigma'_k ||dw_k||^2) by Cauchy-Schwarz, so the dual
never decreases at a round.

That subproblem is exactly the plain SSVM of the shard alone (objective n = n_k, so w_s = psi / (lam n_k)
and L / n_k: each block's contribution is sigma'_k times its contribution to the whole problem) started
at w: every rank runs the ordinary store of its shard and the ordinary :class:`~ssvm_torch.solvers.loop.Solver`
(gap sampling among its own blocks), and a round's aggregation is
    w <- w + sum_k (n_k / n) (w_k - w),   ell <- ell + sum_k (n_k / n) (ell_k - ell_k at the round's start).
The trajectory is not one process's; the records are exact: a gap pass at the shared w on every rank,
each block's gap and loss rescaled by n_k / n (eq. (6) of Osokin et al. 2016 on the whole problem), the
block gaps, H_i and L_i / n gathered into the global order. With one process a round is a pass of plain
BCFW and the run equals the one-process solver's, record for record.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, replace

import torch
import torch.distributed as dist

from ..devices import device_clock
from ..errors import SSVMInputError, check
from ..solvers.best_point import BestPoint
from ..solvers.config import SolverConfig, SolverState, stop_reason
from ..solvers.history import make_record
from ..solvers.loop import LazyDraws, Solver
from ..stores.base import BlockDual, GapPass
from ..stores.box import BoxedDual
from ..stores.state import check_like
from .collectives import Collectives, collective, shard_of, world
from .rank_store import RankStore


class RoundsDual(RankStore):
    """This rank's shard as a problem of its own (``local``: the store of its n_k blocks, objective n_k),
    presented as the store of all n blocks in the whole problem's units: the shared point (w, ell), the
    exact gap pass gathered and rescaled, the exact recomputation summed over the ranks."""

    exchange = "rounds"

    def __init__(self, local: BlockDual, n: int):
        rank, size = world()
        if isinstance(local, BoxedDual):
            raise SSVMInputError("box constraints (segmentation-synth, pose-synth): not supported by the rounds "
                                 "exchange (the clip of w needs the unclipped v of all shards); run them in one process")
        check(local.n == len(shard_of(n, size, rank)), "shard", f"{len(shard_of(n, size, rank))} blocks "
              f"(rank {rank} of {size})", local.n)
        check(local.N == local.n, "n_objective", f"the shard's own n = {local.n} (its store is a problem of its own)",
              local.N)
        self.local, self.rank, self.size = local, rank, size
        self.n = self.N = n
        self.lam, self.device = local.lam, local.device
        self.scale = local.n / n                   # n_k / n = 1 / sigma'_k: the shard's units to the whole's
        d = local.w.numel()
        self.coll = Collectives(rank, size, self.device, narrow_ints=d < 2 ** 31 and n < 2 ** 31)
        self._w = local.w.clone()
        self._ell = self._summed(float(local.ell) * self.scale)
        self._timers()
        self.steps_exchanged = 0                   # rounds

    def _timers(self) -> None:
        self.steps_s = self.gap_s = self.joint_s = 0.0    # seconds: local BCFW steps, gap passes, combining the ranks
        self.sync_s = 0.0                                 # the shared exchange's sums of the mirrors
        self.own_steps = self.own_calls = 0               # this rank's BCFW steps and oracle calls (its solver's)

    @property
    def shard_s(self) -> float:
        """Seconds of this rank's own work: its steps and gap passes."""
        return self.steps_s + self.gap_s

    def profile(self) -> dict:
        return {**super().profile(), "steps": self.own_steps, "oracle_calls": self.own_calls, "steps_s": self.steps_s,
                "gap_s": self.gap_s, "sync_s": self.sync_s}

    def _summed(self, x: float) -> float:
        if self.size == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=self.device)
        return float(self.coll.all_reduce(t)[0])

    # -- the shared point ------------------------------------------------------------------------
    @property
    def w(self) -> torch.Tensor:
        return self._w

    @property
    def v(self) -> torch.Tensor:
        return self._w

    @property
    def ell(self) -> float:
        return self._ell

    @property
    def ell_i(self) -> torch.Tensor:
        raise SSVMInputError("ell_i: a rank of the rounds exchange holds only its own blocks (in its shard's units)")

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        """The shared point (w, ell); the local store starts its next round from w (its own ell, the sum
        of its blocks' in its units, is kept)."""
        if w is not self._w:
            self._w.copy_(w)                       # in place: an optimizer (Lightning) holds this tensor
        self._ell = float(ell)
        self.local.set_point(self._w, self.local.ell)           # copies into the local store's w

    def dual(self) -> float:
        return -0.5 * self.lam * float(self._w @ self._w) + self._ell

    # -- mini-batch steps are the lock-step exchanges' (block_shards.py, column_shards.py) -----------
    def _no_minibatch(self, *args, **kwargs):
        raise SSVMInputError("batch_size: the rounds exchange runs BCFW steps (batch size 1) on every rank's own "
                             "blocks; mini-batch steps are the lock-step exchanges' (--exchange columns / gather / "
                             "allreduce)")

    batch_corners = batch_move = direction = _no_minibatch

    # -- one round's aggregation -------------------------------------------------------------------
    def combine(self, ell_local_start: float) -> None:
        """w += sum_k (n_k / n)(w_k - w), ell likewise (module docstring): one all-reduce of the changes,
        dense or as the union of their nonzero coordinates, whichever this round's largest change makes
        smaller. One process takes its local point as it is. The shared w is the round's start (only the
        local store moved); the local w becomes the change in place (no other d-vector is allocated) and
        takes the new shared point at the end."""
        t0 = time.perf_counter()
        loc = self.local
        dell = (float(loc.ell) - ell_local_start) * self.scale
        if self.size == 1:                         # the whole problem: its point as it is, bit for bit
            self.set_point(loc.w, float(loc.ell))
            self.steps_exchanged += 1
            self.joint_s += time.perf_counter() - t0
            return
        delta = loc.w.sub_(self._w).mul_(self.scale)
        nnz = int((delta != 0).sum())
        sizes = torch.tensor([nnz], dtype=torch.int64, device=self.device)
        collective(dist.all_reduce, sizes, op=dist.ReduceOp.MAX)     # every rank picks the same form
        dell = self._summed(dell)
        sparse_bytes = int(sizes[0]) * (4 + delta.element_size()) * self.size
        if sparse_bytes < delta.numel() * delta.element_size():
            index = torch.nonzero(delta).squeeze(1)
            total = self.coll.merge(self.coll.all_gather_ragged(index), self.coll.all_gather_ragged(delta[index]),
                                    delta)
        else:
            total = self.coll.all_reduce(delta)
        self._w.add_(total)
        self.set_point(self._w, self._ell + dell)
        self.steps_exchanged += 1
        self.joint_s += time.perf_counter() - t0

    # -- exact gap pass and recomputation ------------------------------------------------------------
    def _point_to_local(self) -> None:
        """The shared point into the local store before its gap pass."""
        self.local.set_point(self._w, self.local.ell)

    def attach(self, local_solver: Solver) -> None:
        """Called with the local solver once built (the shared-memory exchange hooks its mirror there)."""

    def gap_pass(self) -> GapPass:
        """Every shard's gap pass at the shared w, in the whole problem's units (block gaps and L_i / n
        times n_k / n; H_i as they are), gathered into the global order. ``last_local_gaps``: this
        rank's block gaps in its own units (its sampler's)."""
        self._point_to_local()
        t0 = time.perf_counter()
        gp = self.local.gap_pass()
        self.gap_s += time.perf_counter() - t0
        self.last_local_gaps = gp.block_gaps
        g = gp.block_gaps
        rows = torch.stack([g * self.scale, gp.H.to(g), gp.loss.to(g) * self.scale], 1)
        out = rows if self.size == 1 else self.coll.gather_blocks(rows, self.n)
        cols = out.T.contiguous()
        return GapPass(labels=None, loss=cols[2], H=cols[1], block_gaps=cols[0])

    def recompute(self) -> None:
        """w and ell exactly from every rank's blocks: each shard's sums rescaled by n_k / n, all-reduced."""
        self.local.recompute()
        if self.size == 1:
            self.set_point(self.local.w, float(self.local.ell))
            return
        w = self.coll.all_reduce(self.local.w * self.scale)
        self.set_point(w, self._summed(float(self.local.ell) * self.scale))

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        shards = [None] * self.size
        mine = self.local.state_dict()
        if self.size == 1:
            shards = [mine]
        else:
            collective(dist.all_gather_object, shards, mine)
        return {"world_size": self.size, "exchange": self.exchange, "w": self._w.clone(), "ell": self._ell,
                "shards": shards}

    def load_state_dict(self, state: dict) -> None:
        if state.get("exchange") != self.exchange:
            raise SSVMInputError(f"checkpoint: written with exchange {state.get('exchange', 'a lock-step one')!r}, "
                                 f"this run has {self.exchange!r}; resume with the same exchange")
        self.check_world_size(state)
        check_like("checkpoint w", state.get("w"), self._w, "the shared point")
        self.local.load_state_dict(state["shards"][self.rank])
        self._restore_point(state)

    def _restore_point(self, state: dict) -> None:
        """The checkpoint's shared point, once the local store holds its blocks."""
        self.set_point(state["w"].to(self.device), float(state["ell"]))


def rounds_store(task, lam: float, device=None, dtype=torch.float64, kernels: str = "auto") -> RoundsDual:
    """This rank's :class:`RoundsDual`: the ordinary store of its round-robin shard of ``task``."""
    from ..stores import make_store
    rank, size = world()
    shard = shard_of(task.n_train, size, rank)
    local = make_store(task.model, task.train.subset(shard), lam, device=device, dtype=dtype, kernels=kernels,
                       nonnegative=task.nonnegative)
    return RoundsDual(local, task.n_train)


class RoundsSolver:
    """BCFW rounds on a :class:`RoundsDual` with the interface of :class:`~ssvm_torch.solvers.loop.Solver`
    that ``ssvm-train`` drives (run, the history, the model point, checkpoints). ``round_steps``: BCFW steps
    per rank per round (None: one pass over the largest shard). Every ``gap_check`` passes (all ranks'
    oracle calls over n) an exact gap check closes the interval, refreshes every rank's block gaps and
    writes the record; the gap pass counts as one pass, as in the one-process solver."""

    def __init__(self, dual: RoundsDual, config: SolverConfig, evaluate=None, progress=None,
                 monitor_start: bool = True, interrupt=None, round_steps: int | None = None):
        cfg = config.validate()
        check(cfg.solver == "bcfw" and cfg.step == "fw" and not cfg.cache and cfg.batch_size == 1
              and not cfg.averaging, "solver", "'bcfw' with step 'fw', batch size 1, no cache and no averaging "
              "for the rounds exchange (each rank's local solver)",
              f"{cfg.solver!r}, step {cfg.step!r}, batch size {cfg.batch_size}" + (", cache" if cfg.cache else "")
              + (", averaging" if cfg.averaging else ""))
        self.dual, self.cfg = dual, cfg
        self.evaluate, self.progress, self.interrupt = evaluate, progress, interrupt
        self.monitor_start = monitor_start
        largest = len(shard_of(dual.n, dual.size, 0))
        self.round_steps = largest if round_steps is None else round_steps
        check(isinstance(self.round_steps, int) and self.round_steps >= 1, "round_steps", "an int >= 1 (BCFW steps "
              "per rank per round)", self.round_steps)
        # the local solver: plain BCFW with gap sampling among this rank's blocks; the rounds own the
        # budget, the checks and the recomputation (which must sum over every rank's blocks)
        local_cfg = replace(cfg, seed=cfg.seed + dual.rank, passes=1e15, gap_check=1.0, recompute_every=2 ** 62,
                            gap_threshold=0.0, time_budget=math.inf, estimate_threshold=0.0, check_below=0.0)
        self.local = Solver(dual.local, local_cfg, monitor_start=False, keep_best=False)
        dual.attach(self.local)
        self.state = SolverState()
        self.best = BestPoint(True)
        self._stopping = ""

    # -- what ssvm-train reads -------------------------------------------------------------------
    @property
    def passes(self) -> float:
        return self.state.oracle_calls / self.dual.n

    @property
    def sampler(self):
        return self.local.sampler

    @property
    def block_gaps(self):
        """This rank's stale block gaps (its sampler's, in its shard's units)."""
        return self.local.sampler.gaps

    def model_point(self) -> tuple[torch.Tensor, float]:
        """(w, ell) of model.pt: the best primal point the checks certified, or the shared point."""
        last = self.best.is_last(self.state.history)
        return (self.dual.w if last else self.best.w), self.dual.ell

    def model_extras(self) -> dict:
        return {} if self.best.is_last(self.state.history) else {"w_dual": self.dual.w}

    def finish(self) -> list:
        return self.best.finish(self.state.history)

    def _now(self) -> float:
        return device_clock(self.dual.device)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> list:
        self.start()
        while not self.state.done:
            self.interval()
        return self.finish()

    def start(self) -> None:
        if not self.state.history and self.monitor_start:
            self._log(self._record(self.dual.gap_pass()))

    def interval(self) -> None:
        """The rounds of :meth:`chunk_sizes`, then the exact check."""
        for size in self.chunk_sizes():
            if self.run_chunk(LazyDraws(self.draw, size)):
                break
        self.end_interval()

    # The pieces of ``run`` for drivers that own the loop (the Lightning module), as Solver has them: a
    # chunk is one round.
    def draw(self) -> int:
        """This rank's next block (its own gap sampler; a local index)."""
        return self.local.draw()

    def chunk_sizes(self, chunk: int | None = None) -> list[int]:
        """The rounds of one interval, in steps per rank: ``gap_check`` passes are round(gap_check x the
        largest shard) steps on every rank (so every rank runs the same rounds), in rounds of ``chunk``
        (default ``round_steps``)."""
        total = max(1, round(self.cfg.gap_check * len(shard_of(self.dual.n, self.dual.size, 0))))
        chunk = self.round_steps if chunk is None else chunk
        check(isinstance(chunk, int) and chunk >= 1, "chunk", "an int >= 1", chunk)
        return [chunk] * (total // chunk) + ([total % chunk] if total % chunk else [])

    def run_chunk(self, indices) -> str:
        """One round on this rank's draws ``indices`` (cut to the pass budget left), the aggregation and, if
        due, the exact recomputation; returns the stop reason ("" to go on)."""
        if self._stopping:
            return self._stopping
        left = math.ceil(self.cfg.passes * self.dual.n) - self.state.oracle_calls
        cap = max(0, math.ceil(left / self.dual.size))
        if cap > 0:       # each rank's share: min(cap, the draws' number) where the draws say it
            share = min(cap, len(indices)) if hasattr(indices, "__len__") else None
            self._round(itertools.islice(iter(indices), cap), share)
        self._stopping = self._should_stop(None)
        return self._stopping

    def _round(self, draws, planned: int | None = None) -> None:
        d, ls, st = self.dual, self.local, self.state
        t0 = self._now()
        ell_start = float(d.local.ell)
        counts0 = (ls.state.oracle_calls, ls.state.steps)
        t1 = time.perf_counter()
        ls.run_chunk(d.round_draws(draws, planned, ls.draw))
        d.steps_s += time.perf_counter() - t1
        d.combine(ell_start)
        mine = (ls.state.oracle_calls - counts0[0], ls.state.steps - counts0[1])
        d.own_calls += mine[0]
        d.own_steps += mine[1]
        counts = torch.tensor(mine, dtype=torch.int64, device=d.device)
        if d.size > 1:
            d.coll.all_reduce(counts)
        calls = int(counts[0])
        st.oracle_calls += calls
        st.steps += int(counts[1])
        st.passes_since_recompute += calls / d.n
        if st.passes_since_recompute >= self.cfg.recompute_every:
            d.recompute()
            st.passes_since_recompute = 0.0
        st.time_s += self._now() - t0

    def _estimate(self) -> float | None:
        """The sum of every rank's stale block gaps in the whole problem's units (None while any is unknown)."""
        local = self.local.sampler.estimate()
        t = torch.tensor([0.0 if local is None else local * self.dual.scale, float(local is None)],
                         dtype=torch.float64, device=self.dual.device)
        if self.dual.size > 1:
            self.dual.coll.all_reduce(t)
        return None if t[1] > 0 else float(t[0])

    def _should_stop(self, rec: dict | None) -> str:
        estimate = self._estimate() if self.cfg.estimate_threshold > 0 else None
        return stop_reason(self.cfg, self.state, self.passes, rec, estimate,
                           interrupted=self.interrupt is not None and self.interrupt())

    def _record(self, gp: GapPass) -> dict:
        """The record of ``gp``: make_record on the shared point, with every rank's step sizes since the
        last record (summed as each rank's solver summed them: one process's record is its own) and the
        global gap estimate."""
        estimate = self._estimate()
        ls, st = self.local.state, self.state
        gammas = torch.tensor([ls.gamma_sum, ls.gamma_n, ls.gamma_full], dtype=torch.float64, device=self.dual.device)
        if self.dual.size > 1:
            self.dual.coll.all_reduce(gammas)
        st.gamma_sum, st.gamma_n, st.gamma_full = float(gammas[0]), int(gammas[1]), int(gammas[2])
        ls.gamma_sum, ls.gamma_n, ls.gamma_full = 0.0, 0, 0
        rec = make_record(self.dual, gp, self.cfg, self.state, self.local.sampler, evaluate=self.evaluate)
        rec["gap_estimate"] = estimate
        return rec

    def _log(self, rec: dict) -> None:
        self.state.history.append(rec)
        self.best.offer(rec, self.dual.w, len(self.state.history) - 1)
        if self.progress is not None:
            self.progress(rec)

    def end_interval(self) -> dict:
        """The exact gap check closing an interval; sets ``state.done`` when a stopping criterion holds."""
        st, d = self.state, self.dual
        t0 = self._now()
        gp = d.gap_pass()
        st.checks += 1
        k = self.cfg.gap_refresh
        counted = k > 0 and st.checks % k == 0
        if counted:
            st.oracle_calls += d.n
            st.time_s += self._now() - t0
        rec = self._record(gp)
        if counted:
            self.local.sampler.set_all(d.last_local_gaps.detach().cpu().numpy())
            st.last_gap = rec["gap"]
        self._log(rec)
        if d.size > 1:       # rank 0's evaluation is outside the timed work: no rank steps meanwhile (untimed)
            collective(dist.barrier)
        st.stop_reason = self._should_stop(rec)
        st.done = bool(st.stop_reason)
        self._stopping = ""
        return rec

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The shared point, every rank's blocks and sampler (gathered to every rank), the counters."""
        mine = {"sampler": self.local.sampler.state_dict(), "stale": self.local.sampler.gaps.copy(),
                "local_state": asdict(self.local.state)}
        samplers = [mine] if self.dual.size == 1 else [None] * self.dual.size
        if self.dual.size > 1:
            collective(dist.all_gather_object, samplers, mine)
        return {"config": asdict(self.cfg), "dual": self.dual.state_dict(), "ranks": samplers,
                "state": asdict(self.state), "best": self.best.state_dict(), "round_steps": self.round_steps}

    def load_state_dict(self, s: dict) -> None:
        missing = {"config", "dual", "ranks", "state"} - set(s)
        if missing:
            raise SSVMInputError(f"checkpoint: expected a rounds solver state (--exchange rounds), missing "
                                 f"{sorted(missing)}")
        for key in ("solver", "sampling", "seed", "gap_check", "step", "batch_size"):
            if s["config"].get(key) != getattr(self.cfg, key):
                raise SSVMInputError(f"checkpoint config.{key}: expected {getattr(self.cfg, key)!r} (this run), got "
                                     f"{s['config'].get(key)!r}")
        if s.get("round_steps") != self.round_steps:
            raise SSVMInputError(f"checkpoint round_steps: expected {self.round_steps} (this run), got "
                                 f"{s.get('round_steps')}")
        self.dual.load_state_dict(s["dual"])
        mine = s["ranks"][self.dual.rank]
        self.local.sampler.load_state_dict(mine["sampler"])
        self.local.sampler.gaps[:] = mine["stale"]
        self.local.state = SolverState(**mine["local_state"])
        self.state = SolverState(**s["state"])
        self.state.done = False
        self.best.load_state_dict(s.get("best"))
