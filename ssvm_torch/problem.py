"""What every client of a task needs, in one object: :class:`Problem` (the data-free model, the train and test
containers, the default lambda, the block store and ``evaluate(w)``), built by the task registry
(:mod:`ssvm_torch.tasks`)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .errors import check_positive
from .models.base import StructuredModel
from .stores import make_store
from .stores.base import BlockDual


@dataclass
class Problem:
    """A loaded task: model, data, evaluation and the names of its two reported errors."""

    name: str
    model: StructuredModel
    train: Any
    test: Any
    evaluate: Callable[[torch.Tensor], dict]
    error_name: str
    position_name: str
    nonnegative: torch.Tensor | None = None      # coordinates of w kept >= 0 (App. H)
    layout: dict = field(default_factory=dict)
    # the test predictions of a w as a JSON-able dict, written beside the model (None: the task has none)
    predictions: Callable[[torch.Tensor], dict] | None = None

    @property
    def n_train(self) -> int:
        return self.train.n

    @property
    def n_test(self) -> int:
        return self.test.n

    @property
    def d(self) -> int:
        return self.model.d

    def lam(self, lam: float | None = None) -> float:
        """The regularization lambda: ``lam`` if given, else the default 1/n. A lambda whose lam n
        is outside [1e-12, 1e12] is warned about: the corners w_s = psi / (lam n) then under- or
        overflow the float64 range of the features, and the gap cannot move."""
        lam = check_positive(lam if lam is not None else 1.0 / self.n_train, "lam")
        if not 1e-12 <= lam * self.n_train <= 1e12:
            warnings.warn(f"lam: lam n = {lam * self.n_train:.3g} is outside [1e-12, 1e12]; w = sum psi / (lam n) "
                          "is then at the edge of float64 and the step sizes and the gap may not move", stacklevel=2)
        return lam

    def store(self, lam: float | None = None, device=None, dtype=torch.float64, kernels: str = "auto") -> BlockDual:
        """The block store of the training set (box constraints included where the model needs them)."""
        return make_store(self.model, self.train, self.lam(lam), device=device, dtype=dtype, kernels=kernels,
                          nonnegative=self.nonnegative)

    def describe(self) -> dict:
        """The feature layout recorded in ``model.pt``."""
        return self.layout or self.model.describe()
