"""Assignment oracle = enumeration of all one-to-one alignments with NULL; targets and AER by
hand; the Hansards data as documented; learned alignments beat the Dice heuristic."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.data.hansards import SentencePair, aer, load_hansards
from ssvm_torch.data import PairData
from ssvm_torch.data.examples import best_one_to_one
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.models.matching import MatchingModel
from ssvm_torch.oracles.assignment import assign
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store


def alignments(m, n):
    """Every one-to-one partial alignment a (m,) with values in -1..n-1."""
    for a in itertools.product(range(-1, n), repeat=m):
        used = [j for j in a if j >= 0]
        if len(used) == len(set(used)):
            yield np.array(a)


def value(a, S, se, sf):
    n = S.shape[1]
    aligned = {int(j) for j in a if j >= 0}
    return (sum(S[i, j] for i, j in enumerate(a) if j >= 0) + sum(se[i] for i, j in enumerate(a) if j < 0)
            + sum(sf[j] for j in range(n) if j not in aligned))


def test_assignment_equals_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(60):
        m, n = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        S, se, sf = rng.normal(size=(m, n)), rng.normal(size=m), rng.normal(size=n)
        a = assign(S, se, sf)
        best = max(value(b, S, se, sf) for b in alignments(m, n))
        assert value(a, S, se, sf) == pytest.approx(best, abs=1e-12)
        used = a[a >= 0]
        assert len(set(used.tolist())) == len(used)


def random_model(rng, n_ex=4):
    X, Ne, Nf, T = [], [], [], []
    for _ in range(n_ex):
        m, n = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        X.append(torch.tensor(rng.normal(size=(m, n, 3))))
        Ne.append(torch.tensor(rng.normal(size=(m, 2))))
        Nf.append(torch.tensor(rng.normal(size=(n, 2))))
        T.append(next(itertools.islice(alignments(m, n), int(rng.integers(0, 5)), None)))
    data = PairData(X, Ne, Nf, T)
    return MatchingModel.for_data(data), data


def test_loss_augmented_oracle_equals_enumeration():
    rng = np.random.default_rng(1)
    model, data = random_model(rng)
    for _ in range(5):
        w = torch.tensor(rng.normal(size=model.d)) * 3
        labels, H = model.oracle(w, data, torch.arange(data.n))
        for k in range(data.n):
            m, n = data.X[k].shape[:2]
            cands = list(alignments(m, n))
            vals = [model.loss(data, [k], torch.tensor(a)) - model.psi(data, [k], torch.tensor(a)) @ w for a in cands]
            assert float(H[k]) == pytest.approx(float(max(vals)), abs=1e-10)
        assert torch.allclose(model.loss(data, torch.arange(data.n), labels), torch.stack(
            [model.loss(data, [k], labels[k]) for k in range(data.n)]).reshape(-1))


def test_targets_loss_and_aer_by_hand():
    a = best_one_to_one(3, 3, sure={(0, 0), (1, 1)}, probable={(0, 0), (1, 1), (1, 2), (2, 1)})
    assert a.tolist() == [0, 1, -1]                     # (1, 1) is sure: it wins over (2, 1)
    model, data = random_model(np.random.default_rng(2))
    for k in range(data.n):
        assert float(model.loss(data, [k], model.gt(data, k))) == 0.0
    p = SentencePair(1, ["a", "b", "c"], ["x", "y", "z"], {(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 2)})
    # A = {(0,0), (2,2), (1,2)}: |A&S| = 1, |A&P| = 2 -> AER = 1 - 3/5
    r = aer([p], [{(0, 0), (2, 2), (1, 2)}])
    assert r["aer"] == pytest.approx(0.4) and r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(0.5)


def test_bad_targets_are_refused():
    X, Ne, Nf = [torch.zeros(2, 2, 3)], [torch.zeros(2, 2)], [torch.zeros(2, 2)]
    with pytest.raises(SSVMInputError, match="one-to-one"):
        PairData(X, Ne, Nf, [np.array([1, 1])])
    with pytest.raises(SSVMInputError, match="targets"):
        PairData(X, Ne, Nf, [np.array([0, 5])])


@pytest.fixture(scope="module")
def hansards():
    return load_hansards()


def test_hansards_data_as_documented(hansards):
    train, test = hansards
    assert len(train) == 237 and len(test) == 247
    everything = [p for p in train + test if p.snum <= 447]
    assert len(everything) == 447
    assert sum(len(p.sure) for p in everything) == 4038
    assert sum(len(p.probable) for p in everything) == 17438
    assert all(p.edge.shape[:2] == (len(p.e), len(p.f)) for p in train + test)


def test_learned_alignment_beats_the_dice_heuristic(hansards):
    train, test = hansards
    data = PairData.from_pairs(train)
    model = MatchingModel.for_data(data)
    dual = make_store(model, data, 1e-3)
    Solver(dual, SolverConfig(passes=6, gap_check=3)).run()
    learned = aer(test, model.links(dual.w, PairData.from_pairs(test)))
    dice = [{(i, int(p.edge[i, :, 1].argmax())) for i in range(len(p.e)) if float(p.edge[i, :, 1].max()) > 0.3}
            for p in test]                              # each English word to its best-Dice French word
    baseline = aer(test, dice)
    assert learned["aer"] < 0.25 and learned["aer"] < baseline["aer"] - 0.05


def test_cli_hansards(tmp_path):
    import json

    from ssvm_torch.cli.train import main
    assert main(["--dataset", "hansards", "--lam", "1e-3", "--train-size", "60", "--passes", "2", "--gap-check", "1",
                 "--quiet", "--out", str(tmp_path)]) == 0
    last = json.loads((tmp_path / "history.json").read_text())[-1]
    assert {"test_error", "test_precision", "test_recall"} <= set(last) and last["test_error"] < 0.4
    assert torch.load(tmp_path / "model.pt")["feature_layout"]["kind"] == "MatchingModel"
