"""Chains with edge-observation features: the oracle and decoding against brute force over all
labelings of the dense joint feature map, the compact store's line-search terms and gaps against
dense blocks and an independent primal/dual computation, exact resume, refused combinations, and
the edge items of the template engine on CoNLL."""
import itertools
import warnings

import numpy as np
import pytest
import torch

from ssvm_torch import ChainData, SolverConfig, SSVMInputError, make_store
from ssvm_torch.data.templates import Template, featurize
from ssvm_torch.models import EdgeChainModel
from ssvm_torch.solvers import Solver

from conftest import assert_tau_one_takes_bcfw_steps, without_time

LAM = 0.3


def random_edge_chains(seed, n=7, K=3, F=3, A=2, tmax=4):
    rng = np.random.default_rng(seed)
    xs, ys, es = [], [], []
    for i in range(n):
        T = 1 if i == 0 else int(rng.integers(2, tmax + 1))     # one length-1 sequence on purpose
        xs.append(rng.normal(size=(T, F)))
        ys.append(rng.integers(0, K, size=T))
        e = (rng.random((T, A)) < 0.6) * rng.choice([1.0, 2.0], size=(T, A))
        e[0] = 0.0                                               # no transition enters position 0
        es.append(e)
    base = ChainData.from_sequences(xs, ys, K)
    with warnings.catch_warnings():             # torch flags sparse CSR as beta
        warnings.simplefilter("ignore", UserWarning)
        E = torch.tensor(np.concatenate(es)).to_sparse_csr()
    return ChainData(base.X, base.Y, base.offsets, K, E=E)


def dense_parts(data, i):
    s, e = int(data.offsets[i]), int(data.offsets[i + 1])
    X = torch.cat([data.X[s:e], torch.ones(e - s, 1, dtype=torch.float64)], 1)
    return X, data.E.to_dense()[s:e], data.Y[s:e]


def brute_force(model, data, i, w, augmented):
    """argmax_y <w, phi(x_i, y)> (+ L_i(y), the model's loss) over all K^T labelings, with the dense
    feature map."""
    X, Ec, gt = dense_parts(data, i)
    c = float(model.token_loss(torch.tensor([X.shape[0]]))[0])
    best, arg = -np.inf, None
    for y in itertools.product(range(model.K), repeat=X.shape[0]):
        y = torch.tensor(y)
        v = float(w @ model.joint_feature(X, y, Ec)) + (c * float((y != gt).sum()) if augmented else 0.0)
        if v > best + 1e-12:
            best, arg = v, y
    return arg, best


def assert_gap_is_the_brute_force_primal_minus_dual(model, data, store):
    """The store's exact gap pass sums to primal - dual at its point, the primal's hinge terms by brute force."""
    w = store.w
    H = []
    for i in range(data.n):
        X, Ec, gt = dense_parts(data, i)
        H.append(brute_force(model, data, i, w, augmented=True)[1] - float(w @ model.joint_feature(X, gt, Ec)))
    primal = 0.5 * LAM * float(w @ w) + sum(H) / data.n
    assert store.gap_pass().block_gaps.sum().item() == pytest.approx(primal - (-0.5 * LAM * float(w @ w) + store.ell),
                                                                     abs=1e-10)


@pytest.mark.parametrize("seed,loss", [(0, "normalized"), (1, "normalized"), (2, "hamming"), (3, "hamming")])
def test_oracle_and_line_search_terms_against_brute_force_and_dense_blocks(seed, loss):
    data = random_edge_chains(seed)
    model = EdgeChainModel.for_data(data, loss)
    assert model.d == model.d0 + 2 * model.P and model.P <= model.K ** 2
    store = make_store(model, data, LAM)
    solver = Solver(store, SolverConfig(passes=3, gap_check=1, seed=seed))
    solver.run()                                                 # a dual point away from the start
    w = store.w.clone()
    X_all = [dense_parts(data, i) for i in range(data.n)]
    for i in range(data.n):
        corner = store.fw_corner(i)
        y_star, best = brute_force(model, data, i, w, augmented=True)
        X, Ec, gt = X_all[i]
        y = torch.as_tensor(corner.labels)
        c = 1.0 / len(y) if loss == "normalized" else 1.0                 # the loss of one wrong token
        assert corner.loss * data.n == pytest.approx(c * float((y != gt).sum()), abs=1e-12)
        score = float(w @ model.joint_feature(X, y, Ec)) + c * float((y != gt).sum())
        assert score == pytest.approx(best, abs=1e-10)           # an argmax (ties may pick another)
        w_s = (model.joint_feature(X, gt, Ec) - model.joint_feature(X, torch.as_tensor(corner.labels), Ec)) \
            / (LAM * data.n)
        w_i = store.block_w(i)
        assert corner.dot == pytest.approx(float((w_i - w_s) @ w), abs=1e-10)
        assert corner.sqnorm == pytest.approx(float((w_i - w_s) @ (w_i - w_s)), abs=1e-10)
    # w is the sum of the blocks, and recomputing it from the statistics changes nothing
    assert torch.allclose(sum(store.block_w(i) for i in range(data.n)), w, atol=1e-12)
    store.recompute()
    assert torch.allclose(store.w, w, atol=1e-12)
    # prediction = brute force without the loss
    pred = model.predict_ragged(w, data)
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        y_hat, best = brute_force(model, data, i, w, augmented=False)
        X, Ec, _ = X_all[i]
        assert float(w @ model.joint_feature(X, pred[s:e], Ec)) == pytest.approx(best, abs=1e-10)


@pytest.mark.parametrize("loss", ["normalized", "hamming"])
def test_gap_pass_equals_an_independent_primal_dual_computation(loss):
    data = random_edge_chains(11, n=6)
    model = EdgeChainModel.for_data(data, loss)
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=4, gap_check=2, sampling="uniform")).run()
    gp = store.gap_pass()
    w = store.w
    H = []
    for i in range(data.n):
        X, Ec, gt = dense_parts(data, i)
        _, best = brute_force(model, data, i, w, augmented=True)
        H.append(best - float(w @ model.joint_feature(X, gt, Ec)))      # max_y L(y) - <w, psi_i(y)>
    primal = 0.5 * LAM * float(w @ w) + sum(H) / data.n
    dual = -0.5 * LAM * float(w @ w) + store.ell
    assert torch.allclose(gp.H, torch.tensor(H, dtype=torch.float64), atol=1e-10)
    assert float(gp.block_gaps.sum()) == pytest.approx(primal - dual, abs=1e-10)
    assert float(gp.block_gaps.min()) >= -1e-12


def test_gap_pass_and_prediction_are_the_same_in_chunks_of_blocks(monkeypatch):
    """The gap pass and prediction run over chunks of sequences (only a chunk's unaries at a time);
    chunks of 2 sequences give what one chunk of all gives, bit for bit."""
    import ssvm_torch.models.chain_edges as chain_edges
    data = random_edge_chains(5, n=7)
    model = EdgeChainModel.for_data(data, "hamming")
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=3, gap_check=3, sampling="uniform")).run()
    whole, labels = store.gap_pass(), model.predict_ragged(store.w, data)
    monkeypatch.setattr(chain_edges, "CHUNK_BLOCKS", 2)
    assert len(chain_edges.block_chunks(data.n)) == 4
    parts = store.gap_pass()
    for name in ("labels", "loss", "H", "block_gaps"):
        assert torch.equal(getattr(parts, name), getattr(whole, name)), name
    assert torch.equal(model.predict_ragged(store.w, data), labels)
    assert float(whole.block_gaps.sum()) > 0


@pytest.mark.parametrize("sparse", [False, True])
def test_minibatch_moves_every_block_to_its_dense_corner_and_w_follows(sparse):
    """A mini-batch step of tau = 3 blocks: each block's dense w_i moves to (1 - gamma) w_i + gamma w_s,i
    with w_s,i = (phi(y_i) - phi(y*_i)) / (lam n) from the dense feature map, the gaps are the blocks'
    FW gaps, and w after the move is what the blocks recompute to (the direction's chain and edge
    parts); the sparse direction (CoNLL's d >= 2^20) gives the dense one's move."""
    data = random_edge_chains(8, n=7)
    model = EdgeChainModel.for_data(data, "hamming")
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=2, gap_check=2, sampling="uniform", seed=2)).run()
    store.sparse_direction = sparse
    idx = torch.tensor([5, 0, 3])
    singles = [store.fw_corner(i) for i in idx.tolist()]
    before = [store.block_w(i) for i in idx.tolist()]
    corners = store.batch_corners(idx)
    assert corners.dw.is_sparse == sparse
    assert torch.allclose(corners.gaps, torch.tensor([c.gap for c in singles], dtype=torch.float64), atol=1e-12)
    gamma = 0.37
    store.batch_move(corners, gamma)
    for b, i in enumerate(idx.tolist()):
        X, Ec, gt = dense_parts(data, i)
        ystar = torch.as_tensor(singles[b].labels)
        w_s = (model.joint_feature(X, gt, Ec) - model.joint_feature(X, ystar, Ec)) / (LAM * data.n)
        assert torch.allclose(store.block_w(i), (1 - gamma) * before[b] + gamma * w_s, atol=1e-12), i
    w = store.w.clone()
    store.recompute()
    assert torch.allclose(store.w, w, atol=1e-12)


def test_minibatch_run_reaches_the_independent_duality_gap():
    """Mini-batch BCFW (tau = 3, gap sampling) on the edge store lowers the gap, and its exact gap is
    the independent primal - dual of the brute-force oracle."""
    data = random_edge_chains(11, n=6)
    model = EdgeChainModel.for_data(data, "normalized")
    store = make_store(model, data, LAM)
    hist = Solver(store, SolverConfig(passes=12, gap_check=4, sampling="gap", batch_size=3, seed=1)).run()
    assert hist[-1]["gap"] < hist[0]["gap"]
    assert_gap_is_the_brute_force_primal_minus_dual(model, data, store)


def test_minibatch_of_one_takes_the_fw_block_steps():
    """MiniBatchStep with tau = 1 and FWStep, driven by samplers of the same seed, take the same steps
    on the edge store: the same blocks, gaps and w."""
    data = random_edge_chains(3, n=7)
    model = EdgeChainModel.for_data(data, "hamming")
    assert_tau_one_takes_bcfw_steps(lambda: make_store(model, data, LAM))


def test_state_round_trip_and_warm_rescale_keep_w():
    data = random_edge_chains(5)
    model = EdgeChainModel.for_data(data)
    a = make_store(model, data, LAM)
    Solver(a, SolverConfig(passes=3, gap_check=1)).run()
    b = make_store(model, data, LAM)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.Me, b.Me) and torch.equal(a.w, b.w)
    for i in range(data.n):                                      # the same next steps
        assert np.array_equal(a.fw_corner(i).labels, b.fw_corner(i).labels)
    w = a.w.clone()
    a.rescale(LAM / 2, 0.5)                                      # keep-primal warm start of the lambda grid
    assert torch.allclose(a.w, w, atol=1e-12)


def dense_w_of(model, data, i, y):
    """w_s(y) = (phi(y_i) - phi(y)) / (lam n): block i's w at the corner y, from the dense feature map."""
    X, Ec, gt = dense_parts(data, i)
    return (model.joint_feature(X, gt, Ec) - model.joint_feature(X, torch.as_tensor(y), Ec)) / (LAM * data.n)


def test_active_set_terms_against_dense_blocks():
    """The cache's and the pairwise / away steps' terms with edge features, against dense blocks: the gaps towards
    stored corners, ||w(P) - w(Q)||^2 (P, Q a corner or the block's point), the block's w after a pair move (and
    w = the sum of the blocks'), and SSG's w += coef psi_i(y*)."""
    data = random_edge_chains(6, n=6, K=3)
    model = EdgeChainModel.for_data(data, "hamming")
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=3, gap_check=3, sampling="uniform", seed=4)).run()
    rng = np.random.default_rng(5)
    for i in range(data.n):
        T = int(data.lengths[i])
        X, Ec, gt = dense_parts(data, i)
        corners = [gt.numpy(), np.asarray(store.fw_corner(i).labels), rng.integers(0, model.K, size=T)]
        c = float(model.token_loss(torch.tensor([T]))[0])
        w_i = store.block_w(i)
        dense = [LAM * float((w_i - dense_w_of(model, data, i, y)) @ store.w) - float(store.ell_i[i])
                 + c * float((torch.as_tensor(y) != gt).sum()) / data.n for y in corners]
        np.testing.assert_allclose(store.corner_gaps(i, np.stack(corners)), dense, atol=1e-12)
        for P, Q in ((corners[1], corners[2]), (None, corners[2]), (corners[1], None)):
            wP, wQ = (w_i if y is None else dense_w_of(model, data, i, y) for y in (P, Q))
            assert store.pair_sqnorm(i, P, Q) == pytest.approx(float((wP - wQ) @ (wP - wQ)), rel=1e-12, abs=1e-15)
            gamma = 0.2
            store.pair_move(i, P, Q, 0.0, 0.0, gamma)
            assert torch.allclose(store.block_w(i), w_i + gamma * (wP - wQ), atol=1e-12)
            w_i = store.block_w(i)
        w = store.w.clone()
        store.recompute()
        assert torch.allclose(store.w, w, atol=1e-12)
    before = store.w.clone()
    corner = store.fw_corner(2)
    store.add_psi(2, corner, 0.3)
    X, Ec, gt = dense_parts(data, 2)
    psi = model.joint_feature(X, gt, Ec) - model.joint_feature(X, torch.as_tensor(corner.labels), Ec)
    assert torch.allclose(store.w, before + 0.3 * psi, atol=1e-12)


@pytest.mark.parametrize("options", [dict(step="pairwise"), dict(step="away"), dict(cache=True),
                                     dict(step="pairwise", cache=True)], ids=["pairwise", "away", "cache",
                                                                              "pairwise-cache"])
def test_active_set_runs_reach_the_independent_duality_gap(options):
    """BCFW with the paper's pairwise / away steps and the cache on the edge store: the gap falls, and the exact
    gap is the independent primal - dual of the brute-force oracle."""
    data = random_edge_chains(11, n=6)
    model = EdgeChainModel.for_data(data, "normalized")
    store = make_store(model, data, LAM)
    hist = Solver(store, SolverConfig(passes=12, gap_check=4, sampling="gap", seed=1, **options)).run()
    assert hist[-1]["gap"] < 0.5 * hist[0]["gap"]
    assert hist[-1]["pairwise_steps" if options.get("step") == "pairwise" else "steps"] > 0
    assert_gap_is_the_brute_force_primal_minus_dual(model, data, store)


def test_batch_fw_and_path_terms_against_dense_blocks():
    """The batch FW corner (w_s, ell_s) of a gap pass and the move of every block towards it, the max margins and
    lam <w_i, w> (the regularization path's terms), against the dense feature map and brute force."""
    data = random_edge_chains(9, n=6)
    model = EdgeChainModel.for_data(data, "hamming")
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=2, gap_check=2, sampling="uniform", seed=3)).run()
    gp = store.gap_pass()
    w_s, ell_s = store.corner_point(gp)
    labels = [gp.labels[int(data.offsets[i]):int(data.offsets[i + 1])] for i in range(data.n)]
    dense = sum(dense_w_of(model, data, i, y) for i, y in enumerate(labels))
    assert torch.allclose(w_s, dense, atol=1e-12) and ell_s == pytest.approx(float(gp.loss.sum()))
    before = [store.block_w(i) for i in range(data.n)]
    gamma = 0.3
    store.move_all(gp, w_s, ell_s, gamma)
    for i in range(data.n):
        assert torch.allclose(store.block_w(i), (1 - gamma) * before[i] + gamma * dense_w_of(model, data, i, labels[i]),
                              atol=1e-12), i
    w = store.w.clone()
    store.recompute()
    assert torch.allclose(store.w, w, atol=1e-12)
    wdots = store.block_wdots()
    margins = store.max_margins(-2.0 * w)
    for i in range(data.n):
        assert float(wdots[i]) == pytest.approx(LAM * float(store.block_w(i) @ store.w), abs=1e-12)
        X, Ec, gt = dense_parts(data, i)
        best = brute_force(model, data, i, -2.0 * w, augmented=False)[1]
        assert float(margins[i]) == pytest.approx(best - float(-2.0 * w @ model.joint_feature(X, gt, Ec)), abs=1e-10)


def test_batch_fw_run_and_the_path_are_certified():
    """Batch FW on the edge store reaches the brute-force primal - dual; the regularization path's pieces are
    certified at lambdas between its breakpoints (the gap of path.w(lam) recomputed from scratch)."""
    from ssvm_torch.path import path_gap, regularization_path
    data = random_edge_chains(11, n=6)
    model = EdgeChainModel.for_data(data, "normalized")
    store = make_store(model, data, LAM)
    hist = Solver(store, SolverConfig(solver="fw", passes=10, gap_check=2)).run()
    assert hist[-1]["gap"] < 0.5 * hist[0]["gap"]
    assert_gap_is_the_brute_force_primal_minus_dual(model, data, store)
    eps = 0.05
    path = regularization_path(make_store(model, data, 1.0), eps, kappa=0.9, lam_min=3e-2,
                               config=SolverConfig(solver="bcfw", sampling="gap", gap_check=1, cache=True))
    assert len(path.lambdas) >= 3
    checker = make_store(model, data, 1.0)
    for lam in [float(v) for v in path.lambdas[:4]] + [max(path.lam_end, 3e-2), 0.5 * float(path.lambdas[0])]:
        assert -1e-9 <= path_gap(checker, path, lam) <= eps + 1e-9, lam


@pytest.mark.parametrize("step", ["fw", "pairwise"])
def test_lazy_average_equals_the_explicit_recursion(step):
    """Weighted averaging on the edge store: the lazy average (the shadow vector's edge rows move with w's) equals
    the O(d) recursion of Lacoste-Julien et al. 2013."""
    from ssvm_torch.solvers.averaging import Averager
    data = random_edge_chains(12, n=7)
    model = EdgeChainModel.for_data(data, "hamming")
    cfg = SolverConfig(solver="bcfw", sampling="gap", step=step, passes=8, gap_check=2, averaging=True,
                       recompute_every=2, seed=2)
    lazy = Solver(make_store(model, data, LAM), cfg)
    lazy.run()
    explicit = Solver(make_store(model, data, LAM), cfg)
    explicit.averager = Averager(explicit.dual, lazy=False)
    explicit.run()
    edge = slice(model.d0, model.d)
    assert torch.allclose(lazy.w_avg, explicit.w_avg, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(lazy.w_avg[edge], lazy.dual.w[edge])           # the edge rows are averaged too


def test_joint_labelings_give_the_dense_constraints_products_and_point():
    """The cutting plane's joint constraints kept as labelings (joint_dots / joint_point) equal the dense corners
    a(y) of corner_point, the edge rows included: products with corners and a random w, the weighted point."""
    from ssvm_torch.solvers.working_set import DenseWorkingSet, LabelingWorkingSet
    data = random_edge_chains(21, n=6)
    model = EdgeChainModel.for_data(data, "hamming")
    store = make_store(model, data, LAM)
    dense, compact = DenseWorkingSet(store), LabelingWorkingSet(store)
    rng = torch.Generator().manual_seed(0)
    corners = []
    for _ in range(3):
        store.set_point(torch.randn(model.d, generator=rng, dtype=torch.float64), 0.0)
        gp = store.gap_pass()
        a, _ = store.corner_point(gp)
        assert float(a[model.d0:].abs().sum()) > 0                    # the corner has edge rows
        np.testing.assert_allclose(compact.lam_dots(a), dense.lam_dots(a), rtol=1e-12, atol=1e-12)
        dense.append(a, gp)
        compact.append(a, gp)
        corners.append(gp.labels)
    w = torch.randn(model.d, generator=rng, dtype=torch.float64)
    np.testing.assert_allclose(compact.lam_dots(w), dense.lam_dots(w), rtol=1e-12, atol=1e-12)
    # an independent product: lam <a(y), w> = sum_i <w, phi_i(y_gt) - phi_i(y)> / n with the dense feature map
    off = data.offsets
    for c, y in enumerate(corners):
        ref = 0.0
        for i in range(data.n):
            X, Ec, gt = dense_parts(data, i)
            yi = y[int(off[i]):int(off[i + 1])].long()
            ref += float(w @ (model.joint_feature(X, gt, Ec) - model.joint_feature(X, yi, Ec))) / data.n
        assert float(compact.lam_dots(w)[c]) == pytest.approx(ref, abs=1e-10)
    alpha = np.array([0.2, 0.0, 0.5])                 # sum < 1: the rest on the ground truth (psi = 0)
    torch.testing.assert_close(compact.point(alpha), dense.point(alpha), rtol=0, atol=1e-12)


def test_cutting_plane_runs_certified_on_labelings_as_on_dense_rows_and_resumes(tmp_path):
    """The 1-slack cutting plane on the edge store: the labelings' run is the dense rows' run, its last gap is the
    brute-force primal (edge scores included) - dual at its point and below 1e-6 of the first, and a checkpoint resumes it record for record."""
    from ssvm_torch.outputs import load_checkpoint, save_checkpoint
    from ssvm_torch.solvers import make_solver
    data = random_edge_chains(22, n=7)
    model = EdgeChainModel.for_data(data, "normalized")

    def run(form, passes=45, state=None):
        s = make_solver(make_store(model, data, LAM), SolverConfig(solver="cutting-plane", passes=passes,
                                                                   gap_check=5, working_set=form))
        if state is not None:
            s.load_state_dict(state)
        return s, s.run()
    _, dense = run("dense")
    compact, hist = run("labelings")
    assert [r["working_set"] for r in hist] == [r["working_set"] for r in dense]
    for key in ("primal", "dual", "gap"):
        np.testing.assert_allclose([r[key] for r in hist], [r[key] for r in dense], rtol=0, atol=1e-9)
    assert hist[-1]["gap"] < 1e-6 * hist[0]["gap"]
    store, w = compact.dual, compact.dual.w
    H = []
    for i in range(data.n):
        X, Ec, gt = dense_parts(data, i)
        H.append(brute_force(model, data, i, w, augmented=True)[1] - float(w @ model.joint_feature(X, gt, Ec)))
    primal = 0.5 * LAM * float(w @ w) + sum(H) / data.n
    # the store holds the last iterate (the record's *_last; its model is the best certified point, best_point.py)
    dual = -0.5 * LAM * float(w @ w) + store.ell
    assert hist[-1]["dual"] == pytest.approx(dual, abs=1e-12)
    assert hist[-1]["gap_last"] == pytest.approx(primal - dual, abs=1e-10)
    part, _ = run("labelings", passes=20)
    save_checkpoint(tmp_path / "ck.pt", part.state_dict())
    _, resumed = run("labelings", state=load_checkpoint(tmp_path / "ck.pt"))
    assert without_time(resumed) == without_time(hist)


def test_torch_kernels_and_the_marginal_solvers_are_refused():
    """The torch kernels, and EG / DEG (the chain's marginal moves know no edge statistics: before 2026-12-03 they
    ran and moved the chain part alone), are refused by name."""
    from ssvm_torch.solvers import make_solver
    data = random_edge_chains(2)
    model = EdgeChainModel.for_data(data)
    with pytest.raises(SSVMInputError, match="numba kernels"):
        make_store(model, data, LAM, kernels="torch")
    for solver, needs in (("eg", "marginal moves"), ("deg", "a relaxation")):
        with pytest.raises(SSVMInputError, match=f"solver: '{solver}' needs a store with {needs}.*edge-observation"):
            make_solver(make_store(model, data, LAM), SolverConfig(solver=solver))
    with pytest.raises(SSVMInputError, match="ChainData.E"):
        EdgeChainModel.for_data(ChainData(data.X, data.Y, data.offsets, 3))


def test_edge_items_of_the_template_engine_equal_the_strings():
    from ssvm_torch.data import data_dir
    from ssvm_torch.data.conll import read_conll
    sents = read_conll(data_dir() / "conll2000_train.txt.gz")[:300]
    t = Template.parse("w[0] edge:p[0] edge:w[-1]|p[0]")
    assert t.attributes(sents[0], edge=True)[0] == []                    # nothing enters the first token
    assert t.attributes(sents[0], edge=True)[1] == [f"edge:p[0]={sents[0][1][1]}",
                                                    f"edge:w[-1]|p[0]={sents[0][0][0]}|{sents[0][1][1]}"]
    (d,), _, n_edge = featurize(t, [sents])
    index = {}
    for s in sents:
        for attrs in t.attributes(s, edge=True):
            for a in attrs:
                index.setdefault(a, len(index))
    rows = [sorted(index[a] for a in attrs) for s in sents for attrs in t.attributes(s, edge=True)]
    assert n_edge == len(index)
    assert np.array_equal(d.edge_cols, np.array([c for r in rows for c in r]))
    assert np.array_equal(np.diff(d.edge_crow), [len(r) for r in rows])


@pytest.mark.long
@pytest.mark.parametrize("extra", [[], ["--step", "pairwise", "--cache", "--averaging"]], ids=["fw", "pairwise-avg"])
def test_conll_with_edge_features_trains_and_resumes_exactly(tmp_path, extra):
    """A run stopped at a checkpoint and resumed ends where the uninterrupted run does, to the bit: FW steps, and
    pairwise steps with the cache and averaging (the working sets and the average's edge rows in the checkpoint)."""
    from ssvm_torch.cli.train import main
    args = ["--dataset", "conll2000", "--train-size", "120", "--features", "w[0] p[0] p[-1]|p[0] edge:p[0]",
            "--gap-check", "1", "--quiet", *extra]
    assert main(args + ["--passes", "2", "--out", str(tmp_path / "a"), "--checkpoint"]) == 0
    assert main(args + ["--passes", "6", "--out", str(tmp_path / "b")]) == 0
    assert main(args + ["--passes", "6", "--out", str(tmp_path / "a"), "--resume",
                        str(tmp_path / "a" / "checkpoint.pt")]) == 0
    wa = torch.load(tmp_path / "a" / "model.pt", weights_only=True)
    wb = torch.load(tmp_path / "b" / "model.pt", weights_only=True)
    assert wa["feature_layout"]["kind"] == "chain-edges" and wa["feature_layout"]["n_edge_features"] >= 30
    assert torch.equal(wa["w"], wb["w"])
