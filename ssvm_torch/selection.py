"""Honest model selection: lambda chosen on a development split of the training data, then one refit.

The training data are split into *fit* and *dev* (for CoNLL-2000: the last ``heldout`` of the
training sentences are dev, the test file is not read). A warm-started lambda grid runs on fit
(:func:`ssvm_torch.path.grid_search`: from the largest lambda down, each lambda starts from the
previous solution rescaled with rho = lam_new / lam_old, which keeps w, with block gaps by eq. (12)
of Osokin et al. 2016), every lambda bounded by the same budget of effective passes, and scores the
weights on dev. The lambda with the best dev score is then refit on all training data by the caller;
only that final model is ever evaluated on the test set.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable

from .errors import SSVMInputError, check
from .path import cold_starts, grid_search
from .solvers import SolverConfig
from .tasks import Problem

DEFAULT_LAMS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)


def dev_metric(record: dict) -> tuple[str, bool]:
    """(the key of the selection score in an evaluation record, higher is better): chunk F1 or the unlabeled
    attachment score where the task reports them, else the test error (lower is better)."""
    if "test_f1" in record:
        return "test_f1", True
    if "test_uas" in record:
        return "test_uas", True
    return "test_error", False


def select_lambda(fit: Problem, lams=DEFAULT_LAMS, config: SolverConfig | None = None, passes: float = 50,
                  device=None, dtype=None, kernels: str = "auto",
                  progress: Callable[[dict], None] | None = None,
                  interrupt: Callable[[], bool] | None = None, checkpoint: Callable[[dict], None] | None = None,
                  resume: dict | None = None) -> tuple[float, list[dict]]:
    """Warm-started grid over ``lams`` (sorted descending) on ``fit.train``, each lambda bounded by
    ``passes`` effective passes (or an exact gap of 1e-9), scored on ``fit.test`` (the dev split).
    Returns (the best lambda, one table row per lambda: lam, dev score, gap, passes at that lambda,
    cumulative passes and seconds). Ties go to the larger lambda. ``interrupt``: once True the grid ends
    after the lambda being solved (stopped at its next gap check): the table then has fewer rows than
    ``lams`` and the best is the best of those. ``checkpoint`` / ``resume``: the grid's state after each lambda
    (:func:`~ssvm_torch.path.grid_search`'s), from which a resumed grid continues exactly."""
    lams = sorted({float(v) for v in lams}, reverse=True)
    check(len(lams) >= 1 and all(v > 0 and math.isfinite(v) for v in lams), "lams",
          "positive finite lambdas", lams)
    check(passes > 0, "passes", "a positive budget of effective passes per lambda", passes)
    cfg = config or SolverConfig(solver="bcfw", sampling="gap", gap_check=10)
    if cfg.solver != "bcfw":
        raise SSVMInputError(f"solver: lambda selection runs the warm-started BCFW grid, got {cfg.solver!r}")
    cfg = SolverConfig(**{**asdict(cfg), "passes": passes}).validate()
    kwargs = {k: v for k, v in {"device": device, "dtype": dtype}.items() if v is not None}
    dual = fit.store(lams[0], kernels=kernels, **kwargs)
    records = grid_search(cold_starts(dual), eps=1e-9, lambdas=lams, warm=True, config=cfg,
                          evaluate=fit.evaluate, max_passes=passes, progress=progress, interrupt=interrupt,
                          checkpoint=checkpoint, resume=resume)
    key, higher = dev_metric(records[0])
    table, before = [], 0.0
    for rec in records:
        table.append({"lam": rec["lam"], f"dev_{key.removeprefix('test_')}": rec[key], "dev_error": rec["test_error"],
                      "gap": rec["gap"], "passes": rec["passes"] - before, "cumulative_passes": rec["passes"],
                      "cumulative_time_s": rec["time_s"], "stop_reason": rec["stop_reason"]})
        before = rec["passes"]
    scores = [rec[key] for rec in records]
    best = max(range(len(records)), key=lambda j: (scores[j] if higher else -scores[j], lams[j]))
    return lams[best], table
