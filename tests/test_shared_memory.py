"""Asynchronous BCFW on shared memory (ssvm_torch/distributed/shared_memory.py): one process equals plain
BCFW record for record (a resume too); on 2 gloo ranks (spawned here, tiny subsets) every record's gap is
its primal minus its dual, the run's w is exactly the sum of both shards' blocks, the last gap equals one
process's recomputation at the run's point, a resume starts from the checkpoint's point, and a dead rank
ends the other in one line; what the exchange does not run is refused by name."""
from __future__ import annotations

import os
from dataclasses import replace

import distributed_worker as worker
import pytest
import torch
from test_distributed import spawn
from test_rounds import strip

from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.distributed import shard_of
from ssvm_torch.distributed.rounds import RoundsSolver
from ssvm_torch.distributed.shared_memory import shared_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.tasks import load_task

SHARED = dict(dataset="ocr-small", subset=40, lam=0.05, tau=1, passes=8, gap_check=1, seed=2, exchange="shared",
              recompute_every=3)
CHAIN = dict(dataset="conll2000", train_size=24, lam=0.05, tau=1, passes=5, gap_check=1, seed=1, exchange="shared")
TREES = dict(dataset="ud-ewt", train_size=30, lam=0.05, tau=1, passes=5, gap_check=1, seed=1, exchange="shared")


def test_one_process_equals_plain_bcfw():
    """P = 1: the mirror receives the same additions as w, so a check's exact point is w itself and the run
    is plain BCFW: the same records and the same w, bit for bit (the recomputation included)."""
    task = load_task("ocr-small")
    cfg = SolverConfig(passes=5, gap_check=2, seed=3, sampling="gap", recompute_every=2)
    plain = Solver(task.store(0.01), cfg)
    expected = plain.run()
    dual = shared_store(task, 0.01)
    assert strip(RoundsSolver(dual, cfg).run()) == strip(expected)
    assert torch.equal(dual.w, plain.dual.w) and dual.ell == plain.dual.ell


def test_one_process_on_the_tree_store_equals_plain_bcfw():
    """The dependency-tree store (UD English-EWT, projective) shares its w the same way: one process is plain
    BCFW, bit for bit."""
    task = load_task("ud-ewt", train_size=40)
    cfg = SolverConfig(passes=4, gap_check=1, seed=1, sampling="gap", recompute_every=2)
    plain = Solver(task.store(0.01), cfg)
    expected = plain.run()
    dual = shared_store(task, 0.01)
    assert strip(RoundsSolver(dual, cfg).run()) == strip(expected)
    assert torch.equal(dual.w, plain.dual.w)


def test_one_process_resume_continues_bit_for_bit():
    task = load_task("ocr-small")
    cfg = SolverConfig(passes=6, gap_check=1, seed=4, sampling="gap", recompute_every=2)
    whole = RoundsSolver(shared_store(task, 0.01), cfg).run()
    first = RoundsSolver(shared_store(task, 0.01), replace(cfg, passes=3))
    first.run()
    state = first.state_dict()
    second = RoundsSolver(shared_store(task, 0.01), cfg)
    second.load_state_dict(state)
    assert strip(second.run()) == strip(whole)


def test_shared_refuses_what_it_does_not_run(monkeypatch):
    with pytest.raises(SSVMInputError, match="exchange: expected 'shared' for the chain .* stores with compiled "
                                             "kernels.*got a ChainDual with kernels 'torch'"):
        shared_store(load_task("ocr-small"), 0.01, kernels="torch")
    with pytest.raises(SSVMInputError, match="got a EdgeChainDual"):
        shared_store(load_task("conll2000", train_size=8, features="rich-edges"), 0.01)
    with pytest.raises(SSVMInputError, match="exchange: expected 'shared' for the chain"):
        shared_store(load_task("scene"), 0.01)
    dual = shared_store(load_task("ocr-small"), 0.01)
    with pytest.raises(SSVMInputError, match="set_point: the shared exchange's point is the sum of its blocks"):
        dual.set_point(torch.zeros_like(dual.w), 0.0)
    with pytest.raises(SSVMInputError, match="batch_size: the rounds exchange runs BCFW steps"):
        dual.batch_corners(torch.tensor([0]))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(SSVMInputError, match="every rank on one machine .* across machines use --exchange rounds"):
        shared_store(load_task("ocr-small"), 0.01)


def test_shared_memory_that_cannot_be_reserved_is_refused_up_front(monkeypatch):
    """A /dev/shm too small for w and the mirrors (a container's default) would kill the run with SIGBUS
    at the first page touched: the space is reserved first, and refused by name; no file is left behind."""
    import os

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    with pytest.raises(SSVMInputError, match=r"exchange: 'shared' needs 0\.\d MB of shared memory .* "
                                             r"No space left on device.*--shm-size"):
        shared_store(load_task("ocr-small"), 0.01)
    assert (set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()) == before


def test_auto_picks_shared_for_bcfw_on_one_machines_ranks(monkeypatch):
    """``auto`` (measured: docs/distributed.md): shared for BCFW with batch size 1 on several ranks of one
    machine where it applies; the columns store for mini-batches and for edge features; one process stays
    the one-process solver (mini-batches: the columns kernels)."""
    from ssvm_torch.distributed import launch, resolve_exchange
    ocr, edges = load_task("ocr-small"), load_task("conll2000", train_size=8, features="rich-edges")
    bcfw, minibatch = SolverConfig(), SolverConfig(batch_size=4)
    assert resolve_exchange("auto", ocr, config=bcfw) == "auto"
    assert resolve_exchange("auto", ocr, config=minibatch) == "columns"
    monkeypatch.setattr(launch, "world", lambda: (0, 2))
    assert resolve_exchange("auto", ocr, config=bcfw) == "shared"
    assert resolve_exchange("auto", ocr, config=minibatch) == "columns"
    assert resolve_exchange("auto", ocr, config=SolverConfig(averaging=True)) == "columns"
    assert resolve_exchange("auto", ocr, config=bcfw, kernels="torch") == "auto"
    assert resolve_exchange("auto", edges, config=bcfw) == "columns"
    assert resolve_exchange("rounds", ocr, config=bcfw) == "rounds"
    assert resolve_exchange("auto", load_task("ud-ewt", train_size=8), config=bcfw) == "shared"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")              # two machines
    assert resolve_exchange("auto", ocr, config=bcfw) == "columns"


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    """The 2-rank OCR run, its ranks pinned (SSVM_SHARED_PIN=compact, affinity.py; the children inherit the
    environment): the exactness checks below hold pinned as they do unpinned (the CoNLL and UD runs)."""
    os.environ["SSVM_SHARED_PIN"] = "compact"
    try:
        return spawn(SHARED, tmp_path_factory.mktemp("shared"))
    finally:
        del os.environ["SSVM_SHARED_PIN"]


def shard_w(spec, state):
    """Each shard's w exactly from its blocks (a store of the shard loaded from the checkpoint)."""
    task = worker.problem(spec)
    n = task.n_train
    out = []
    for r, shard_state in enumerate(state["dual"]["shards"]):
        local = make_store(task.model, task.train.subset(shard_of(n, 2, r)), spec["lam"], n_objective=n)
        local.load_state_dict(shard_state)
        local.recompute()
        out.append((local.w.clone(), float(local.ell_i.sum())))
    return task, out


# OCR's and UD's cases are slow (CoNLL's runs the same exchange in the fast tier; the tree store's one-process
# case below stays fast)
@pytest.mark.long
@pytest.mark.parametrize("spec, mirror", [pytest.param(SHARED, "steps", marks=pytest.mark.slow), (CHAIN, "steps"),
                                          (CHAIN, "rebuild"), pytest.param(TREES, "steps", marks=pytest.mark.slow),
                                          pytest.param(TREES, "rebuild", marks=pytest.mark.slow)],
                         ids=["ocr", "conll", "conll-rebuild", "ud-ewt", "ud-ewt-rebuild"])
def test_two_ranks_are_exact_at_every_check(spec, mirror, request, tmp_path, monkeypatch):
    """Exact at every check whether each rank's mirror follows its moves (``steps``) or is rebuilt from its blocks
    at every check (``SSVM_SHARED_MIRROR=rebuild``; the spawned ranks inherit the environment)."""
    monkeypatch.setenv("SSVM_SHARED_MIRROR", mirror)
    run = request.getfixturevalue("shared_run") if spec is SHARED else spawn(spec, tmp_path)
    hist = run["history"]
    assert run["exchange"] == "shared" and len(hist) >= 4
    assert hist[-1]["gap"] < 0.5 * hist[0]["gap"]
    for r in hist:
        assert r["gap"] == pytest.approx(r["primal"] - r["dual"], rel=1e-8, abs=1e-12)
    # the run's point is w(alpha): the two shards' blocks summed (lost additions to the shared w do not
    # reach it), and ell likewise
    task, parts = shard_w(spec, run["state"])
    assert torch.allclose(parts[0][0] + parts[1][0], run["w"], rtol=0, atol=1e-12 * float(run["w"].abs().max()))
    assert parts[0][1] + parts[1][1] == pytest.approx(run["ell"], rel=1e-10)
    # and one process's exact gap pass there gives the last record
    store = make_store(task.model, task.train, spec["lam"])
    store.set_point(run["w"], run["ell"])
    gp = store.gap_pass()
    assert store.primal(gp.H) == pytest.approx(hist[-1]["primal"], rel=1e-10)
    assert store.primal(gp.H) - store.dual() == pytest.approx(hist[-1]["gap"], rel=1e-9)
    # each rank's profile (ranks.json of ssvm-train): its shard, its own steps (the records count both ranks'),
    # where its seconds went; its steps are inside the timed rounds, the mirrors are summed at every check
    ranks = run["profiles"]
    assert [p["rank"] for p in ranks] == [0, 1] and sum(p["blocks"] for p in ranks) == task.n_train
    assert sum(p["steps"] for p in ranks) == hist[-1]["steps"] and all(p["steps"] > 0 for p in ranks)
    # the ranks share each round's steps (SharedDual.round_draws): between two checks the machine makes at
    # least gap_check passes of the larger shard per rank, a rank ahead taking more of them, and at most
    # half as many again (a rank's last look at the sum lets it take up to half an equal share of what is left)
    per_check = 2 * round(spec["gap_check"] * len(shard_of(task.n_train, 2, 0)))
    diffs = [b["steps"] - a["steps"] for a, b in zip(hist, hist[1:])]
    assert all(per_check <= d <= 1.5 * per_check for d in diffs[:-1]) and diffs[-1] >= 1, (per_check, diffs)
    assert all(p["steps_s"] > 0 and p["gap_s"] > 0 and p["sync_s"] > 0 and p["wait_s"] > 0 for p in ranks)
    assert ranks[0]["steps_s"] < hist[-1]["time_s"]
    # pinned (the OCR run): each rank on a CPU of its own where the machine lets this process use two
    pinned = spec is SHARED and len(os.sched_getaffinity(0)) >= 2
    cpus = [p["cpus"] for p in ranks]
    assert (len(cpus[0]) == len(cpus[1]) == 1 and cpus[0] != cpus[1]) if pinned else cpus == [None, None], cpus
    assert all(p["shard_s"] == pytest.approx(p["steps_s"] + p["gap_s"]) for p in ranks)
    assert [p["mirror"] for p in ranks] == [mirror, mirror]


@pytest.mark.slow                     # two more spawns
def test_resume_starts_from_the_checkpoint(shared_run, tmp_path):
    """The trajectory between checks depends on the ranks' timing, so a resume cannot replay the records;
    it continues from the checkpoint's exact point: the records up to it kept, one more interval run, and
    the point again the sum of the shards' blocks."""
    part = spawn({**SHARED, "stop_at": 3}, tmp_path, name="part.pt")
    ckpt = tmp_path / "ckpt.pt"
    torch.save(part["state"], ckpt)
    resumed = spawn({**SHARED, "resume_from": str(ckpt), "stop_at": 4}, tmp_path, name="resumed.pt")
    assert strip(resumed["history"][:4]) == strip(part["history"])
    assert len(resumed["history"]) == 5
    _, parts = shard_w(SHARED, resumed["state"])
    assert torch.allclose(parts[0][0] + parts[1][0], resumed["w"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name, read, default, other, refused", [
    ("SSVM_SHARED_ROUND", "shares_rounds", True, ("fixed", False), "dynamic"),
    ("SSVM_SHARED_MIRROR", "mirror_choice", "steps", ("rebuild", "rebuild"), "never")])
def test_exchange_settings_are_chosen_by_their_environment_variables(name, read, default, other, refused,
                                                                      monkeypatch):
    """SSVM_SHARED_ROUND: 'shared' (the default) or 'fixed' (every rank its own share of a round, kept for
    side-by-side measurement); SSVM_SHARED_MIRROR: 'steps' (the default) or 'rebuild'; anything else is refused
    by name, with the choices."""
    from ssvm_torch.distributed import shared_memory
    fn = getattr(shared_memory, read)
    monkeypatch.delenv(name, raising=False)
    assert fn() == default
    monkeypatch.setenv(name, other[0])
    assert fn() == other[1]
    monkeypatch.setenv(name, refused)
    with pytest.raises(ValueError, match=f"{name}: expected one of \\(.*\\), got '{refused}'"):
        fn()


def test_one_process_with_rebuilt_mirrors_follows_plain_bcfw(monkeypatch):
    """SSVM_SHARED_MIRROR=rebuild, one process: no move touches the mirror, each check sets w to the blocks'
    exact sum (the recomputation plain BCFW runs every recompute_every passes), so the records follow plain
    BCFW's to rounding and the last w is the blocks' sum."""
    monkeypatch.setenv("SSVM_SHARED_MIRROR", "rebuild")
    task = load_task("ocr-small")
    cfg = SolverConfig(passes=5, gap_check=1, seed=3, sampling="gap", recompute_every=1)
    plain = Solver(task.store(0.01), cfg)
    expected = plain.run()
    dual = shared_store(task, 0.01)
    got = RoundsSolver(dual, cfg).run()
    assert dual.local.shadow is None and len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a["gap"] == pytest.approx(b["gap"], rel=1e-8) and a["dual"] == pytest.approx(b["dual"], rel=1e-10)
    assert torch.allclose(dual.w, plain.dual.w, rtol=0, atol=1e-12)


@pytest.mark.long
def test_a_dead_rank_ends_the_other_in_one_line(tmp_path):
    res = spawn({**SHARED, "die_after_start": True, "timeout_s": 10}, tmp_path)
    assert "distributed: a collective failed" in res["error"] and "another rank died" in res["error"]
    assert "\n" not in res["error"]


@pytest.mark.slow          # Lightning's DDP launcher: two interpreters
def test_lightning_ddp_runs_the_shared_exchange(tmp_path):
    """``--model.exchange shared`` under ``--trainer.strategy ddp --trainer.devices 2``: the records are exact
    (the last primal is one process's at model.pt's w, the gap its primal minus its dual)."""
    import json

    from ssvm_torch.outputs import load_model
    from test_rounds import lightning_ddp
    out, _ = lightning_ddp(tmp_path, "shared")
    hist = json.loads((out / "history.json").read_text())
    hist = hist["records"] if isinstance(hist, dict) else hist
    assert len(hist) == 3 and hist[-1]["gap"] < hist[0]["gap"]       # a check every pass: 2 passes each
    w = load_model(out / "model.pt")["w"]
    store = load_task("ocr-small").store(0.01)
    store.set_point(w, 0.0)
    last = hist[-1]
    assert store.primal(store.gap_pass().H) == pytest.approx(last["primal"], rel=1e-10)
    assert last["gap"] == pytest.approx(last["primal"] - last["dual"], rel=1e-8)
