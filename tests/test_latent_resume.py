"""Checkpointing and resuming the latent SSVM (``train_latent``'s ``checkpoint`` / ``resume``; ``ssvm-train
--hide-labels --checkpoint / --resume``): a run resumed from any state it wrote (an inner gap check or an outer
step's end) ends with the uninterrupted run's w and records, bit for bit, on chains, segmentations, constituency
and dependency trees; an interrupted run's last state finishes its step; a state through the checkpoint file
(weights_only) resumes the same; a damaged or foreign state is refused by name; and the command resumes a killed
run and extends a finished one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import random_chain_data, random_dependency_data, random_segment_data, random_span_data, without_time
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import LATENT_STATE, hide_heads, hide_labels, train_latent
from ssvm_torch.models import ConstituencyModel, DependencyModel, SemiMarkovModel
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.outputs import load_checkpoint, load_model, save_checkpoint
from ssvm_torch.solvers import SolverConfig

LAM = 0.05
INNER = SolverConfig(passes=12, gap_check=3, step="pairwise", cache=True)   # four gap checks per inner problem


def _chain():
    data = random_chain_data(np.random.default_rng(1), 10, 3, 3, tmin=1, tmax=4)
    return ChainModel.for_data(data), hide_labels(data, 0.5, 1)


def _segments():
    data = random_segment_data(np.random.default_rng(6), 8, 3, 3, 4, tmin=1, tmax=6, outside=0, sparse=True)
    return SemiMarkovModel.for_data(data, max_length=3, outside=0), hide_labels(data, 0.4, 6)


def _spans():
    data = random_span_data(np.random.default_rng(3), 7, 6, 2, lmin=1, lmax=4)
    return ConstituencyModel(data.n_features, data.n_labels, "hamming", buckets=(1, 2, 3)), hide_labels(data, 0.5, 3)


def _heads():
    data = random_dependency_data(np.random.default_rng(6), 8, 12, lmin=1, lmax=5)
    return DependencyModel(data.n_features, projective=True), hide_heads(data, 0.5, 6, True)


PROBLEMS = {"chain": _chain, "segments": _segments, "spans": _spans, "heads": _heads}


def _run(model, data, **kw):
    """(w, records, every state the run from w = 0 handed to ``checkpoint``)."""
    states = []

    def keep(state):
        states.append(state)
    w, records = train_latent(model, data, LAM, INNER, max_outer=4, w0=None, checkpoint=keep, **kw)
    return w, records, states


def _through_file(state, path):
    save_checkpoint(path, state, {"test": 1})
    return load_checkpoint(path, {"test": 1})


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_a_run_resumed_from_any_state_ends_as_the_uninterrupted_run(name, tmp_path):
    model, data = PROBLEMS[name]()
    w, records, states = _run(model, data)
    assert len(records) >= 3 and all(s["format"] == LATENT_STATE for s in states)
    inner = [s for s in states if s["inner"] is not None]
    boundary = [s for s in states if s["inner"] is None]
    assert inner and boundary                        # both kinds were written
    picks = [inner[len(inner) // 2], boundary[0], inner[-1]]
    for k, state in enumerate(picks):
        loaded = _through_file(state, tmp_path / f"{k}.pt")
        w_res, rec_res = train_latent(model, data, LAM, INNER, max_outer=4, resume=loaded)
        assert torch.equal(w_res, w)
        assert without_time(rec_res) == without_time(records)


@pytest.mark.parametrize("inner", [dict(solver="fw"), dict(solver="ssg", sampling="perm"),
                                   dict(solver="cutting-plane", sampling="perm"), dict(solver="eg", sampling="perm"),
                                   dict(solver="deg", sampling="perm")], ids=lambda c: c["solver"])
def test_every_inner_solver_resumes_exactly(inner):
    model, data = _heads()
    config = SolverConfig(passes=6, gap_check=2, seed=3, **inner)
    states = []
    w, records = train_latent(model, data, LAM, config, max_outer=3, w0=None, checkpoint=states.append)
    assert len(states) >= 4
    for state in states[1::3] + states[-1:]:
        w_res, rec_res = train_latent(model, data, LAM, config, max_outer=3, resume=state)
        assert torch.equal(w_res, w) and without_time(rec_res) == without_time(records), (state["outer"])


def test_an_interrupted_run_records_its_cut_step_and_its_last_state_finishes_it():
    model, data = _heads()
    w, records, _ = _run(model, data)
    states = []

    def keep(state):
        states.append(state)

    def interrupt():                                 # Ctrl-C after the second inner problem's first gap check
        return any(s["outer"] == 2 and s["inner"] is not None and len(s["inner"]["state"]["history"]) >= 2
                   for s in states)
    w_cut, rec_cut = train_latent(model, data, LAM, INNER, max_outer=4, w0=None, checkpoint=keep,
                                  interrupt=interrupt)
    assert rec_cut[-1].get("interrupted") is True and rec_cut[-1]["outer"] == 2
    assert not any(r.get("interrupted") for r in records)
    assert rec_cut[-1]["inner_passes"] < records[2]["inner_passes"]
    last = states[-1]
    assert last["outer"] == 2 and len(last["inner"]["state"]["history"]) == 2
    w_res, rec_res = train_latent(model, data, LAM, INNER, max_outer=4, resume=last)
    assert torch.equal(w_res, w) and without_time(rec_res) == without_time(records)


def test_a_finished_run_takes_more_outer_steps_from_its_last_state():
    model, data = _chain()
    w_long, rec_long = train_latent(model, data, LAM, INNER, max_outer=4)
    states = []
    train_latent(model, data, LAM, INNER, max_outer=2, checkpoint=states.append)
    assert states[-1]["outer"] == 3 and states[-1]["inner"] is None
    w, records = train_latent(model, data, LAM, INNER, max_outer=4, resume=states[-1])
    assert torch.equal(w, w_long) and without_time(records) == without_time(rec_long)


def test_a_damaged_or_foreign_state_is_refused_by_name():
    model, data = _chain()
    _, _, states = _run(model, data)
    state = next(s for s in states if s["inner"] is None)          # an outer step's end: w != 0
    for change, text in [
        ({"format": "something/1"}, "resume: expected a latent SSVM state"),
        ({"w": state["w"][:-1]}, "resume.w: expected a float64 vector"),
        ({"outer": 0}, "resume.outer: expected an int >= 1"),
        ({"records": "[{]"}, "resume.records: expected the JSON list of outer steps"),
        ({"records": json.dumps(json.loads(state["records"])[:-1] + [{"outer": 9, "time_s": 0.0}])},
         "resume.records"),
        ({"labels": state["labels"][:-1]}, "resume.labels: expected a completion of shape"),
        ({"objective": state["objective"] + 1.0}, "resume.objective: expected J(w)"),
        ({"inner": [1, 2]}, "resume.inner: expected an inner solver state or None"),
    ]:
        with pytest.raises(SSVMInputError, match=text.replace("(", r"\(").replace(")", r"\)")):
            train_latent(model, data, LAM, INNER, max_outer=4, resume={**state, **change})
    with pytest.raises(SSVMInputError, match="resume.objective"):      # the same state on another lam
        train_latent(model, data, 2 * LAM, INNER, max_outer=4, resume=state)


ARGS = ["--dataset", "ocr-small", "--lam", "0.01", "--hide-labels", "0.5", "--hide-seed", "3", "--passes", "6",
        "--gap-check", "2", "--quiet", "--checkpoint"]


@pytest.mark.long
def test_ssvm_train_extends_a_finished_latent_run_and_refuses_a_foreign_checkpoint(tmp_path, capsys):
    from ssvm_torch.cli.train import main
    short, full = tmp_path / "short", tmp_path / "full"
    assert main([*ARGS, "--latent-outer", "1", "--out", str(short)]) == 0
    assert main([*ARGS, "--latent-outer", "2", "--out", str(short), "--resume", str(short / "checkpoint.pt")]) == 0
    assert main([*ARGS, "--latent-outer", "2", "--out", str(full)]) == 0
    a, b = (json.loads((d / "latent.json").read_text()) for d in (short, full))
    assert len(a) == 3 and without_time(a) == without_time(b)
    assert torch.equal(load_model(short / "model.pt")["w"], load_model(full / "model.pt")["w"])
    assert json.loads((short / "config.json").read_text())["resume"] == str(short / "checkpoint.pt")
    capsys.readouterr()
    other = tmp_path / "other"
    assert main([*ARGS[:-1], "--hide-seed", "4", "--latent-outer", "2", "--out", str(other),
                 "--resume", str(full / "checkpoint.pt")]) == 2
    assert "is a checkpoint of hide_seed = 3, this run has hide_seed = 4" in capsys.readouterr().err
    plain = ["--dataset", "ocr-small", "--lam", "0.01", "--passes", "2", "--quiet"]
    assert main([*plain, "--out", str(tmp_path / "plain"), "--resume", str(full / "checkpoint.pt")]) == 2
    assert "is a checkpoint of hide_labels = 0.5, this run has hide_labels = None" in capsys.readouterr().err


@pytest.mark.long
def test_killed_latent_run_resumes_exactly(tmp_path):
    """A real kill -9 of ``ssvm-train --hide-labels`` during its second outer step, then --resume: latent.json and
    model.pt equal the uninterrupted run's."""
    from ssvm_torch.cli.train import main
    from ssvm_torch.outputs import load_torch
    args = [*ARGS, "--latent-outer", "3"]
    killed, full = tmp_path / "killed", tmp_path / "full"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.train", *args, "--out", str(killed)], env=env)
    deadline = time.time() + 300

    def at_step_two():
        try:
            state = load_torch(killed / "checkpoint.pt")["solver"]
        except (SSVMInputError, KeyError):          # not written yet (the writes are atomic: never half a file)
            return False
        return state["outer"] >= 2
    while not at_step_two() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "latent.json").exists()                 # it died mid-run
    assert main([*args, "--out", str(killed), "--resume", str(killed / "checkpoint.pt")]) == 0
    assert main([*args, "--out", str(full)]) == 0
    a, b = (json.loads((d / "latent.json").read_text()) for d in (killed, full))
    assert without_time(a) == without_time(b) and len(a) >= 3
    assert torch.equal(load_model(killed / "model.pt")["w"], load_model(full / "model.pt")["w"])


def test_a_failed_checkpoint_write_stops_the_run_and_keeps_its_work(tmp_path, capsys, monkeypatch):
    """A full disk at the third checkpoint: the inner solver stops at that gap check, latent.json and model.pt are
    written, checkpoint.pt keeps the last good state, and the error names the step and the file."""
    import errno

    from ssvm_torch.cli.train import main
    import ssvm_torch.cli.checkpoints as writes_cli
    real, calls = writes_cli.save_checkpoint, []

    def full_disk(path, state, run):
        calls.append(state["outer"])
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, state, run)
    monkeypatch.setattr(writes_cli, "save_checkpoint", full_disk)
    out = tmp_path / "run"
    assert main([*ARGS, "--latent-outer", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "writing the checkpoint in outer step 1 failed (No space left on device)" in err
    assert f"{out / 'checkpoint.pt'} holds the last good one (taken in outer step 1)" in err
    records = json.loads((out / "latent.json").read_text())
    assert records[-1]["outer"] == 1 and records[-1]["interrupted"] is True
    assert load_checkpoint(out / "checkpoint.pt")["outer"] == 1 and load_model(out / "model.pt")["w"].shape
