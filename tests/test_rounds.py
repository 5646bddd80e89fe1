"""BCFW rounds (CoCoA+, ssvm_torch/distributed/rounds.py): one process equals plain BCFW record for record; on
2 gloo ranks (spawned here, tiny subsets) the dual never decreases from round to round, every record's gap is
its primal minus its dual, the last gap equals one process's recomputation at the run's point, a resume
reproduces the records, and a dead rank ends the other in one line."""
from __future__ import annotations

import pytest
import torch

import distributed_worker as worker
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.distributed.rounds import RoundsSolver, rounds_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.tasks import load_task
from test_distributed import spawn

# gap_check 1 with rounds of one pass over the largest shard: one round per record
ROUNDS = dict(dataset="ocr-small", subset=40, lam=0.05, tau=1, passes=8, gap_check=1, seed=2, exchange="rounds")
CHAIN = dict(dataset="conll2000", train_size=24, lam=0.05, tau=1, passes=5, gap_check=1, seed=1, exchange="rounds")


def strip(history):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


@pytest.mark.parametrize("round_steps, recompute_every", [(None, 3), (7, 100)], ids=["pass-rounds", "7-step-rounds"])
def test_one_process_equals_plain_bcfw(round_steps, recompute_every):
    """P = 1: the shard is the whole problem (sigma' = 1) and a round's aggregation takes its point as it
    is, so the rounds are plain BCFW cut into pieces: the same records, bit for bit, and the same w (the
    exact recomputation comes after the round that reaches its pass count, so rounds shorter than a
    pass recompute at other steps than the one-process loop: that case runs without one)."""
    task = load_task("ocr-small")
    cfg = SolverConfig(passes=5, gap_check=2, seed=3, sampling="gap", recompute_every=recompute_every)
    plain = Solver(task.store(0.01), cfg)
    expected = plain.run()
    dual = rounds_store(task, 0.01)
    rounds = RoundsSolver(dual, cfg, round_steps=round_steps)
    assert strip(rounds.run()) == strip(expected)
    assert torch.equal(dual.w, plain.dual.w) and dual.ell == plain.dual.ell


def test_rounds_refuse_what_they_do_not_run():
    task = load_task("ocr-small")
    dual = rounds_store(task, 0.01)
    with pytest.raises(SSVMInputError, match="solver: expected 'bcfw' with step 'fw', batch size 1"):
        RoundsSolver(dual, SolverConfig(step="pairwise"))
    with pytest.raises(SSVMInputError, match="round_steps: expected an int >= 1"):
        RoundsSolver(dual, SolverConfig(), round_steps=0)
    with pytest.raises(SSVMInputError, match="batch_size: the rounds exchange runs BCFW steps"):
        dual.batch_corners(torch.tensor([0]))


def test_a_checkpoint_point_of_another_shape_is_refused_before_anything_is_loaded():
    """The shared point w of a rounds checkpoint is copied in place; one of another shape (one that
    ``copy_`` would broadcast) is refused naming it, and the blocks stay as they were."""
    task = load_task("ocr-small")
    donor = rounds_store(task, 0.01)
    RoundsSolver(donor, SolverConfig(passes=1, gap_check=1, seed=1)).run()
    state = donor.state_dict()
    dual = rounds_store(task, 0.01)
    w_before = dual.w.clone()
    with pytest.raises(SSVMInputError, match=r"checkpoint w: expected the shared point, a tensor of shape"):
        dual.load_state_dict({**state, "w": state["w"][:1]})
    assert torch.equal(dual.w, w_before) and torch.equal(dual.local.w, w_before)
    dual.load_state_dict(state)
    assert torch.equal(dual.w, donor.w)


@pytest.fixture(scope="module")
def rounds_run(tmp_path_factory):
    return spawn(ROUNDS, tmp_path_factory.mktemp("rounds"))


@pytest.mark.long
@pytest.mark.parametrize("spec", [pytest.param(ROUNDS, marks=pytest.mark.slow), CHAIN], ids=["ocr", "conll"])  # OCR: slow tier
def test_two_ranks_raise_the_dual_at_every_round(spec, request, tmp_path):
    run = request.getfixturevalue("rounds_run") if spec is ROUNDS else spawn(spec, tmp_path)
    hist = run["history"]
    assert run["exchange"] == "rounds" and len(hist) >= 4
    duals = [r["dual"] for r in hist]
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:])) and duals[-1] > duals[0]
    assert hist[-1]["gap"] < 0.5 * hist[0]["gap"]
    for r in hist:
        assert r["gap"] == pytest.approx(r["primal"] - r["dual"], rel=1e-8, abs=1e-12)
    assert [r["passes"] for r in hist][:3] == [0.0, 2.0, 4.0]    # a round (1 pass) + the counted gap pass


@pytest.mark.long
def test_last_gap_equals_a_one_process_recomputation(rounds_run):
    """One process at the run's (w, ell): its own exact gap pass gives the last record's primal, and
    primal - (ell - lam/2 ||w||^2) its gap."""
    task = worker.problem(ROUNDS)
    store = make_store(task.model, task.train, ROUNDS["lam"])
    store.set_point(rounds_run["w"], rounds_run["ell"])
    gp = store.gap_pass()
    last = rounds_run["history"][-1]
    assert store.primal(gp.H) == pytest.approx(last["primal"], rel=1e-10)
    assert store.primal(gp.H) - store.dual() == pytest.approx(last["gap"], rel=1e-9)
    # the blocks of both shards, rescaled to the whole problem, give the run's ell
    shards = rounds_run["state"]["dual"]["shards"]
    sizes = [len(s["ell_i"]) for s in shards]
    ell = sum(float(s["ell_i"].sum()) * k / task.n_train for s, k in zip(shards, sizes))
    assert ell == pytest.approx(rounds_run["ell"], rel=1e-10)


@pytest.mark.slow                     # two more spawns (the shared run is the third)
def test_resume_on_the_same_ranks_reproduces_the_records(rounds_run, tmp_path):
    part = spawn({**ROUNDS, "stop_at": 3}, tmp_path, name="part.pt")
    ckpt = tmp_path / "ckpt.pt"
    torch.save(part["state"], ckpt)
    resumed = spawn({**ROUNDS, "resume_from": str(ckpt)}, tmp_path, name="resumed.pt")
    assert strip(resumed["history"]) == strip(rounds_run["history"])
    assert torch.equal(resumed["w"], rounds_run["w"])


@pytest.mark.long
def test_a_dead_rank_ends_the_other_in_one_line(tmp_path):
    res = spawn({**ROUNDS, "die_after_start": True, "timeout_s": 10}, tmp_path)
    assert "distributed: a collective failed" in res["error"] and "another rank died" in res["error"]
    assert "\n" not in res["error"]


def lightning_ddp(tmp_path, exchange: str):
    """``python -m ssvm_torch.lightning fit`` on OCR-small under ``--trainer.strategy ddp --trainer.devices 2``
    with ``--model.exchange exchange`` (4 passes, a check every pass, seed 3); returns its log directory and
    the environment it ran in (PATH, one thread, its MASTER_PORT)."""
    import subprocess
    import sys
    from pathlib import Path

    from test_distributed import free_port
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "MASTER_PORT": str(free_port())}
    lit = ["fit", "--model.dataset", "ocr-small", "--model.lam", "0.01", "--model.passes", "4", "--model.gap_check", "1",
           "--model.seed", "3", "--model.exchange", exchange, "--trainer.strategy", "ddp", "--trainer.devices", "2",
           "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path / "lit"),
           "--trainer.enable_progress_bar", "false"]
    r = subprocess.run([sys.executable, "-m", "ssvm_torch.lightning", *lit], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "lit" / "lightning_logs" / "version_0", env


@pytest.mark.slow          # Lightning's DDP launcher and torchrun: four interpreters (~40 s)
def test_lightning_ddp_runs_the_rounds_as_torchrun_does(tmp_path):
    """``--model.exchange rounds`` under ``--trainer.strategy ddp --trainer.devices 2``: a training step is a
    round, the gap check closes the epoch, and the records equal those of ``torchrun --nproc-per-node 2
    ssvm-train --exchange rounds`` with the same options (the same RoundsSolver under two drivers)."""
    import json
    import subprocess
    import sys

    from test_distributed import free_port
    out, env = lightning_ddp(tmp_path, "rounds")
    hist = json.loads((out / "history.json").read_text())
    cli = ["--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "ssvm_torch.cli.train", "--dataset",
           "ocr-small", "--lam", "0.01", "--passes", "4", "--gap-check", "1", "--seed", "3", "--exchange", "rounds",
           "--quiet", "--out", str(tmp_path / "cli")]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", *cli], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = json.loads((tmp_path / "cli" / "history.json").read_text())
    ref = ref["records"] if isinstance(ref, dict) else ref
    assert len(hist) == len(ref) >= 3
    assert [h["gap"] for h in hist] == [h["gap"] for h in ref]
    assert [h["test_error"] for h in hist] == [h["test_error"] for h in ref]
