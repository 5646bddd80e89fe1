"""Data-parallel mini-batch BCFW on torch.distributed (gloo, 2 processes spawned here, tiny subsets):
the same trajectory as one process, the exact distributed gap, resume, and a dead rank."""
from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import distributed_worker as worker
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.distributed.column_shards import ColumnShardedChain
from ssvm_torch.distributed import ShardedDual, shard_of
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.stores import EdgeChainDual
from ssvm_torch.tasks import load_task

OCR = dict(dataset="ocr-small", subset=40, lam=0.05, tau=6, passes=6, gap_check=1, seed=2, exchange="allreduce")
CONLL = dict(dataset="conll2000", train_size=24, lam=0.05, tau=5, passes=4, gap_check=1, seed=1, exchange="gather")
COLUMNS = {**CONLL, "exchange": "columns"}
EDGES = {**COLUMNS, "features": "rich-edges"}       # edge-observation features: CoNLL's default template


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: what a spec says beyond the run itself: a stop, a resume, a fault
FAULT_KEYS = ("stop_at", "resume_from", "die_after_start", "timeout_s")


def spawn(spec, tmp_path, world=2, name="out.pt"):
    # the one-process BCFW run first: with an empty numba cache (CI's) every rank would compile the store's kernels
    # itself, all at once; after it they load them from the cache
    single({k: v for k, v in spec.items() if k not in FAULT_KEYS})
    out = tmp_path / name
    mp.spawn(worker.run, args=(world, free_port(), spec, str(out)), nprocs=world, join=True)
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def ocr_run(tmp_path_factory):
    """The 2-rank run of OCR, shared by the tests that only read it (each spawn costs two interpreters)."""
    return spawn(OCR, tmp_path_factory.mktemp("ocr"))


@pytest.fixture(scope="module")
def columns_run(tmp_path_factory):
    """The 2-rank run of CoNLL with the coordinate-sharded store, shared like ``ocr_run``."""
    return spawn(COLUMNS, tmp_path_factory.mktemp("columns"))


@pytest.fixture(scope="module")
def edges_run(tmp_path_factory):
    """The 2-rank run of CoNLL's rich-edges template with the coordinate-sharded store."""
    return spawn(EDGES, tmp_path_factory.mktemp("edges"))


_SINGLE: dict = {}


def single(spec):
    """(solver, history, store, task) of the one-process run of ``spec``, run once per spec in this process (the
    tests read it only)."""
    key = repr(sorted(spec.items()))
    if key not in _SINGLE:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)        # as the ranks: a module fixture may run before conftest's one_torch_thread
        try:
            task = worker.problem(spec)
            store = make_store(task.model, task.train, spec["lam"])
            store.sparse_direction = bool(spec.get("sparse_direction"))
            solver = Solver(store, worker.config(spec))
            _SINGLE[key] = (solver, solver.run(), store, task)
        finally:
            torch.set_num_threads(threads)
    return _SINGLE[key]


@pytest.mark.long
@pytest.mark.parametrize("spec", [OCR, pytest.param({**OCR, "exchange": "gather"}, marks=pytest.mark.slow),
                                  CONLL,
                                  pytest.param({**CONLL, "sparse_direction": True}, marks=pytest.mark.slow),
                                  # OCR's sparse directions and its column exchange spawn their own runs: slow tier
                                  # (CoNLL's column and edge cases check both code paths on the shared runs)
                                  pytest.param({**OCR, "sparse_direction": True}, marks=pytest.mark.slow), COLUMNS,
                                  pytest.param({**OCR, "exchange": "columns"}, marks=pytest.mark.slow), EDGES],
                         ids=["ocr-allreduce", "ocr-gather", "conll-gather", "conll-sparse-gather",
                              "ocr-sparse-allreduce", "conll-columns", "ocr-columns", "conll-edges-columns"])
def test_two_ranks_follow_the_single_process_trajectory(spec, tmp_path, request):
    """allreduce sums the ranks' directions in another order than one process: equal to rounding
    (CoNLL's binary features can turn such a rounding difference into another Viterbi tie-break, so
    CoNLL is checked with the bit-identical gather exchange, every process with one torch thread, as
    conftest's ``one_torch_thread`` sees to here; the columns exchange sums partial unaries in another
    order: :func:`check_columns_run`)."""
    shared = {id(OCR): "ocr_run", id(COLUMNS): "columns_run", id(EDGES): "edges_run"}
    dist_run = request.getfixturevalue(shared[id(spec)]) if id(spec) in shared else spawn(spec, tmp_path)
    solver, hist, store, _ = single(spec)
    exact = spec.get("exchange") == "gather"
    assert dist_run["exchange"] == spec.get("exchange", "allreduce")
    assert len(dist_run["history"]) == len(hist) >= 3
    if spec.get("exchange") == "columns":
        return check_columns_run(dist_run["history"], hist)
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


def check_columns_run(dist: list, one: list) -> None:
    """The columns exchange sums each unary from partial scores: its first check (w = 0, every
    unary exactly 0) equals one process's, later ones may leave one process's labelings at an argmax
    tie (binary features, docs/distributed.md) but stay a valid run: the dual never decreases, the
    gap falls, and every record's gap is primal - dual of that record."""
    assert dist[0]["gap"] == one[0]["gap"] and dist[0]["primal"] == one[0]["primal"]
    assert [a["passes"] for a in dist] == [b["passes"] for b in one]
    duals = [r["dual"] for r in dist]
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:])) and duals[-1] > duals[0]
    assert dist[-1]["gap"] < 0.9 * dist[0]["gap"]
    for r in dist:
        assert r["gap"] == pytest.approx(r["primal"] - r["dual"], rel=1e-9, abs=1e-12)


def test_distributed_gap_equals_a_single_process_recomputation(ocr_run):
    """Rebuild the blocks of both shards in one store from the 2-rank checkpoint: its own exact
    gap pass gives the distributed run's last gap."""
    run = ocr_run
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


@pytest.mark.parametrize("spec, fixture", [(COLUMNS, "columns_run"), (EDGES, "edges_run")], ids=["chain", "edges"])
def test_columns_gap_equals_a_single_process_recomputation(spec, fixture, request):
    """The coordinate-sharded run's checkpoint is a whole chain store (w gathered, the statistics
    replicated; with edge features, Me too): one process loads it, recomputes w from the statistics
    and its own exact gap pass gives the run's last gap."""
    run = request.getfixturevalue(fixture)
    task = worker.problem(spec)
    store = make_store(task.model, task.train, spec["lam"])
    assert isinstance(store, EdgeChainDual) == (spec is EDGES)
    state = run["state"]["dual"]
    assert state["world_size"] == 2 and state["exchange"] == "columns"
    store.load_state_dict(state)
    assert torch.equal(store.w, run["w"])
    store.recompute()
    assert torch.allclose(store.w, run["w"], rtol=1e-10, atol=1e-13)
    gp = store.gap_pass()
    last = run["history"][-1]
    assert float(gp.block_gaps.sum()) == pytest.approx(last["gap"], rel=1e-9)
    assert store.primal(gp.H) - store.dual() == pytest.approx(last["gap"], rel=1e-9)


@pytest.mark.long
@pytest.mark.parametrize("spec, stop", [(OCR, 2), pytest.param(COLUMNS, 1, marks=pytest.mark.slow)],
                         ids=["allreduce", "columns"])        # columns' case in the slow tier (15 s)
def test_resume_on_the_same_ranks_reproduces_the_run(tmp_path, spec, stop, request):
    full = request.getfixturevalue("ocr_run" if spec is OCR else "columns_run")
    assert len(full["history"]) > stop + 1              # stopped before the run's last check
    part = spawn({**spec, "stop_at": stop}, tmp_path, name="part.pt")
    ckpt = tmp_path / "ckpt.pt"
    torch.save(part["state"], ckpt)
    resumed = spawn({**spec, "resume_from": str(ckpt)}, tmp_path, name="resumed.pt")
    strip = [{k: v for k, v in r.items() if k != "time_s"} for r in resumed["history"]]
    assert strip == [{k: v for k, v in r.items() if k != "time_s"} for r in full["history"]]
    assert torch.equal(resumed["w"], full["w"])


@pytest.mark.long
@pytest.mark.parametrize("spec", [OCR, COLUMNS], ids=["allreduce", "columns"])
def test_a_dead_rank_stops_the_others_with_a_clear_error(tmp_path, spec):
    res = spawn({**spec, "die_after_start": True, "timeout_s": 10}, tmp_path)
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
    conll = load_task("conll2000", train_size=6, features="rich-edges")
    edges = make_store(conll.model, conll.train, 0.1)
    with pytest.raises(SSVMInputError, match="edge-observation features.*not supported by the exchanges gather and "
                                             "allreduce.*use --exchange columns"):
        ShardedDual(edges, 6)
    with pytest.raises(SSVMInputError, match="exchange 'columns': ColumnShardedChain runs the ChainDual store, got a "
                                             "chain with edge-observation features"):
        ColumnShardedChain(edges)
    plain = load_task("conll2000", train_size=6, features="sha-pereira")
    with pytest.raises(SSVMInputError, match="exchange 'columns': runs the numba kernels"):
        ColumnShardedChain(make_store(plain.model, plain.train, 0.1, kernels="torch"))
    with pytest.raises(SSVMInputError, match="written by 2 process.*exchange 'columns'.*this run has 1"):
        ColumnShardedChain(make_store(plain.model, plain.train, 0.1)).load_state_dict(
            {"world_size": 2, "exchange": "columns"})
    with pytest.raises(SSVMInputError, match="averaging: not supported.*coordinate-sharded store"):
        Solver(ColumnShardedChain(make_store(plain.model, plain.train, 0.1)),
               SolverConfig(batch_size=2, averaging=True))
    # the audit's case: --exchange columns on scene named two store classes and not the rule
    from ssvm_torch.distributed import sharded_store
    with pytest.raises(SSVMInputError, match="exchange: 'columns' shards the feature columns of linear-chain models "
                                             r"\(datasets ocr-small, ocr-large, conll2000\); scene is not one: use "
                                             "--exchange gather or allreduce"):
        sharded_store(load_task("scene"), 0.1, exchange="columns")


@pytest.mark.long
def test_one_process_runs_the_column_kernels_where_they_apply(tmp_path):
    """ssvm-train in one process takes the coordinate-sharded store's kernels for sparse chain
    models with mini-batches (recorded in config.json) and follows the generic store's trajectory
    (``--exchange allreduce``: the chain store's own mini-batch path) to rounding; block steps
    (batch size 1) keep the generic store."""
    import json
    from ssvm_torch.cli.train import main as train_main
    args = ["--dataset", "conll2000", "--features", "sha-pereira", "--tags", "bio", "--constraints", "bio",
            "--train-size", "60", "--lam", "0.05", "--passes", "3", "--gap-check", "1", "--seed", "4", "--quiet"]
    assert train_main([*args, "--batch-size", "8", "--out", str(tmp_path / "auto")]) == 0
    assert train_main([*args, "--batch-size", "8", "--exchange", "allreduce", "--out", str(tmp_path / "generic")]) == 0
    assert train_main([*args, "--out", str(tmp_path / "bcfw")]) == 0
    config = {k: json.loads((tmp_path / k / "config.json").read_text()) for k in ("auto", "generic", "bcfw")}
    assert config["auto"]["distributed"]["exchange"] == "columns" and config["auto"]["distributed"]["world_size"] == 1
    assert config["generic"]["distributed"] is None and config["bcfw"]["distributed"] is None
    auto, generic = (json.loads((tmp_path / k / "history.json").read_text()) for k in ("auto", "generic"))
    assert [r["passes"] for r in auto] == [r["passes"] for r in generic]
    for a, b in zip(auto, generic):
        assert a["gap"] == pytest.approx(b["gap"], rel=1e-9)
        assert a["test_error"] == b["test_error"]


@pytest.mark.slow   # torchrun itself launches ssvm-train in the fast tier's Ctrl-C case; exactness: the spawned runs above
def test_torchrun_launch_of_ssvm_train_matches_one_process(tmp_path):
    """The README's launch command: torchrun runs ssvm-train on 2 ranks; with the gather exchange its
    model.pt is bit-identical to the 1-process run, and only rank 0 writes."""
    import json
    import subprocess
    import sys
    args = ["--dataset", "conll2000", "--features", "sha-pereira", "--min-count", "1", "--tags", "bio",
            "--constraints", "none", "--loss", "normalized", "--train-size", "30", "--lam", "0.05", "--batch-size", "4",
            "--passes", "3",
            "--gap-check", "1", "--exchange", "gather", "--seed", "2", "--checkpoint", "--quiet"]
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(free_port()), "-m", "ssvm_torch.cli.train", *args,
                          "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=300, env=env)
    assert two.returncode == 0, two.stderr[-2000:]
    one = subprocess.run([sys.executable, "-m", "ssvm_torch.cli.train", *args, "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert one.returncode == 0, one.stderr[-2000:]
    w2 = torch.load(tmp_path / "two" / "model.pt")["w"]
    w1 = torch.load(tmp_path / "one" / "model.pt")["w"]
    assert torch.equal(w1, w2)
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["distributed"]["world_size"] == 2 and config["distributed"]["exchange"] == "gather"
    ck = torch.load(tmp_path / "two" / "checkpoint.pt")
    assert ck["run"]["world_size"] == 2 and len(ck["solver"]["dual"]["shards"]) == 2


@pytest.mark.slow          # two Lightning interpreters (~30 s); the sharded store itself is covered above
@pytest.mark.parametrize("exchange", ["gather", "auto"])
def test_lightning_ddp_runs_the_sharded_store(tmp_path, exchange):
    """``python -m ssvm_torch.lightning fit --trainer.strategy ddp --trainer.devices 2``: Lightning's
    launcher starts rank 1, each rank holds its shard, the gather exchange makes the history equal the
    one-process mini-batch run's (``auto``: the columns store, equal to rounding), and rank 0 writes
    the outputs into one version directory."""
    import json
    import subprocess
    import sys
    from ssvm_torch import SolverConfig
    from ssvm_torch.tasks import load_task
    args = ["fit", "--model.dataset", "ocr-small", "--model.lam", "0.01", "--model.batch_size", "32",
            "--model.passes", "4", "--model.gap_check", "1", "--model.seed", "3", "--model.exchange", exchange,
            "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "MASTER_PORT": str(free_port())}
    r = subprocess.run([sys.executable, "-m", "ssvm_torch.lightning", *args], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    versions = sorted(p.name for p in (tmp_path / "lightning_logs").iterdir())
    assert versions == ["version_0"]                      # rank 1 used rank 0's version directory
    hist = json.loads((tmp_path / "lightning_logs" / "version_0" / "history.json").read_text())
    task = load_task("ocr-small")
    solver = Solver(task.store(0.01), SolverConfig(batch_size=32, passes=4, gap_check=1, seed=3),
                    evaluate=task.evaluate)
    ref = solver.run()
    if exchange == "gather":
        assert [h["gap"] for h in hist] == [h["gap"] for h in ref]
    else:
        assert [h["gap"] for h in hist] == pytest.approx([h["gap"] for h in ref], rel=1e-9)
    assert [h["test_error"] for h in hist] == [h["test_error"] for h in ref]


def test_direction_shares_concatenate_to_the_whole_direction():
    """What each rank of the gather exchange builds for a sparse (CoNLL) direction: its share of the
    feature columns. The shares, concatenated in rank order, are the whole direction bit for bit,
    already coalesced (indices strictly increasing), for any number of shares."""
    task = worker.problem(CONLL)
    store = make_store(task.model, task.train, CONLL["lam"])
    store.sparse_direction = True
    assert store.shares_direction
    parts = store.batch_corners(torch.arange(0, 20, 2)).parts
    whole = store.direction(parts)
    K, F = task.model.K, task.model.F
    for p in (1, 2, 3, 7):
        shares = [store.direction_share(parts, (r, p)) for r in range(p)]
        for r, (cols, values) in enumerate(shares):     # share r: its columns, K values each (+ the tail last)
            assert bool(((cols >= F * r // p) & (cols < F * (r + 1) // p)).all())
            assert values.numel() == K * cols.numel() + (store.model.d - K * F if r == p - 1 else 0)
        dw = store.joined_shares(torch.cat([c for c, _ in shares]), torch.cat([v for _, v in shares]))
        assert torch.equal(dw.indices(), whole.indices()) and torch.equal(dw.values(), whole.values())
        assert bool((dw.indices()[0, 1:] > dw.indices()[0, :-1]).all())


def _torchrun_ranks(launcher_pid: int) -> dict:
    """{rank: pid} of the launcher's worker processes (Linux /proc: parent pid and RANK in the environment)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != launcher_pid:
                continue
            env = dict(item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item)
        except (OSError, ValueError):
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(entry.name)
    return found


@pytest.mark.long
@pytest.mark.parametrize("fault", [
    "ctrl-c",                                                    # the terminal's Ctrl-C: the whole process group
    pytest.param("ctrl-c-launcher", marks=pytest.mark.slow),     # Ctrl-C to the launcher alone
    pytest.param("kill-rank-1", marks=pytest.mark.slow),         # a dead rank: test_a_dead_rank_stops_the_others
    pytest.param("kill-rank-0", marks=pytest.mark.slow)])
def test_torchrun_ctrl_c_and_a_dead_rank_keep_the_last_certified_point(tmp_path, fault):
    """The audit's cases under torchrun --nproc-per-node 2 --checkpoint. Ctrl-C (to the process group as a
    terminal sends it, or to the launcher, which passes it on): every rank stops at the same pass after
    an exact gap check, rank 0 writes history.json and model.pt of that point, each rank ends in one line,
    exit 130 each. kill -9 of rank 1: rank 0 writes history.json and model.pt of the last certified
    point and ends in one line. kill -9 of rank 0: rank 1 ends in one line (no traceback)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    from ssvm_torch.outputs import load_model
    out = tmp_path / "run"
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                             str(free_port()), "-m", "ssvm_torch.cli.train", "--dataset", "ocr-small", "--lam", "0.01",
                             "--batch-size", "4", "--exchange", "allreduce", "--passes", "100000", "--gap-check", "1",
                             "--checkpoint", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        checks = 0
        for line in proc.stdout:                                 # three gap checks after the start: under way
            checks += line.startswith("pass")
            if checks == 4:
                break
        ranks = _torchrun_ranks(proc.pid)
        assert sorted(ranks) == [0, 1]
        if fault == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        elif fault == "ctrl-c-launcher":
            proc.send_signal(signal.SIGINT)
        else:
            os.kill(ranks[int(fault[-1])], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    ours = [line for line in stderr.splitlines() if line.startswith("ssvm-train: ")]
    # the launcher prints its own traceback (torch's elastic agent); no rank may print one of ours
    assert "ssvm_torch/" not in stderr and "DistributedError" not in stderr and "KeyboardInterrupt" not in stderr
    if fault.startswith("ctrl-c"):
        ends = [line for line in ours if "interrupted at" in line]
        assert len(ends) == 2 and ("rank 1 of 2: rank 0 wrote the results" in ends[0] + ends[1])
        assert any("exact duality gap there" in line and "wrote" in line for line in ends)
    elif fault == "kill-rank-1":
        assert ours[-1].startswith("ssvm-train: distributed: a collective failed (") and "of the last certified " \
            "point" in ours[-1] and "pair.cc" not in ours[-1]
    else:
        assert len(ours) == 1 and ours[0].startswith("ssvm-train: distributed: a collective failed (")
        assert not (out / "history.json").exists()                # rank 0, the writer, is gone
        return
    history = json.loads((out / "history.json").read_text())
    assert len(history) >= 4 and history[-1]["gap"] > 0
    model = load_model(out / "model.pt")
    task = load_task("ocr-small")
    assert task.store(0.01).primal_at(model["w"]) == pytest.approx(history[-1]["primal"], rel=1e-9)
    assert not (out / ".ssvm-run.lock").exists()
