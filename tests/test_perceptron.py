"""The structured perceptron (ssvm_torch/perceptron.py) and its estimator (ssvm_torch/perceptron_estimator.py).

* on every structure of the conformance suite, the run is the algorithm written out with a brute-force argmax over
  every labeling (plain, mini-batched and loss-augmented; averaged, projected onto w[nonnegative] >= 0);
* the multiclass case is the textbook multiclass perceptron on a (K, F) weight matrix;
* on a separable set it stops without a mistake and within Novikoff's bound (R / gamma)^2 (Theorem 1 of Collins 2002);
* the estimator: OCR words, scikit-learn's clone, seeds, the torch decoders, bad settings refused by name.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from conftest import random_chain_data
from test_conformance import STRUCTURES, instance
from ssvm_torch import ChainData, FlatData, StructuredPerceptron
from ssvm_torch.data import load_ocr
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import hide_labels
from ssvm_torch.models import ChainModel
from ssvm_torch.perceptron import PerceptronConfig, PerceptronResult, train_perceptron
from ssvm_torch.perceptron_compiled import compiled_epoch


class Tie(Exception):
    """Two labelings share the best score: the reference cannot tell which one the decoder returns."""


def reference(name, model, data, w0, nonneg, epochs, batch_size, loss_augmented, eta=lambda t: 1.0):
    """The perceptron written out: the examples in order, each batch decoded by enumeration at one w, the updates
    psi_i(y^) summed where L_i(y^) > 0 (or H_i > 0), w projected, every step's w averaged."""
    w, total, steps, mistakes = w0.clone(), torch.zeros_like(w0), 0, []
    for t in range(epochs):
        wrong = 0
        for start in range(0, data.n, batch_size):
            delta = torch.zeros_like(w)
            for i in range(start, min(start + batch_size, data.n)):
                Y = STRUCTURES[name].enumerate(model, data, i)
                idx, one = torch.full((len(Y),), i), torch.tensor([i])
                values = model.phi(data, idx, Y) @ w + (model.loss(data, idx, Y) if loss_augmented else 0)
                top = torch.topk(values, min(2, len(Y))).values
                if len(Y) > 1 and float(top[0] - top[1]) <= 1e-9:
                    raise Tie(name)
                best = Y[int(values.argmax())][None]
                gold = float(model.phi(data, one, model.gt_batch(data, one)) @ w)
                violated = (float(values.max()) - gold > 1e-9 if loss_augmented
                            else float(model.loss(data, one, best)) > 0)
                if violated:
                    wrong += 1
                    delta += eta(t) * model.psi(data, one, best)[0]
            w = w + delta
            if nonneg is not None:
                w[nonneg] = w[nonneg].clamp_min(0)
            total += w
            steps += 1
        mistakes.append(wrong)
        if wrong == 0:
            break
    return w, total / steps, mistakes


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_every_structure_is_the_written_out_perceptron(name):
    model, data, nonneg, w0 = instance(name, seed=3)
    for batch_size, loss_augmented in ((1, False), (2, False), (1, True)):
        cfg = PerceptronConfig(epochs=3, batch_size=batch_size, shuffle=False, loss_augmented=loss_augmented,
                               decay_exponent=0.5, decay_t0=2.0)
        run = train_perceptron(model, data, cfg, w0=w0, nonnegative=nonneg)
        last, avg, mistakes = reference(name, model, data, w0, nonneg, 3, batch_size, loss_augmented,
                                        eta=cfg.eta)
        assert [r["mistakes"] for r in run.history] == mistakes
        torch.testing.assert_close(run.w_last, last, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(run.w, avg, rtol=1e-9, atol=1e-9)
        assert run.stop_reason == ("separated" if mistakes[-1] == 0 else "epochs")
        if nonneg is not None:
            assert bool((run.w_last[nonneg] >= 0).all())


def test_multiclass_is_the_textbook_perceptron():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 5)), rng.integers(0, 4, size=60)
    W, total, steps = np.zeros((4, 6)), np.zeros((4, 6)), 0             # the model's features end with a bias 1
    for _ in range(4):
        for x, k in zip(np.c_[X, np.ones(60)], y):
            guess = int(np.argmax(W @ x))                   # ties (w = 0) go to the lowest class, as in the model
            if guess != k:
                W[k] += x
                W[guess] -= x
            total += W
            steps += 1
    Xt = rng.normal(size=(40, 5))
    for average, weights in ((False, W), (True, total / steps)):
        est = StructuredPerceptron("multiclass", epochs=4, shuffle=False, average=average, n_states=4).fit(X, y)
        assert est.stop_reason_ == "epochs" and est.n_iter_ == 4
        np.testing.assert_allclose(est.coef_.numpy().reshape(4, 6), weights, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(est.predict(Xt), np.argmax(np.c_[Xt, np.ones(40)] @ weights.T, axis=1))


def test_a_separable_set_stops_without_a_mistake_within_novikoffs_bound():
    rng = np.random.default_rng(1)
    data = random_chain_data(rng, 12, 3, 4, tmin=1, tmax=4)
    model = ChainModel.for_data(data)
    u = torch.tensor(rng.normal(size=model.d))
    labels = model.predict(u, data)                       # the gold labels are the argmax under u: separable
    Y = torch.cat([labels[i, :int(data.lengths[i])] for i in range(data.n)])
    data = ChainData(data.X, Y, data.offsets, data.n_states)
    R2, gamma = 0.0, np.inf
    for i in range(data.n):
        Ys = STRUCTURES["chain"].enumerate(model, data, i)
        psi = model.psi(data, torch.full((len(Ys),), i), Ys)
        other = psi.abs().sum(1) > 0                      # every labeling but the gold one
        R2 = max(R2, float((psi ** 2).sum(1).max()))
        gamma = min(gamma, float((psi[other] @ u).min()) / float(u.norm()))
    assert gamma > 0
    run = train_perceptron(model, data, PerceptronConfig(epochs=10_000, average=False, seed=2))
    assert run.stop_reason == "separated" and run.history[-1]["mistakes"] == 0
    assert sum(r["mistakes"] for r in run.history) <= R2 / gamma ** 2
    assert bool((model.predict(run.w, data)[model.gt_batch(data, torch.arange(data.n)) >= 0]
                 == Y).all())


@pytest.fixture(scope="module")
def ocr():
    train, test = load_ocr("small")
    return train.subset(torch.arange(200)), test.subset(torch.arange(1000))


def test_the_averaged_perceptron_learns_ocr_words(ocr):
    train, test = ocr
    last = StructuredPerceptron(epochs=5, average=False).fit(train)
    avg = StructuredPerceptron(epochs=5).fit(train)
    # the averaged point is the better predictor (Collins 2002, Sec. 2.5); both learn (26 letters: chance 0.96)
    assert 1 - avg.score(test) < 1 - last.score(test) < 0.6
    assert 1 - avg.score(test) < 0.4
    mistakes = [r["mistakes"] for r in avg.history_]
    assert mistakes[-1] < mistakes[0] and avg.n_iter_ == 5
    torch.testing.assert_close(avg.coef_last_, last.coef_)      # the same iterates, another returned point


def test_the_torch_decoders_and_a_float32_run_follow_the_compiled_one(ocr):
    train, _ = ocr
    compiled = StructuredPerceptron(epochs=2).fit(train)
    torch_path = StructuredPerceptron(epochs=2, kernels="torch").fit(train)
    torch.testing.assert_close(torch_path.coef_, compiled.coef_, rtol=1e-12, atol=1e-12)
    assert [r["mistakes"] for r in torch_path.history_] == [r["mistakes"] for r in compiled.history_]
    single = StructuredPerceptron(epochs=2, dtype="float32").fit(train)
    assert abs(single.history_[0]["mistakes"] - compiled.history_[0]["mistakes"]) <= 2


def test_seeds_shuffle_and_sklearn_clone():
    from sklearn.base import clone
    rng = np.random.default_rng(2)
    X = [rng.normal(size=(int(rng.integers(1, 6)), 4)) for _ in range(20)]
    Y = [np.array(["a", "b", "c"])[rng.integers(0, 3, size=len(x))] for x in X]
    est = StructuredPerceptron(epochs=3, seed=5)
    a, b = est.fit(X, Y).coef_.clone(), clone(est).fit(X, Y).coef_
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(StructuredPerceptron(epochs=3, seed=6).fit(X, Y).coef_, a)
    assert not torch.equal(StructuredPerceptron(epochs=3, shuffle=False).fit(X, Y).coef_, a)
    assert set(np.concatenate(est.predict(X))) <= {"a", "b", "c"}
    assert clone(est).get_params() == est.get_params()


@pytest.mark.parametrize("field,value,expected", [
    ("epochs", 0, "an int >= 1"), ("batch_size", 0, "an int >= 1"), ("decay_t0", 0.0, "a finite number > 0"),
    ("decay_exponent", -1.0, "a finite number >= 0"), ("average", "yes", "a bool"), ("kernels", "cuda", "kernels"),
    ("device", "tpu", "device")])
def test_bad_settings_are_refused_by_name(field, value, expected):
    rng = np.random.default_rng(3)
    data = random_chain_data(rng, 4, 3, 2)
    with pytest.raises(SSVMInputError, match=f"{field}: .*{expected}" if field not in ("kernels", "device") else field):
        StructuredPerceptron(**{field: value}).fit(data)


def test_bad_starts_and_hidden_labels_are_refused():
    rng = np.random.default_rng(4)
    data = random_chain_data(rng, 6, 3, 2)
    model = ChainModel.for_data(data)
    with pytest.raises(SSVMInputError, match="w0: expected a weight vector of length d"):
        train_perceptron(model, data, w0=torch.zeros(model.d + 1))
    with pytest.raises(SSVMInputError, match="w0: expected finite weights"):
        train_perceptron(model, data, w0=torch.full((model.d,), float("nan")))
    with pytest.raises(SSVMInputError, match="unobserved labels"):
        train_perceptron(model, hide_labels(data, 0.5, seed=0))
    for bad, got in (([model.d], f"range \\[{model.d}, {model.d}\\]"), ([-1], "range \\[-1, -1\\]"),
                     ([0.5], "torch.float")):
        with pytest.raises(SSVMInputError, match=f"nonnegative: expected .* got {got}"):
            train_perceptron(model, data, nonnegative=bad)
    with pytest.raises(SSVMInputError, match="unobserved labels"):
        StructuredPerceptron().fit(hide_labels(data, 0.5, seed=0))
    with pytest.raises(SSVMInputError, match="compiled: expected a bool, got no"):
        train_perceptron(model, data, compiled="no")
    flat = FlatData(rng.normal(size=(5, 2)), rng.integers(0, 2, size=5))
    with pytest.raises(SSVMInputError, match="model: expected a StructuredModel"):
        StructuredPerceptron("custom").fit(flat)


def assert_same_run(fast: PerceptronResult, loop: PerceptronResult) -> None:
    """Bit for bit the same iterate, lagged sum and records (all but the seconds)."""
    assert torch.equal(fast.w_last, loop.w_last) and torch.equal(fast.lagged, loop.lagged)
    assert fast.steps == loop.steps
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in fast.history] == \
        [{k: v for k, v in r.items() if k != "time_s"} for r in loop.history]


@pytest.mark.parametrize("loss_augmented", [False, True])
def test_the_compiled_chain_epoch_takes_the_loops_steps(ocr, loss_augmented):
    """A ChainModel run at batch size 1 on CPU float64 takes its epochs in one compiled call each
    (oracles/chain_perceptron.py); the generic loop (the torch decoders) takes the same steps, plain and
    loss-augmented: with unit steps the same w, lagged sum and records bit for bit (OCR's binary pixels keep w on
    integers, where labelings tie: the loss is added to the unaries as the model's augment adds it); with decaying
    steps here the same mistakes and w to rounding (psi's entries are summed in another order; where two
    labelings tie exactly, the rounding of the two paths' unaries may break the tie apart)."""
    train, _ = ocr
    data = train.subset(torch.arange(150))
    model = ChainModel.for_data(data)
    w = torch.zeros(model.d, dtype=torch.float64)
    for cfg in (PerceptronConfig(epochs=3, loss_augmented=loss_augmented),
                PerceptronConfig(epochs=3, loss_augmented=loss_augmented, decay_exponent=0.5, decay_t0=2.0)):
        assert compiled_epoch(model, data, w, w.clone(), cfg, None) is not None
        assert compiled_epoch(model.with_kernels("torch"), data, w, w.clone(), cfg, None) is None
        fast = train_perceptron(model, data, cfg)
        loop = train_perceptron(model.with_kernels("torch"), data, cfg)
        assert fast.steps == loop.steps == 3 * 150
        assert [r["mistakes"] for r in fast.history] == [r["mistakes"] for r in loop.history]
        assert fast.history[0]["mistakes"] > fast.history[-1]["mistakes"] > 0
        if cfg.decay_exponent == 0:
            assert_same_run(fast, loop)
        else:
            torch.testing.assert_close(fast.w_last, loop.w_last, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(fast.w, loop.w, rtol=1e-12, atol=1e-12)


def test_the_compiled_chain_epoch_keeps_the_chunk_constraints_and_serves_only_its_case():
    """On CoNLL-2000 chunks under the BIO constraints the compiled epochs are the loop's; batches of several
    examples, a box or another precision take the loop (a subclass of ChainModel too: the edge-feature chain's
    perceptron tests below run it)."""
    from ssvm_torch.tasks import load_task
    task = load_task("conll2000", train_size=120, constraints="bio")
    model, data = task.model, task.train
    assert model.constraint_scheme is not None
    cfg = PerceptronConfig(epochs=2)
    fast = train_perceptron(model, data, cfg)
    assert_same_run(fast, train_perceptron(model.with_kernels("torch"), data, cfg))
    w = torch.zeros(model.d, dtype=torch.float64)
    assert compiled_epoch(model, data, w, w.clone(), PerceptronConfig(batch_size=2), None) is None
    assert compiled_epoch(model, data, w, w.clone(), cfg, torch.tensor([0])) is None
    assert compiled_epoch(model, data, w.float(), w.float(), cfg, None) is None


def test_the_compiled_edge_chain_epoch_is_the_loop_on_conll_rich_edges():
    """``ssvm-train``'s CoNLL-2000 featurization (rich-edges: an EdgeChainModel, BIOES tags and constraints, the
    Hamming loss): the compiled epochs (per-position transitions, the edge block's part of psi) take the loop's
    steps bit for bit with unit steps."""
    from ssvm_torch.models import EdgeChainModel
    from ssvm_torch.tasks import CONLL_RECOMMENDED, load_task
    task = load_task("conll2000", train_size=150, **CONLL_RECOMMENDED)
    model, data = task.model, task.train
    assert type(model) is EdgeChainModel and model.constraint_scheme is not None
    cfg = PerceptronConfig(epochs=2)
    w = torch.zeros(model.d, dtype=torch.float64)
    assert compiled_epoch(model, data, w, w.clone(), cfg, None) is not None
    fast = train_perceptron(model, data, cfg)
    loop = train_perceptron(model, data, cfg, compiled=False)
    assert_same_run(fast, loop)
    assert fast.history[0]["mistakes"] > fast.history[1]["mistakes"] > 0
    assert bool((model.edge_weights(fast.w_last) != 0).any())


#: real tasks whose models take the compiled epochs at batch size 1: (task, its options, the first sentences taken,
#: None: all)
COMPILED_TASKS = {
    "trees": ("ud-ewt", {"trees": "projective", "train_size": 150}, None),    # oracles/tree_perceptron.py, Eisner
    "trees-non-projective": ("ud-ewt", {"trees": "non-projective", "train_size": 150}, None),  # Chu-Liu-Edmonds
    "trees-second-order": ("ud-ewt", {"trees": "second-order", "train_size": 80}, None),  # stores/sibling_perceptron
    "constituency": ("ud-ewt-spans", {"train_size": 150}, None),             # oracles/span_perceptron.py
    "segments": ("conll2000-segments", {}, 100),                             # stores/segment_perceptron.py
}


@pytest.mark.long
@pytest.mark.parametrize("case", list(COMPILED_TASKS))
def test_the_compiled_epochs_are_the_loop_on_real_data(case):
    """EWT's first-order trees (McDonald's features; Eisner, Chu-Liu-Edmonds), second-order trees (McDonald &
    Pereira's sibling features with first-child parts) and constituency trees (Hall et al.'s surface features with
    inside means), CoNLL-2000's chunk segmentations (the outside label's segments of one word): the compiled epochs
    take the loop's steps bit for bit, unit and decaying steps, plain and loss-augmented (the same scores in the
    models' order of operations, the second-order first-child parts folded in as the model folds them, the losses
    added to the parts as the models' augment adds them, the first best span label on ties, the same decoders,
    psi's additions in add_psi's order; EWT's non-projective gold trees, outside Eisner's space, among the
    sentences)."""
    from ssvm_torch.tasks import load_task
    name, options, n = COMPILED_TASKS[case]
    task = load_task(name, **options)
    model, data = task.model, task.train if n is None else task.train.subset(torch.arange(n))
    w = torch.zeros(model.d, dtype=torch.float64)
    for augmented in (False, True):
        for cfg in (PerceptronConfig(epochs=2, loss_augmented=augmented),
                    PerceptronConfig(epochs=2, loss_augmented=augmented, decay_exponent=0.5, decay_t0=2.0)):
            assert compiled_epoch(model, data, w, w.clone(), cfg, None) is not None
            fast = train_perceptron(model, data, cfg)
            assert_same_run(fast, train_perceptron(model, data, cfg, compiled=False))
            assert fast.history[0]["mistakes"] > fast.history[1]["mistakes"] > 0


def drawn_sibling_instance(first_child, table_max, multiroot):
    """Sentences of 1-9 words with non-projective gold trees among them (always a mistake) under a sibling design
    with or without first-child parts, looked up in dense tables or hashes; a Gaussian start."""
    from conftest import random_sibling_data
    from ssvm_torch.models import SiblingDependencyModel
    rng = np.random.default_rng(11)
    data = random_sibling_data(rng, 30, 12, lmin=1, lmax=9, projective_only=False, table_max=table_max,
                               first_child=first_child)
    model = SiblingDependencyModel(data.n_features, multiroot=multiroot)
    return model, data, torch.tensor(rng.normal(size=model.d))


def conformance_instance(name):
    """(model, data, a Gaussian start) of the conformance suite's instance ``name``."""
    model, data, _, w0 = instance(name, seed=3)
    return model, data, w0


def drawn_gold_outside(second_order):
    """Sentences of 3-9 words with non-projective gold trees among them under a first- or second-order projective
    model, from a start that scores the gold trees' own (nearly unique) features highly: the best projective tree's
    loss-augmented score stays below some non-projective gold tree's, where the oracle returns the gold tree."""
    from conftest import random_dependency_data, random_sibling_data
    from ssvm_torch.models import DependencyModel, SiblingDependencyModel
    rng = np.random.default_rng(5)
    if second_order:
        data = random_sibling_data(rng, 30, 600, lmin=3, lmax=9, projective_only=False, vocab=20)
        model = SiblingDependencyModel(data.n_features)
    else:
        data = random_dependency_data(rng, 30, 600, lmin=3, lmax=9)
        model = DependencyModel(data.n_features)
    idx = torch.arange(data.n)
    w0 = 0.1 * torch.tensor(rng.normal(size=model.d)) + 3.0 * model.phi(data, idx, model.gt_batch(data, idx)).sum(0)
    return model, data, w0


DRAWN_COMPILED = {**{name: partial(conformance_instance, name)
                     for name in ("dependency", "dependency-nonprojective", "constituency",
                                  "constituency-boundary-normalized", "semimarkov", "semimarkov-outside")},
                  "sibling-first-child": partial(drawn_sibling_instance, True, None, False),
                  "sibling-hashed-multiroot": partial(drawn_sibling_instance, False, 0, True),
                  "sibling-adjacent": partial(drawn_sibling_instance, False, None, False),
                  "dependency-gold-outside": partial(drawn_gold_outside, False),
                  "sibling-gold-outside": partial(drawn_gold_outside, True)}


def gold_returned(model, data, w) -> int:
    """How many sentences' loss-augmented oracle at w returns their gold tree from outside the decoder's space."""
    from ssvm_torch.trees.checks import tree_faults
    idx = torch.arange(data.n)
    gold = model.gt_batch(data, idx)
    outside = tree_faults(gold, data.lengths, model.multiroot, model.projective) != 0
    labels, _ = model.oracle(w, data, idx)
    return int((outside & (labels == gold).all(1)).sum())


@pytest.mark.parametrize("case", list(DRAWN_COMPILED))
def test_the_compiled_epochs_are_the_loop_on_drawn_instances(case):
    """The conformance suite's tree, constituency (with and without the inside part, Hamming and normalized
    losses) and semi-Markov instances (real-valued features, with and without an outside label), and drawn
    second-order designs, from a Gaussian start with decaying steps: the loop's run bit for bit, plain and
    loss-augmented (among the trees non-projective gold trees that the oracle returns as they are, scored above every
    projective tree with its loss)."""
    model, data, w0 = DRAWN_COMPILED[case]()
    if case.endswith("gold-outside"):
        assert gold_returned(model, data, w0) >= 3
    for cfg in (PerceptronConfig(epochs=3, decay_exponent=0.5),
                PerceptronConfig(epochs=3, decay_exponent=0.5, loss_augmented=True)):
        assert compiled_epoch(model, data, w0, w0.clone(), cfg, None) is not None
        fast = train_perceptron(model, data, cfg, w0=w0)
        assert_same_run(fast, train_perceptron(model, data, cfg, w0=w0, compiled=False))
        assert fast.history[0]["mistakes"] > 0


@given(st.sampled_from(sorted(STRUCTURES)), st.integers(0, 2 ** 31), st.integers(1, 4), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 0.5, 1.0]))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_drawn_runs_are_the_written_out_perceptron(name, seed, batch_size, loss_augmented, average, kappa):
    """The check above on drawn instances, batch sizes, variants and steps. w0 is Gaussian, but labelings with the
    same features tie whatever w (the boundary-feature constituency model has them): such draws are discarded."""
    model, data, nonneg, w0 = instance(name, seed=seed)
    cfg = PerceptronConfig(epochs=2, batch_size=batch_size, shuffle=False, loss_augmented=loss_augmented,
                           average=average, decay_exponent=kappa)
    run = train_perceptron(model, data, cfg, w0=w0, nonnegative=nonneg)
    try:
        last, avg, mistakes = reference(name, model, data, w0, nonneg, 2, batch_size, loss_augmented, eta=cfg.eta)
    except Tie:
        assume(False)
    assert [r["mistakes"] for r in run.history] == mistakes
    torch.testing.assert_close(run.w_last, last, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(run.w, avg if average else last, rtol=1e-9, atol=1e-9)


def test_a_resumed_run_and_a_warm_start_equal_the_uninterrupted_run(tmp_path):
    rng = np.random.default_rng(5)
    data = random_chain_data(rng, 15, 3, 4, tmin=1, tmax=6)
    model = ChainModel.for_data(data)
    whole = train_perceptron(model, data, PerceptronConfig(epochs=6, batch_size=2, decay_exponent=0.5))
    assert whole.stop_reason == "epochs"
    part = train_perceptron(model, data, PerceptronConfig(epochs=2, batch_size=2, decay_exponent=0.5))
    torch.save(part.state_dict(), tmp_path / "state.pt")                # tensors, numbers and records only
    back = PerceptronResult.from_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    resumed = train_perceptron(model, data, PerceptronConfig(epochs=6, batch_size=2, decay_exponent=0.5),
                               resume=back)
    for a, b in ((resumed.w, whole.w), (resumed.w_last, whole.w_last), (resumed.lagged, whole.lagged)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [r["mistakes"] for r in resumed.history] == [r["mistakes"] for r in whole.history]
    warm = StructuredPerceptron(epochs=2, batch_size=2, decay_exponent=0.5, warm_start=True)
    for _ in range(3):
        warm.fit(data)
    torch.testing.assert_close(warm.coef_, whole.w, rtol=0, atol=0)
    assert warm.n_iter_ == 6
    cold = StructuredPerceptron(epochs=2, batch_size=2, decay_exponent=0.5).fit(data).fit(data)
    assert cold.n_iter_ == 2                                           # without warm_start a fit starts afresh
    with pytest.raises(SSVMInputError, match="w0: expected None when a run is resumed"):
        train_perceptron(model, data, PerceptronConfig(epochs=3), w0=torch.zeros(model.d), resume=part)
    with pytest.raises(SSVMInputError, match="resume: expected a perceptron state"):
        PerceptronResult.from_state_dict({"w": whole.w})
    with pytest.raises(SSVMInputError, match=r"resume: expected the settings of the resumed run \(batch_size, seed"):
        train_perceptron(model, data, PerceptronConfig(epochs=6, batch_size=3, decay_exponent=0.5, seed=1),
                         resume=back)
    moved = StructuredPerceptron(epochs=1, warm_start=True).fit(data).set_params(average=False)
    with pytest.raises(SSVMInputError, match="resume: expected the settings of the resumed run \\(average"):
        moved.fit(data)


def test_partial_fit_learns_online_one_epoch_per_call():
    rng = np.random.default_rng(6)
    X = [rng.normal(size=(int(rng.integers(1, 6)), 4)) for _ in range(30)]
    Y = [np.array(["b", "c"])[rng.integers(0, 2, size=len(x))] for x in X]
    Y[20][0] = "a"                                                     # a tag the first chunk never shows
    online = StructuredPerceptron(shuffle=False)
    online.partial_fit(X[:10], Y[:10], classes=["a", "b", "c"])
    online.partial_fit(X[10:], Y[10:])
    assert online.n_iter_ == 2 and list(online.classes_) == ["a", "b", "c"]
    # the same as one pass over the stream in order: a run on all 30 examples with one step each
    batch = StructuredPerceptron(shuffle=False, epochs=1).fit(X, Y)
    torch.testing.assert_close(online.coef_last_, batch.coef_last_, rtol=0, atol=0)
    steps = online.state_.steps
    assert steps == 30
    with pytest.raises(SSVMInputError, match=r"Y\[0\]: expected labels among classes_"):
        online.partial_fit(X[:2], [np.full(len(X[0]), "z"), Y[1]])
    fresh = StructuredPerceptron(shuffle=False).partial_fit(X[:10], Y[:10])
    with pytest.raises(SSVMInputError, match="expected labels among classes_"):
        fresh.partial_fit(X[20:21], Y[20:21])                          # "a" was never declared


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("emission", ["label-major", "feature-major"])
def test_the_chains_sparse_update_is_the_dense_psi(sparse, emission):
    rng = np.random.default_rng(7)
    data = random_chain_data(rng, 6, 4, 5, tmin=1, tmax=5)
    if sparse:
        X = data.X * torch.tensor(rng.uniform(size=data.X.shape) < 0.5)
        data = ChainData(X.to_sparse_csr(), data.Y, data.offsets, data.n_states)
    model = ChainModel.for_data(data, emission=emission)
    idx = torch.tensor([4, 0, 2, 5])
    labels = model.predict(torch.tensor(rng.normal(size=model.d)), data, idx)
    coefs = (torch.tensor([0.5, -2.0, 0.0, 1.0], dtype=torch.float64), torch.tensor([3.0, 1.0, 7.0, 0.0]))
    targets = (torch.tensor(rng.normal(size=model.d)), torch.zeros(model.d, dtype=torch.float64))
    expected = [t + c.double() @ model.psi(data, idx, labels) for t, c in zip(targets, coefs)]
    model.add_psi(targets, data, idx, labels, coefs)
    for t, e in zip(targets, expected):
        torch.testing.assert_close(t, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_the_edge_feature_chains_sparse_update_is_the_dense_psi(seed):
    from test_conformance import edge_chain
    rng = np.random.default_rng(seed)
    model, data, _ = edge_chain(rng)
    idx = torch.tensor(rng.permutation(data.n)[:3])
    labels = torch.tensor(rng.integers(0, model.K, size=(3, int(data.lengths.max()))))   # unsupported pairs too
    coefs = (torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64), torch.tensor([0.0, 4.0, 1.0], dtype=torch.float64))
    targets = (torch.tensor(rng.normal(size=model.d)), torch.zeros(model.d, dtype=torch.float64))
    expected = [t + c @ model.psi(data, idx, labels) for t, c in zip(targets, coefs)]
    model.add_psi(targets, data, idx, labels, coefs)
    for t, e in zip(targets, expected):
        torch.testing.assert_close(t, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_edge_feature_chain_is_the_written_out_perceptron(seed):
    """Chains with edge-observation features (no padded oracle: their plain decoding is the edge Viterbi on the
    subset, EdgeChainModel.predict; at batch size 1 the compiled epochs) against the reference over every tag
    sequence; the loss-augmented variant at batch size 1 too (compiled only), refused by name in batches (the
    loop needs the padded oracle)."""
    from test_conformance import edge_chain
    model, data, _ = edge_chain(np.random.default_rng(seed))
    w0 = torch.tensor(np.random.default_rng(seed + 10).normal(size=model.d))
    for batch_size in (1, 3):
        cfg = PerceptronConfig(epochs=3, batch_size=batch_size, shuffle=False)
        run = train_perceptron(model, data, cfg, w0=w0)
        last, avg, mistakes = reference("chain", model, data, w0, None, 3, batch_size, False)
        assert [r["mistakes"] for r in run.history] == mistakes
        torch.testing.assert_close(run.w_last, last, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(run.w, avg, rtol=1e-9, atol=1e-9)
    cfg = PerceptronConfig(epochs=3, shuffle=False, loss_augmented=True)
    run = train_perceptron(model, data, cfg, w0=w0)
    last, avg, mistakes = reference("chain", model, data, w0, None, 3, 1, True)
    assert [r["mistakes"] for r in run.history] == mistakes and sum(mistakes) > 0
    torch.testing.assert_close(run.w_last, last, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(run.w, avg, rtol=1e-9, atol=1e-9)
    with pytest.raises(SSVMInputError, match="scores: a chain with edge-observation features"):
        train_perceptron(model, data, PerceptronConfig(epochs=1, loss_augmented=True, batch_size=2))


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_every_models_update_is_the_dense_psi(name):
    """StructuredModel.add_psi and its sparse overrides (chains, dependency and second-order trees) add
    coefs @ psi to each target, for the labelings a random w decodes on a drawn batch."""
    model, data, nonneg, _ = instance(name, seed=4)
    rng = np.random.default_rng(4)
    idx = torch.tensor(rng.permutation(data.n)[:3])
    w = torch.tensor(rng.normal(size=model.d))
    if nonneg is not None:
        w[nonneg] = w[nonneg].abs()
    labels = model.predict(w, data, idx)
    coefs = (torch.tensor(rng.normal(size=3)), torch.tensor(rng.normal(size=3)))
    targets = (torch.tensor(rng.normal(size=model.d)), torch.zeros(model.d, dtype=torch.float64))
    expected = [t + c @ model.psi(data, idx, labels).double() for t, c in zip(targets, coefs)]
    model.add_psi(targets, data, idx, labels, coefs)
    for t, e in zip(targets, expected):
        torch.testing.assert_close(t, e, rtol=1e-12, atol=1e-12)


def test_early_stopping_keeps_the_best_epoch_on_held_out_training_examples(ocr):
    train, test = ocr
    est = StructuredPerceptron(epochs=30, early_stopping=True, validation_fraction=0.2, n_iter_no_change=2).fit(train)
    losses = [r["validation_loss"] for r in est.history_]
    assert est.stop_reason_ in ("no improvement", "separated") and len(losses) < 30
    assert est.best_epoch_ == 1 + int(np.argmin(losses))
    assert all(v > min(losses) for v in losses[est.best_epoch_:])          # no later epoch did as well
    # the returned point is the best epoch's: rerunning that many epochs on the same 160 words gives it
    keep = np.sort(np.random.default_rng(0).permutation(200)[40:])
    again = StructuredPerceptron(epochs=est.best_epoch_).fit(train.subset(torch.as_tensor(keep)))
    torch.testing.assert_close(est.coef_, again.coef_, rtol=0, atol=0)
    assert 1 - est.score(test) < 0.4
    for field, value in (("validation_fraction", 1.0), ("n_iter_no_change", 0), ("early_stopping", "yes")):
        with pytest.raises(SSVMInputError, match=field):
            StructuredPerceptron(**{"early_stopping": True, field: value}).fit(train)
