"""scikit-learn's own estimator checks over MulticlassSSVM and MultiLabelSSVM, and the same contract by
hand for ChainSSVM / StructuredSVM, whose X (ragged sequences, typed containers) is not scikit-learn's:
clone, get/set_params, NotFittedError, labels required, classes_, string tags round trip."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from ssvm_torch import ChainSSVM, MulticlassSSVM, MultiLabelSSVM, SSVMInputError, StructuredSVM

# MultiLabelSSVM models L >= 2 labels jointly (a pairwise graph over the labels, 2^L labelings): the
# generic checks below fit it on a single column of binary / multiclass targets, (n, 1), which is
# not a multi-label problem, and it refuses them by name ("expected an (n, L >= 2) 0/1 label
# indicator matrix"). Every other check, the multi-label ones included, passes.
SINGLE_COLUMN = "fits a single (n, 1) binary/multiclass target column; a multi-label SSVM needs an (n, L >= 2) 0/1 matrix"
MULTILABEL_EXPECTED_FAILURES = {name: SINGLE_COLUMN for name in (
    "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit", "check_estimators_dtypes", "check_dtype_object",
    "check_pipeline_consistency", "check_estimators_nan_inf", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_classifier_data_not_an_array", "check_classifiers_one_label",
    "check_classifiers_classes", "check_classifiers_train", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_fit2d_1sample", "check_fit2d_1feature", "check_dict_unchanged",
    "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in", "check_fit2d_predict1d")}


def expected_failed_checks(estimator):
    return MULTILABEL_EXPECTED_FAILURES if isinstance(estimator, MultiLabelSSVM) else {}


@parametrize_with_checks([MulticlassSSVM(), MultiLabelSSVM()], expected_failed_checks=expected_failed_checks)
def test_scikit_learn_checks(estimator, check):
    check(estimator)


def test_multiclass_string_labels_round_trip_and_labels_are_required():
    rng = np.random.default_rng(0)
    names = np.array(["cat", "dog", "emu"])
    y = names[rng.integers(0, 3, 90)]
    X = rng.normal(size=(90, 3)) + 4 * (y[:, None] == names[None]).astype(float)
    est = MulticlassSSVM(passes=10).fit(X, y)
    assert list(est.classes_) == ["cat", "dog", "emu"] and est.n_features_in_ == 3
    assert set(est.predict(X)) <= set(names) and est.score(X, y) > 0.9
    with pytest.raises(ValueError, match="requires y"):
        MulticlassSSVM(n_states=3).fit(X)
    with pytest.raises(SSVMInputError, match="Y: .*needs the labels"):
        est.score(X)
    with pytest.raises(SSVMInputError, match="n_states=3 expected labels in 0..2"):
        MulticlassSSVM(n_states=3).fit(X, rng.integers(5, 8, 90))
    labels = rng.integers(5, 8, 90)                   # {5, 6, 7}: three classes, not eight
    assert list(MulticlassSSVM(passes=2).fit(X, labels).classes_) == [5, 6, 7]
    with pytest.raises(ValueError, match="Complex data not supported"):
        MulticlassSSVM().fit(X + 1j, y)


def sequences(rng, tags, n=40, F=4):
    """Chains whose tag at each position is visible in its features (a learnable toy)."""
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(2, 7))
        y = tags[rng.integers(0, len(tags), T)]
        x = rng.normal(size=(T, F)) * 0.3
        x[np.arange(T), np.searchsorted(tags, y) % F] += 2.0
        X.append(x)
        Y.append(y)
    return X, Y


def test_chain_contract_by_hand():
    rng = np.random.default_rng(1)
    tags = np.array(["B-NP", "I-NP", "O"])
    X, Y = sequences(rng, tags)
    est = ChainSSVM(passes=10)
    twin = clone(est.set_params(lam=0.01))
    assert twin is not est and twin.get_params() == est.get_params() and twin.lam == 0.01
    with pytest.raises(NotFittedError):
        est.predict(X)
    est.fit(X, Y)
    assert list(est.classes_) == list(tags) and est.n_features_in_ == 4 and est.n_states_ == 3
    pred = est.predict(X)
    assert all(p.dtype.kind == "U" and set(p) <= set(tags) for p in pred)
    assert est.score(X, Y) > 0.9
    for call in (lambda: ChainSSVM(n_states=3).fit(X), lambda: est.score(X)):
        with pytest.raises(SSVMInputError, match="Y: .*needs the labels"):
            call()
    with pytest.raises(SSVMInputError, match="Y: expected labels without NaN"):
        ChainSSVM().fit([np.ones((2, 4))], [np.array([0.0, np.nan])])
    with pytest.raises(SSVMInputError, match=r"X\[1\]: expected a sequence of length >= 1"):
        ChainSSVM().fit([np.ones((2, 4)), np.ones((0, 4))], [np.array([0, 1]), np.array([], dtype=int)])
    with pytest.raises(SSVMInputError, match=r"X\[0\]: expected 4 features, got 5"):
        est.predict([np.ones((3, 5))])
    with pytest.raises(SSVMInputError, match="Y: expected labels of one sortable type"):
        ChainSSVM().fit([np.ones((2, 4))], [np.array([0, "a"], dtype=object)])
    with pytest.raises(SSVMInputError, match=r"Y\[0\]: expected \(3,\) labels"):
        ChainSSVM().fit([np.ones((3, 4))], [np.array([0, 1])])


def test_chain_n_states_and_unseen_tags():
    rng = np.random.default_rng(2)
    X, Y = sequences(rng, np.array([0, 1, 2]))
    est = ChainSSVM(n_states=4, passes=5).fit(X, Y)
    assert list(est.classes_) == [0, 1, 2, 3]
    # a tag never seen in fit (a cross-validation fold's) counts as wrong, not as an error
    Y_other = [np.where(y == 2, 9, y) for y in Y]
    assert est.score(X, Y_other) < est.score(X, Y)


def test_structured_svm_contract_by_hand():
    est = StructuredSVM(structure="multiclass", passes=3)
    assert clone(est).get_params() == est.get_params()
    with pytest.raises(NotFittedError):
        est.predict(np.zeros((2, 3)))
    with pytest.raises(SSVMInputError, match="Y: .*needs the labels"):
        est.fit(np.zeros((4, 3)))
