"""Property test of the solvers on tiny chain problems drawn by hypothesis: 1-6 sequences of 1-4 positions, 1-3
labels (one label: every loss is 0), Gaussian, binary, all-zero (every direction has norm 0) or duplicated
features, lambda from 1e-4 to 100, and every solver with its options (sampling, steps, caching, mini-batches,
averaging, gap checks every half pass to every two). Every record is finite with a gap >= 0 (SSG records none),
and FW / BCFW's last gap and dual equal the primal (1) and dual (3) recomputed from scratch with the loss-augmented
decoding by enumeration (tests/test_solvers.py)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import random_chain_data
from ssvm_torch import ChainModel, SolverConfig, make_store
from ssvm_torch.data.types import ChainData
from ssvm_torch.solvers.make import make_solver
from test_solvers import independent_primal_dual_chain


@st.composite
def problems(draw):
    """(ChainData, lambda, SolverConfig fields)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    n, K, F = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    features = draw(st.sampled_from(["normal", "binary", "zeros", "duplicated"]))
    data = random_chain_data(rng, n, K, F, tmin=1, tmax=4, binary=features == "binary")
    if features in ("zeros", "duplicated"):
        xs = [data.X[s:e].numpy() for s, e in zip(data.offsets[:-1].tolist(), data.offsets[1:].tolist())]
        ys = [data.Y[s:e].numpy() for s, e in zip(data.offsets[:-1].tolist(), data.offsets[1:].tolist())]
        xs, ys = ([np.zeros_like(x) for x in xs], ys) if features == "zeros" else (xs + xs, ys + ys)
        data = ChainData.from_sequences(xs, ys, K)
    solver = draw(st.sampled_from(["bcfw", "fw", "ssg", "eg", "deg", "cutting-plane"]))
    config = dict(solver=solver, sampling=draw(st.sampled_from(["uniform", "perm", "gap"])),
                  passes=draw(st.sampled_from([1, 3, 6])), gap_check=draw(st.sampled_from([0.5, 1, 2])),
                  averaging=solver in ("bcfw", "ssg") and draw(st.booleans()), seed=draw(st.integers(0, 5)))
    if solver == "bcfw":
        config.update(step=draw(st.sampled_from(["fw", "pairwise", "away", "best"])), cache=draw(st.booleans()),
                      recompute_every=draw(st.sampled_from([1, 10])))
        if config["step"] == "fw" and not config["cache"]:           # mini-batches move along the joint FW direction
            config["batch_size"] = draw(st.integers(1, data.n))
    return data, draw(st.sampled_from([1e-4, 1e-2, 1.0, 100.0])), config


@given(problems())
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_solver_certifies_what_it_reports(problem):
    data, lam, config = problem
    model = ChainModel.for_data(data)
    store = make_store(model, data, lam)
    history = make_solver(store, SolverConfig(**config)).run()
    assert history
    for record in history:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float)), record
        if config["solver"] == "ssg":
            assert record.get("gap") is None                        # no dual: nothing to certify
            continue
        assert record["gap"] >= -1e-9 * max(1.0, abs(record["primal"])), record
    if config["solver"] in ("bcfw", "fw"):
        primal, dual = independent_primal_dual_chain(model, data, store, lam, brute=True)
        last = history[-1]
        assert abs(last.get("gap_last", last["gap"]) - (primal - dual)) <= 1e-8 * max(1.0, abs(primal))
        assert abs(last["dual"] - dual) <= 1e-8 * max(1.0, abs(dual))

