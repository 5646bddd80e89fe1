"""The latent SSVM for semi-Markov segmentations (ssvm_torch/latent.py with models/semimarkov.py): CCCP's objective
non-increasing and equal to its enumeration over all segmentations (the loss counted at the observed positions,
the concave part the best segmentation agreeing with them), the letter-wise start, refusals, and a run on
CoNLL-2000 chunks with half the states hidden."""
import numpy as np
import pytest
import torch

from conftest import all_segmentations, random_segment_data
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import hide_labels, latent_objective, letter_start, train_latent
from ssvm_torch.models import SemiMarkovModel
from ssvm_torch.segments.convert import segment_states
from ssvm_torch.segments.scoring import score
from ssvm_torch.solvers import SolverConfig


def partial(seed, n=8, fraction=0.4):
    rng = np.random.default_rng(seed)
    data = random_segment_data(rng, n, 3, 3, 4, tmin=1, tmax=6, outside=0, sparse=True)
    return SemiMarkovModel.for_data(data, max_length=3, outside=0), hide_labels(data, fraction, seed)


def brute_objective(model, data, lam, w):
    """J(w) = lam/2 ||w||^2 + 1/n sum_i [max_y s(y) + Delta_i(y) - max_{h agreeing} s(h)] by enumeration."""
    S, lengths, first, last, trans = model.scores(w, data, torch.arange(data.n))
    total = 0.0
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        T, seen, gold = e - s, data.observed[s:e], data.Y[s:e]
        c = 1.0 / T if model.loss_name == "normalized" else 1.0
        aug = agree = -np.inf
        for seg in all_segmentations(T, model.K, model.L, model.outside):
            seg = torch.tensor([seg])
            states = segment_states(seg, torch.tensor([T]), model.K)[0]
            v = float(score(S[i:i + 1, :T], first, last, trans, seg, torch.tensor([T]))[0])
            wrong = ((states % model.K != gold % model.K) | ((states < model.K) != (gold < model.K))) & seen
            aug = max(aug, v + c * float(wrong.sum()))
            if torch.equal(states[seen], gold[seen]):
                agree = max(agree, v)
        total += aug - agree
    return 0.5 * lam * float(w @ w) + total / data.n


@pytest.mark.parametrize("inner", [dict(step="pairwise", cache=True), dict(solver="cutting-plane")],
                         ids=["bcpfw-cache", "cutting-plane"])
def test_cccp_objective_never_increases_and_equals_enumeration(inner):
    model, data = partial(3)
    assert data.partial
    lam = 0.1
    w, records = train_latent(model, data, lam, SolverConfig(passes=40, gap_check=10, seed=0, **inner), max_outer=5)
    objectives = [r["objective"] for r in records]
    assert len(records) >= 2 and all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert records[1]["objective"] < records[0]["objective"]
    assert brute_objective(model, data, lam, w) == pytest.approx(objectives[-1], abs=1e-9)
    J, labels = latent_objective(model, data, lam, w)
    assert J == pytest.approx(objectives[-1], abs=1e-12)
    assert torch.equal(labels[data.observed], data.Y[data.observed])


def test_letter_start_scores_each_segment_by_its_positions_states():
    """The start from the observed positions' state classifier v (2K classes): every segment (t, l, k) scores
    v[k] . x_t + sum_{j in t+1..t+l} v[K + k] . x_j, the BIO tagger's scores of its positions."""
    from ssvm_torch.latent import observed_positions
    from ssvm_torch.models import ChainModel
    model, data = partial(4)
    w = letter_start(model, data, 0.1)
    W, first, last, trans, lengths = model.split(w)
    assert W[:, 2 * model.K:].abs().sum() == 0 and W[:, :2 * model.K].abs().sum() > 0
    assert first.abs().sum() == last.abs().sum() == trans.abs().sum() == lengths.abs().sum() == 0
    chain = ChainModel(model.n_features, 2 * model.K, emission="feature-major")
    v = letter_start(chain, data, 0.1)[:chain.K * chain.F].view(chain.F, 2 * model.K)
    X = torch.cat([data.X.to_dense(), torch.ones(data.X.shape[0], 1, dtype=torch.float64)], 1)
    S = model.scores(w, data, torch.tensor([0]))[0][0]
    T = int(data.lengths[0])
    for t in range(T):
        for l in range(min(model.L, T - t)):
            for k in range(model.K):
                if k == model.outside and l > 0:
                    continue
                expect = X[t] @ v[:, k] + sum(X[j] @ v[:, model.K + k] for j in range(t + 1, t + l + 1))
                assert float(S[t, l, k]) == pytest.approx(float(expect), abs=1e-10)
    assert observed_positions(data).n == int(data.observed.sum())


def test_refusals_name_the_field():
    model, data = partial(5)
    bad = data.Y.clone()
    first_rows = data.offsets[:-1]
    seen_first = first_rows[data.observed[first_rows]]
    bad[seen_first[0]] = model.K + 1                    # an observed state going on a segment at a row's start
    from ssvm_torch.latent import with_labels
    with pytest.raises(SSVMInputError, match="position 0: the observed state"):
        model.check_data(with_labels(data, bad))
    with pytest.raises(SSVMInputError, match="max_length: expected an int for partially observed data"):
        SemiMarkovModel.for_data(data)
    # an inner solver the segment store cannot run is refused before the letter-wise start (one row's store)
    calls = []
    with pytest.raises(SSVMInputError, match="solver: 'eg' needs a store with marginal moves"):
        train_latent(model, data, 0.1, SolverConfig(solver="eg"), progress=calls.append)
    assert calls == []


@pytest.mark.long
def test_cccp_on_conll_chunks_with_half_the_states_hidden():
    """CoNLL-2000 chunks as segments, 150 training sentences, half the states hidden: CCCP lowers the objective
    from the letter-wise start, and its model's chunk F1 on the test file is within reach of the fully
    observed model's."""
    from ssvm_torch.tasks import load_task
    task = load_task("conll2000-segments", train_size=150, features="p[-1] p[0] p[1] w[0]")
    data = hide_labels(task.train, 0.5, 0)
    cfg = SolverConfig(passes=20, gap_check=10, step="pairwise", cache=True, seed=0)
    w, records = train_latent(task.model, data, 0.01, cfg, max_outer=3)
    assert records[-1]["objective"] < records[0]["objective"]
    full = train_latent(task.model, task.train, 0.01, cfg, max_outer=1, w0=None)[0]
    f1 = task.evaluate(w)["test_f1"]
    assert f1 > task.evaluate(full)["test_f1"] - 10.0 and f1 > 60.0


@pytest.mark.long
def test_ssvm_train_hide_labels_trains_conll_segments(tmp_path):
    """``ssvm-train --dataset conll2000-segments --hide-labels``: the run's hidden positions are the seed's,
    latent.json's objective never increases, and the saved model's chunk F1 is what its record says."""
    import json
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_model
    from ssvm_torch.tasks import load_task
    out = tmp_path / "run"
    assert main(["--dataset", "conll2000-segments", "--train-size", "80", "--features", "p[-1] p[0] p[1]", "--lam",
                 "0.01", "--hide-labels", "0.5", "--hide-seed", "2", "--step", "pairwise", "--cache", "--passes", "10",
                 "--gap-check", "10", "--latent-outer", "2", "--quiet", "--out", str(out)]) == 0
    hidden = json.loads((out / "hidden.json").read_text())
    task = load_task("conll2000-segments", train_size=80, features="p[-1] p[0] p[1]")
    assert hidden["hidden"] == torch.nonzero(~hide_labels(task.train, 0.5, 2).observed)[:, 0].tolist()
    records = json.loads((out / "latent.json").read_text())
    objectives = [r["objective"] for r in records]
    assert all(b <= a for a, b in zip(objectives, objectives[1:])) and objectives[-1] < objectives[0]
    w = load_model(out / "model.pt")["w"].to(torch.float64)
    assert task.evaluate(w)["test_f1"] == pytest.approx(records[-1]["test_f1"], abs=1e-9)
