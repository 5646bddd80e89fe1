"""History records: one dict per exact gap check (the certificate of a run), built from the store,
the loop's counters and the optional listeners' points (weighted average, evaluation).

A record holds passes, oracle_calls, steps, time_s, primal (objective (1)), dual (objective (3)),
the exact duality gap (the sum of the block gaps of the pass, eq. (6) of Osokin et al. 2016),
gap_estimate (the sum of the stale block gaps), step-size statistics since the previous record,
working-set statistics (pairwise/away/cache), avg_* fields for the weighted average, and whatever
``evaluate(w)`` returns (train/test errors).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..stores.base import BlockDual, GapPass
from .averaging import Averager
from .config import SolverConfig, SolverState
from .samplers import Sampler

Evaluator = Callable[[torch.Tensor], dict]


def average_point_record(dual: BlockDual, w_avg: torch.Tensor, ell_avg: float, has_dual: bool) -> dict:
    """Primal (and, for dual methods, dual and Lagrange gap) of the averaged point, evaluated by one
    gap pass at it; the store's own point is set back afterwards."""
    saved_w, saved_ell = dual.w.clone(), dual.ell
    try:
        if has_dual:
            dual.set_point(w_avg, ell_avg)
            gpa = dual.gap_pass()
            primal, dual_value = dual.primal(gpa.H), dual.dual()
            return {"avg_primal": primal, "avg_dual": dual_value, "avg_gap": primal - dual_value}
        dual.w.copy_(w_avg)
        return {"avg_primal": dual.primal(dual.gap_pass().H)}
    finally:
        if has_dual:
            dual.set_point(saved_w, saved_ell)
        else:
            dual.w.copy_(saved_w)


def make_record(dual: BlockDual, gp: GapPass, cfg: SolverConfig, st: SolverState, sampler: Sampler,
                sets: list | None = None, averager: Averager | None = None,
                evaluate: Evaluator | None = None) -> dict:
    """The history record of the gap pass ``gp`` at the store's current point. Resets the step-size
    statistics of ``st`` (they cover the interval since the previous record)."""
    has_dual = cfg.solver != "ssg"     # SSG keeps no dual: its records carry the primal only
    rec = {"passes": st.oracle_calls / dual.n, "oracle_calls": st.oracle_calls, "steps": st.steps,
           "time_s": st.time_s, "primal": dual.primal(gp.H)}
    if has_dual:
        rec.update(dual=dual.dual(), gap=float(gp.block_gaps.sum()))
    else:
        rec.update(dual=None, gap=None)
    rec["gap_estimate"] = sampler.estimate()
    if has_dual:       # step sizes since the previous record (SSG's are 1/(k+1))
        rec.update(step_size_mean=st.gamma_sum / st.gamma_n if st.gamma_n else None,
                   full_step_rate=st.gamma_full / st.gamma_n if st.gamma_n else None)
        st.gamma_sum, st.gamma_n, st.gamma_full = 0.0, 0, 0
    if sets is not None:
        rec.update(cache_hits=st.cache_hits,
                   cache_hit_rate=st.cache_hits / max(st.cache_hits + st.step_oracle_calls, 1),
                   fw_steps=st.fw_steps, pairwise_steps=st.pairwise_steps, away_steps=st.away_steps,
                   drop_steps=st.drop_steps, active_set_mean=float(np.mean([len(s.active()) for s in sets])),
                   cache_size_mean=float(np.mean([len(s) for s in sets])))
    w_avg = averager.w_avg(st.steps) if averager is not None else None
    if w_avg is not None:
        rec.update(average_point_record(dual, w_avg, averager.ell_avg, has_dual))
    if evaluate is not None:
        rec.update(evaluate(dual.w))
        if w_avg is not None:
            rec.update({f"avg_{k}": v for k, v in evaluate(w_avg).items()})
    return rec
