"""``--checkpoint-every SECONDS`` (ssvm_torch/cli/checkpoints.py): a check writes checkpoint.pt only once SECONDS
have passed since the last write, the run's last state is always written (finished, stopped or interrupted),
and a resume from what was written is as exact as from a checkpoint of every check."""
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ssvm_torch.cli.checkpoints as writes_cli
from ssvm_torch.cli.checkpoints import CheckpointWrites, check_every
from ssvm_torch.cli.path import main as path_main
from ssvm_torch.cli.train import main
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.outputs import load_checkpoint, load_model

PLAIN = ["--dataset", "ocr-small", "--lam", "0.01", "--gap-check", "1", "--quiet", "--checkpoint"]


@pytest.fixture
def written(monkeypatch):
    """The checkpoint writes of the test (their paths), through the real writer."""
    real, calls = writes_cli.save_checkpoint, []

    def counting(path, state, run=None):
        calls.append(path)
        return real(path, state, run)
    monkeypatch.setattr(writes_cli, "save_checkpoint", counting)
    return calls


def without_time(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_check_writes_once_the_interval_has_passed_and_flush_writes_the_last_state(tmp_path, written):
    now = [0.0]
    writes = CheckpointWrites(tmp_path / "c.pt", {"run": 1}, every=10.0, clock=lambda: now[0])
    made = []

    def state(k):
        return lambda: made.append(k) or {"k": torch.tensor([k])}
    for k, t in enumerate([3.0, 9.9, 10.0, 15.0, 19.9, 21.0, 25.0]):
        now[0] = t
        writes.offer(state(k), f"at check {k}")
    assert made == [2, 5] and writes.count == 2 and writes.written == "at check 5"   # 10.0 - 0 and 21.0 - 10.0
    assert writes.pending is not None
    writes.flush()
    assert made == [2, 5, 6] and writes.written == "at check 6" and writes.pending is None
    assert int(load_checkpoint(tmp_path / "c.pt", {"run": 1})["k"]) == 6
    writes.flush()                                                 # nothing pending: nothing written again
    assert len(written) == 3
    assert writes.summary() == "checkpoint.pt: 3 writes in 0.0 s, the last at check 6"
    every = CheckpointWrites(tmp_path / "d.pt", {}, every=None)
    for k in range(3):
        every.offer(state(k), f"at check {k}")
    assert every.count == 3 and every.pending is None


def test_a_rank_without_the_file_restarts_its_interval_with_the_writer():
    """Under torchrun only rank 0 has the path; the others' intervals must restart at each agreed write, or after
    the first interval they would vote for a write at every check (any_rank takes the maximum)."""
    now = [0.0]
    other = CheckpointWrites(None, {}, every=10.0, clock=lambda: now[0])
    made = []
    for t in (5.0, 10.0, 12.0, 19.0, 20.0):
        now[0] = t
        other.offer(lambda t=t: made.append(t) or {}, f"at {t}")
    assert made == [10.0, 20.0] and other.count == 0              # the state taken (a collective), nothing written


def test_a_failed_write_stops_the_writes_and_names_the_last_good_one(tmp_path, monkeypatch):
    calls = []

    def full_disk(path, state, run=None):
        calls.append(state["k"])
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
    monkeypatch.setattr(writes_cli, "save_checkpoint", full_disk)
    writes = CheckpointWrites(tmp_path / "c.pt", {})
    for k in range(4):
        writes.offer(lambda k=k: {"k": k}, f"at check {k}")
    writes.flush()
    assert calls == [0, 1] and writes.failed
    msg = str(writes.error("the run stopped there"))
    assert msg == (f"out: writing the checkpoint at check 1 failed (No space left on device); the run stopped there; "
                   f"{tmp_path / 'c.pt'} holds the last good one (taken at check 0)")
    first = CheckpointWrites(tmp_path / "d.pt", {})
    calls.clear()
    monkeypatch.setattr(writes_cli, "save_checkpoint", lambda *a: (_ for _ in ()).throw(RuntimeError("unexpected pos")))
    first.offer(lambda: {"k": 0}, "at check 0")
    assert "(unexpected pos); x; no checkpoint was written" in str(first.error("x"))


@pytest.mark.parametrize("every, checkpoint, expected", [
    (0.0, True, "expected seconds > 0"), (-5.0, True, "expected seconds > 0"), (float("nan"), True, "got nan"),
    (60.0, False, "add --checkpoint")])
def test_bad_intervals_are_refused_by_name(every, checkpoint, expected):
    with pytest.raises(SSVMInputError, match="checkpoint_every") as e:
        check_every(every, checkpoint)
    assert expected in str(e.value)


def test_the_commands_refuse_a_bad_interval_before_the_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*PLAIN[:-1], "--passes", "2", "--checkpoint-every", "30", "--out", str(out)]) == 2
    assert "checkpoint_every: sets how often --checkpoint writes; add --checkpoint" in capsys.readouterr().err
    assert main([*PLAIN, "--passes", "2", "--checkpoint-every", "0", "--out", str(out)]) == 2
    assert "checkpoint_every: expected seconds > 0" in capsys.readouterr().err
    assert path_main(["--dataset", "ocr-small", "--eps", "0.5", "--lam-min", "2.0", "--checkpoint-every", "-1",
                      "--checkpoint", "--quiet", "--out", str(out)]) == 2
    assert "checkpoint_every: expected seconds > 0" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.long
def test_a_long_interval_writes_the_last_check_once_and_resumes_exactly(tmp_path, written):
    """--passes 4 at --gap-check 1 (a step pass and a gap pass per check) writes 3 checkpoints, one per check, and 1
    with a long interval: the same file (the last check's state); extended to 8 passes it gives the uninterrupted
    8-pass run."""
    every, each, full = tmp_path / "every", tmp_path / "each", tmp_path / "full"
    assert main([*PLAIN, "--passes", "4", "--out", str(each)]) == 0
    assert len(written) == 3
    written.clear()
    assert main([*PLAIN, "--passes", "4", "--checkpoint-every", "1e9", "--out", str(every)]) == 0
    assert written == [every / "checkpoint.pt"]
    a, b = (load_checkpoint(d / "checkpoint.pt") for d in (every, each))
    assert without_time(a["state"]["history"]) == without_time(b["state"]["history"])
    assert all(torch.equal(a["dual"][k], b["dual"][k]) for k in b["dual"] if torch.is_tensor(b["dual"][k]))
    assert json.loads((every / "config.json").read_text())["checkpoint_every"] == 1e9
    assert main([*PLAIN, "--passes", "8", "--checkpoint-every", "1e9", "--out", str(every),
                 "--resume", str(every / "checkpoint.pt")]) == 0
    assert main([*PLAIN, "--passes", "8", "--out", str(full)]) == 0
    h_every, h_full = (json.loads((d / "history.json").read_text()) for d in (every, full))
    assert len(h_full) == 5 and without_time(h_every) == without_time(h_full)
    assert torch.equal(load_model(every / "model.pt")["w"], load_model(full / "model.pt")["w"])


@pytest.mark.long
def test_the_latent_run_and_the_path_write_their_last_state_once(tmp_path, written):
    latent = ["--dataset", "ocr-small", "--lam", "0.01", "--hide-labels", "0.5", "--hide-seed", "3", "--passes", "4",
              "--gap-check", "2", "--quiet", "--checkpoint", "--checkpoint-every", "1e9"]
    short, full = tmp_path / "short", tmp_path / "full"
    assert main([*latent, "--latent-outer", "1", "--out", str(short)]) == 0
    assert written == [short / "checkpoint.pt"] and load_checkpoint(short / "checkpoint.pt")["outer"] == 2
    assert main([*latent, "--latent-outer", "2", "--out", str(short), "--resume", str(short / "checkpoint.pt")]) == 0
    assert main([*latent[:-2], "--latent-outer", "2", "--out", str(full)]) == 0
    a, b = (json.loads((d / "latent.json").read_text()) for d in (short, full))
    assert len(a) == 3 and without_time(a) == without_time(b)
    assert torch.equal(load_model(short / "model.pt")["w"], load_model(full / "model.pt")["w"])
    written.clear()
    path = ["--dataset", "ocr-small", "--eps", "0.5", "--lam-min", "2.0", "--checkpoint", "--quiet"]
    assert path_main([*path, "--checkpoint-every", "1e9", "--out", str(tmp_path / "p1")]) == 0
    assert len(written) == 1
    assert path_main([*path, "--out", str(tmp_path / "p2")]) == 0
    assert len(written) > 2
    a, b = (load_checkpoint(tmp_path / d / "checkpoint.pt") for d in ("p1", "p2"))
    assert a["lambdas"] == b["lambdas"] and len(a["lambdas"]) >= 2


def _as_from_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.long
def test_ctrl_c_writes_the_interrupted_check_and_the_resume_is_exact(tmp_path):
    """SIGINT with a long interval: no check wrote, but the interrupted run's last state is written on the way
    out; resumed to a few passes more it equals the run that went there directly."""
    out, full = tmp_path / "cut", tmp_path / "full"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.train", *PLAIN[:-2], "--checkpoint",
                             "--checkpoint-every", "1e9", "--passes", "100000", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    for line in proc.stdout:
        if line.startswith("pass") and not line.startswith("pass     0.0"):
            break
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert f"resume with --resume {out / 'checkpoint.pt'}" in stderr
    cut = json.loads((out / "history.json").read_text())
    state = load_checkpoint(out / "checkpoint.pt")
    assert len(state["state"]["history"]) == len(cut)
    target = str(cut[-1]["passes"] + 3)
    assert main([*PLAIN, "--passes", target, "--out", str(out), "--resume", str(out / "checkpoint.pt")]) == 0
    assert main([*PLAIN, "--passes", target, "--out", str(full)]) == 0
    h_cut, h_full = (json.loads((d / "history.json").read_text()) for d in (out, full))
    assert without_time(h_cut) == without_time(h_full)
    assert torch.equal(load_model(out / "model.pt")["w"], load_model(full / "model.pt")["w"])


# slow tier (two torchrun ranks, ~13 s): the ranks' joint decision is checked in-process by
# test_a_rank_without_the_file_restarts_its_interval_with_the_writer, torchrun's checkpoints by test_distributed's
# Ctrl-C case
@pytest.mark.slow
def test_torchrun_ranks_agree_on_each_write(tmp_path):
    """Under torchrun the solver's state_dict is a collective: the ranks decide each write together (one
    all-reduce per check), so a long interval ends, without a hang, in the last check's state of both shards."""
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(free_port()), "-m", "ssvm_torch.cli.train", *PLAIN, "--batch-size", "4", "--exchange",
                          "allreduce", "--passes", "4", "--checkpoint-every", "1e9", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    state = load_checkpoint(out / "checkpoint.pt")
    assert len(state["dual"]["shards"]) == 2
    history = json.loads((out / "history.json").read_text())
    kept = state["state"]["history"]                 # the solver's records (history.json's last adds the model's)
    assert len(history) >= 3 and [(r["passes"], r["gap"]) for r in kept] == [(r["passes"], r["gap"]) for r in history]
    # ranks.json: each rank's share (the block shards' timers): the shards cover the n blocks, every rank took
    # part in every step's exchange, decoded and waited in collectives
    from ssvm_torch.tasks import load_task
    ranks = json.loads((out / "ranks.json").read_text())
    assert [p["rank"] for p in ranks] == [0, 1] and sum(p["blocks"] for p in ranks) == load_task("ocr-small").n_train
    assert len({p["exchanges"] for p in ranks}) == 1 and ranks[0]["exchanges"] > 0
    assert all(p["shard_s"] > 0 and p["comm_s"] > 0 and p["bytes_sent"] > 0 and p["wait_s"] == 0 for p in ranks)
