"""Solver engine: duality gap certificate, BCFW(n=1) = FW, determinism, gap sampling (App. C toy),
averaging, checkpoint/resume."""
import numpy as np
import pytest
import torch

from conftest import brute_force_chain, chain_score, explicit, random_chain_data
from ssvm_torch import ChainModel, Solver, SolverConfig, make_store
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.solvers.averaging import Averager
from ssvm_torch.oracles import viterbi
from ssvm_torch.solvers.samplers import GapSampler


def strip_time(history):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


def independent_primal_dual_chain(model, data, d, lam, brute=False):
    """Primal (1) and dual (3) recomputed from scratch: w rebuilt densely from the blocks, H_i by
    brute-force enumeration (tiny chains) or by the padded torch Viterbi (a different kernel)."""
    w = sum(d.block_w(i) for i in range(data.n))
    ell = float(d.ell_i.sum())
    Xc = model.features(data)
    W, first, last, trans = model.split(w)
    H = []
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        U = Xc[s:e] @ W.T
        gt = data.Y[s:e]
        if brute:
            best = brute_force_chain(U.numpy(), first.numpy(), last.numpy(), trans.numpy(), gt.numpy())
        else:
            _, sc = viterbi(U[None], torch.tensor([e - s]), first, last, trans, gt=gt[None])
            best = float(sc[0])
        H.append(best - chain_score(U.numpy(), first.numpy(), last.numpy(), trans.numpy(), gt.tolist()))
    primal = 0.5 * lam * float(w @ w) + sum(H) / data.n
    dual = -0.5 * lam * float(w @ w) + ell
    return primal, dual


@pytest.mark.parametrize("solver", ["bcfw", "fw"])
def test_gap_equals_independent_primal_minus_dual_tiny(solver):
    rng = np.random.default_rng(0)
    data = random_chain_data(rng, 10, 3, 4, tmin=1, tmax=5)
    m = ChainModel.for_data(data)
    lam = 0.05
    d = make_store(m, data, lam)
    hist = Solver(d, SolverConfig(solver=solver, sampling="gap", passes=7, gap_check=3)).run()
    primal, dual = independent_primal_dual_chain(m, data, d, lam, brute=True)
    last = hist[-1]                                  # the iterate's values (the model may be an earlier check's)
    assert last.get("gap_last", last["gap"]) == pytest.approx(primal - dual, rel=1e-9)
    assert last.get("primal_last", last["primal"]) == pytest.approx(primal, rel=1e-9)
    assert last["dual"] == pytest.approx(dual, rel=1e-9)
    assert sum(float(g) for g in d.gap_pass().block_gaps) == pytest.approx(primal - dual, rel=1e-9)


def test_gap_equals_independent_primal_minus_dual_ocr(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(60))
    m = ChainModel.for_data(sub)
    lam = 0.01
    d = make_store(m, sub, lam)
    hist = Solver(d, SolverConfig(solver="bcfw", sampling="gap", passes=12, gap_check=5)).run()
    primal, dual = independent_primal_dual_chain(m, sub, d, lam)
    assert hist[-1]["gap"] == pytest.approx(primal - dual, rel=1e-9)
    assert 0 < hist[-1]["gap"] < hist[0]["gap"]
    gaps = [r["gap"] for r in hist]
    duals = [r["dual"] for r in hist]
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:])), "BCFW with line search never lowers the dual"
    assert min(gaps) >= 0


def test_bcfw_with_one_block_equals_batch_fw(ocr_small):
    train, _ = ocr_small
    one = train.subset([3])
    m = ChainModel.for_data(one)
    a, b = make_store(m, one, 0.1), make_store(m, one, 0.1)
    ha = Solver(a, SolverConfig(solver="bcfw", sampling="uniform", passes=10, gap_check=10)).run()
    hb = Solver(b, SolverConfig(solver="fw", passes=11, gap_check=11)).run()
    assert ha[-1]["steps"] == hb[-1]["steps"] == 10
    assert torch.allclose(a.w, b.w, rtol=0, atol=1e-12)
    for key in ("primal", "dual", "gap"):
        assert ha[-1][key] == pytest.approx(hb[-1][key], rel=1e-10)


def test_explicit_model_bcfw_one_block_equals_fw():
    rng = np.random.default_rng(4)
    psi = [rng.normal(size=(6, 5))]
    psi[0][0] = 0
    losses = [np.r_[0.0, rng.uniform(0.5, 2, size=5)]]
    model = explicit(psi, losses)
    a, b = make_store(*model, 0.2), make_store(*model, 0.2)
    Solver(a, SolverConfig(solver="bcfw", sampling="perm", passes=25, gap_check=25)).run()
    Solver(b, SolverConfig(solver="fw", passes=26, gap_check=26)).run()
    assert torch.allclose(a.w, b.w, atol=1e-12)


@pytest.mark.parametrize("solver,sampling", [("bcfw", "gap"), ("bcfw", "perm"), ("fw", "uniform"),
                                             ("ssg", "uniform")])
def test_fixed_seed_gives_identical_history(ocr_small, solver, sampling):
    train, _ = ocr_small
    sub = train.subset(range(50))
    m = ChainModel.for_data(sub)
    runs = []
    for _ in range(2):
        d = make_store(m, sub, 0.01)
        cfg = SolverConfig(solver=solver, sampling=sampling, passes=6, gap_check=2, seed=11, averaging=True)
        runs.append((strip_time(Solver(d, cfg).run()), d.w.clone()))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
    d = make_store(m, sub, 0.01)
    other = strip_time(Solver(d, SolverConfig(solver=solver, sampling=sampling, passes=6, gap_check=2,
                                               seed=12, averaging=True)).run())
    if solver != "fw":                     # batch FW is deterministic: no sampling
        assert other != runs[0][0]


def app_c_toy(n, lam=1.0, a=1.0):
    """Toy of Osokin et al. 2016, App. C: one hard block whose optimum lies inside an edge of its
    polytope (FW zig-zags), n-1 easy blocks solved exactly by one step; every block has the same
    curvature ||psi|| = a. Coordinates: the hard block uses (0, 1), easy block j uses 1 + j."""
    d = n + 1
    lamn = lam * n
    psi, losses = [], []
    hard = np.zeros((3, d))
    hard[1, 0] = a
    hard[2, 1] = a
    psi.append(hard)
    losses.append(np.array([0.0, 0.75 * a * a / lamn, 0.75 * a * a / lamn]))
    for j in range(1, n):
        e = np.zeros((2, d))
        e[1, 1 + j] = a
        psi.append(e)
        losses.append(np.array([0.0, 1.5 * a * a / lamn]))
    return explicit(psi, losses)


def calls_to_reach(model, sampling, eps, seed):
    d = make_store(*model, 1.0)
    hist = Solver(d, SolverConfig(solver="bcfw", sampling=sampling, passes=2000, gap_check=1,
                                  gap_threshold=eps, seed=seed)).run()
    assert hist[-1]["gap"] <= eps, "did not converge"
    return hist[-1]["oracle_calls"]


def test_app_c_toy_gap_sampling_needs_n_over_2_times_fewer_calls():
    n = 20
    model = app_c_toy(n)
    g0 = Solver(make_store(*model, 1.0), SolverConfig(solver="bcfw", passes=1, gap_check=1)).run()[0]["gap"]
    eps = 1e-4 * g0
    uni = np.median([calls_to_reach(model, "uniform", eps, s) for s in range(3)])
    gap = np.median([calls_to_reach(model, "gap", eps, s) for s in range(3)])
    assert uni / gap >= n / 2, (uni, gap)


def test_gap_sampler_visits_every_block_first_then_follows_gaps():
    n = 7
    s = GapSampler(n, seed=0)
    first = [s.next() for _ in range(n)]
    assert sorted(first) == list(range(n))          # all g_i = +inf: a permutation
    gaps = np.array([0.0, 1.0, 3.0, 0.0, 6.0, -1e-17, 0.0])
    for i, g in enumerate(gaps):
        s.update(i, g)
    np.testing.assert_allclose(s.probabilities(), np.maximum(gaps, 0) / 10.0)
    draws = np.bincount([s.next() for _ in range(20000)], minlength=n) / 20000
    np.testing.assert_allclose(draws, np.maximum(gaps, 0) / 10.0, atol=0.015)
    s.update(4, 0.0)                                 # probabilities reflect every update
    assert s.probabilities()[4] == 0
    assert set(s.next() for _ in range(2000)) <= {1, 2}


def test_averaged_iterate_gap_is_a_certificate(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(40))
    m = ChainModel.for_data(sub)
    d = make_store(m, sub, 0.05)
    solver = Solver(d, SolverConfig(solver="bcfw", sampling="uniform", passes=10, gap_check=5, averaging=True))
    hist = solver.run()
    last = hist[-1]
    assert last["avg_gap"] == pytest.approx(last["avg_primal"] - last["avg_dual"], rel=1e-12)
    assert last["avg_gap"] >= 0
    # the averaged point is a separate one: independent primal at w_avg
    d.set_point(solver.w_avg, solver.averager.ell_avg)
    assert last["avg_primal"] == pytest.approx(d.primal(d.gap_pass().H), rel=1e-12)
    assert last["avg_gap"] != pytest.approx(last["gap"], rel=1e-6)


@pytest.mark.parametrize("solver,sampling", [("bcfw", "gap"), ("bcfw", "uniform"), ("ssg", "uniform")])
def test_checkpoint_resume_is_exact(ocr_small, tmp_path, solver, sampling):
    train, _ = ocr_small
    sub = train.subset(range(30))
    m = ChainModel.for_data(sub)
    cfg = dict(solver=solver, sampling=sampling, gap_check=2, seed=5, averaging=True)
    full = Solver(make_store(m, sub, 0.02), SolverConfig(passes=12, **cfg))
    h_full = strip_time(full.run())
    part = Solver(make_store(m, sub, 0.02), SolverConfig(passes=6, **cfg))
    part.run()
    save_checkpoint(tmp_path / "ck.pt", part.state_dict())
    resumed = Solver(make_store(m, sub, 0.02), SolverConfig(passes=12, **cfg))
    resumed.load_state_dict(load_checkpoint(tmp_path / "ck.pt"))
    h_res = strip_time(resumed.run())
    assert h_res == h_full
    assert torch.equal(resumed.dual.w, full.dual.w)


def test_gap_refresh_schedule(ocr_small):
    """Every k-th gap check refreshes the sampler and counts as a pass; the others only monitor."""
    sub = ocr_small[0].subset(range(20))
    m = ChainModel.for_data(sub)
    for k, counted in [(1, 4), (2, 2), (0, 0)]:
        h = Solver(make_store(m, sub, 0.05), SolverConfig(sampling="gap", passes=8 + counted, gap_check=2,
                                                    gap_refresh=k)).run()
        steps_passes = h[-1]["steps"] / sub.n
        assert steps_passes == 8 and h[-1]["passes"] == 8 + counted
        assert all(r["gap"] is not None for r in h)


@pytest.mark.parametrize("path", ["numba", "torch", "dense"])
def test_lazy_average_equals_explicit_recursion(ocr_small, path):
    """BCFW keeps w_avg lazily (shadow vector on each move's support); it must equal the O(d)
    recursion w_avg(k+1) = k/(k+2) w_avg(k) + 2/(k+2) w(k+1) of Lacoste-Julien et al. 2013."""
    sub = ocr_small[0].subset(range(30))

    def make():
        if path == "dense":
            return make_store(*app_c_toy(12), 1.0)
        return make_store(ChainModel.for_data(sub), sub, 0.05, kernels="numba" if path == "numba" else "torch")
    cfg = SolverConfig(solver="bcfw", sampling="gap", step="pairwise" if path != "numba" else "fw",
                       passes=12, gap_check=3, averaging=True, recompute_every=2, seed=2)
    lazy = Solver(make(), cfg)
    h_lazy = lazy.run()
    explicit = Solver(make(), cfg)
    explicit.averager = Averager(explicit.dual, lazy=False)      # the O(d) recursion, no shadow vector
    h_exp = explicit.run()
    assert torch.allclose(lazy.w_avg, explicit.w_avg, rtol=1e-10, atol=1e-12 * float(explicit.w_avg.abs().max()))
    assert h_lazy[-1]["avg_gap"] == pytest.approx(h_exp[-1]["avg_gap"], rel=1e-8)
    assert not torch.allclose(lazy.w_avg, lazy.dual.w)
