"""``ssvm-train --solver perceptron`` (ssvm_torch/cli/perceptron.py): the run directory holds the weights
``train_perceptron`` returns on the task's model, bit for bit; the records thin with --eval-every; a checkpoint
resumed (to more epochs, or after Ctrl-C) ends where the uninterrupted run ends; the options of the other solvers
and the perceptron's own are refused by name where they do not apply."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from ssvm_torch.cli.train import main
from ssvm_torch.outputs import load_model
from ssvm_torch.perceptron import PerceptronConfig, PerceptronResult, train_perceptron
from ssvm_torch.tasks import load_task

RUN = ["--dataset", "ocr-small", "--solver", "perceptron", "--batch-size", "8", "--quiet"]      # 0.1 s an epoch
TIMELESS = ("time_s",)


def _records(out):
    return [{k: v for k, v in r.items() if k not in TIMELESS} for r in json.loads((out / "history.json").read_text())]


def test_a_run_writes_what_train_perceptron_returns(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--dataset", "ocr-small", "--solver", "perceptron", "--epochs", "2", "--batch-size", "4",
                 "--seed", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "perceptron (averaged, batch 4)" in printed and "epoch    2" in printed and "test error:" in printed
    task = load_task("ocr-small")
    ref = train_perceptron(task.model, task.train, PerceptronConfig(epochs=2, batch_size=4, seed=3),
                           evaluate=task.evaluate)
    model = load_model(out / "model.pt")
    assert torch.equal(model["w"], ref.w) and model["epochs"] == 2
    assert model["lam"] != model["lam"] and model["ell"] != model["ell"]           # NaN: no regularizer, no dual
    assert _records(out) == [{k: v for k, v in r.items() if k not in TIMELESS} for r in ref.history]
    config = json.loads((out / "config.json").read_text())
    assert config["solver"] == {"solver": "perceptron", "epochs": 2, "average": True, "batch_size": 4,
                                "shuffle": True, "decay_exponent": 0.0, "decay_t0": 1.0, "loss_augmented": False,
                                "seed": 3}
    assert history_errors_are_the_returned_points(task, out)
    assert json.loads((out / "test_predictions.json").read_text()) == task.predictions(ref.w)


def history_errors_are_the_returned_points(task, out) -> bool:
    """The last record's errors are those of model.pt's w (the averaged point), not of the last iterate."""
    last = json.loads((out / "history.json").read_text())[-1]
    return last["test_error"] == task.evaluate(load_model(out / "model.pt")["w"])["test_error"]


@pytest.mark.parametrize("every", [0, 2])
def test_eval_every_thins_the_records_not_the_run(tmp_path, every):
    assert main(RUN + ["--epochs", "3", "--out", str(tmp_path / "all")]) == 0
    assert main(RUN + ["--epochs", "3", "--eval-every", str(every), "--out", str(tmp_path / "thin")]) == 0
    full, thin = _records(tmp_path / "all"), _records(tmp_path / "thin")
    evaluated = [i for i, r in enumerate(thin) if "test_error" in r]
    assert evaluated == ([2] if every == 0 else [0, 2])                       # the k-th ones and the last
    assert [full[i] for i in evaluated] == [thin[i] for i in evaluated]
    assert all(thin[i] == {k: v for k, v in full[i].items() if k in thin[i]} for i in range(3))
    assert torch.equal(load_model(tmp_path / "all" / "model.pt")["w"], load_model(tmp_path / "thin" / "model.pt")["w"])


@pytest.mark.long
def test_a_resumed_run_ends_where_the_uninterrupted_run_ends(tmp_path, capsys):
    cut, full = tmp_path / "cut", tmp_path / "full"
    thin = ["--loss-augmented", "--eval-every", "3"]
    assert main(RUN + ["--epochs", "2", "--checkpoint", *thin, "--out", str(cut)]) == 0
    assert main(RUN + ["--epochs", "4", *thin, "--out", str(cut), "--resume", str(cut / "checkpoint.pt")]) == 0
    assert main(RUN + ["--epochs", "4", *thin, "--out", str(full)]) == 0
    assert _records(cut) == _records(full) and len(_records(full)) == 4
    assert torch.equal(load_model(cut / "model.pt")["w"], load_model(full / "model.pt")["w"])
    state = torch.load(cut / "checkpoint.pt", weights_only=True)
    assert state["run"]["solver"] == "perceptron" and len(state["solver"]["history"]) == 2      # not rewritten
    capsys.readouterr()
    # other settings than the checkpoint's: refused by name, the run directory untouched
    files = {f.name: f.read_bytes() for f in cut.iterdir()}
    assert main(RUN + ["--epochs", "4", "--eval-every", "3", "--out", str(cut), "--resume",
                       str(cut / "checkpoint.pt")]) == 2
    assert "resume: expected the settings of the resumed run (loss_augmented differ" in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in cut.iterdir()} == files
    assert main(RUN + ["--epochs", "4", "--dataset", "ocr-large", "--out", str(tmp_path / "other"), "--resume",
                       str(cut / "checkpoint.pt")]) == 2
    assert "is a checkpoint of dataset = 'ocr-small'" in capsys.readouterr().err


def test_interrupt_stops_at_the_end_of_an_epoch_and_the_state_resumes_exactly():
    """train_perceptron's hooks: ``interrupt`` polled after each epoch (stop reason "interrupted"), ``checkpoint``
    given each epoch's state, which resumes to the uninterrupted run."""
    task = load_task("ocr-small")
    cfg = PerceptronConfig(epochs=3, batch_size=8)
    states, polls = [], []
    cut = train_perceptron(task.model, task.train, cfg, checkpoint=lambda state: states.append(state()),
                           interrupt=lambda: polls.append(1) or len(polls) >= 1)
    assert cut.stop_reason == "interrupted" and len(cut.history) == 1 and len(states) == 1
    resumed = train_perceptron(task.model, task.train, cfg, resume=PerceptronResult.from_state_dict(states[0]))
    full = train_perceptron(task.model, task.train, cfg)
    assert torch.equal(resumed.w, full.w) and resumed.stop_reason == full.stop_reason == "epochs"
    assert [r["mistakes"] for r in resumed.history] == [r["mistakes"] for r in full.history]


def _as_from_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.long
def test_ctrl_c_writes_the_epoch_and_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.train", "--dataset", "ocr-small", "--solver",
                             "perceptron", "--epochs", "1000", "--eval-every", "0", "--checkpoint", "--out", str(out)],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    for line in proc.stdout:                                       # an epoch is done: training is under way
        if line.startswith("epoch"):
            break
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert "stopping at the end of the current epoch" in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("ssvm-train: interrupted after epoch") and "resume with --resume" in last
    history = json.loads((out / "history.json").read_text())
    assert 1 <= len(history) < 1000 and "test_error" in history[-1]
    state = torch.load(out / "checkpoint.pt", weights_only=True)["solver"]
    assert len(state["history"]) == len(history)
    assert torch.equal(load_model(out / "model.pt")["w"], PerceptronResult.from_state_dict(state).w)


@pytest.mark.parametrize("argv, needle", [
    (["--lam", "0.1"], "not with --lam"),
    (["--passes", "3"], "not with --passes (the perceptron counts --epochs)"),
    (["--cache", "--step", "pairwise"], "not with --step pairwise, --cache"),
    (["--averaging"], "--averaging (the perceptron averages unless --no-average)"),
    (["--select-lam"], "not with --select-lam"),
    (["--hide-labels", "0.3"], "not with --hide-labels"),
    (["--sampling", "uniform"], "--sampling uniform (an epoch visits a fresh permutation)"),
    (["--epochs", "0"], "epochs: expected an int >= 1, got 0"),
    (["--batch-size", "0"], "batch_size: expected an int >= 1, got 0"),
    (["--decay-t0", "0"], "decay_t0: expected a finite number > 0"),
])
def test_options_that_do_not_apply_are_refused_before_the_run_directory(tmp_path, capsys, argv, needle):
    assert main(RUN + argv + ["--out", str(tmp_path / "run")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option", [["--epochs", "3"], ["--no-average"], ["--loss-augmented"],
                                    ["--decay-exponent", "0.5"]])
def test_perceptron_options_are_refused_with_the_other_solvers(tmp_path, capsys, option):
    assert main(["--dataset", "ocr-small", *option, "--out", str(tmp_path / "run")]) == 2
    name = option[0].lstrip("-").replace("-", "_")
    assert f"{name}: an option of --solver perceptron, not of --solver bcfw" in capsys.readouterr().err


def test_the_box_constrained_task_keeps_its_pairwise_weights_nonnegative(tmp_path):
    """segmentation-synth's graph cut needs w_pairwise >= 0: the run projects onto it (the task's nonnegative)."""
    out = tmp_path / "run"
    assert main(["--dataset", "segmentation-synth", "--solver", "perceptron", "--epochs", "2", "--quiet",
                 "--out", str(out)]) == 0
    task = load_task("segmentation-synth")
    w = load_model(out / "model.pt")["w"]
    assert task.nonnegative is not None and bool((w[task.nonnegative] >= 0).all())
    ref = train_perceptron(task.model, task.train, PerceptronConfig(epochs=2), nonnegative=task.nonnegative)
    assert torch.equal(w, ref.w)
