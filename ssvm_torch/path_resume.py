"""The resumable states of the regularization path and grid search (ssvm_torch/path.py): their format tags, the
cumulative clock both keep, and the checks that turn a saved state (a file's content: untrusted) back into the
loops' variables, each field refused by name when it is not what this run expects."""
from __future__ import annotations

import copy
import json
import math

import torch

from .errors import check
from .path_rows import PathRows
from .stores.base import BlockDual, GapPass

#: the format tag of :func:`~ssvm_torch.path.regularization_path`'s resumable state
PATH_STATE = "ssvm_torch.path/1"
#: the format tag of :func:`~ssvm_torch.path.grid_search`'s resumable state
GRID_STATE = "ssvm_torch.grid/1"


class Clock:
    """Cumulative counted cost: effective passes and solver seconds."""

    def __init__(self):
        self.passes, self.time_s = 0.0, 0.0


def resumed_path(dual: BlockDual, state: dict, eps: float, kappa: float, heuristic: bool) -> tuple:
    """The loop variables of :func:`regularization_path` from its ``state`` (a file's content: untrusted), each
    field checked by name; ``dual`` is set to the state's lam and blocks (its own load checks their shapes)."""
    check(isinstance(state, dict) and state.get("format") == PATH_STATE, "resume",
          f"a regularization path state ({PATH_STATE})", state.get("format") if isinstance(state, dict) else
          type(state).__name__)
    for key, value in (("eps", eps), ("kappa", kappa), ("heuristic", heuristic)):
        check(state.get(key) == value, f"resume.{key}", f"{value!r} (this path's)", state.get(key))
    lambdas, ells, W = state.get("lambdas"), state.get("ells"), state.get("W")
    J = len(lambdas) if isinstance(lambdas, list) else 0
    check(J >= 1 and all(isinstance(v, float) and v > 0 for v in lambdas)
          and all(a > b for a, b in zip(lambdas, lambdas[1:])), "resume.lambdas", "a decreasing list of lambdas > 0",
          str(lambdas)[:80])
    check(isinstance(ells, list) and len(ells) == J and all(isinstance(v, float) for v in ells), "resume.ells",
          f"{J} floats", str(ells)[:80])
    d = dual.w.shape[0]
    rows = PathRows.of_packed(W, "resume.W")     # the matrix, or its non-zero entries as portable.pack writes them
    check(len(rows) == J and rows.d == d, "resume.W", f"a float64 ({J}, {d}) tensor", (len(rows), rows.d))
    lam, g = state.get("lam"), state.get("g")
    check(lam == lambdas[-1] and isinstance(g, float) and math.isfinite(g), "resume.lam",
          "the last breakpoint and a finite gap", (lam, g))
    for key in ("gaps",) + (() if heuristic else ("H",)):
        t = state.get(key)
        check(torch.is_tensor(t) and t.shape == (dual.n,) and bool(torch.isfinite(t).all()), f"resume.{key}",
              f"({dual.n},) finite numbers", tuple(t.shape) if torch.is_tensor(t) else type(t).__name__)
    try:
        records = json.loads(state.get("records"))
    except (TypeError, ValueError):
        records = None
    check(isinstance(records, list) and len(records) == J and all(isinstance(r, dict) for r in records),
          "resume.records", f"the JSON list of {J} breakpoint records", str(state.get("records"))[:80])
    spent = state.get("clock")
    check(isinstance(spent, list) and len(spent) == 2 and all(isinstance(v, (int, float)) for v in spent),
          "resume.clock", "[passes, seconds]", spent)
    clock = Clock()
    clock.passes, clock.time_s = float(spent[0]), float(spent[1])
    dual.rescale(lam, 1.0)                       # the store's lam, which its state must match
    dual.load_state_dict(state.get("dual"))
    H = None if heuristic else state["H"].to(dual.w)
    return (lam, g, state["gaps"].to(dual.w), H, copy.deepcopy(state.get("sets")), list(lambdas),
            rows,
            list(ells), records, clock)


def resumed_grid(make_dual, state: dict, eps: float, lambdas: list, warm: bool) -> tuple:
    """(records, clock, dual, exact gap pass, working sets) of a :func:`grid_search` state (a file's content:
    untrusted), each field checked by name; warm, the dual of ``make_dual`` set to the state's lam and blocks."""
    check(isinstance(state, dict) and state.get("format") == GRID_STATE, "resume",
          f"a grid search state ({GRID_STATE})", state.get("format") if isinstance(state, dict) else type(state).__name__)
    for key, value in (("eps", eps), ("lambdas", lambdas), ("warm", warm)):
        check(state.get(key) == value, f"resume.{key}", f"{value!r} (this grid's)", state.get(key))
    try:
        records = json.loads(state.get("records"))
    except (TypeError, ValueError):
        records = None
    check(isinstance(records, list) and 1 <= len(records) <= len(lambdas)
          and [r.get("lam") if isinstance(r, dict) else None for r in records] == lambdas[:len(records)],
          "resume.records", "the JSON records of the grid's first lambdas", str(state.get("records"))[:80])
    spent = state.get("clock")
    check(isinstance(spent, list) and len(spent) == 2 and all(isinstance(v, (int, float)) for v in spent),
          "resume.clock", "[passes, seconds]", spent)
    clock = Clock()
    clock.passes, clock.time_s = float(spent[0]), float(spent[1])
    if not warm:
        return records, clock, None, None, None
    lam = state.get("lam")
    check(lam == records[-1]["lam"], "resume.lam", f"the last solved lambda {records[-1]['lam']!r}", lam)
    dual = make_dual(lam)
    dual.load_state_dict(state.get("dual"))
    for key in ("H", "block_gaps"):
        t = state.get(key)
        check(torch.is_tensor(t) and t.shape == (dual.n,) and bool(torch.isfinite(t).all()), f"resume.{key}",
              f"({dual.n},) finite numbers", tuple(t.shape) if torch.is_tensor(t) else type(t).__name__)
    exact = GapPass(labels=None, loss=None, H=state["H"].to(dual.w), block_gaps=state["block_gaps"].to(dual.w))
    return records, clock, dual, exact, copy.deepcopy(state.get("sets"))
