"""Regularization path (Osokin et al. 2016, Section 4): the rescaling primitives, eq. (12), the
certificate of the path at random lambda recomputed from scratch, the heuristic path, grid search
and the ssvm-path command's files."""
import json

import numpy as np
import pytest
import torch

from ssvm_torch import SSVMInputError, Solver, SolverConfig
from ssvm_torch.data import load_ocr
from conftest import explicit
from ssvm_torch.models import ChainModel
from ssvm_torch.stores import make_store
from ssvm_torch.path import RegPath, check_zero_gt_loss, grid_search, path_gap, regularization_path
from ssvm_torch.cli.path import main as path_main
from ssvm_torch.outputs import load_torch
from ssvm_torch.portable import unpack


def random_explicit(seed, n=12, m=6, d=5):
    rng = np.random.default_rng(seed)
    psi, losses = [], []
    for _ in range(n):
        p = rng.normal(size=(m, d))
        p[0] = 0.0
        loss = rng.uniform(0.1, 1.0, size=m)
        loss[0] = 0.0
        psi.append(p)
        losses.append(loss)
    return explicit(psi, losses)


@pytest.fixture(scope="module")
def ocr_part():
    train, _ = load_ocr("small")
    part = train.subset(torch.arange(60))
    return ChainModel.for_data(train), part


def duals(ocr_part):
    model, part = ocr_part
    return [make_store(*random_explicit(0), 0.3), make_store(model, part, 0.3)]


def test_rescale_keeps_w_and_gives_eq12(ocr_part):
    for dual in duals(ocr_part):
        Solver(dual, SolverConfig(solver="bcfw", sampling="uniform", passes=3, gap_check=3, seed=1)).run()
        gp = dual.gap_pass()
        w, ell = dual.w.clone(), dual.ell
        rho = 0.37
        dual.rescale(dual.lam * rho, rho)
        assert torch.allclose(dual.w, w, atol=1e-12, rtol=0)
        assert dual.ell == pytest.approx(rho * ell, abs=1e-12)
        gp2 = dual.gap_pass()
        expected = rho * gp.block_gaps + (1 - rho) * gp.H / dual.n                       # eq. (12)
        assert torch.allclose(gp2.block_gaps, expected, atol=1e-12, rtol=0)
        assert torch.allclose(gp2.H, gp.H, atol=1e-12, rtol=0)
        lam = dual.lam
        dual.rescale(2 * lam, 1.0)                                                       # keep alpha
        assert torch.allclose(dual.w, w / 2, atol=1e-12, rtol=0)


def test_block_wdots_and_max_margins(ocr_part):
    model, part = ocr_part
    for dual in duals(ocr_part):
        Solver(dual, SolverConfig(solver="bcfw", sampling="uniform", passes=2, gap_check=2)).run()
        gp = dual.gap_pass()
        Hn = gp.block_gaps - dual.block_wdots() + dual.ell_i                # H_i / n from the identity
        assert torch.allclose(Hn, gp.H / dual.n, atol=1e-12, rtol=0)
    ex = random_explicit(3)
    w = torch.tensor(np.random.default_rng(1).normal(size=ex[0].d))
    theta = make_store(*ex, 1.0).max_margins(w)
    assert torch.allclose(theta, (-(ex[1].psi_table @ w)).max(1).values, atol=1e-12)
    cd = make_store(model, part, 1.0)
    w = torch.tensor(np.random.default_rng(2).normal(size=model.d) * 0.1)
    theta = cd.max_margins(w)
    labels = model.predict_ragged(w, part)
    for i in range(5):
        s, e = int(part.offsets[i]), int(part.offsets[i + 1])
        Xi = torch.cat([part.X[s:e], torch.ones(e - s, 1, dtype=part.X.dtype)], 1)     # rows with the constant
        diff = model.joint_feature(Xi, labels[s:e]) - model.joint_feature(Xi, part.Y[s:e])
        assert float(theta[i]) == pytest.approx(float(diff @ w), abs=1e-10) and float(theta[i]) >= -1e-12


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("which", [0, 1, pytest.param(2, marks=pytest.mark.slow)])
def test_path_is_certified_at_random_lambdas(ocr_part, which, gated):
    """Also with the estimate-gated exact passes (checks every 0.25 pass, paid once the estimate is
    <= kappa eps): the certificate must not depend on how the solver decided to check. which: 0 a
    random explicit problem down to lam 1e-2, 1 OCR, 2 (slow tier) the random problem down to 1e-3."""
    eps = 0.1 if which == 1 else 0.05
    model, part = ocr_part
    make = (lambda lam: make_store(model, part, lam)) if which == 1 else (lambda lam: make_store(*random_explicit(0), lam))
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=0.25 if gated else 1.0)
    path = regularization_path(make(1.0), eps, kappa=0.9, lam_min={0: 1e-2, 1: 2e-2, 2: 1e-3}[which], config=cfg,
                               gated=gated)
    assert len(path.lambdas) >= 3 and bool((path.lambdas[1:] < path.lambdas[:-1]).all())
    lo = max(path.lam_end, 1e-4)
    rng = np.random.default_rng(which % 2)
    lams = list(np.exp(rng.uniform(np.log(lo), np.log(10 * float(path.lambdas[0])), size=8)))
    lams += [float(v) for v in path.lambdas[:3]] + [lo]
    checker = make(1.0)
    for lam in lams:
        g = path_gap(checker, path, float(lam))
        assert -1e-9 <= g <= eps + 1e-9, (lam, g)
    for r in path.records[1:]:
        assert r["gap"] <= 0.9 * eps + 1e-12
    if path.lam_end > 0:
        with pytest.raises(SSVMInputError, match="lam: expected lam >="):
            path.w(path.lam_end / 2)


@pytest.mark.slow          # the slow tier (SSVM_SLOW=1): keeps the fast CI tier short
def test_heuristic_path_and_grid(ocr_part):
    ex = random_explicit(4)
    path = regularization_path(make_store(*ex, 1.0), 0.05, kappa=0.7, heuristic=True, lam_min=1e-3)
    assert path.heuristic and len(path.lambdas) >= 3
    assert all(r["gap_estimate"] <= 0.7 * 0.05 + 1e-12 for r in path.records[1:])
    lams = [2.0 ** k for k in range(4, -8, -1)]
    warm = grid_search(lambda lam: make_store(*ex, lam), 0.05, lams, warm=True)
    cold = grid_search(lambda lam: make_store(*ex, lam), 0.05, lams, warm=False)
    gated = grid_search(lambda lam: make_store(*ex, lam), 0.05, lams, warm=True, gated=True,
                        config=SolverConfig(solver="bcfw", sampling="gap", gap_check=0.25))
    for recs in (warm, cold, gated):
        assert [r["lam"] for r in recs] == lams and all(r["gap"] <= 0.05 + 1e-12 for r in recs)
        assert all(b["passes"] >= a["passes"] for a, b in zip(recs, recs[1:]))


def test_path_refuses_nonzero_gt_loss_and_box():
    ex = random_explicit(0)
    ex[1].losses[3, 0] = 0.5
    with pytest.raises(SSVMInputError, match="L_i\\(y_i\\) = 0.*block 3"):
        check_zero_gt_loss(make_store(*ex, 1.0))
    from ssvm_torch.data import GraphData
    from ssvm_torch.data.segmentation_synth import make_segmentation_synth
    from ssvm_torch.models import GraphCutModel
    data = GraphData(make_segmentation_synth(3, 1)[0])
    m = GraphCutModel.for_data(data)
    with pytest.raises(SSVMInputError, match="box-constrained"):
        regularization_path(make_store(m, data, 1.0, nonnegative=m.pairwise_index), 0.1)


def assert_sets_hold_the_point(store, sets):
    """The working sets are a decomposition of every block's point: alpha >= 0 summing to 1 with
    sum_j alpha_j g_i(y_j) = 0 (g_i(y) = lam <w_i - w_s(y), w> - ell_i + L_i(y)/n is affine in the corner, and
    its alpha-average is the block's own point: lam <w_i - w_i, w> - ell_i + ell_i)."""
    for i, bs in enumerate(sets):
        alpha = np.array(bs.alpha)
        assert (alpha >= -1e-12).all() and alpha.sum() == pytest.approx(1.0, abs=1e-12), i
        assert float(alpha @ store.corner_gaps(i, bs.matrix())) == pytest.approx(0.0, abs=1e-10), i


@pytest.mark.parametrize("step", ["pairwise", "away"])
def test_warm_starts_carry_the_working_sets(ocr_part, step):
    """Pairwise / away steps keep each block's point as a combination of labelings; a warm start (the keep-primal
    rescaling of Alg. 7) carries that combination (solvers/active_set.warm_sets): the sets still hold the point
    after the rescaling and after the next solve, where fresh sets (alpha_i = delta(y_i)) do not, and a solver on
    a moved store without them is refused."""
    from ssvm_torch.solvers.active_set import warm_sets
    model, part = ocr_part
    store = make_store(model, part, 0.1)
    first = Solver(store, SolverConfig(passes=3, gap_check=3, step=step, seed=1))
    first.run()
    assert_sets_hold_the_point(store, first.sets)
    with pytest.raises(SSVMInputError, match=f"step: {step!r} keeps each block's point .* already moved"):
        Solver(store, SolverConfig(passes=1, gap_check=1, step=step))
    fresh = Solver(make_store(model, part, 0.1), SolverConfig(step=step)).sets     # delta(y_i): not this point
    with pytest.raises(AssertionError):
        assert_sets_hold_the_point(store, fresh)
    store.rescale(0.05, 0.5)
    sets = warm_sets(store, first.sets, 0.5)
    assert_sets_hold_the_point(store, sets)
    second = Solver(store, SolverConfig(passes=3, gap_check=3, step=step, seed=2), sets=sets)
    hist = second.run()
    assert_sets_hold_the_point(store, second.sets)
    assert hist[-1]["gap"] < hist[0]["gap"]


@pytest.mark.parametrize("which", [0, 1])
def test_path_and_warm_grid_with_pairwise_steps_are_certified(ocr_part, which):
    """The path and the warm grid with pairwise steps and the cache (their working sets carried through every
    rescaling): every piece certified at random lambdas, every grid point solved."""
    eps = 0.1 if which == 1 else 0.05
    model, part = ocr_part
    make = (lambda lam: make_store(model, part, lam)) if which == 1 else (lambda lam: make_store(*random_explicit(0), lam))
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=1, step="pairwise", cache=True)
    path = regularization_path(make(1.0), eps, kappa=0.9, lam_min=2e-2, config=cfg)
    assert len(path.lambdas) >= 3
    checker = make(1.0)
    rng = np.random.default_rng(which)
    lo = max(path.lam_end, 2e-2)
    for lam in list(np.exp(rng.uniform(np.log(lo), np.log(float(path.lambdas[0])), size=6))) + [lo]:
        assert -1e-9 <= path_gap(checker, path, float(lam)) <= eps + 1e-9, lam
    grid = grid_search(make, eps, lambdas=[1.0, 0.3, 0.1, 0.03], config=cfg)
    assert len(grid) == 4 and all(r["gap"] <= eps for r in grid)


def test_estimator_warm_start_with_pairwise_steps_carries_its_sets(ocr_part):
    from ssvm_torch import ChainSSVM
    model, part = ocr_part
    est = ChainSSVM(lam=0.1, step="pairwise", passes=4, gap_check=2, warm_start=True).fit(part)
    est.set_params(lam=0.03).fit(part)                          # rescaled keep-primal, the sets carried
    assert_sets_hold_the_point(est.store_, est.solver_.sets)
    assert est.history_[-1]["gap"] < est.history_[0]["gap"]


def test_regpath_pieces_and_roundtrip(tmp_path):
    W = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]], dtype=torch.float64)
    p = RegPath(torch.tensor([8.0, 4.0, 1.0], dtype=torch.float64), W, torch.tensor([0.5, 0.4, 0.3], dtype=torch.float64),
                eps=0.1, lam_end=0.5, records=[{"lam": 8.0}])
    assert torch.equal(p.w(16.0), W[0] / 2) and p.ell(16.0) == 0.5          # first piece: lam_1 / lam W[0]
    assert torch.equal(p.w(6.0), W[0]) and p.ell(6.0) == pytest.approx(0.5 * 6 / 8)
    assert torch.equal(p.w(4.0), W[1]) and torch.equal(p.w(0.75), W[2])
    p.save(tmp_path)
    q = RegPath.load(tmp_path)
    assert torch.equal(q.W, p.W) and q.lam_end == 0.5 and q.records == [{"lam": 8.0}]


@pytest.mark.long
def test_ssvm_path_cli_files(tmp_path, capsys):
    out = tmp_path / "p"
    assert path_main(["--dataset", "ocr-small", "--eps", "0.3", "--lam-min", "0.2", "--out", str(out)]) == 0
    assert "breakpoints" in capsys.readouterr().out
    saved = load_torch(out / "path.pt")
    assert {"lambdas", "W", "ells", "eps"} <= set(saved) and saved["W"].shape == (len(saved["lambdas"]), 4082)
    assert saved["W"].dtype == torch.float64 and saved["eps"] == 0.3
    recs = json.loads((out / "path.json").read_text())
    assert len(recs) == len(saved["lambdas"])
    assert all({"lam", "gap", "passes", "time_s", "test_error"} <= set(r) for r in recs)
    # anyone can re-check the certificate from the files: w = W[j], ell = ells[j] lam / lam_j
    train, _ = load_ocr("small")
    model = ChainModel.for_data(train)
    j = len(saved["lambdas"]) // 2
    lam = float(saved["lambdas"][j]) * 0.97
    dual = make_store(model, train, lam)
    w, ell = saved["W"][j], float(saved["ells"][j]) * lam / float(saved["lambdas"][j])
    dual.set_point(w, ell)
    gap = lam * float(w @ w) - ell + float(dual.gap_pass().H.sum()) / train.n
    assert 0 <= gap <= 0.3 + 1e-9
    gated = tmp_path / "gated"
    assert path_main(["--dataset", "ocr-small", "--eps", "0.3", "--lam-min", "0.4", "--gated", "--gap-check", "0.5",
                      "--quiet", "--out", str(gated)]) == 0
    assert all(r["gap"] <= 0.9 * 0.3 + 1e-12 for r in json.loads((gated / "path.json").read_text())[1:])
    assert path_main(["--eps", "0", "--out", str(out)]) == 2
    assert path_main(["--dataset", "segmentation-synth", "--out", str(out)]) == 2
    assert "box-constrained" in capsys.readouterr().err


def test_check_below_defers_the_exact_pass(ocr_part):
    """check_below: an interval goes on (in gap_check steps, at most one pass more) while the gap
    estimate is above the level, so a level no estimate reaches spaces the checks by gap_check + 1
    pass, and a level every estimate is under changes nothing."""
    model, part = ocr_part

    def check_passes(level):
        cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=0.25, passes=6, check_below=level)
        hist = Solver(make_store(model, part, 0.1), cfg).run()
        return [round(b["passes"] - a["passes"], 6) for a, b in zip(hist[1:], hist[2:])]
    assert check_passes(0.0) == check_passes(1e9) == [1.25] * len(check_passes(0.0))     # 0.25 + the check
    spaced = check_passes(1e-300)
    assert spaced[:2] == [2.25, 2.25]                       # 0.25 + 1 more pass (the cap) + the check
    with pytest.raises(SSVMInputError, match="check_below"):
        SolverConfig(check_below=-1.0).validate()


@pytest.mark.long
@pytest.mark.parametrize("heuristic", [False, True])
@pytest.mark.parametrize("step", ["fw", "pairwise"])
def test_a_path_resumed_from_any_state_equals_the_uninterrupted_path(heuristic, step, tmp_path):
    """``checkpoint`` / ``resume``: from the state after the initialization, a middle breakpoint or the last one,
    each through a checkpoint file, the path's breakpoints, W, ells, lam_end and records (but their times) equal the
    uninterrupted path's (the working sets and the cache go through the file too)."""
    from ssvm_torch.outputs import load_checkpoint, save_checkpoint
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=1, step=step, cache=step == "pairwise")
    kw = dict(kappa=0.7 if heuristic else 0.9, heuristic=heuristic, lam_min=0.1, config=cfg)
    states = []
    full = regularization_path(make_store(*random_explicit(0), 0.3), 0.05, checkpoint=states.append, **kw)
    assert len(states) == len(full.lambdas) >= 10

    def strip(records):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in records]
    for k in (0, len(states) // 2, len(states) - 1):
        save_checkpoint(tmp_path / "c.pt", states[k], {"k": k})
        resumed = regularization_path(make_store(*random_explicit(0), 0.3), 0.05,
                                      resume=load_checkpoint(tmp_path / "c.pt"), **kw)
        assert torch.equal(resumed.lambdas, full.lambdas) and torch.equal(resumed.W, full.W)
        assert torch.equal(resumed.ells, full.ells) and resumed.lam_end == full.lam_end
        assert strip(resumed.records) == strip(full.records)


def test_a_damaged_or_foreign_path_state_is_refused_by_name():
    states = []
    regularization_path(make_store(*random_explicit(0), 0.3), 0.05, lam_min=0.1, checkpoint=states.append)
    state = states[-1]
    for change, text in [({"format": "x/1"}, "resume: expected a regularization path state"),
                         ({"eps": 0.1}, "resume.eps: expected 0.05"),
                         ({"W": unpack(state["W"])[:, :-1]}, "resume.W: expected a float64"),
                         ({"lambdas": state["lambdas"][::-1]}, "resume.lambdas: expected a decreasing list"),
                         ({"gaps": state["gaps"][:-1]}, "resume.gaps: expected"),
                         ({"records": "[]"}, "resume.records: expected the JSON list of"),
                         ({"clock": None}, r"resume.clock: expected \[passes, seconds\]")]:
        with pytest.raises(SSVMInputError, match=text):
            regularization_path(make_store(*random_explicit(0), 0.3), 0.05, lam_min=0.1, resume={**state, **change})
    with pytest.raises(SSVMInputError, match=r"resume.gaps: expected \(13,\)"):     # another problem
        regularization_path(make_store(*random_explicit(1, n=13), 0.3), 0.05, lam_min=0.1, resume=state)


@pytest.mark.long
def test_ssvm_path_resumes_a_path_and_extends_it_below_its_lam_min(tmp_path, capsys):
    args = ["--dataset", "ocr-small", "--eps", "0.5", "--quiet"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert path_main([*args, "--lam-min", "2.0", "--checkpoint", "--out", str(a)]) == 0
    short = json.loads((a / "path.json").read_text())
    assert path_main([*args, "--lam-min", "0.8", "--out", str(a), "--resume", str(a / "checkpoint.pt")]) == 0
    assert path_main([*args, "--lam-min", "0.8", "--out", str(b)]) == 0
    pa, pb = load_torch(a / "path.pt"), load_torch(b / "path.pt")
    assert len(pa["lambdas"]) > len(short) and torch.equal(pa["W"], pb["W"]) and pa["lam_end"] == pb["lam_end"]

    def strip(records):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in records]
    assert strip(json.loads((a / "path.json").read_text())) == strip(json.loads((b / "path.json").read_text()))
    capsys.readouterr()
    assert path_main(["--dataset", "ocr-small", "--eps", "0.2", "--out", str(tmp_path / "c"),
                      "--resume", str(a / "checkpoint.pt")]) == 2
    assert "is a checkpoint of eps = 0.5, this run has eps = 0.2" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.parametrize("warm", [True, False])
def test_a_grid_resumed_from_any_state_equals_the_uninterrupted_grid(warm, tmp_path):
    """``grid_search(checkpoint=, resume=)`` (what ``ssvm-train --select-lam --resume`` runs): from the state after
    the first, a middle or the last lambda, through a checkpoint file, the records but their times equal the
    uninterrupted grid's; warm, with pairwise steps and the cache (the working sets go through the file)."""
    from ssvm_torch.outputs import load_checkpoint, save_checkpoint
    from ssvm_torch.path import cold_starts
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=1, step="pairwise", cache=True)
    lams = [2.0 ** k for k in range(3, -6, -1)]
    states = []
    full = grid_search(cold_starts(make_store(*random_explicit(2), 1.0)), 0.02, lams, warm=warm, config=cfg,
                       checkpoint=states.append)
    assert len(states) == len(full) == len(lams)

    def strip(records):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in records]
    for k in (0, len(states) // 2, len(states) - 1):
        save_checkpoint(tmp_path / "g.pt", states[k], {"k": k})
        again = grid_search(cold_starts(make_store(*random_explicit(2), 1.0)), 0.02, lams, warm=warm, config=cfg,
                            resume=load_checkpoint(tmp_path / "g.pt"))
        assert strip(again) == strip(full)
    with pytest.raises(SSVMInputError, match="resume.lambdas: expected"):
        grid_search(cold_starts(make_store(*random_explicit(2), 1.0)), 0.02, lams[:-1], warm=warm, config=cfg,
                    resume=states[1])
    with pytest.raises(SSVMInputError, match="resume.warm: expected"):
        grid_search(cold_starts(make_store(*random_explicit(2), 1.0)), 0.02, lams, warm=not warm, config=cfg,
                    resume=states[1])


@pytest.mark.slow          # the slow tier (SSVM_SLOW=1): grid_search's resume is tested above in the fast tier
def test_ssvm_path_resumes_its_grids(tmp_path, capsys, monkeypatch):
    """``ssvm-path --grid --checkpoint``: a checkpoint write failing in the cold grid stops it (grid_cold.json with
    the lambdas done, grid_warm.json whole); --resume continues the cold grid from its last state, the path read
    back from path.pt, and every file equals the uninterrupted run's but the seconds."""
    import errno

    import ssvm_torch.cli.path as path_cli
    args = ["--dataset", "ocr-small", "--eps", "0.5", "--lam-min", "2.0", "--grid", "--checkpoint", "--quiet"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert path_main([*args, "--out", str(full)]) == 0
    import ssvm_torch.cli.checkpoints as writes_cli
    real, calls = writes_cli.save_checkpoint, []

    def full_disk(path, state, run):
        calls.append(state["format"] == path_cli.GRID_PHASE and not state["warm"])
        if sum(calls) == 3:                          # the cold grid's third lambda
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, state, run)
    monkeypatch.setattr(writes_cli, "save_checkpoint", full_disk)
    assert path_main([*args, "--out", str(cut)]) == 2
    err = capsys.readouterr().err
    assert "writing the checkpoint after 3 lambdas of the cold grid failed (No space left on device)" in err
    assert f"{cut / 'checkpoint.pt'} holds the last good one (taken after 2 lambdas of the cold grid)" in err
    monkeypatch.setattr(writes_cli, "save_checkpoint", real)
    assert path_main([*args[:-1], "--out", str(cut), "--resume", str(cut / "checkpoint.pt")]) == 0
    assert "resumed the cold grid from" in capsys.readouterr().out

    def strip(name, run):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in json.loads((run / name).read_text())]
    for name in ("path.json", "grid_warm.json", "grid_cold.json"):
        assert strip(name, cut) == strip(name, full), name
    assert len(strip("grid_cold.json", full)) >= 4


@pytest.mark.long
def test_ssvm_path_eval_every_evaluates_every_kth_breakpoint_and_the_last(tmp_path, capsys):
    """--eval-every 5: the errors in records 0, 5, 10, ... and the last (the same figures as a path that evaluates
    every breakpoint), the rest of every record as that path's; --eval-every -1 is refused by name."""
    args = ["--dataset", "ocr-small", "--eps", "0.5", "--lam-min", "1.0", "--quiet"]
    assert path_main([*args, "--out", str(tmp_path / "all")]) == 0
    assert path_main([*args, "--eval-every", "5", "--out", str(tmp_path / "k")]) == 0
    every, some = (json.loads((tmp_path / d / "path.json").read_text()) for d in ("all", "k"))
    assert len(every) == len(some) >= 8 and (len(some) - 1) % 5 != 0        # the last is not a multiple of 5
    errors = {"train_error", "test_error", "test_position_error"}
    for j, (a, b) in enumerate(zip(every, some)):
        shown = j % 5 == 0 or j == len(some) - 1
        assert (errors <= set(b)) == shown, j
        assert {k: v for k, v in b.items() if k != "time_s"} == {k: v for k, v in a.items() if k != "time_s"
                                                                   and (shown or k not in errors)}
    assert path_main([*args, "--eval-every", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert "eval_every: expected an int >= 0" in capsys.readouterr().err and not (tmp_path / "bad").exists()
