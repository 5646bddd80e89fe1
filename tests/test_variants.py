"""BCFW variants (Osokin et al. 2016): pairwise / away / best steps, caching, box constraints (App. H).

Convergence is checked against an independent QP solve (scipy SLSQP on the explicit primal)."""
import itertools

import numpy as np
import pytest
import torch

from conftest import CheckedBox, explicit, random_chain_data
from qp_reference import qp_optimum, random_explicit_problem
from ssvm_torch import ChainModel, SSVMInputError, Solver, SolverConfig, make_store
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.stores import BoxedDual

METHODS = list(itertools.product(["fw", "pairwise", "away", "best"], [False, True]))


def run(dual, step, cache, passes=4000, eps=1e-9, sampling="gap", seed=0, gap_check=5):
    solver = Solver(dual, SolverConfig(solver="bcfw", sampling=sampling, step=step, cache=cache, passes=passes,
                                       gap_check=gap_check, gap_threshold=eps, seed=seed))
    return solver, solver.run()


def hard_problem(seed):
    """Small lambda: the optimum lies inside faces of the block simplices (FW zig-zags)."""
    rng = np.random.default_rng(seed)
    psi, losses = random_explicit_problem(rng, n=4, m=5, d=4)
    lam = 0.05
    P, w = qp_optimum(psi, losses, lam)
    neg = np.flatnonzero(w < 0)[:2]
    box = (list(neg), [0.0] * len(neg), [np.inf] * len(neg))       # binding: the unconstrained w* < 0 there
    Pb, wb = qp_optimum(psi, losses, lam, box)
    return explicit(psi, losses), lam, P, box, Pb


@pytest.mark.parametrize("boxed", [False, True])
@pytest.mark.parametrize("step,cache", [m for m in METHODS if m[0] != "fw"])
def test_linearly_convergent_variants_reach_qp_optimum(step, cache, boxed):
    for seed in (0, 1):
        model, lam, P, box, Pb = hard_problem(seed)
        dual = make_store(*model, lam)
        if boxed:
            dual = BoxedDual(dual, *box)
        _, hist = run(dual, step, cache)
        target = Pb if boxed else P
        assert hist[-1]["gap"] <= 1e-8
        assert abs(hist[-1]["primal"] - target) <= 1e-6
        assert hist[-1]["dual"] <= target + 1e-9
        if boxed:
            assert bool((dual.w[torch.tensor(box[0])] >= 0).all())


@pytest.mark.parametrize("boxed", [False, True])
@pytest.mark.parametrize("cache", [False, True])
def test_fw_step_variants(cache, boxed):
    """FW steps converge sublinearly (zig-zag), so on the hard problem we check the certificate
    sandwich dual <= P* <= primal and progress; on problems with two outputs per block (each block
    a segment, where a FW step with exact line search is exact block minimization and converges
    linearly) they reach the QP optimum to 1e-6."""
    model, lam, P, box, Pb = hard_problem(0)
    dual = make_store(*model, lam)
    if boxed:
        dual = BoxedDual(dual, *box)
    _, hist = run(dual, "fw", cache, passes=300)
    target = Pb if boxed else P
    assert hist[-1]["dual"] - 1e-12 <= target <= hist[-1]["primal"] + 1e-12
    assert hist[-1]["gap"] < 2e-2 * hist[0]["gap"]
    rng = np.random.default_rng(0)
    psi, losses = random_explicit_problem(rng, n=4, m=2, d=3)
    for lam in (0.05, 1.0):
        dual = make_store(*explicit(psi, losses), lam)
        P_easy, _ = qp_optimum(psi, losses, lam)
        _, h = run(dual, "fw", cache, passes=200)
        assert abs(h[-1]["primal"] - P_easy) <= 1e-6 and h[-1]["gap"] <= 1e-6


def recompute_from_sets(model_psi, solver, lam, n):
    w = 0
    for i, bs in enumerate(solver.sets):
        for y, a in zip(bs.labels, bs.alpha):
            w = w + a * model_psi(i, y) / (lam * n)
    return w


@pytest.mark.parametrize("step,cache", [m for m in METHODS if m != ("fw", False)])
def test_active_sets_reproduce_w_chain(step, cache):
    """On real OCR words with the compact chain store: w rebuilt from the active sets
    (sum_i sum_y alpha_i(y) psi_i(y) / (lam n)) equals the maintained w; every alpha_i is a
    distribution; without a cache the sets hold only positive weights."""
    from ssvm_torch import load_ocr
    train, _ = load_ocr("small")
    sub = train.subset(range(12))
    m = ChainModel.for_data(sub)
    lam = 0.05
    dual = make_store(m, sub, lam)
    solver, hist = run(dual, step, cache, passes=30, eps=0.0, gap_check=3)
    Xc = m.features(sub)

    def psi(i, y):
        s, e = int(sub.offsets[i]), int(sub.offsets[i + 1])
        return m.joint_feature(Xc[s:e], sub.Y[s:e]) - m.joint_feature(Xc[s:e], torch.as_tensor(y))
    for bs in solver.sets:
        assert abs(sum(bs.alpha) - 1.0) <= 1e-9 and min(bs.alpha) >= 0.0
        if not cache:
            assert min(bs.alpha) > 0.0
    if step != "fw":                 # FW steps with a cache may evict active corners (they need no active set)
        w_sets = recompute_from_sets(psi, solver, lam, sub.n)
        assert torch.allclose(w_sets, dual.w, rtol=0, atol=1e-9 * float(dual.w.abs().max()))
        ell_sets = sum(a * l for bs in solver.sets for a, l in zip(bs.alpha, bs.loss))
        assert dual.ell == pytest.approx(ell_sets, rel=1e-9)
    assert hist[-1]["gap"] < hist[1]["gap"]
    if cache:
        assert hist[-1]["cache_hits"] > 0 and 0 < hist[-1]["cache_hit_rate"] < 1


def test_chain_active_set_primitives_torch_equals_numba():
    rng = np.random.default_rng(8)
    data = random_chain_data(rng, 8, 3, 5, tmin=1, tmax=5)
    m = ChainModel.for_data(data)
    a = make_store(m, data, 0.1)
    run(a, "pairwise", False, passes=6, eps=0.0, gap_check=2)
    b = make_store(m, data, 0.1, kernels="torch")
    b.load_state_dict(a.state_dict())
    for i in range(data.n):
        T = int(data.lengths[i])
        ys = [rng.integers(0, 3, size=T) for _ in range(3)]
        np.testing.assert_allclose(a.corner_gaps(i, ys), b.corner_gaps(i, ys), rtol=1e-9, atol=1e-12)
        assert a.pair_sqnorm(i, ys[0], ys[1]) == pytest.approx(b.pair_sqnorm(i, ys[0], ys[1]), rel=1e-9)
        assert a.pair_sqnorm(i, None, ys[2]) == pytest.approx(b.pair_sqnorm(i, None, ys[2]), rel=1e-9)
        la, lb = a.loss_of(i, ys[0]), a.loss_of(i, ys[1])
        a.pair_move(i, ys[0], ys[1], la, lb, 0.3)
        b.pair_move(i, ys[0], ys[1], la, lb, 0.3)
        assert torch.allclose(a.w, b.w, atol=1e-12) and a.ell == pytest.approx(b.ell, abs=1e-15)


def test_box_constrained_run_stays_in_bounds_and_gap_is_app_h_lagrange_gap():
    rng = np.random.default_rng(3)
    data = random_chain_data(rng, 10, 3, 4, tmin=1, tmax=5)
    m = ChainModel.for_data(data)
    lam = 0.02
    trans_idx = torch.arange(m.d - 9, m.d)                   # transitions >= 0 (an attractive chain)
    for step in ("fw", "pairwise"):
        inner = make_store(m, data, lam)
        dual = CheckedBox(inner, trans_idx, lower=0.0)       # checks w >= 0 after every move
        solver = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", step=step, passes=40, gap_check=4))
        hist = solver.run()
        assert dual.checks >= hist[-1]["steps"] // 2
        # App. H Lagrange gap, recomputed from scratch: v from the blocks, w = clip(v)
        v = sum(inner.block_w(i) for i in range(data.n))
        w = v.clone()
        w[trans_idx] = w[trans_idx].clamp(min=0)
        assert torch.allclose(w, dual.w, atol=1e-10)
        gp = dual.gap_pass()
        primal = 0.5 * lam * float(w @ w) + float(gp.H.sum()) / data.n
        dual_val = float(inner.ell_i.sum()) - lam * float(w @ v) + 0.5 * lam * float(w @ w)
        assert float(gp.block_gaps.sum()) == pytest.approx(primal - dual_val, rel=1e-9)
        assert hist[-1]["gap"] >= 0 and hist[-1]["dual"] <= hist[-1]["primal"]
        assert bool((v[trans_idx] < 0).any()), "the constraint should bind on this problem"


def test_box_batch_fw_and_bad_box():
    model, lam, P, box, Pb = hard_problem(1)
    dual = BoxedDual(make_store(*model, lam), *box)
    hist = Solver(dual, SolverConfig(solver="fw", passes=200, gap_check=50)).run()
    assert hist[-1]["dual"] - 1e-12 <= Pb <= hist[-1]["primal"] + 1e-12
    assert bool((dual.w[torch.tensor(box[0])] >= 0).all())
    inner = make_store(*model, lam)
    with pytest.raises(SSVMInputError, match="box index"):
        BoxedDual(inner, [0, 99])
    with pytest.raises(SSVMInputError, match="box lower"):
        BoxedDual(inner, [0], lower=1.0, upper=0.0)
    with pytest.raises(SSVMInputError, match="averaging"):
        Solver(BoxedDual(inner, [0], lower=0.0), SolverConfig(averaging=True))
    with pytest.raises(SSVMInputError, match="step"):
        SolverConfig(solver="fw", step="pairwise").validate()


def test_checkpoint_resume_with_sets_is_exact(tmp_path):
    model, lam, *_ = hard_problem(0)
    cfg = dict(solver="bcfw", sampling="gap", step="best", cache=True, gap_check=2, seed=4)
    full = Solver(make_store(*model, lam), SolverConfig(passes=12, **cfg))
    h_full = [{k: v for k, v in r.items() if k != "time_s"} for r in full.run()]
    part = Solver(make_store(*model, lam), SolverConfig(passes=6, **cfg))
    part.run()
    save_checkpoint(tmp_path / "ck.pt", part.state_dict())
    res = Solver(make_store(*model, lam), SolverConfig(passes=12, **cfg))
    res.load_state_dict(load_checkpoint(tmp_path / "ck.pt"))
    h_res = [{k: v for k, v in r.items() if k != "time_s"} for r in res.run()]
    assert h_res == h_full
