"""The solvers the FW papers are measured against, on the same store seam: the chain marginal oracle
(numba forward-backward and the torch-struct reference) against enumeration, online EG and the dual
extragradient against a BCFW optimum, the 1-slack cutting plane's QP against an independent solve
and its gap against the true suboptimality, histories and exact resume."""
import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from conftest import chain_score, random_chain_data
from ssvm_torch import ChainModel, SolverConfig, make_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.chain import chain_marginals_ragged
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.solvers import Solver, make_solver
from ssvm_torch.solvers.cutting_plane import solve_working_set_qp


def brute_marginals(U, first, last, trans):
    T, K = U.shape
    scores, ys = [], list(itertools.product(range(K), repeat=T))
    for y in ys:
        scores.append(chain_score(U, first, last, trans, y))
    scores = np.array(scores)
    logz = np.logaddexp.reduce(scores)
    p = np.exp(scores - logz)
    mu, mt = np.zeros((T, K)), np.zeros((K, K))
    for pi, y in zip(p, ys):
        for t in range(T):
            mu[t, y[t]] += pi
        for t in range(1, T):
            mt[y[t], y[t - 1]] += pi
    return mu, mt, logz


@pytest.mark.parametrize("backend", ["numba", "torch", "torch-struct"])
@pytest.mark.parametrize("shared", [True, False])
def test_marginals_equal_enumeration_on_ragged_chains_with_length_one(backend, shared):
    rng = np.random.default_rng(1)
    K, lengths = 3, [1, 4, 2, 1, 3]
    B = len(lengths)
    U = torch.as_tensor(rng.normal(size=(sum(lengths), K)))
    first, last = (torch.as_tensor(rng.normal(size=(K,) if shared else (B, K))) for _ in range(2))
    trans = torch.as_tensor(rng.normal(size=(K, K) if shared else (B, K, K)))
    Mu, Mt, logZ = chain_marginals_ragged(U, torch.tensor(lengths), first, last, trans, backend=backend)
    off = np.cumsum([0] + lengths)
    for b in range(B):
        pick = (lambda t: t.numpy()) if shared else (lambda t: t[b].numpy())
        mu, mt, logz = brute_marginals(U[off[b]:off[b + 1]].numpy(), pick(first), pick(last), pick(trans))
        np.testing.assert_allclose(Mu[off[b]:off[b + 1]].numpy(), mu, rtol=0, atol=1e-12)
        np.testing.assert_allclose(Mt[b].numpy(), mt, rtol=0, atol=1e-12)
        assert float(logZ[b]) == pytest.approx(logz, abs=1e-12)
    torch.testing.assert_close(Mu.sum(1), torch.ones(sum(lengths), dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(Mt.sum((1, 2)), torch.tensor(lengths, dtype=torch.float64) - 1, rtol=0, atol=1e-12)


def test_marginal_backends_agree_on_ocr_and_reject_bad_input(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(40))
    d = make_store(ChainModel.for_data(sub), sub, 0.01)
    rng = np.random.default_rng(0)
    U = torch.as_tensor(rng.normal(size=(int(d.lengths.sum()), 26)))
    first, last, trans = (torch.as_tensor(rng.normal(size=s)) for s in ((26,), (26,), (26, 26)))
    a = chain_marginals_ragged(U, d.lengths, first, last, trans, backend="numba")
    for other in ("torch", "torch-struct"):
        b = chain_marginals_ragged(U, d.lengths, first, last, trans, backend=other)
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=0, atol=1e-10)
    with pytest.raises(SSVMInputError, match="lengths"):
        chain_marginals_ragged(U, d.lengths + 1, first, last, trans)
    with pytest.raises(SSVMInputError, match="trans"):
        chain_marginals_ragged(U, d.lengths, first, last, trans[:3])
    with pytest.raises(SSVMInputError, match="backend"):
        chain_marginals_ragged(U.float(), d.lengths, first.float(), last.float(), trans.float(), backend="numba")


def tiny_problem():
    rng = np.random.default_rng(3)
    data = random_chain_data(rng, 4, 2, 3, tmin=1, tmax=2)
    return ChainModel.for_data(data), data


def optimum(model, data, lam):
    d = make_store(model, data, lam)
    hist = Solver(d, SolverConfig(solver="bcfw", sampling="gap", step="pairwise", passes=20000, gap_check=50,
                                  gap_threshold=1e-9)).run()
    assert hist[-1]["gap"] <= 1e-9
    return hist[-1]["primal"], d.w.clone()


@pytest.mark.parametrize("solver,passes,step", [("eg", 2000, 0),
                                                 pytest.param("deg", 150000, 100, marks=pytest.mark.slow)])
def test_eg_and_deg_reach_the_bcfw_optimum(solver, passes, step):
    """Objective within 1e-5 of P* (BCPFW to gap 1e-9). DEG's averaged iterate converges as O(1/t):
    ~150,000 passes here with the adaptive step's refused tries (about a sixth of them), so it is in
    the slow tier; the fast tier checks it at 1e-4."""
    model, data = tiny_problem()
    lam = 1.0
    p_star, w_star = optimum(model, data, lam)
    d = make_store(model, data, lam)
    s = make_solver(d, SolverConfig(solver=solver, sampling="perm", passes=passes, gap_check=passes / 4,
                                    step_size=step))
    hist = s.run()
    last = hist[-1]
    assert last["primal"] - p_star < 1e-5
    assert last["gap"] >= last["primal"] - p_star - 1e-12           # the certificate bounds the suboptimality
    assert last["dual"] <= p_star + 1e-12
    assert all(r["passes"] > q["passes"] for q, r in zip(hist, hist[1:]))
    torch.testing.assert_close(s.model_point()[0], w_star, rtol=0, atol=1e-2)


@pytest.mark.slow          # the slow tier (SSVM_SLOW=1): keeps the fast CI tier short
def test_deg_certificate_on_the_way_to_the_optimum():
    model, data = tiny_problem()
    p_star, w_star = optimum(model, data, 1.0)
    s = make_solver(make_store(model, data, 1.0), SolverConfig(solver="deg", passes=20000, gap_check=5000,
                                                                step_size=100))
    hist = s.run()
    gaps = [r["gap"] for r in hist[1:]]
    assert all(r["gap"] >= r["primal"] - p_star - 1e-12 and r["dual"] <= p_star + 1e-12 for r in hist)
    assert all(r["primal_last"] >= p_star - 1e-12 and r["primal_z"] >= p_star - 1e-12 for r in hist)
    assert gaps[-1] < gaps[0] and hist[-1]["primal"] - p_star < 1e-4


def test_eg_raises_the_dual_at_every_step(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(30))
    d = make_store(ChainModel.for_data(sub), sub, 0.01)
    s = make_solver(d, SolverConfig(solver="eg", sampling="perm", passes=3, gap_check=1, step_size=30000))
    duals = []
    for _ in range(3 * sub.n):
        s.step(s.sampler.next())
        duals.append(d.dual())
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:]))
    assert s.refused > 0                                  # step 30000 is too long for some blocks: halved
    w = d.w.clone()
    d.recompute()
    torch.testing.assert_close(d.w, w, rtol=0, atol=1e-10)    # the incremental w is the blocks' w


def test_working_set_qp_equals_an_independent_solve():
    rng = np.random.default_rng(0)
    for m in (1, 4, 30):
        A = rng.normal(size=(m, 20)) * 5
        lam, b = 0.05, rng.uniform(0.2, 1.0, size=m)
        Q = lam * A @ A.T

        def neg(x):
            return -(b @ x - 0.5 * x @ Q @ x)
        ref = minimize(neg, np.full(m, 0.5 / m), jac=lambda x: Q @ x - b, bounds=[(0, None)] * m, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda x: 1 - x.sum(), "jac": lambda x: -np.ones((1, m))}],
                       options={"ftol": 1e-15, "maxiter": 2000})
        x = solve_working_set_qp(Q, b, "daqp")
        assert (x >= 0).all() and x.sum() <= 1 + 1e-12
        assert -neg(x) == pytest.approx(-ref.fun, abs=1e-10)


@pytest.mark.long
def test_cutting_plane_qp_on_its_working_set_and_its_gap_bounds_the_suboptimality(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(12))
    model, lam = ChainModel.for_data(sub), 0.05
    p_star, _ = optimum(model, sub, lam)
    d = make_store(model, sub, lam)
    s = make_solver(d, SolverConfig(solver="cutting-plane", passes=40, gap_check=5))
    hist = s.run()
    for r in hist[1:]:
        assert r["gap"] >= r["primal"] - p_star - 1e-10 >= -1e-10
    # the working set's QP, solved independently, has the dual value the store reports
    A, b = s.ws.dense().numpy(), s.b
    Q = lam * A @ A.T
    ref = minimize(lambda x: -(b @ x - 0.5 * x @ Q @ x), np.full(len(b), 0.5 / len(b)), jac=lambda x: Q @ x - b,
                   bounds=[(0, None)] * len(b), method="SLSQP", options={"ftol": 1e-15, "maxiter": 5000},
                   constraints=[{"type": "ineq", "fun": lambda x: 1 - x.sum(), "jac": lambda x: -np.ones((1, len(b)))}])
    assert d.dual() == pytest.approx(-ref.fun, abs=1e-8)
    assert d.dual() == pytest.approx(float(s.alpha @ b) - 0.5 * lam * float(d.w @ d.w), abs=1e-12)
    assert hist[-1]["gap"] < hist[1]["gap"]


@pytest.mark.parametrize("solver,cache", [("eg", False), ("deg", False), ("cutting-plane", False),
                                          ("cutting-plane", True)])
def test_resume_is_exact(ocr_small, tmp_path, solver, cache):
    train, _ = ocr_small
    sub = train.subset(range(20))
    m = ChainModel.for_data(sub)
    cfg = dict(solver=solver, sampling="perm", gap_check=2, seed=4, cache=cache)

    def strip(h):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in h]
    full = make_solver(make_store(m, sub, 0.02), SolverConfig(passes=8, **cfg))
    h_full = strip(full.run())
    part = make_solver(make_store(m, sub, 0.02), SolverConfig(passes=4, **cfg))
    part.run()
    save_checkpoint(tmp_path / "ck.pt", part.state_dict())
    resumed = make_solver(make_store(m, sub, 0.02), SolverConfig(passes=8, **cfg))
    resumed.load_state_dict(load_checkpoint(tmp_path / "ck.pt"))
    assert strip(resumed.run()) == h_full
    assert torch.equal(resumed.model_point()[0], full.model_point()[0])


def test_clear_errors():
    from ssvm_torch import load_task
    task = load_task("scene")
    with pytest.raises(SSVMInputError, match="marginal moves"):
        make_solver(task.store(0.01), SolverConfig(solver="eg"))
    with pytest.raises(SSVMInputError, match="relaxation"):
        make_solver(task.store(0.01), SolverConfig(solver="deg"))
    from ssvm_torch.models import EdgeChainModel
    from test_chain_edges import random_edge_chains
    edges = random_edge_chains(0)
    with pytest.raises(SSVMInputError, match="'eg' needs a store with marginal moves"):
        make_solver(make_store(EdgeChainModel.for_data(edges), edges, 0.1), SolverConfig(solver="eg"))
    with pytest.raises(SSVMInputError, match="step_size"):
        SolverConfig(solver="deg", step_size=-1).validate()
    with pytest.raises(SSVMInputError, match="qp_solver"):
        SolverConfig(solver="cutting-plane", qp_solver="cplex").validate()
    model, data = tiny_problem()
    with pytest.raises(SSVMInputError, match="make_solver"):
        Solver(make_store(model, data, 0.1), SolverConfig(solver="eg"))


def tiny_matching(seed=0, n_ex=3):
    from ssvm_torch.data.examples import PairData
    from ssvm_torch.models.matching import MatchingModel
    rng = np.random.default_rng(seed)
    X, Ne, Nf, A = [], [], [], []
    for _ in range(n_ex):
        m, n = rng.integers(1, 4), rng.integers(1, 4)
        X.append(rng.normal(size=(m, n, 2)))
        Ne.append(rng.normal(size=(m, 1)))
        Nf.append(rng.normal(size=(n, 1)))
        a, perm = -np.ones(m, dtype=int), rng.permutation(n)
        for j in range(min(m, n)):
            if rng.random() < 0.7:
                a[j] = perm[j]
        A.append(a)
    data = PairData(X, Ne, Nf, A)
    return MatchingModel.for_data(data), data


def test_matching_relaxation_is_exact_at_alignments_and_linear():
    from ssvm_torch.stores import MatchingDual
    model, data = tiny_matching(1, n_ex=5)
    d = make_store(model, data, 0.1)
    assert isinstance(d, MatchingDual)
    rng = np.random.default_rng(0)
    idx = torch.arange(data.n)
    for _ in range(5):
        w = torch.as_tensor(rng.normal(size=model.d))
        labels = model.predict(w, data, idx)
        z = torch.zeros_like(d.gold)
        off = 0
        for k in range(data.n):
            m, n = data.X[k].shape[:2]
            for j, a in enumerate(labels[k, :m].tolist()):
                if a >= 0:
                    z[off + j * n + a] = 1.0
            off += m * n
        torch.testing.assert_close(d.phi_relaxed(z), model.phi(data, idx, labels), rtol=0, atol=1e-12)
        torch.testing.assert_close(d.loss_relaxed(z), model.loss(data, idx, labels), rtol=0, atol=1e-12)
        theta = d.relaxed_scores(w)[0]          # <w, phi(z) - phi(z_gt)> = <theta(w), z - z_gt>
        assert float(((d.phi_relaxed(z) - d.phi_gt) @ w).sum()) == pytest.approx(float(theta @ (z - d.gold)), abs=1e-12)


def test_matching_projection_equals_an_independent_solve():
    model, data = tiny_matching(2, n_ex=4)
    d = make_store(model, data, 0.1)
    a = d.gold + torch.as_tensor(np.random.default_rng(0).normal(scale=0.7, size=d.gold.shape[0]))
    z = d.project(a).numpy()
    G = d._G.toarray()
    assert (z >= 0).all() and (G @ z <= 1 + 1e-12).all()
    an = a.numpy()
    ref = minimize(lambda x: 0.5 * ((x - an) ** 2).sum(), np.zeros_like(an), jac=lambda x: x - an,
                   bounds=[(0, None)] * len(an), method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000},
                   constraints=[{"type": "ineq", "fun": lambda x: 1 - G @ x, "jac": lambda x: -G}])
    np.testing.assert_allclose(z, ref.x, rtol=0, atol=1e-6)


@pytest.mark.long
def test_deg_on_matchings_reaches_the_bcfw_optimum():
    model, data = tiny_matching()
    p_star, _ = optimum(model, data, 1.0)
    s = make_solver(make_store(model, data, 1.0), SolverConfig(solver="deg", passes=2000, gap_check=1000, step_size=10))
    hist = s.run()
    assert hist[-1]["primal"] - p_star < 1e-5
    assert all(r["gap"] >= r["primal"] - p_star - 1e-12 for r in hist)
    assert hist[-1]["geometry"] == "euclidean"


@pytest.mark.slow          # the slow tier (SSVM_SLOW=1): keeps the fast CI tier short
def test_cutting_plane_inference_cache_saves_oracle_calls(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(40))
    model, lam = ChainModel.for_data(sub), 0.05
    p_star, _ = optimum(model, sub, lam)
    calls = {}
    for cache in (False, True):
        d = make_store(model, sub, lam)
        s = make_solver(d, SolverConfig(solver="cutting-plane", cache=cache, passes=200, gap_check=1,
                                        gap_threshold=1e-2))
        hist = s.run()
        assert hist[-1]["gap"] <= 1e-2 and all(r["gap"] >= r["primal"] - p_star - 1e-10 for r in hist)
        calls[cache] = hist[-1]["oracle_calls"]
        if cache:
            assert hist[-1]["cache_hits"] > 0
    assert calls[True] < calls[False]


def test_the_batched_cache_round_is_the_per_block_one(ocr_small):
    """The numba chain store scores every block's cache in one call (ChainDual.cached_best): the same labelings
    and losses as corner_gaps / loss_of block by block, so the cutting plane with the cache follows the same
    trajectory bit for bit (records, working set, w) with and without the batched round; a latent completion's
    unobserved positions stay out of its losses."""
    train, _ = ocr_small
    sub = train.subset(range(60))
    model, lam = ChainModel.for_data(sub), 0.05
    runs = []
    for batched in (True, False):
        d = make_store(model, sub, lam)
        s = make_solver(d, SolverConfig(solver="cutting-plane", cache=True, passes=12, gap_check=1, cache_F=0.05))
        assert s.batched                                   # the numba store offers the batched round
        s.batched, s.stacks = batched, s.stacks if batched else None
        hist = s.run()
        runs.append((hist, d.w.clone()))
        assert hist[-1]["cache_hits"] > 0
    (h1, w1), (h2, w2) = runs
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in h1] == \
        [{k: v for k, v in r.items() if k != "time_s"} for r in h2] and torch.equal(w1, w2)
    from ssvm_torch.latent import hide_labels
    part = hide_labels(sub, 0.5, 1)
    d = make_store(model, part, lam)
    rng = np.random.default_rng(0)
    stacks = [rng.integers(0, model.K, size=(4, int(t))).astype(np.int64) for t in part.lengths.tolist()]
    labels, losses = d.cached_best(stacks)
    best = [ys[int(np.argmax(d.corner_gaps(i, list(ys))))] for i, ys in enumerate(stacks)]
    assert torch.equal(labels, d.stack_labelings(best))
    assert all(losses[i] == d.loss_of(i, y) for i, y in enumerate(best))
    assert not make_store(ChainModel.for_data(sub), sub, lam, kernels="torch").batched_cache


@pytest.mark.long
def test_cutting_plane_under_box_constraints():
    from ssvm_torch import load_task
    task = load_task("segmentation-synth", train_size=12)
    lam = 0.01
    ref = Solver(task.store(lam), SolverConfig(solver="bcfw", step="pairwise", passes=500, gap_check=20)).run()[-1]
    d = task.store(lam)
    idx, lower, _ = d.box()
    s = make_solver(d, SolverConfig(solver="cutting-plane", passes=300, gap_check=5, gap_threshold=1e-9))
    hist = s.run()
    last = hist[-1]
    assert bool((d.w[idx] >= lower - 1e-12).all())
    assert last["gap"] <= 1e-9
    # two independent certificates agree: BCPFW's dual <= the cutting plane's primal and vice versa
    assert ref["dual"] <= last["primal"] + 1e-12 and last["dual"] <= ref["primal"] + 1e-12
    p_star = last["dual"]                                      # within 1e-9 of P*
    assert all(r["gap"] >= r["primal"] - p_star - 1e-9 for r in hist)
    # the working set's primal QP min lam/2 |w|^2 + xi (xi >= b_c - lam <a_c, w>, w in the box), solved
    # independently, has the value of the store's (App. H) dual
    A, b, dim = s.ws.dense().numpy(), s.b, d.w.shape[0]
    bounds = [(None, None)] * dim + [(0, None)]
    for j in idx.tolist():
        bounds[j] = (0, None)
    res = minimize(lambda x: 0.5 * lam * x[:dim] @ x[:dim] + x[dim], np.zeros(dim + 1),
                   jac=lambda x: np.r_[lam * x[:dim], 1.0], bounds=bounds, method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda x: lam * A @ x[:dim] + x[dim] - b,
                                 "jac": lambda x: np.hstack([lam * A, np.ones((len(b), 1))])}],
                   options={"ftol": 1e-15, "maxiter": 2000})
    assert d.dual() == pytest.approx(res.fun, abs=1e-8)


def test_eg_kernel_takes_the_torch_paths_steps(ocr_small):
    """The numba EG step (oracles/eg_kernels.py) and the torch path it replaces on the CPU take the
    same steps: the same records and w after 3 passes with refused tries (step 30000)."""
    train, _ = ocr_small
    sub = train.subset(range(30))
    runs = []
    for kernels in ("numba", "torch"):
        s = make_solver(make_store(ChainModel.for_data(sub), sub, 0.01, kernels=kernels),
                        SolverConfig(solver="eg", sampling="uniform", passes=3, gap_check=1, step_size=30000, seed=2))
        runs.append((s.run(), s.model_point()[0].clone(), s.refused))
    (h1, w1, r1), (h2, w2, r2) = runs
    assert r1 == r2 > 0
    assert [r["passes"] for r in h1] == [r["passes"] for r in h2]
    for key in ("primal", "dual", "gap"):          # scaled FB (numba) and log space (torch) round differently
        np.testing.assert_allclose([r[key] for r in h1], [r[key] for r in h2], rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(w1, w2, rtol=0, atol=1e-9)             # |w| ~ 1: 3 passes of rounding


def test_eg_start_choice(ocr_small):
    """``eg_start='uniform'`` is Collins et al.'s uniform alpha_i (theta = 0: every position's marginal
    1/K); the default margin start theta_i = m S(y_i) takes the smallest integer m whose dual is at
    least -0.01 P(0) (checked here from fresh stores at m and m - 1, at two lam whose m differ); a
    bad value is refused."""
    train, _ = ocr_small
    sub = train.subset(range(10))
    model = ChainModel.for_data(sub)
    d = make_store(model, sub, 0.01)
    make_solver(d, SolverConfig(solver="eg", eg_start="uniform", passes=1))
    assert torch.allclose(d.Mu, torch.full_like(d.Mu, 1 / 26))

    def dual_at(lam, m):
        e = make_store(model, sub, lam)
        K = e.model.K
        z, zt = torch.zeros(e.n, K, dtype=e.dtype), torch.zeros(e.n, K, K, dtype=e.dtype)
        Mu, Mt, _ = e.gibbs_marginals(m * torch.nn.functional.one_hot(e.Y, K).to(e.dtype), e.lengths, z, z, zt)
        e.set_marginals(Mu, Mt)
        return e.dual(), e.primal_at(torch.zeros_like(e.w))

    margins = []
    for lam in (0.01, 1e-3):
        d = make_store(model, sub, lam)
        hist = make_solver(d, SolverConfig(solver="eg", passes=1, gap_check=1)).run()
        m = hist[-1]["start_margin"]
        (dm, p0), (below, _) = dual_at(lam, m), dual_at(lam, m - 1)
        assert m == int(m) and dm >= -0.01 * p0 > below
        assert hist[-1]["start_passes"] >= 2
        margins.append(m)
    assert margins[1] > margins[0]                # a smaller lam n needs less mass on the wrong labelings
    with pytest.raises(SSVMInputError, match="eg_start"):
        SolverConfig(solver="eg", eg_start="zero").validate()
