"""The binary local-polytope LP by one max flow (oracles/roof_duality.py) against the simplex (HiGHS) and
enumeration: the same optimal value on random loopy graphs (ties included), a half-integral point of the
polytope, fractional cases reached, and an all-labeled result equal to the exact MAP."""
import itertools

import numpy as np
import pytest

from ssvm_torch.oracles.local_polytope import local_polytope_constraints, local_polytope_map, solve_lp
from ssvm_torch.oracles.roof_duality import roof_dual_map


def loopy(rng, N, density=0.7):
    pairs = np.array(list(itertools.combinations(range(N), 2)))
    keep = rng.uniform(size=len(pairs)) < density
    edges = pairs[keep] if keep.any() else pairs[:1]
    # either orientation, so both ends of an edge's table are exercised
    return np.where(rng.uniform(size=(len(edges), 1)) < 0.5, edges, edges[:, ::-1]).astype(np.int64)


@pytest.mark.parametrize("integer_scores", [False, True])
def test_roof_duality_is_the_lp_optimum(integer_scores):
    rng = np.random.default_rng(5 + integer_scores)
    fractional = 0
    for _ in range(150):
        N = int(rng.integers(3, 9))
        edges = loopy(rng, N)
        tn, te = rng.normal(size=(N, 2)), 2 * rng.normal(size=(len(edges), 2, 2))
        if integer_scores:                               # many ties: several optima
            tn, te = np.round(tn), np.round(te)
        mu_n, mu_e, integral = roof_dual_map(tn, te, edges)
        z = np.concatenate([mu_n.ravel(), mu_e.ravel()])
        A, b = local_polytope_constraints(N, edges, 2)
        assert np.abs(A @ z - b).max() < 1e-12 and z.min() >= 0          # a point of the local polytope
        assert set(np.unique(z)) <= {0.0, 0.5, 1.0}                        # half-integral
        value = float((tn * mu_n).sum() + (te * mu_e).sum())
        simplex = float(np.concatenate([tn.ravel(), te.ravel()]) @ solve_lp(tn, te, edges))
        assert value == pytest.approx(simplex, abs=1e-9)                  # the LP's optimum
        Y = np.array(list(itertools.product(range(2), repeat=N)))
        pair = te[np.arange(len(edges)), Y[:, edges[:, 0]], Y[:, edges[:, 1]]]
        best = (tn[np.arange(N), Y].sum(1) + pair.sum(1)).max()
        assert value >= best - 1e-9
        if integral:                                     # all labeled: the exact MAP (persistency)
            assert value == pytest.approx(best, abs=1e-9)
        fractional += not integral
    assert fractional >= 10, fractional


def test_roof_duality_on_a_grid_and_submodular_scores():
    """A 12 x 12 grid (the simplex's value), and submodular scores, where the LP is tight: integral, the exact
    MAP (the graph cut's)."""
    rng = np.random.default_rng(3)
    ids = np.arange(144).reshape(12, 12)
    edges = np.concatenate([np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], 1),
                            np.stack([ids[:-1].ravel(), ids[1:].ravel()], 1)]).astype(np.int64)
    tn, te = rng.normal(size=(144, 2)), rng.normal(size=(len(edges), 2, 2))
    mu_n, mu_e, _ = roof_dual_map(tn, te, edges)
    simplex = float(np.concatenate([tn.ravel(), te.ravel()]) @ solve_lp(tn, te, edges))
    assert float((tn * mu_n).sum() + (te * mu_e).sum()) == pytest.approx(simplex, abs=1e-8)
    te_sub = np.zeros_like(te)
    te_sub[:, 0, 0] = te_sub[:, 1, 1] = np.abs(rng.normal(size=len(edges)))     # agreement rewards: submodular
    mu_n, mu_e, integral = roof_dual_map(tn, te_sub, edges)
    assert integral
    from ssvm_torch.oracles.maxflow import binary_cut_host
    y = binary_cut_host(tn[:, 1] - tn[:, 0], edges, te_sub[:, 0, 0])
    assert float((tn * mu_n).sum() + (te_sub * mu_e).sum()) == pytest.approx(
        float(tn[np.arange(144), y].sum() + te_sub[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum()),
        abs=1e-9)


def test_binary_loopy_graphs_take_the_max_flow_path():
    """local_polytope_map answers a binary loopy graph with roof duality's point (fractional ones among them)."""
    rng = np.random.default_rng(8)
    found = False
    for _ in range(60):
        edges = loopy(rng, 6, density=1.0)
        tn, te = rng.normal(size=(6, 2)), 3 * rng.normal(size=(len(edges), 2, 2))
        mu_n, mu_e, integral = local_polytope_map(tn, te, edges)
        ref = roof_dual_map(tn, te, edges)
        np.testing.assert_array_equal(mu_n, ref[0])
        np.testing.assert_array_equal(mu_e, ref[1])
        found |= not integral
    assert found
