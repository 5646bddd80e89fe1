"""Mini-batch BCFW (issue: device-true paths, item 3): tau distinct blocks per step, one batched
oracle call, one exact line search on the joint direction. tau = 1 is BCFW, tau = n batch FW; the
draws depend only on the seed and the block gaps. (Its gap against an independent primal - dual is
in test_conformance.py, for every structure.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.solvers.samplers import SAMPLERS, _tree_set
from ssvm_torch.solvers.steps import MiniBatchStep
from ssvm_torch.solvers.config import SolverState
from ssvm_torch.tasks import load_task

from conftest import assert_tau_one_takes_bcfw_steps


@pytest.fixture(scope="module")
def ocr():
    return load_task("ocr-small")


def chain_store(problem, n, kernels):
    return make_store(problem.model, problem.train.subset(range(n)), 0.05, kernels=kernels)


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_tau_one_takes_bcfw_steps(ocr, kernels):
    """MiniBatchStep with tau = 1 and FWStep, driven by samplers of the same seed, take the same
    steps: the same blocks, step sizes and gaps, the same w."""
    assert_tau_one_takes_bcfw_steps(lambda: chain_store(ocr, 30, kernels))


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("path", ["corners_step", "full_step"])
def test_tau_n_takes_batch_fw_steps(ocr, kernels, path):
    """Both ways of a tau = n step (the general one on batched corners, and the batch-FW one that
    ``step`` takes when the batch holds every block) move as batch FW does."""
    fw = chain_store(ocr, 25, kernels)
    batch_fw = Solver(fw, SolverConfig(solver="fw", passes=4, gap_check=4))
    batch_fw.run()
    assert batch_fw.state.steps == 3               # the 4th oracle pass only measures the gap
    mb = chain_store(ocr, 25, kernels)
    cfg = SolverConfig(solver="bcfw", sampling="perm", batch_size=mb.n)
    sampler = SAMPLERS["perm"](mb.n, 0)
    rule, st = MiniBatchStep(mb, cfg, sampler), SolverState()
    for _ in range(3):
        getattr(rule, path)(sampler.draw(mb.n), st)
    assert torch.allclose(mb.w, fw.w, rtol=1e-9, atol=1e-12)
    assert mb.ell == pytest.approx(fw.ell, rel=1e-9)
    assert st.oracle_calls == 3 * mb.n and st.gamma_n == 3
    # the block gaps the sampler holds are those of the last step's pass (at the pre-step w)
    assert np.isfinite(sampler.gaps).all() and (sampler.gaps >= -1e-12).all()


@pytest.mark.parametrize("averaging", [None, "weighted"])
def test_tau_n_run_follows_batch_fw(ocr, averaging):
    """``--batch-size n`` runs batch FW's trajectory through the solver loop: the same records
    (gap, primal, dual) pass by pass, with and without weighted averaging (the shadow follows)."""
    runs = []
    for cfg in (SolverConfig(solver="fw", passes=6, gap_check=1, averaging=averaging),
                SolverConfig(solver="bcfw", sampling="gap", batch_size=30, passes=6, gap_check=1,
                             averaging=averaging, seed=3)):
        solver = Solver(chain_store(ocr, 30, "numba"), cfg)
        solver.run()
        runs.append(solver.state.history)                 # the iterates' records (run() ends on the model's)
    fw, mb = runs
    # batch FW's records sit at its pre-step points; the mini-batch run's after its steps and
    # count its exact gap passes too: match the records by the number of steps taken
    at_step = {r["steps"]: r for r in fw}
    assert [r["steps"] for r in mb] == [0, 1, 2, 3] and max(at_step) == 5
    for key in ("gap", "primal", "dual"):
        np.testing.assert_allclose([r[key] for r in mb], [at_step[r["steps"]][key] for r in mb],
                                   rtol=1e-8, atol=1e-12)


def test_minibatch_run_ascends_and_counts_passes(ocr):
    store = chain_store(ocr, 40, "auto")
    hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", batch_size=8, passes=6, gap_check=2,
                                      seed=1)).run()
    duals = [r["dual"] for r in hist]
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:])) and duals[-1] > duals[0]
    assert hist[-1]["passes"] == pytest.approx(6.0)          # the last batch is cut to the budget
    assert hist[-1]["gap"] < hist[0]["gap"] / 2


@pytest.mark.parametrize("sampling", ["uniform", "perm", "gap"])
def test_draws_are_distinct_and_reproducible(sampling):
    a, b = SAMPLERS[sampling](50, 3), SAMPLERS[sampling](50, 3)
    rng = np.random.default_rng(0)
    for step in range(40):
        da, db = a.draw(16), b.draw(16)
        assert da == db and len(set(da)) == 16
        for i in da:                                      # the same gaps feed both
            g = float(rng.uniform())
            a.update(i, g)
            b.update(i, g)
    assert a.draw(50) == b.draw(50) and sorted(a.draw(50)) == list(range(50))


def test_gap_draw_is_next_called_until_tau_distinct_blocks():
    """The compiled draw reads the same uniforms as next() would one by one (across buffer refills,
    with repeats, zero and positive gaps, and draws of more blocks than have a positive gap, which
    empty the tree), holds drawn leaves at 0 and restores them; update_many is update in order, bit
    for bit in the sum-tree."""
    def reference(s, tau):                  # the definition, on the sampler's own primitives
        out, held = [], []
        while len(out) < tau:
            i = s.next()
            if i in out:
                continue
            out.append(i)
            leaf = s.tree[s.size + i]
            if leaf > 0.0:
                held.append((i, leaf))
                _tree_set(s.tree, s.size, i, 0.0)
        for i, leaf in held:
            _tree_set(s.tree, s.size, i, leaf)
        return out

    a, b = SAMPLERS["gap"](300, 5), SAMPLERS["gap"](300, 5)
    a.stream.chunk = b.stream.chunk = 37                  # refills inside draws
    rng = np.random.default_rng(1)
    for step in range(60):
        tau = int(rng.integers(1, 120))
        da, db = a.draw(tau), reference(b, tau)
        assert da == db
        g = np.where(rng.uniform(size=tau) < 0.3, 0.0, rng.exponential(size=tau)) * (1 if step % 7 else 0)
        a.update_many(da, g)
        for i, gi in zip(db, g.tolist()):
            b.update(i, gi)
        assert np.array_equal(a.tree, b.tree) and np.array_equal(a.gaps, b.gaps)
        assert a.stream.pos == b.stream.pos and np.array_equal(a.stream.buf, b.stream.buf)
    with pytest.raises(SSVMInputError, match="tau"):
        a.draw(301)


def test_perm_draws_visit_every_block_once_per_pass():
    s = SAMPLERS["perm"](10, 0)
    seen = [i for _ in range(5) for i in s.draw(4)]        # 20 draws = 2 passes
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))


def test_gap_draws_follow_the_gaps():
    s = SAMPLERS["gap"](6, 0)
    s.set_all(np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0]))
    for _ in range(20):
        assert sorted(s.draw(2)) == [2, 3]                 # the only two blocks with a positive gap
    assert s.probabilities()[[2, 3]].tolist() == [0.5, 0.5]   # the tree is restored after each draw


def test_batch_size_is_checked(ocr):
    store = chain_store(ocr, 10, "auto")
    with pytest.raises(SSVMInputError, match=r"batch_size: expected an int in \[1, n = 10\]"):
        Solver(store, SolverConfig(batch_size=11))
    with pytest.raises(SSVMInputError, match="batch_size: expected 1 unless solver 'bcfw' with step 'fw'"):
        SolverConfig(batch_size=4, step="pairwise").validate()
    with pytest.raises(SSVMInputError, match="batch_size: expected an int >= 1"):
        SolverConfig(batch_size=0).validate()
