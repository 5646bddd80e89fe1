"""The exact MAP of graphs with cycles (oracles/local_polytope.py's ``solve_exact``: branch and bound over the
local polytope LP; ``GraphCRFModel(inference="exact")``): equal to enumeration where the LP is fractional and where
it is not, the exact SSVM's certified primal equal to the enumerating model's, and the relaxation's value above it."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data import GraphData, GraphExample
from ssvm_torch.models import GraphCRFModel
from ssvm_torch.models.graph_crf import enumerate_map
from ssvm_torch.oracles.local_polytope import solve_exact, solve_graph


def value(tn, te, edges, y):
    return tn[np.arange(len(y)), y].sum() + te[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum()


@pytest.mark.parametrize("K", [2, 3, 4])
def test_branch_and_bound_is_the_enumerated_maximum(K):
    rng = np.random.default_rng(K)
    fractional = 0
    for trial in range(60):
        N = int(rng.integers(3, 8))
        pairs = np.array(list(itertools.combinations(range(N), 2)))
        edges = pairs[rng.random(len(pairs)) < 0.7]
        edges = edges if len(edges) else pairs[:1]
        # weak unaries and repulsive edges (equal states cost 2): frustrated cycles, where the LP goes fractional
        tn, te = 0.3 * rng.standard_normal((N, K)), rng.standard_normal((len(edges), K, K)) - 2.0 * np.eye(K)
        y = solve_exact(tn, te, edges)
        best = enumerate_map(tn, te, edges)[0].argmax(1)
        assert value(tn, te, edges, y) == pytest.approx(value(tn, te, edges, best), abs=1e-9)
        mu_n, mu_e, integral = solve_graph(tn, te, edges, False)
        relaxed = (mu_n * tn).sum() + (mu_e * te).sum()
        assert relaxed >= value(tn, te, edges, y) - 1e-9
        fractional += not integral
    assert fractional >= 10, fractional                 # the branching is exercised, not only integral LPs


@pytest.mark.long
def test_exact_model_oracle_equals_enumeration_and_its_ssvm_the_enumerating_one():
    rng = np.random.default_rng(5)
    graphs = []
    for _ in range(6):
        N = int(rng.integers(4, 7))
        edges = np.array(list(itertools.combinations(range(N), 2)))
        graphs.append(GraphExample(rng.standard_normal((N, 3)), edges, rng.standard_normal((len(edges), 2)),
                                   rng.integers(0, 3, N)))
    data = GraphData(graphs, n_states=3)
    exact, enum = (GraphCRFModel.for_data(data, inference=i) for i in ("exact", "enumerate"))
    for trial in range(3):
        w = torch.as_tensor(10.0 * rng.standard_normal(exact.d))
        for i in range(data.n):
            idx = torch.tensor([i])
            (y, h), (_, h_ref) = exact.oracle(w, data, idx), enum.oracle(w, data, idx)
            assert float(h[0]) == pytest.approx(float(h_ref[0]), abs=1e-10)
            assert not bool(((y > 1e-9) & (y < 1 - 1e-9)).any())
    cfg = SolverConfig(passes=300, gap_check=10, seed=0, step="pairwise", cache=True, gap_threshold=1e-6)
    runs = [Solver(make, cfg).run()[-1] for make in (exact_store(exact, data), exact_store(enum, data))]
    for r in runs:
        assert r["gap"] <= 1e-6
    assert abs(runs[0]["primal"] - runs[1]["primal"]) <= runs[0]["gap"] + runs[1]["gap"] + 1e-9
    relaxed = Solver(exact_store(GraphCRFModel.for_data(data), data), cfg).run()[-1]
    # the relaxed SSVM's primal maximizes over more labelings: at any w at least the exact one's, so its value is
    # at least the exact SSVM's optimum, which is at least the exact dual
    assert relaxed["primal"] >= runs[0]["dual"] - 1e-9


def exact_store(model, data):
    from ssvm_torch.stores import make_store
    return make_store(model, data, 0.05)


@pytest.mark.long
def test_ssvm_train_graph_inference_trains_the_exact_ssvm_on_scene(tmp_path, capsys):
    """``ssvm-train --dataset scene-graph --graph-inference exact``: the exact SSVM (no fractional test optimum, the
    model file says so, config.json records it) with the records of enumeration's run; refused on other tasks."""
    import json

    from ssvm_torch import SSVMInputError, load_task
    from ssvm_torch.cli.train import main
    runs = {}
    for inference in ("exact", "enumerate"):
        out = tmp_path / inference
        assert main(["--dataset", "scene-graph", "--train-size", "40", "--lam", "0.01", "--passes", "3",
                     "--gap-check", "1", "--graph-inference", inference, "--out", str(out)]) == 0
        runs[inference] = json.loads((out / "history.json").read_text())
        assert json.loads((out / "config.json").read_text())["inference"] == inference
        assert torch.load(out / "model.pt", weights_only=True)["feature_layout"]["inference"] == inference
    capsys.readouterr()
    assert runs["exact"][-1]["test_fractional"] == 0.0
    for a, b in zip(runs["exact"], runs["enumerate"]):     # an exact oracle each: the same certified objective
        assert abs(a["primal"] - b["primal"]) <= 1e-9 + 2 * max(a["gap"], b["gap"])
    with pytest.raises(SSVMInputError, match="inference: only for the graph tasks"):
        load_task("ocr-small", inference="exact")
    with pytest.raises(SSVMInputError, match="inference: expected one of"):
        load_task("scene-graph", train_size=5, inference="qpbo")
