"""Warm-started BCFW after a feature change (ssvm_torch.deep.warm): the dual stays feasible, its gap
equals an independent primal - dual computed by enumeration, and BCFW phases lower the gap."""
import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from ssvm_torch.data.types import ChainData
from ssvm_torch.deep.warm import warm_start, with_features
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.solvers.loop import Solver, SolverConfig
from ssvm_torch.stores import make_store

K = 3


def tiny_problem(seed, n=6, F=4):
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 1, 2, 3, 2, 1][:n]
    N = sum(lengths)
    X = torch.randn(N, F, generator=g, dtype=torch.float64)
    Y = torch.randint(K, (N,), generator=g)
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]))
    return ChainData(X, Y, offsets, K)


def statistics(y):
    """(one-hot (T, K), transition counts (K, K) [next, prev]) of one labeling."""
    oh = np.eye(K)[list(y)]
    tc = np.zeros((K, K))
    for t in range(len(y) - 1):
        tc[y[t + 1], y[t]] += 1
    return oh, tc


def in_hull(Mu_i, Mt_i, ell_i, gt):
    """Whether (Mu_i, Mt_i, ell_i) = sum_y alpha(y) (S(y), L(y)) for some alpha in the simplex (an LP)."""
    T = len(gt)
    cols = []
    for y in itertools.product(range(K), repeat=T):
        oh, tc = statistics(y)
        loss = sum(a != b for a, b in zip(y, gt)) / T
        cols.append(np.concatenate([oh.ravel(), tc.ravel(), [loss, 1.0]]))
    A = np.array(cols).T
    b = np.concatenate([Mu_i.ravel(), Mt_i.ravel(), [ell_i, 1.0]])
    res = linprog(np.zeros(A.shape[1]), A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    return res.status == 0


def brute_primal_dual(model, data, lam, Mu, Mt, ell):
    """Objective (1) and dual (3) from scratch: w from the block statistics and the dense joint
    feature map, H_i by enumerating every labeling."""
    n = data.n
    Xc = model.features(data)
    w = torch.zeros(model.d, dtype=torch.float64)
    H = 0.0
    for i in range(n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        phi_gt = model.joint_feature(Xc[s:e], data.Y[s:e])
        m = torch.zeros(model.d, dtype=torch.float64)
        W, first, last, trans = model.split(m)
        W.copy_(Mu[s:e].T @ Xc[s:e])
        first.copy_(Mu[s])
        last.copy_(Mu[e - 1])
        trans.copy_(Mt[i])
        w += (phi_gt - m) / (lam * n)
    for i in range(n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        phi_gt = model.joint_feature(Xc[s:e], data.Y[s:e])
        best = -np.inf
        for y in itertools.product(range(K), repeat=e - s):
            y = torch.tensor(y)
            loss = float((y != data.Y[s:e]).double().mean())
            best = max(best, loss - float((phi_gt - model.joint_feature(Xc[s:e], y)) @ w))
        H += best / n
    sq = float(w @ w)
    return lam / 2 * sq + H, -lam / 2 * sq + ell


@pytest.mark.parametrize("seed", [0, 1])
def test_warm_started_dual_is_feasible_and_its_gap_is_primal_minus_dual(seed):
    data = tiny_problem(seed)
    model = ChainModel.for_data(data)
    lam = 0.1
    solver = Solver(make_store(model, data, lam), SolverConfig(passes=4, gap_check=2, seed=seed))
    solver.run()
    g = torch.Generator().manual_seed(100 + seed)
    new_data = with_features(data, 2.0 * torch.randn(data.X.shape, generator=g, dtype=torch.float64))
    warm, gp = warm_start(solver, new_data, passes=8)
    store = warm.dual
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        assert in_hull(store.Mu[s:e].numpy(), store.Mt[i].numpy(), float(store.ell_i[i]) * data.n,
                       data.Y[s:e].tolist()), f"block {i} is not a convex combination of labelings"
    primal, dual = brute_primal_dual(model, new_data, lam, store.Mu, store.Mt, store.ell)
    assert abs(float(gp.block_gaps.sum()) - (primal - dual)) < 1e-10
    assert float(gp.block_gaps.sum()) > 1e-6          # the new features left work to do
    gap_before = float(gp.block_gaps.sum())
    history = warm.run()
    assert warm.passes == pytest.approx(8.0)
    assert history[-1]["gap"] < gap_before            # the BCFW phase lowers the subproblem gap
    primal, dual = brute_primal_dual(model, new_data, lam, store.Mu, store.Mt, store.ell)
    assert abs(history[-1].get("gap_last", history[-1]["gap"]) - (primal - dual)) < 1e-9      # the iterate's
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        assert in_hull(store.Mu[s:e].numpy(), store.Mt[i].numpy(), float(store.ell_i[i]) * data.n,
                       data.Y[s:e].tolist())


def test_warm_start_refuses_other_problems_by_name():
    data = tiny_problem(0)
    solver = Solver(make_store(ChainModel.for_data(data), data, 0.1), SolverConfig(passes=1, gap_check=1))
    from ssvm_torch.errors import SSVMInputError
    with pytest.raises(SSVMInputError, match="X: expected a"):
        with_features(data, torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(SSVMInputError, match="data: expected 6 sequences with 4 features"):
        warm_start(solver, with_features(data, torch.zeros(data.X.shape[0], 5, dtype=torch.float64)), passes=2)
