"""The 1-slack cutting plane's working set of joint constraints (solvers/cutting_plane.py), in one of
two forms with the same operations:

* :class:`DenseWorkingSet`: the constraints a_c as rows of an (m, d) matrix (any store; the box
  constraints' primal QP needs them dense);
* :class:`LabelingWorkingSet`: each constraint as its joint labeling (stores.optional_moves.JointConstraints),
  N small integers instead of d floats. On CoNLL-2000 (d = 7.4M, N = 211,727 tokens) that is 0.4 MB
  instead of 59 MB per constraint; the Gram row of a new constraint and the violations are one
  scoring of every position per constraint, and w = sum_c alpha_c a_c is one map from statistics
  to w (no d-sized work per constraint).

``working_set="auto"`` takes labelings where the store keeps them and d >= SPARSE_D (the size above
which this package treats a model as large and sparse), dense otherwise.
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from ..stores.base import SPARSE_D, GapPass
from ..stores.optional_moves import JointConstraints


class DenseWorkingSet:
    def __init__(self, dual):
        self.dual = dual
        self.A = torch.zeros(0, dual.w.shape[0], dtype=dual.w.dtype, device=dual.device)

    def lam_dots(self, w: torch.Tensor) -> np.ndarray:
        """lam <a_c, w> for every constraint: (m,)."""
        return to_host(self.A @ w) * self.dual.lam

    def append(self, a: torch.Tensor, gp: GapPass) -> None:
        self.A = torch.cat([self.A, a[None]])

    def keep(self, mask: np.ndarray) -> None:
        self.A = self.A[torch.as_tensor(np.nonzero(mask)[0], device=self.A.device)]

    def point(self, alpha: np.ndarray) -> torch.Tensor:
        """sum_c alpha_c a_c."""
        return from_host(alpha, self.dual.device).to(self.dual.w.dtype) @ self.A

    def dense(self) -> torch.Tensor:
        return self.A

    def state_dict(self) -> dict:
        return {"A": self.A.clone()}

    def load_state_dict(self, s: dict) -> None:
        check("A" in s and s["A"].dim() == 2 and s["A"].shape[1] == self.dual.w.shape[0], "state['A']",
              f"a (m, {self.dual.w.shape[0]}) tensor of constraints", tuple(s["A"].shape) if "A" in s else None)
        self.A = s["A"].to(self.dual.device, self.dual.w.dtype)


class LabelingWorkingSet:
    def __init__(self, dual: JointConstraints):
        self.dual = dual
        self.labels: list[torch.Tensor] = []

    def lam_dots(self, w: torch.Tensor) -> np.ndarray:
        if not self.labels:
            return np.zeros(0)
        return to_host(self.dual.joint_dots(w, self.labels))

    def append(self, a: torch.Tensor, gp: GapPass) -> None:
        self.labels.append(self.dual.joint_labels(gp))

    def keep(self, mask: np.ndarray) -> None:
        self.labels = [y for y, k in zip(self.labels, mask) if k]

    def point(self, alpha: np.ndarray) -> torch.Tensor:
        return self.dual.joint_point(alpha, self.labels)

    def dense(self) -> torch.Tensor:
        raise SSVMInputError("working_set: box constraints need the dense working set (working_set='dense')")

    def state_dict(self) -> dict:
        return {"labels": torch.stack(self.labels) if self.labels else torch.zeros(0, 0, dtype=torch.int16)}

    def load_state_dict(self, s: dict) -> None:
        Y = s.get("labels")
        check(torch.is_tensor(Y) and Y.dim() == 2 and not Y.is_floating_point(), "state['labels']",
              "an (m, N) integer tensor of joint labelings", None if Y is None else tuple(Y.shape))
        self.labels = [y.to(self.dual.device) for y in Y]


def make_working_set(dual, form: str):
    """The working set of ``form`` ("auto", "dense", "labelings") for this store (module docstring)."""
    compact = isinstance(dual, JointConstraints) and dual.box() is None
    if form == "labelings" and not compact:
        raise SSVMInputError(f"working_set: 'labelings' needs a store that keeps joint constraints as labelings "
                             f"(chains without box constraints); {type(dual).__name__} does not")
    if form == "labelings" or (form == "auto" and compact and dual.w.shape[0] >= SPARSE_D):
        return LabelingWorkingSet(dual)
    return DenseWorkingSet(dual)
