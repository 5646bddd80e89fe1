"""The compiled block steps (solvers/steps.py): the tie-broken picks of the FW and away corners against numpy, the
chain store's fused steps float for float against the generic ones (``BlockDual.pairwise_step``: one direction
built for the norm and the move; ``BlockDual.fw_step``: oracle, line search and move in one call), and pairwise /
away / best steps with the cache on the numba chain store against its torch path."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_chain_data
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.models import ChainModel
from ssvm_torch.models.base import TIE
from ssvm_torch.solvers.active_set import away_corner, first_best
from ssvm_torch.stores.base import BlockDual


def numpy_first_best(v, scale, largest=True):
    """The numpy formulation first_best had: the first entry within TIE * max(|v|, scale) of the best."""
    v = np.asarray(v, dtype=np.float64)
    best = v.max() if largest else v.min()
    tol = TIE * max(float(np.abs(v).max()), scale)
    return int(np.argmax(v >= best - tol if largest else v <= best + tol))


def test_first_best_and_away_corner_equal_numpy_with_ties_and_nan():
    rng = np.random.default_rng(0)
    for trial in range(300):
        m = int(rng.integers(1, 9))
        v = rng.normal(size=m) * 10.0 ** rng.integers(-6, 3)
        if m > 1 and trial % 3 == 0:          # ties: an entry within the tolerance of another, or equal to it
            j, k = rng.choice(m, 2, replace=False)
            v[j] = v[k] * (1 + (TIE / 4 if trial % 2 else 0.0))
        scale = float(10.0 ** rng.integers(-4, 1))
        for largest in (True, False):
            assert first_best(v, scale, largest) == numpy_first_best(v, scale, largest)
        alpha = [float(x) for x in rng.uniform(size=m) * (rng.uniform(size=m) < 0.6)]
        if not any(a > 0 for a in alpha):
            alpha[int(rng.integers(m))] = 1.0
        active = [j for j, a in enumerate(alpha) if a > 0]
        a, g = away_corner(v, alpha, scale)
        assert a == active[numpy_first_best(v[active], scale, largest=False)]
        assert g == float(np.min(v[active]))
    assert first_best(np.array([1.0, np.nan, 3.0]), 1.0) == 0
    a, g = away_corner(np.array([1.0, np.nan, 3.0]), [0.0, 0.5, 0.5], 1.0)
    assert a == 1 and np.isnan(g)
    with pytest.raises(ValueError, match="empty active set"):
        away_corner(np.array([1.0, 2.0]), [0.0, 0.0], 1.0)
    with pytest.raises(ValueError, match="no values"):
        first_best(np.array([]), 1.0)


def two_stores(seed: int, partial: bool = False, lam: float = 0.05):
    rng = np.random.default_rng(seed)
    data = random_chain_data(rng, n=7, K=11, F=13, tmin=1, tmax=9)
    model = ChainModel.for_data(data)
    if partial:                        # unobserved labels completed at a random w (the latent SSVM's inner problem)
        from ssvm_torch.latent import hide_labels, with_labels
        part = hide_labels(data, 0.4, seed)
        data = with_labels(part, model.complete(torch.tensor(rng.normal(size=model.d)), part))
    return [make_store(model, data, lam, kernels="numba") for _ in range(2)]


def state_of(store):
    return [store.w.clone(), store.Mu.clone(), store.Mt.clone(), store.ell_i.clone(), store.ell]


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("shadow", [False, True])
def test_fused_pairwise_step_equals_the_generic_step_float_for_float(partial, shadow):
    """Pairwise, away (P = None) and FW (Q = None) directions, moves and refusals (g <= 0), a shadow vector, labels
    partly unobserved: the compiled step leaves the store bit for bit where the generic one does."""
    fused, generic = two_stores(3, partial)
    assert type(fused).pairwise_step is not BlockDual.pairwise_step     # the store's own compiled step
    rng = np.random.default_rng(1)
    if shadow:                                   # the averaging's shadow vector moves with every block move
        for s in (fused, generic):
            s.shadow, s.shadow_coef = torch.zeros_like(s.w), 0.3
    moved = 0
    for it in range(60):
        i = int(rng.integers(fused.n))
        c = fused.fw_corner(i)                   # a real corner at the current point, and another labeling
        for s in (fused, generic):
            s.fw_move(i, c, 0.5)
        T = len(c.labels)
        P = np.asarray(c.labels, dtype=np.int64)
        Q = rng.integers(0, 11, size=T).astype(np.int64)
        loss_P, loss_Q = fused.loss_of(i, P), fused.loss_of(i, Q)
        if it % 3 == 1:                          # an away step: from the away corner Q, away from it
            P, loss_P = None, float(fused.ell_i[i])
        elif it % 3 == 2:                        # a FW step: from the block's point towards P
            Q, loss_Q = None, float(fused.ell_i[i])
        g = float(rng.normal()) if it % 5 == 0 else abs(float(rng.normal())) * 10.0 ** rng.integers(-3, 1)
        cap = float(rng.uniform(0.01, 1.0))
        gam_f = fused.pairwise_step(i, P, Q, loss_P, loss_Q, g, cap)
        gam_g = BlockDual.pairwise_step(generic, i, P, Q, loss_P, loss_Q, g, cap)
        assert gam_f == gam_g
        moved += gam_f > 0
        for a, b in zip(state_of(fused), state_of(generic)):
            assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
        if shadow:
            assert torch.equal(fused.shadow, generic.shadow)
    assert moved >= 20                           # the comparison covered moves, not only refusals
    same = state_of(fused)
    P = np.asarray(c.labels, dtype=np.int64)
    assert fused.pairwise_step(i, P, P, loss_P, loss_P, 1.0, 1.0) == 0.0      # a zero direction: no move
    assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(same, state_of(fused)))


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("shadow", [False, True])
def test_fused_fw_step_equals_the_generic_step_float_for_float(partial, shadow):
    """BCFW's step as one compiled call (oracle, line search clipped to [0, 1], move) leaves the store bit for bit
    where fw_corner, the line search and fw_move do, gap and gamma included (a large lam: gamma = g_i / (lam
    ||w_i - w_s||^2) grows with lam, so steps clip to 1)."""
    fused, generic = two_stores(4, partial, lam=50.0)
    assert type(fused).fw_step is not BlockDual.fw_step
    if shadow:
        for s in (fused, generic):
            s.shadow, s.shadow_coef = torch.zeros_like(s.w), 0.7
    rng = np.random.default_rng(2)
    full = moved = 0
    for _ in range(300):
        i = int(rng.integers(fused.n))
        got, want = fused.fw_step(i), BlockDual.fw_step(generic, i)
        assert got == want
        moved += want[1] > 0
        full += want[1] == 1.0
        for a, b in zip(state_of(fused), state_of(generic)):
            assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
        if shadow:
            assert torch.equal(fused.shadow, generic.shadow)
    assert moved >= 40 and full >= 1             # moves and full steps (gamma clipped to 1) covered
    assert partial or moved < 300                # and refusals (g_i <= 0: the block's gold decodes best)


@pytest.mark.parametrize("step", ["pairwise", "away", "best"])
def test_set_steps_with_the_cache_compiled_equal_the_torch_path(step):
    data = random_chain_data(np.random.default_rng(5), n=9, K=3, F=4, tmin=2, tmax=6)
    model = ChainModel.for_data(data)
    runs = []
    for kernels in ("numba", "torch"):
        store = make_store(model, data, 0.1, kernels=kernels)
        cfg = SolverConfig(solver="bcfw", sampling="gap", step=step, cache=True, passes=8, gap_check=2, seed=2)
        hist = Solver(store, cfg).run()
        runs.append((hist, store))
    (ha, a), (hb, b) = runs
    assert [r["cache_hits"] for r in ha] == [r["cache_hits"] for r in hb]
    assert ha[-1]["cache_hits"] > 0 and ha[-1]["pairwise_steps" if step == "pairwise" else "steps"] > 0
    assert hb[-1]["gap"] == pytest.approx(ha[-1]["gap"], rel=1e-9)
    assert torch.allclose(a.w, b.w, atol=1e-10)


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_span_store_pairwise_step_builds_its_direction_once_float_for_float(kernels):
    """The constituency store's pairwise_step (one s(P) - s(Q) for the norm and the move) against the generic
    pair_sqnorm + pair_move, on pairwise, away and FW directions between real trees of its blocks."""
    from conftest import random_span_data
    from ssvm_torch.models import ConstituencyModel
    rng = np.random.default_rng(6)
    data = random_span_data(rng, 6, 5, 3, lmin=2, lmax=6)
    model = ConstituencyModel.for_data(data, fill=0)
    fused, generic = (make_store(model, data, 0.5, kernels=kernels) for _ in range(2))
    assert type(fused).pairwise_step is not BlockDual.pairwise_step
    moved = 0
    for it in range(40):
        i = int(rng.integers(fused.n))
        g = abs(float(rng.normal())) * 10.0 ** rng.integers(-3, 1)
        kind, gams = it % 3, []
        for store, step in ((fused, fused.pairwise_step),
                            (generic, lambda *a: BlockDual.pairwise_step(generic, *a))):
            c = store.fw_corner(i)               # each store's own corner: the direction it keeps for its move
            P, loss_P = c.labels, c.loss
            Q = store.gt_labeling(i)
            loss_Q = store.loss_of(i, Q)
            if kind == 1:                        # an away step
                P, loss_P = None, float(store.ell_i[i])
            elif kind == 2:                      # a FW step
                Q, loss_Q = None, float(store.ell_i[i])
            gams.append(step(i, P, Q, loss_P, loss_Q, g, 0.7))
        assert gams[0] == gams[1]
        moved += gams[0] > 0
        assert torch.equal(fused.w, generic.w) and torch.equal(fused.ell_i, generic.ell_i)
    assert moved >= 10


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_span_store_corner_gaps_of_a_whole_working_set_equal_eq_6(kernels):
    """The constituency store's corner gaps, every tree of a block scored in one scatter, against eq. (6) computed
    from the model: g_i(y) = lam <w_i - psi_i(y) / (lam n), w> - ell_i + L_i(y) / n over every labeled tree."""
    from conftest import all_labeled_trees, random_span_data
    from ssvm_torch.models import ConstituencyModel
    data = random_span_data(np.random.default_rng(8), 5, 4, 2, lmin=2, lmax=4)
    model = ConstituencyModel.for_data(data, fill=0)
    lam = 0.1
    store = make_store(model, data, lam, kernels=kernels)
    Solver(store, SolverConfig(solver="bcfw", sampling="gap", step="pairwise", cache=True, passes=4, seed=0)).run()
    for i in range(data.n):
        charts = all_labeled_trees(int(data.lengths[i]), model.L)
        trees = [torch.stack(torch.nonzero(c >= 0, as_tuple=True) + (c[c >= 0],), 1) for c in charts]
        got = store.corner_gaps(i, trees)
        idx, one = torch.full((len(charts),), i), torch.tensor([i])
        psi = model.phi(data, one, model.gt_batch(data, one)) - model.phi(data, idx, charts)
        w_s = psi / (lam * data.n)
        want = lam * (store.block_w(i) - w_s) @ store.w - store.ell_i[i] + model.loss(data, idx, charts) / data.n
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-12)
