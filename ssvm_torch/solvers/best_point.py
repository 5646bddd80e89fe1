"""What a run returns is the best point it certified.

Frank-Wolfe iterates are not monotone in the primal objective (1) of Osokin et al. 2016: BCFW's exact
line search raises the dual at every step, but P(w) can go up between two checks (on pose-synth the
gap / primal ratio moves between 0.6% and 1.6% over the last 200 passes of a run), and so can EG's
and the cutting plane's. The duality gap certifies any primal point against any dual point: for the
best primal point w_b the run has evaluated and the current dual value D,

    P(w_b) - P* <= P(w_b) - D,

so a run can return w_b with that certificate instead of whichever iterate it stopped on.
:class:`BestPoint` keeps w_b (and its record) over the exact checks; :meth:`BestPoint.finish`
gives the history whose last record describes the returned model (what ``run()`` returns and
history.json holds; the solver's own history, which checkpoints keep, stays the iterates'): its ``primal``,
``gap`` (= P(w_b) - the last record's dual) and ``train_*`` / ``test_*`` are w_b's, ``model_check``
and ``model_passes`` say which check it comes from, ``primal_last`` / ``gap_last`` keep the last
iterate's, and ``passes`` / ``time_s`` stay the run's. The dual extragradient keeps its own best
point (solvers/deg.py) in every record; with weighted averaging the records and the model are the
averaged point's, and the rule is off.
"""
from __future__ import annotations

import math

import torch


class BestPoint:
    """The lowest-primal point among the records offered (see the module docstring). The copy of w_b
    is kept as its nonzero entries (index, value) when they are fewer than a quarter of d -- CoNLL's
    rich-edges w has 4.6% nonzeros after 10 passes: 36 MB instead of 389 MB -- and as a dense
    vector, overwritten in place, otherwise; :attr:`w` is always the dense vector."""

    def __init__(self, enabled: bool = True):
        # off where only the iterate matters (the path's and the lambda grid's inner solves continue from
        # the store's point): no copy of w is kept and the history is returned as the checks wrote it
        self.enabled = enabled
        self._dense: torch.Tensor | None = None
        self._sparse: tuple | None = None          # (index, value, d)
        self.record: dict | None = None
        self.index = -1

    @property
    def w(self) -> torch.Tensor | None:
        """The kept point as a dense vector (a new tensor when it is kept sparse)."""
        if self._sparse is None:
            return self._dense
        index, value, d = self._sparse
        return torch.zeros(d, dtype=value.dtype, device=value.device).index_put_((index,), value)

    def _keep(self, w: torch.Tensor) -> None:
        w = w.detach().reshape(-1)
        index = torch.nonzero(w).squeeze(1)
        if 4 * index.numel() < w.numel():
            self._sparse, self._dense = (index, w[index].clone(), w.numel()), None
        elif self._dense is not None and self._dense.shape == w.shape and self._dense.dtype == w.dtype \
                and self._dense.device == w.device:
            self._dense.copy_(w)                   # in place: a second copy of w (d floats) would double the peak
            self._sparse = None
        else:
            self._dense, self._sparse = None, None    # the old copy goes before the new one is made
            self._dense = w.clone()

    @property
    def primal(self) -> float:
        return math.inf if self.record is None else float(self.record["primal"])

    def offer(self, record: dict, w: torch.Tensor, index: int) -> None:
        """The record of check ``index`` of the history, at point ``w`` (copied when it is the best)."""
        p = record.get("primal")
        if self.enabled and p is not None and math.isfinite(p) and p < self.primal:
            self._keep(w)
            self.record, self.index = dict(record), index

    def is_last(self, history: list) -> bool:
        return self.record is None or self.index == len(history) - 1

    def finish(self, history: list) -> list:
        """The history with its last record rewritten to describe the returned model (module
        docstring): a new list and a new last record; ``history`` itself (the solver's state, what
        checkpoints hold and a resumed run continues) is left as the checks wrote it."""
        if not history or self.record is None:
            return list(history)
        last = dict(history[-1])
        last["model_check"], last["model_passes"] = self.index, float(self.record["passes"])
        if self.is_last(history):
            return [*history[:-1], last]
        last["primal_last"], last["gap_last"] = last["primal"], last.get("gap")
        for key, value in self.record.items():
            if key == "primal" or key.startswith(("train_", "test_")):
                last[key] = value
        if last.get("dual") is not None:
            last["gap"] = float(self.record["primal"]) - float(last["dual"])
        return [*history[:-1], last]

    def state_dict(self) -> dict:
        kept = ({"w_index": self._sparse[0], "w_value": self._sparse[1], "d": self._sparse[2]} if self._sparse is not None
                else {"w": self._dense})
        return {**kept, "record": self.record, "index": self.index}

    def load_state_dict(self, s: dict | None) -> None:
        """A checkpoint without one (written before the rule) starts the search again."""
        s = s or {}
        if s.get("w_index") is not None:
            self._sparse, self._dense = (s["w_index"], s["w_value"], int(s["d"])), None
        else:
            self._sparse, self._dense = None, s.get("w")
        self.record, self.index = s.get("record"), int(s.get("index", -1))
