"""The compiled dense store (stores/dense_compiled.py) against the torch store it replaces on CPU:
the host oracles return the torch models' labelings, features and losses, and the same seeded
solver run gives the same blocks, w, ell and block gaps (to 1e-10 in float64) for every step type,
cache on and off, with box constraints; incremental w equals the sum of the blocks after 10^4 random
moves."""
import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.stores import BoxedDual, CompiledDenseDual, CompiledMatchingDual, DenseDual, make_store
from ssvm_torch.stores.host_structures import host_structure
from ssvm_torch.tasks import load_task

DENSE = {"scene": 14, "ocr-letters": 20, "segmentation-synth": 6, "pose-synth": 5, "hansards": 6, "scene-graph": 12,
         "ocr-graph": 10}

STEPS = {
    "fw-gap": dict(sampling="gap"),
    "fw-cache": dict(sampling="perm", step="fw", cache=True),
    "pairwise": dict(sampling="uniform", step="pairwise"),
    "pairwise-cache": dict(sampling="gap", step="pairwise", cache=True),
    "away": dict(sampling="perm", step="away"),
    "best-cache": dict(sampling="gap", step="best", cache=True),
}


@pytest.fixture(scope="module")
def problems():
    cache = {}

    def get(name):
        if name not in cache:
            problem = load_task(name, train_size=DENSE[name] if name in ("segmentation-synth", "pose-synth", "hansards")
                                else None)
            cache[name] = (problem, problem.train.subset(range(DENSE[name])))
        return cache[name]
    return get


def stores(problem, data, lam):
    """(compiled, torch) stores of the same problem; box constraints where the task has them."""
    return tuple(make_store(problem.model, data, lam, kernels=k, nonnegative=problem.nonnegative)
                 for k in ("numba", "torch"))


def inner(store):
    return store.inner if isinstance(store, BoxedDual) else store


def assert_same_point(a, b, tol=1e-10):
    ia, ib = inner(a), inner(b)
    torch.testing.assert_close(ia.W_blocks, ib.W_blocks, rtol=0, atol=tol)
    torch.testing.assert_close(ia.ell_i, ib.ell_i, rtol=0, atol=tol)
    torch.testing.assert_close(a.w, b.w, rtol=0, atol=tol)
    assert abs(a.ell - b.ell) <= tol
    if isinstance(a, BoxedDual):
        torch.testing.assert_close(a.v_c, b.v_c, rtol=0, atol=tol)
    torch.testing.assert_close(a.gap_pass().block_gaps, b.gap_pass().block_gaps, rtol=0, atol=tol)


@pytest.mark.parametrize("name", list(DENSE))
def test_host_oracle_equals_the_torch_model(problems, name):
    """Labelings, H_i, features and losses of the host structure = the torch model's, at w = 0 (all
    ties) and at random w (nonnegative where the structure needs it)."""
    problem, data = problems(name)
    model = problem.model.with_kernels("torch")
    host = host_structure(problem.model, data)
    gen = torch.Generator().manual_seed(0)
    for trial in range(3):
        w = torch.zeros(model.d, dtype=torch.float64) if trial == 0 else torch.randn(model.d, generator=gen,
                                                                                      dtype=torch.float64)
        if problem.nonnegative is not None:
            w[problem.nonnegative] = w[problem.nonnegative].abs()
        for i in range(data.n):
            idx = torch.tensor([i])
            y_ref, H_ref = model.oracle(w, data, idx)
            y, cols, vals, L = host.corner(w.numpy(), i)
            assert model.key(y) == model.key(y_ref[0]), (name, trial, i)
            phi = torch.zeros(model.d, dtype=torch.float64)
            phi[torch.as_tensor(cols)] = torch.as_tensor(vals)
            torch.testing.assert_close(phi, model.phi(data, idx, y_ref)[0], rtol=0, atol=1e-12)
            assert abs(L - float(model.loss(data, idx, y_ref)[0])) <= 1e-12
            gt_phi = model.phi(data, idx, model.gt_batch(data, idx))[0]
            assert abs(L - float((gt_phi - phi) @ w) - float(H_ref[0])) <= 1e-10
            assert model.key(host.gt(i)) == model.key(model.gt(data, i))


@pytest.mark.parametrize("name", list(DENSE))
def test_gap_pass_equals_the_torch_store(problems, name):
    """The compiled gap pass (a loop of the host oracle, or the torch model for multi-label) gives the
    torch store's labelings, H_i, losses and block gaps at the same point."""
    problem, data = problems(name)
    a, b = stores(problem, data, 1.0 / data.n)
    Solver(b, SolverConfig(passes=2, seed=1, gap_check=2)).run()
    inner(a).load_state_dict(inner(b).state_dict())
    if isinstance(a, BoxedDual):
        a.load_state_dict(b.state_dict())
    ga, gb = a.gap_pass(), b.gap_pass()
    assert torch.equal(ga.labels, gb.labels)
    for field in ("H", "loss", "block_gaps"):
        torch.testing.assert_close(getattr(ga, field), getattr(gb, field), rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", list(DENSE))
@pytest.mark.parametrize("step", list(STEPS))
def test_same_run_as_the_torch_store(problems, name, step):
    problem, data = problems(name)
    lam = 1.0 / data.n
    a, b = stores(problem, data, lam)
    assert isinstance(inner(a), (CompiledDenseDual, CompiledMatchingDual)) and not isinstance(
        inner(b), (CompiledDenseDual, CompiledMatchingDual))
    cfg = SolverConfig(solver="bcfw", passes=4, gap_check=2, seed=5, max_cache=4, **STEPS[step])
    ha, hb = Solver(a, cfg).run(), Solver(b, cfg).run()
    assert [r["oracle_calls"] for r in ha] == [r["oracle_calls"] for r in hb]
    for ra, rb in zip(ha, hb):
        assert abs(ra["gap"] - rb["gap"]) <= 1e-10 and abs(ra["primal"] - rb["primal"]) <= 1e-10
    assert_same_point(a, b)


@pytest.mark.parametrize("name", ["scene", "segmentation-synth", "pose-synth"])
@pytest.mark.parametrize("opts", [dict(solver="ssg", sampling="perm"), dict(averaging=True, sampling="perm"),
                                  dict(batch_size=3, sampling="gap"), dict(solver="fw")])
def test_other_solvers_on_the_compiled_store(problems, name, opts):
    problem, data = problems(name)
    a, b = stores(problem, data, 0.5 / data.n)
    if opts.get("averaging") and not a.supports_averaging:
        pytest.skip("averaging is refused with box constraints")
    cfg = SolverConfig(passes=3, gap_check=1, seed=2, **opts)
    ha, hb = Solver(a, cfg).run(), Solver(b, cfg).run()
    for key in ("gap", "primal", "dual"):
        if ha[-1].get(key) is not None:              # SSG records no dual
            np.testing.assert_allclose([r[key] for r in ha], [r[key] for r in hb], rtol=0, atol=1e-10)
    torch.testing.assert_close(a.w, b.w, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "pose-synth" else n for n in DENSE])
def test_incremental_w_is_the_sum_of_blocks_after_many_moves(problems, name):
    """10^4 random FW, pairwise and away moves (random step sizes, no recomputation): w = sum_i w_i
    and ell = sum_i ell_i to 1e-10; then the same moves on the torch store give the same point.
    pose-synth takes 2,000 (its tree max-sum corner in Python costs most of this file's time)."""
    problem, data = problems(name)
    data = data.subset(range(3))
    a, b = (make_store(problem.model, data, 0.3, kernels=k, nonnegative=problem.nonnegative) for k in ("numba", "torch"))
    rng = np.random.default_rng(1)
    last = [None] * data.n
    steps = 2_000 if name == "pose-synth" else 10_000
    for k in range(steps):
        i, kind, gamma = int(rng.integers(data.n)), int(rng.integers(3)), float(rng.random())
        for s in (a, b) if k >= steps - 50 else (a,):
            c = s.fw_corner(i)
            if kind == 0 or last[i] is None:
                s.fw_move(i, c, gamma)
            elif kind == 1:
                s.pair_move(i, c.labels, last[i], c.loss, s.loss_of(i, last[i]), 0.1 * gamma)
            else:
                s.pair_move(i, None, last[i], float(s.ell_i[i]), s.loss_of(i, last[i]), 0.1 * gamma)
        last[i] = c.labels
        if k == steps - 51:
            b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.v, inner(a).W_blocks.sum(0), rtol=0, atol=1e-10)       # v = w without a box
    assert abs(a.ell - float(a.ell_i.sum())) <= 1e-10
    assert_same_point(a, b)


def test_kernels_choice_and_errors(problems):
    problem, data = problems("scene")
    assert isinstance(make_store(problem.model, data, 0.1), CompiledDenseDual)              # auto on CPU float64
    assert type(make_store(problem.model, data, 0.1, dtype=torch.float32)) is DenseDual     # auto elsewhere: torch
    assert type(make_store(problem.model, data, 0.1, kernels="torch")) is DenseDual
    with pytest.raises(SSVMInputError, match="kernels: 'numba' needs a CPU float64 store"):
        make_store(problem.model, data, 0.1, kernels="numba", dtype=torch.float32)
    hans, hdata = problems("hansards")
    assert isinstance(make_store(hans.model, hdata, 0.1), CompiledMatchingDual)


def test_compiled_oracles_refuse_weights_outside_the_box(problems):
    for name in ("segmentation-synth", "pose-synth"):
        problem, data = problems(name)
        host = host_structure(problem.model, data)
        w = np.zeros(problem.model.d)
        w[int(problem.nonnegative[0])] = -1.0
        with pytest.raises(SSVMInputError, match="w: the"):
            host.corner(w, 0)


@pytest.mark.long
@pytest.mark.parametrize("name,size", [("scene", None),
                                       pytest.param("ocr-letters", None, marks=pytest.mark.slow),
                                       ("segmentation-synth", 10),
                                       pytest.param("pose-synth", 6, marks=pytest.mark.slow),
                                       pytest.param("hansards", 8, marks=pytest.mark.slow),
                                       ("scene-graph", 60)])
def test_compiled_run_resumes_exactly_through_the_cli(tmp_path, name, size):
    """Pairwise steps with the cache keep the compiled store's (host) labelings in their working sets:
    a checkpointed and resumed ssvm-train run equals the uninterrupted one. OCR letters and pose (the
    slowest two, ~11 s each) run in the slow tier; the flat, graph-cut, matching and pairwise-graph (marginal
    vectors as labelings) stores here."""
    import json

    from ssvm_torch.cli.train import main
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["--dataset", name, "--step", "pairwise", "--cache", "--gap-check", "1", "--seed", "4", "--quiet",
              *(["--train-size", str(size)] if size else [])]
    assert main(common + ["--passes", "3", "--out", str(a)]) == 0
    assert main(common + ["--passes", "1", "--out", str(b), "--checkpoint"]) == 0
    assert main(common + ["--passes", "3", "--out", str(b), "--resume", str(b / "checkpoint.pt")]) == 0
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]
    assert strip(json.loads((a / "history.json").read_text())) == strip(json.loads((b / "history.json").read_text()))
    assert torch.equal(torch.load(a / "model.pt")["w"], torch.load(b / "model.pt")["w"])
