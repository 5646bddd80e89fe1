"""Data-parallel mini-batch BCFW on torch.distributed (gloo, 2 processes spawned here, tiny subsets):
the same trajectory as one process, the exact distributed gap, resume, and a dead rank."""
from __future__ import annotations

import dataclasses
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import distributed_worker as worker
from ssvm_torch import Solver, make_store
from ssvm_torch.distributed import ShardedDual, shard_of
from ssvm_torch.errors import SSVMInputError

OCR = dict(dataset="ocr-small", subset=40, lam=0.05, tau=6, passes=6, gap_check=1, seed=2)
CONLL = dict(dataset="conll2000", train_size=24, lam=0.05, tau=5, passes=4, gap_check=1, seed=1, exchange="gather")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(spec, tmp_path, world=2, name="out.pt"):
    out = tmp_path / name
    mp.spawn(worker.run, args=(world, free_port(), spec, str(out)), nprocs=world, join=True)
    return torch.load(out, weights_only=False)


def single(spec):
    task = worker.problem(spec)
    store = make_store(task.model, task.train, spec["lam"])
    solver = Solver(store, worker.config(spec))
    return solver, solver.run(), store, task


@pytest.mark.parametrize("spec", [OCR, {**OCR, "exchange": "gather"}, CONLL], ids=["ocr-allreduce", "ocr-gather",
                                                                                  "conll-gather"])
def test_two_ranks_follow_the_single_process_trajectory(spec, tmp_path):
    dist_run = spawn(spec, tmp_path)
    solver, hist, store, _ = single(spec)
    exact = spec.get("exchange") == "gather"
    assert dist_run["gather"] == exact
    assert len(dist_run["history"]) == len(hist) >= 3
    for a, b in zip(dist_run["history"], hist):
        assert a["passes"] == b["passes"] and a["steps"] == b["steps"]
        assert a["gap"] == pytest.approx(b["gap"], rel=1e-10, abs=1e-13)
        assert a["primal"] == pytest.approx(b["primal"], rel=1e-10)
        assert a["dual"] == pytest.approx(b["dual"], rel=1e-10)
    assert torch.allclose(dist_run["w"], store.w, rtol=1e-10, atol=1e-13)
    if exact:                                       # the gather exchange reproduces one process bit for bit
        assert torch.equal(dist_run["w"], store.w)
        assert [r["gap"] for r in dist_run["history"]] == [r["gap"] for r in hist]
    np.testing.assert_allclose(dist_run["gaps"], solver.block_gaps, rtol=1e-9, atol=1e-13)


def test_distributed_gap_equals_a_single_process_recomputation(tmp_path):
    """Rebuild the blocks of both shards in one store from the 2-rank checkpoint: its own exact
    gap pass gives the distributed run's last gap."""
    run = spawn(OCR, tmp_path)
    task = worker.problem(OCR)
    store = make_store(task.model, task.train, OCR["lam"])
    shards = run["state"]["dual"]["shards"]
    ids = [shard_of(task.n_train, 2, r) for r in range(2)]
    state = {"lam": OCR["lam"], "w": shards[0]["w"], "ell": shards[0]["ell"],
             "ell_i": torch.empty(task.n_train, dtype=torch.float64), "Mt": torch.empty_like(store.Mt),
             "Mu": torch.empty_like(store.Mu)}
    offsets = task.train.offsets
    for r in range(2):
        state["ell_i"][ids[r]] = shards[r]["ell_i"]
        state["Mt"][ids[r]] = shards[r]["Mt"]
        rows = torch.cat([torch.arange(int(offsets[i]), int(offsets[i + 1])) for i in ids[r].tolist()])
        state["Mu"][rows] = shards[r]["Mu"]
    store.load_state_dict(state)
    w_run = store.w.clone()
    store.recompute()                                   # w and ell from the blocks alone
    assert torch.allclose(store.w, w_run, atol=1e-12)
    gp = store.gap_pass()
    primal, dual = store.primal(gp.H), store.dual()
    last = run["history"][-1]
    assert float(gp.block_gaps.sum()) == pytest.approx(last["gap"], rel=1e-9)
    assert primal - dual == pytest.approx(last["gap"], rel=1e-9)


def test_resume_on_the_same_ranks_reproduces_the_run(tmp_path):
    full = spawn(OCR, tmp_path, name="full.pt")
    part = spawn({**OCR, "stop_at": 2}, tmp_path, name="part.pt")
    ckpt = tmp_path / "ckpt.pt"
    torch.save(part["state"], ckpt)
    resumed = spawn({**OCR, "resume_from": str(ckpt)}, tmp_path, name="resumed.pt")
    strip = [{k: v for k, v in r.items() if k != "time_s"} for r in resumed["history"]]
    assert strip == [{k: v for k, v in r.items() if k != "time_s"} for r in full["history"]]
    assert torch.equal(resumed["w"], full["w"])


def test_a_dead_rank_stops_the_others_with_a_clear_error(tmp_path):
    res = spawn({**OCR, "die_after_start": True, "timeout_s": 10}, tmp_path)
    assert "distributed: a collective failed" in res["error"] and "another rank died" in res["error"]


def test_sharded_store_checks_its_inputs():
    task = worker.problem(OCR)
    local = make_store(task.model, task.train, 0.05)
    with pytest.raises(SSVMInputError, match="n_objective: expected the local store built with n_objective = n = 41"):
        ShardedDual(local, 41)
    with pytest.raises(SSVMInputError, match="world_size: expected at most n = 3 ranks"):
        shard_of(3, 4, 0)
    seg = worker.problem(dict(dataset="segmentation-synth", train_size=4))
    boxed = make_store(seg.model, seg.train, 0.1, nonnegative=seg.nonnegative)
    with pytest.raises(SSVMInputError, match="box constraints"):
        ShardedDual(boxed, 4)
    assert dataclasses.is_dataclass(task)
