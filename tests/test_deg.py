"""The dual extragradient's adaptive step (solvers/deg.py): the Bregman divergence its test reads,
against brute force over all labelings, and the backtracking on a step far beyond the safe one."""
import itertools

import numpy as np
import pytest
import torch

from conftest import chain_score, random_chain_data
from ssvm_torch import ChainModel, SolverConfig, make_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.solvers import make_solver
from test_other_solvers import optimum, tiny_problem


def gibbs(pots, s, e):
    """log p(y) of every labeling of the positions s:e under the log-potentials (U, first, last, trans)."""
    U, first, last, trans = (t.numpy() for t in pots[:4])
    ys = list(itertools.product(range(U.shape[1]), repeat=e - s))
    scores = np.array([chain_score(U[s:e], first, last, trans, y) for y in ys])
    return scores - np.logaddexp.reduce(scores)


def test_chain_divergence_is_the_kl_of_the_gibbs_distributions():
    rng = np.random.default_rng(0)
    data = random_chain_data(rng, 4, 3, 4, tmin=1, tmax=3)
    d = make_store(ChainModel.for_data(data), data, 0.1)
    center = d.prox_center()
    gen = torch.Generator().manual_seed(1)

    def step():
        return tuple(3 * torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in center)
    z_a, A = d.prox(center, step())
    _, B = d.prox(center, step())
    kl, err = d.relaxed_divergence(z_a, A, B)
    offsets = data.offsets.tolist()
    brute = 0.0
    for i in range(len(offsets) - 1):
        log_p, log_q = gibbs(A, offsets[i], offsets[i + 1]), gibbs(B, offsets[i], offsets[i + 1])
        brute += float((np.exp(log_p) * (log_p - log_q)).sum())
    assert brute > 0.1
    assert abs(kl - brute) < 1e-10 and 0 < err < 1e-9
    assert abs(d.relaxed_divergence(z_a, A, A)[0]) < 1e-12          # D(z, z) = 0


def test_deg_backtracks_from_a_step_far_beyond_the_safe_one():
    """A first step 10^5 x the theorem's: tries are refused (each counted as 2 passes), the averaged
    iterate still converges and its certificate bounds the true suboptimality at every record."""
    model, data = tiny_problem()
    p_star, _ = optimum(model, data, 1.0)
    s = make_solver(make_store(model, data, 1.0), SolverConfig(solver="deg", sampling="perm", passes=400,
                                                                gap_check=100, step_size=1e5))
    hist = s.run()
    assert hist[-1]["backtracks"] > 0
    assert hist[-1]["passes"] == 2 * (hist[-1]["iterations"] + hist[-1]["backtracks"])
    assert hist[-1]["step_z"] < 0.1 * hist[0]["step_z"]            # the step came down to what the test accepts
    assert all(r["gap"] >= r["primal"] - p_star - 1e-12 and r["dual"] <= p_star + 1e-12 for r in hist)
    assert hist[-1]["primal"] - p_star < 0.1 * (hist[0]["primal"] - p_star) and hist[-1]["gap"] < hist[1]["gap"]


def test_a_deg_checkpoint_without_the_adaptive_step_is_refused_by_name():
    model, data = tiny_problem()
    s = make_solver(make_store(model, data, 1.0), SolverConfig(solver="deg", passes=4, gap_check=2))
    s.run()
    state = s.state_dict()
    del state["method"]["eta"]
    fresh = make_solver(make_store(model, data, 1.0), SolverConfig(solver="deg", passes=8, gap_check=2))
    with pytest.raises(SSVMInputError, match=r"missing \['eta'\]"):
        fresh.load_state_dict(state)


def test_deg_model_point_is_the_best_primal_point_the_run_certified():
    """The records' primal is the lowest of P(0), P(w_bar) and P(w(z_bar)) over the checks so far
    (monotone, never above P(0)), and it is the objective at the point model_point returns."""
    model, data = tiny_problem()
    d = make_store(model, data, 0.1)
    s = make_solver(d, SolverConfig(solver="deg", sampling="perm", passes=40, gap_check=2, step_size=1e3))
    hist = s.run()
    best = d.primal_at(torch.zeros_like(d.w))
    moved = 0
    for r in hist:
        best = min(best, r["primal_avg"], r["primal_z"])
        assert r["primal"] == best and r["gap"] == r["primal"] - r["dual"]
        moved += r["model_passes"] == r["passes"]
    assert [r["primal"] for r in hist] == sorted((r["primal"] for r in hist), reverse=True)
    assert moved >= 2 and any(r["primal_avg"] > r["primal"] for r in hist)   # the safeguard mattered
    assert abs(d.primal_at(s.model_point()[0]) - hist[-1]["primal"]) < 1e-12
