"""Regularization paths of the SSVM (Osokin et al. 2016, Section 4, Alg. 6-7, Prop. 1, App. K).

Notation of :mod:`ssvm_torch.stores.base`: objective (1) with regularization lam; for a dual point
alpha, w = sum_i w_i with w_i = sum_y alpha_i(y) psi_i(y) / (lam n), ell = sum_i ell_i, block gaps
g_i = lam <w_i - w_s, w> - ell_i + ell_s, H_i(w) = max_y L_i(y) - <w, psi_i(y)>.

**Initialization (Alg. 6).** At w = 0 the oracle returns a max-loss labeling y~_i of every block;
alpha_i = delta(y~_i) gives w(lam) = psi~ / lam with psi~ = sum_i psi_i(y~_i) / n and
ell = sum_i L_i(y~_i) / n for every lam. Since L_i(y) <= L_i(y~_i),
    g(lam) <= (||psi~||^2 + sum_i theta_i / n) / lam,   theta_i = max_y -<psi_i(y), psi~> >= 0,
so alpha is kappa eps-optimal for every lam >= lam_inf = (||psi~||^2 + sum_i theta_i / n) / (kappa eps);
theta_i costs one plain decoding pass.

**Induction (Alg. 7, Prop. 1).** Rescaling alpha_i <- rho alpha_i + (1 - rho) delta(y_i) and
lam_new = rho lam keeps w (needs psi_i(y_i) = 0 and L_i(y_i) = 0), scales ell by rho, and the block
gaps become
    g_i(lam_new) = rho g_i(lam) + (1 - rho) H_i(w) / n                                      (12)
so g(lam_new) = rho g + (1 - rho) Delta with Delta = sum_i H_i(w) / n. From an eps-approximate pair
with g <= kappa eps < eps, the largest step that keeps g <= eps is
    rho = (Delta - eps) / (Delta - g)            (Delta > eps; otherwise g <= eps for all lam < lam_j:
                                                 the end of the path is certified)
and every lam in [rho lam_j, lam_j] is eps-approximated by w_j with ell = ell_j lam / lam_j (the gap is
linear in rho between two values <= eps). At lam_new the solver (any of the engine's) runs to
g <= kappa eps, warm-started with the block gaps of (12).

**Heuristic path (App. K).** The same induction driven by the solver's gap estimates (sum of the
stale block gaps, no exact gap pass): the solver stops when the estimate is <= kappa eps, and
Delta, g_i(lam_new) use H_i / n = g^_i - lam <w_i, w> + ell_i with the stale g^_i. Not certified;
exact gaps are still recorded for monitoring (not counted in passes or time).

**Grid search.** lam = 2^15, ..., 2^-15, each solved to g <= eps, cold (from alpha_i = delta(y_i)) or
warm (keep-primal: the rescaling above with rho = lam_new / lam_old, block gaps by (12)).
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .devices import from_host
from .errors import SSVMInputError, check, check_positive
from .atomic import atomic_write_bytes
from .outputs import load_torch, save_torch
from .solvers import Solver, SolverConfig
from .path_resume import GRID_STATE, PATH_STATE, Clock, resumed_grid, resumed_path
from .path_rows import PathRows
from .solvers.active_set import corner_sets, warm_sets
from .stores.base import BlockDual, GapPass


@dataclass
class RegPath:
    """Breakpoints lam_1 > ... > lam_J with their weight vectors W[j] and ells[j] (at lam_j).

    w(lam) = lam_1 / lam * W[0] for lam >= lam_1 (alpha fixed: the first piece is linear in 1/lam),
    w(lam) = W[j] and ell(lam) = ells[j] * lam / lam_j for lam_{j+1} <= lam <= lam_j, down to
    ``lam_end`` (0 when the end of the path is certified, else the next breakpoint not computed).
    ``rows``: the W[j] (:class:`~ssvm_torch.path_rows.PathRows`, or a (J, d) matrix, kept as rows); :attr:`W` is
    the dense (J, d) matrix, built when read."""

    lambdas: torch.Tensor
    rows: PathRows
    ells: torch.Tensor
    eps: float
    lam_end: float
    kappa: float = 0.9
    heuristic: bool = False
    records: list = field(default_factory=list)

    def __post_init__(self):
        if torch.is_tensor(self.rows):
            self.rows = PathRows.of_matrix(self.rows)

    @property
    def W(self) -> torch.Tensor:
        """(J, d) float64: every breakpoint's w (a dense copy of :attr:`rows`)."""
        return self.rows.matrix()

    def _piece(self, lam: float) -> int:
        lam = check_positive(lam, "lam")
        if lam < self.lam_end * (1 - 1e-12):
            raise SSVMInputError(f"lam: expected lam >= {self.lam_end:.6g} (the end of the computed path), got {lam:.6g}")
        below = torch.nonzero(self.lambdas >= lam * (1 - 1e-12)).flatten()
        return int(below[-1]) if len(below) else -1

    def w(self, lam: float) -> torch.Tensor:
        j = self._piece(lam)
        if j < 0:
            return self.rows.row(0) * (float(self.lambdas[0]) / lam)
        return self.rows.row(j)

    def ell(self, lam: float) -> float:
        j = self._piece(lam)
        if j < 0:
            return float(self.ells[0])
        return float(self.ells[j]) * lam / float(self.lambdas[j])

    def save(self, out_dir) -> None:
        out = Path(out_dir)
        save_torch(out / "path.pt", {"lambdas": self.lambdas, "W": self.rows.packed(), "ells": self.ells,
                                     "eps": self.eps, "lam_end": self.lam_end, "kappa": self.kappa,
                                     "heuristic": self.heuristic})
        atomic_write_bytes(out / "path.json", json.dumps(self.records, indent=1).encode())

    @classmethod
    def load(cls, out_dir) -> "RegPath":
        out = Path(out_dir)
        d = load_torch(out / "path.pt", "path", "a path.pt", packed=("W",))
        recs = json.loads((out / "path.json").read_text()) if (out / "path.json").is_file() else []
        return cls(d["lambdas"], PathRows.of_packed(d["W"], "path.W"), d["ells"], d["eps"], d["lam_end"],
                   d.get("kappa", 0.9),
                   d.get("heuristic", False), recs)


def check_zero_gt_loss(dual: BlockDual) -> None:
    """The path needs L_i(y_i) = 0 for every block (the rescaling moves mass to y_i)."""
    for i in range(dual.n):
        loss = dual.loss_of(i, dual.gt_labeling(i))
        if loss != 0.0:
            raise SSVMInputError(f"loss: the regularization path needs L_i(y_i) = 0 for every block; block {i} "
                                 f"has L_i(y_i) = {loss * dual.n:.6g}")


def _solve(dual, target, cfg_base: SolverConfig, gaps, clock, heuristic, max_passes, gated=False, interrupt=None,
           sets=None):
    """Runs the engine at the dual's lam from the current dual to gap (or estimate, heuristic) <= target.
    ``gated``: the exact gap pass is paid once the gap estimate is <= target (``check_below``);
    ``interrupt``: the solver's (True stops it at its next gap check, stop reason "interrupted"); ``sets``: the
    working sets of the current point (pairwise / away steps, the cache: :func:`warm_sets`)."""
    cfg = SolverConfig(**{**asdict(cfg_base), "passes": max_passes, "gap_threshold": 0.0 if heuristic else target,
                          "estimate_threshold": target if heuristic else 0.0,
                          "check_below": target if gated and not heuristic else 0.0,
                          "gap_refresh": 0 if heuristic else cfg_base.gap_refresh,
                          "gap_check": max_passes if heuristic else cfg_base.gap_check})
    solver = Solver(dual, cfg, monitor_start=False, keep_best=False,   # the path continues from the iterate
                    interrupt=interrupt, sets=sets)
    if gaps is not None:
        solver.set_block_gaps(gaps)
    hist = solver.run()
    clock.passes += solver.passes
    clock.time_s += solver.state.time_s
    return solver, hist[-1]


def _on_device(gaps, dual) -> torch.Tensor:
    """Block gaps (a tensor, or the sampler's host array) as a tensor beside w."""
    return gaps.to(dual.w) if torch.is_tensor(gaps) else from_host(gaps, dual.w.device, dual.w.dtype)


def _hinge_from_gaps(dual, gaps) -> torch.Tensor:
    """H_i / n = g_i - lam <w_i, w> + ell_i (exact when g_i are exact block gaps at w)."""
    return torch.as_tensor(gaps, dtype=dual.w.dtype, device=dual.w.device) - dual.block_wdots() + dual.ell_i


def _record(dual, lam, gap, clock, evaluate, **extra) -> dict:
    rec = {"lam": lam, "gap": gap, "passes": clock.passes, "time_s": clock.time_s, **extra}
    if evaluate is not None:
        rec.update(evaluate(dual.w))
    return rec


def check_path_options(eps: float, kappa: float, lam_min: float, max_passes: float) -> tuple[float, float]:
    """(eps, lam_min) as floats, or a clear error naming the bad option (called by ``ssvm-path``
    before it creates its output directory)."""
    eps = check_positive(eps, "eps")
    check(isinstance(kappa, (int, float)) and 0 < kappa < 1, "kappa", "a number in (0, 1)", kappa)
    lam_min = check_positive(lam_min, "lam_min")
    check_positive(max_passes, "max_passes")
    return eps, lam_min


def regularization_path(dual: BlockDual, eps: float, kappa: float = 0.9, heuristic: bool = False,
                        lam_min: float = 1e-5, config: SolverConfig | None = None,
                        evaluate: Callable | None = None, max_passes: float = 1000,
                        max_breakpoints: int = 10_000, progress: Callable | None = None,
                        gated: bool = False, interrupt: Callable[[], bool] | None = None,
                        checkpoint: Callable[[dict], None] | None = None, resume: dict | None = None) -> RegPath:
    """eps-approximate (or heuristic, App. K) regularization path on ``dual`` (a fresh dual at any lam;
    it is re-used and rescaled). ``config`` sets the solver (default BCFW + gap sampling, gap check
    every pass); ``max_passes`` caps each breakpoint's solve. ``gated``: each breakpoint pays its exact
    gap pass only once the gap estimate (the warm block gaps of eq. (12), refreshed by the steps) is
    <= kappa eps (SolverConfig.check_below), checking the estimate every ``config.gap_check`` passes.
    ``interrupt``: polled before each new breakpoint; once True the path ends where the computed
    pieces are certified (``lam_end`` = the next breakpoint of Prop. 1, as with ``lam_min``).
    ``checkpoint(state)`` is called after the initialization and after every breakpoint with the path's state (a
    dict of tensors, numbers and strings, :data:`PATH_STATE`: the dual's blocks, the working sets, the block gaps
    and hinge terms Prop. 1 reads, the breakpoints so far); ``resume=state`` continues from it exactly as the run
    that wrote it (the same ``dual``'s data, eps, kappa and solver; the breakpoints, w and records but their
    times equal the uninterrupted path's)."""
    eps, lam_min = check_path_options(eps, kappa, lam_min, max_passes)
    cfg = (config or SolverConfig(solver="bcfw", sampling="gap", gap_check=1)).validate()
    check(cfg.solver == "bcfw", "config.solver", "'bcfw' (the path warm-starts block-coordinate solvers)", cfg.solver)
    check_zero_gt_loss(dual)
    n = dual.n

    if not dual.supports_path:
        raise SSVMInputError(f"dual: {type(dual).__name__} does not support the regularization path "
                             "(box-constrained models are not supported)")
    if resume is not None:
        lam, g, gaps, H, sets, lambdas, Ws, ells, records, clock = resumed_path(dual, resume, eps, kappa, heuristic)
    else:
        # -- Alg. 6: max-loss corners at w = 0, lam_inf -----------------------------------------
        clock = Clock()
        t0 = time.perf_counter()
        dual.rescale(1.0, 0.0)                     # alpha_i = delta(y_i), lam = 1: w = 0
        gp = dual.gap_pass()                       # at w = 0 the oracle maximizes the loss alone
        w_s, ell_s = dual.corner_point(gp)
        dual.move_all(gp, w_s, ell_s, 1.0)         # alpha_i = delta(y~_i); at lam = 1, w = psi~
        # the decomposition the pairwise / away steps and the cache go on from (kept through every rescaling)
        sets = (corner_sets(dual, [dual.block_labeling(gp, i) for i in range(n)], gp.loss.tolist())
                if cfg.uses_sets else None)
        dual.recompute()
        psi_t = dual.w.clone()
        theta = dual.max_margins(psi_t)
        lam1 = (float(psi_t @ psi_t) + float(theta.sum()) / n) / (kappa * eps)
        dual.rescale(lam1, 1.0)                    # keep alpha: w = psi~ / lam1
        exact = dual.gap_pass()                    # block gaps and H_i(w) at lam1 for Prop. 1 / eq. (12)
        clock.passes += 3.0                        # loss-only pass, plain decoding pass, gap pass
        clock.time_s += time.perf_counter() - t0
        gaps, H = exact.block_gaps, exact.H
        records = [_record(dual, lam1, float(gaps.sum()), clock, evaluate, bound=kappa * eps, solved=False)]
        if progress:
            progress(records[-1])
        lambdas, Ws, ells = [lam1], PathRows(dual.w.shape[0]), [dual.ell]
        Ws.append(dual.w)
        lam = lam1
        g = float(gaps.sum()) if not heuristic else kappa * eps   # Alg. 6 certifies g <= kappa eps

    def state() -> dict:
        host = {"device": "cpu", "dtype": torch.float64}
        return {"format": PATH_STATE, "eps": eps, "kappa": kappa, "heuristic": heuristic, "lam": lam, "g": g,
                "gaps": _on_device(gaps, dual).to(**host), "H": None if heuristic else H.to(**host),
                "dual": dual.state_dict(), "sets": copy.deepcopy(sets), "lambdas": list(lambdas),
                "W": Ws.packed(), "ells": list(ells), "records": json.dumps(records),
                "clock": [clock.passes, clock.time_s]}
    if checkpoint is not None and resume is None:
        checkpoint(state())
    lam_end = 0.0
    while True:
        # -- Prop. 1: next breakpoint --------------------------------------------------------------
        if heuristic:
            Hn = _hinge_from_gaps(dual, gaps)
        else:
            Hn = H.to(dual.w) / n
        Delta = float(Hn.sum())
        if Delta <= eps:
            lam_end = 0.0                      # g(lam') <= eps for every lam' < lam: done
            break
        rho = (Delta - eps) / (Delta - g)
        lam_new = rho * lam
        if lam_new < lam_min or len(lambdas) >= max_breakpoints or (interrupt is not None and interrupt()):
            lam_end = lam_new                  # the last piece is certified down to lam_new
            break
        t0 = time.perf_counter()
        dual.rescale(lam_new, rho)
        warm_sets(dual, sets, rho)
        gaps = rho * _on_device(gaps, dual) + (1 - rho) * Hn          # eq. (12)
        clock.time_s += time.perf_counter() - t0
        solver, last = _solve(dual, kappa * eps, cfg, gaps, clock, heuristic, max_passes, gated, sets=sets)
        sets = solver.sets
        if heuristic:
            gaps = _on_device(solver.block_gaps, dual)
            g = float(gaps.sum())
        else:
            exact = solver.last_gap_pass
            gaps, H = exact.block_gaps, exact.H
            g = float(gaps.sum())
            if g > kappa * eps:
                raise SSVMInputError(f"max_passes: the solver did not reach gap {kappa * eps:.3g} at lam = {lam_new:.4g} "
                                     f"within {max_passes} passes (gap {g:.3g}); raise max_passes")
        lam = lam_new
        lambdas.append(lam)
        Ws.append(dual.w)
        ells.append(dual.ell)
        records.append(_record(dual, lam, last["gap"], clock, evaluate, rho=rho, Delta=Delta,
                               gap_estimate=float(gaps.sum()) if heuristic else None, solved=True,
                               stop_reason=solver.state.stop_reason, checks=solver.state.checks))
        if progress:
            progress(records[-1])
        if checkpoint is not None:
            checkpoint(state())
    return RegPath(torch.tensor(lambdas, dtype=torch.float64, device="cpu"), Ws,
                   torch.tensor(ells, dtype=torch.float64, device="cpu"), eps, max(lam_end, 0.0), kappa, heuristic, records)


def cold_starts(dual: BlockDual) -> Callable[[float], BlockDual]:
    """``make_dual`` for grid search that re-uses one dual: alpha_i = delta(y_i) at each lam (the
    same point as a fresh dual, without rebuilding the structure)."""
    def make_dual(lam: float) -> BlockDual:
        dual.rescale(lam, 0.0)
        return dual
    return make_dual


def grid_lambdas(hi: int = 15, lo: int = -15) -> list:
    return [2.0 ** k for k in range(hi, lo - 1, -1)]


def grid_search(make_dual: Callable[[float], BlockDual], eps: float, lambdas=None, warm: bool = True,
                config: SolverConfig | None = None, evaluate: Callable | None = None, max_passes: float = 1000,
                progress: Callable | None = None, gated: bool = False,
                interrupt: Callable[[], bool] | None = None, checkpoint: Callable[[dict], None] | None = None,
                resume: dict | None = None) -> list:
    """Solve each lam of ``lambdas`` (descending; default 2^15 ... 2^-15) to exact gap <= eps, cold
    (a fresh dual each time) or warm (keep-primal rescaling of the previous solution, block gaps by
    (12)). ``gated`` as for :func:`regularization_path`. Returns one record per lam with cumulative
    passes and time. ``interrupt``: once True, the lam being solved stops at its next exact gap check
    (its record's stop reason "interrupted") and the grid ends there: fewer records than lambdas.
    ``checkpoint(state)`` after every lam solved to its gap (not one an interrupt cut short) with the grid's state
    (:data:`GRID_STATE`: the records, the clock and, warm, the dual's blocks, working sets and the exact gap pass
    the next warm start reads); ``resume=state`` continues from it exactly (the same ``make_dual`` data, eps,
    lambdas, warm and solver)."""
    eps = check_positive(eps, "eps")
    lambdas = grid_lambdas() if lambdas is None else [float(v) for v in lambdas]
    check(all(a > b for a, b in zip(lambdas, lambdas[1:])), "lambdas", "a strictly decreasing list", lambdas[:3])
    cfg = (config or SolverConfig(solver="bcfw", sampling="gap", gap_check=1)).validate()
    clock, records, dual, exact, sets = Clock(), [], None, None, None
    if resume is not None:
        records, clock, dual, exact, sets = resumed_grid(make_dual, resume, eps, lambdas, warm)

    def state() -> dict:
        host = {"device": "cpu", "dtype": torch.float64}
        held = warm and dual is not None
        return {"format": GRID_STATE, "eps": eps, "lambdas": list(lambdas), "warm": warm,
                "records": json.dumps(records), "clock": [clock.passes, clock.time_s],
                "lam": dual.lam if held else None, "dual": dual.state_dict() if held else None,
                "H": exact.H.to(**host) if held else None, "block_gaps": exact.block_gaps.to(**host) if held else None,
                "sets": copy.deepcopy(sets) if held else None}
    for lam in lambdas[len(records):]:
        gaps = None
        if warm and dual is not None:
            t0 = time.perf_counter()
            rho = lam / dual.lam
            Hn = exact.H.to(dual.w) / dual.n
            dual.rescale(lam, rho)
            warm_sets(dual, sets, rho)           # the working sets follow the rescaling
            gaps = rho * exact.block_gaps.to(dual.w) + (1 - rho) * Hn            # eq. (12)
            clock.time_s += time.perf_counter() - t0
        else:
            dual = make_dual(lam)
        if gaps is not None and float(gaps.sum()) <= eps:
            last, solver = {"gap": float(gaps.sum())}, None      # the warm start is already eps-optimal
            exact = GapPass(labels=exact.labels, loss=exact.loss, H=exact.H, block_gaps=gaps)
        else:
            solver, last = _solve(dual, eps, cfg, gaps, clock, False, max_passes, gated, interrupt,
                                  sets=sets if warm else None)
            exact = solver.last_gap_pass
            sets = solver.sets
        rec = _record(dual, lam, last["gap"], clock, evaluate, warm=warm,
                      stop_reason=solver.state.stop_reason if solver else "warm_start",
                      checks=solver.state.checks if solver else 0)
        records.append(rec)
        if progress:
            progress(rec)
        if checkpoint is not None and rec["stop_reason"] != "interrupted":
            checkpoint(state())
        if interrupt is not None and interrupt():
            break
    return records


def path_gap(dual: BlockDual, path: RegPath, lam: float) -> float:
    """Exact duality gap of (path.w(lam), path.ell(lam)) at lam, recomputed from scratch with one
    oracle pass: lam ||w||^2 - ell + sum_i H_i(w) / n (primal minus dual of objective (1))."""
    w, ell = path.w(lam), path.ell(lam)
    dual.rescale(lam, 1.0)
    dual.set_point(w.to(dual.w), ell)
    H = dual.gap_pass().H
    return lam * float(w @ w) - ell + float(H.sum()) / dual.n


__all__ = ["RegPath", "regularization_path", "grid_search", "grid_lambdas", "cold_starts", "path_gap", "check_zero_gt_loss"]
