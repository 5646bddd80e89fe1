"""Fault injection: files a user hands in are untrusted (no code runs from a checkpoint, damaged
files are refused by name), and a run never loses work (its directory is checked before any
training, an earlier run is not overwritten, concurrent runs cannot share a directory, a mid-run
kill -9 resumes to the uninterrupted trajectory)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ssvm_torch.cli.path import main as path_main
from ssvm_torch.cli.train import main
from ssvm_torch.data import data_dir, load_scene
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.lightning import SSVMModule
from ssvm_torch.outputs import LOCK, RunDir, load_model, save_torch
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.tasks import load_task

QUICK = ["--dataset", "ocr-small", "--lam", "0.05", "--passes", "2", "--gap-check", "1", "--quiet"]


def strip(h):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in h]


def flip_bytes(path: Path, at: float = 0.5, count: int = 64) -> None:
    raw = bytearray(path.read_bytes())
    i = int(len(raw) * at)
    for k in range(count):
        raw[i + k] ^= 0xFF
    path.write_bytes(bytes(raw))


class Evil:
    """Unpickling this would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


# -- files handed in ---------------------------------------------------------------------------
def test_crafted_pickle_checkpoint_does_not_execute(tmp_path, capsys):
    marker = tmp_path / "pwned"
    torch.save({"config": Evil(str(marker))}, tmp_path / "evil.pt")
    assert main(QUICK + ["--out", str(tmp_path / "run"), "--resume", str(tmp_path / "evil.pt")]) == 2
    assert not marker.exists()
    assert "resume:" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "text", "wrong-dict"])
def test_damaged_checkpoint_is_refused(tmp_path, capsys, damage):
    run = tmp_path / "run"
    assert main(QUICK + ["--out", str(run), "--checkpoint"]) == 0
    ck = run / "checkpoint.pt"
    before = (run / "history.json").read_bytes()
    if damage == "flip":
        flip_bytes(ck)
    elif damage == "truncate":
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif damage == "empty":
        ck.write_bytes(b"")
    elif damage == "text":
        ck.write_text("not a checkpoint\n")
    else:
        save_torch(ck, {"config": {}})
    assert main(QUICK + ["--passes", "4", "--out", str(run), "--resume", str(ck)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ssvm-train: error: resume:") and str(ck) in err and err.count("\n") == 1
    assert (run / "history.json").read_bytes() == before          # the earlier run's outputs are intact


def test_bit_flipped_model_is_refused(tmp_path):
    assert main(QUICK + ["--out", str(tmp_path)]) == 0
    w = load_model(tmp_path / "model.pt")["w"]
    assert w.shape == (4082,)
    flip_bytes(tmp_path / "model.pt", at=0.6)
    with pytest.raises(SSVMInputError, match="model: .*model.pt is damaged|model: .*not a readable"):
        load_model(tmp_path / "model.pt")


def test_lightning_solver_state_is_verified():
    module = SSVMModule(dataset="ocr-small", lam=0.05)
    ck = {}
    task = load_task("ocr-small")
    module.solver = Solver(task.store(0.05), SolverConfig(passes=1, gap_check=1))
    module.solver.run()
    module.on_save_checkpoint(ck)
    module.on_load_checkpoint(ck)                                 # intact: accepted
    state = ck["ssvm_solver"]["solver"]["dual"]
    w = state["w"]                                                # dense, or its non-zero values (portable.pack)
    (w["__sparse__"]["values"] if isinstance(w, dict) else w)[0] += 1.0      # one changed weight
    with pytest.raises(SSVMInputError, match="checkpoint: the solver state is damaged"):
        module.on_load_checkpoint(ck)


def test_damaged_or_missing_data_file(tmp_path, monkeypatch):
    copy = tmp_path / "data"
    shutil.copytree(data_dir(), copy)
    monkeypatch.setenv("SSVM_TORCH_DATA", str(copy))
    flip_bytes(copy / "scene.npz", count=4)
    with pytest.raises(SSVMInputError, match=r"data file: .*scene.npz is damaged"):
        load_scene()
    (copy / "scene.npz").unlink()
    with pytest.raises(SSVMInputError, match=r"data file: .*scene.npz is missing"):
        load_scene()


def test_truncated_or_empty_conll_file_without_a_checksum_is_refused_by_name(tmp_path, monkeypatch, capsys):
    """User data (no SHA256SUMS entry to catch it): a truncated gzip and an empty file get one line."""
    import gzip

    from ssvm_torch.data.conll import read_conll
    from ssvm_torch.deep.conll_text import load_chunking
    data = tmp_path / "data"
    data.mkdir()
    whole = (data_dir() / "conll2000_train.txt.gz").read_bytes()
    (data / "conll2000_train.txt.gz").write_bytes(whole[:len(whole) // 3])
    shutil.copy(data_dir() / "conll2000_test.txt.gz", data / "conll2000_test.txt.gz")
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    with pytest.raises(SSVMInputError, match=r"data file: .*conll2000_train.txt.gz is damaged or unreadable after line \d+"):
        read_conll(data / "conll2000_train.txt.gz")
    assert main(["--dataset", "conll2000", "--passes", "1", "--quiet"]) == 2
    assert "conll2000_train.txt.gz is damaged" in capsys.readouterr().err
    with gzip.open(data / "conll2000_train.txt.gz", "wt") as f:
        f.write("\n\n")
    with pytest.raises(SSVMInputError, match="holds no sentences"):
        load_chunking(train_size=10)


@pytest.mark.parametrize("damage,message", [
    ("1001 2 P", r"trial.wa.gz line 2: expected 'sentence english french S\|P'"),
    ("1001 2 \u00b2 P", "trial.wa.gz line 2: expected"),
    (None, r"trial.wa.gz is damaged or unreadable after line \d+"),
])
def test_a_damaged_hansards_link_file_without_a_checksum_is_refused_by_name(tmp_path, monkeypatch, damage, message):
    """User data (no SHA256SUMS entry): a short link line, a non-ASCII digit (a ValueError from int() before) and a
    gzip stream cut short (None) get one line naming the file (and the line)."""
    import gzip

    from ssvm_torch.data.hansards import load_hansards
    data = tmp_path / "data"
    shutil.copytree(data_dir() / "hansards_naacl2003", data / "hansards_naacl2003")
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    links = data / "hansards_naacl2003" / "trial.wa.gz"
    text = gzip.decompress(links.read_bytes())
    stream = gzip.compress(text)
    links.write_bytes(stream[:len(stream) // 2] if damage is None
                      else gzip.compress(text.decode().replace("1001 2 2 P", damage, 1).encode()))
    with pytest.raises(SSVMInputError, match=message) as err:
        load_hansards()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("argv", [["--eps", "-1"], ["--lam-min", "0"], ["--kappa", "2"], ["--max-passes", "0"],
                                  ["--gap-check", "-1"], ["--threads", "0"]])
def test_a_refused_path_run_creates_nothing_and_its_corrected_rerun_runs(tmp_path, capsys, argv):
    out = tmp_path / "run"
    assert path_main(["--dataset", "ocr-small", "--quiet", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[0][2:].replace("-", "_") in err
    assert not out.exists()


def test_a_held_directory_hint_names_only_files_that_exist(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(QUICK + ["--out", str(out)]) == 0                # no --checkpoint: no checkpoint.pt
    assert main(QUICK + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite" in err and "--resume" not in err
    assert main(QUICK + ["--out", str(out), "--overwrite", "--checkpoint"]) == 0
    assert main(QUICK + ["--out", str(out)]) == 2
    assert f"--resume {out / 'checkpoint.pt'}" in capsys.readouterr().err


def test_resume_given_a_directory_says_so(tmp_path, capsys):
    assert main(QUICK + ["--resume", str(tmp_path)]) == 2
    assert f"resume: expected a checkpoint file, {tmp_path} is a directory" in capsys.readouterr().err


# -- run directories -------------------------------------------------------------------------
def test_out_checked_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("keep me")
    t0 = time.perf_counter()
    assert main(QUICK + ["--passes", "50", "--out", str(a_file)]) == 2
    assert "out: expected a directory" in capsys.readouterr().err
    assert path_main(["--dataset", "ocr-small", "--eps", "0.1", "--quiet", "--out", str(a_file)]) == 2
    assert "out: expected a directory" in capsys.readouterr().err
    assert time.perf_counter() - t0 < 30 and a_file.read_text() == "keep me"
    assert main(QUICK + ["--out", ""]) == 2
    assert "out: expected a directory path" in capsys.readouterr().err


def test_earlier_run_is_not_overwritten(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(QUICK + ["--out", str(run), "--checkpoint"]) == 0
    before = {f: (run / f).read_bytes() for f in ("history.json", "model.pt", "checkpoint.pt", "config.json")}
    assert main(QUICK + ["--dataset", "ocr-large", "--out", str(run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert all((run / f).read_bytes() == b for f, b in before.items())
    # --overwrite replaces the run whole: no checkpoint of the earlier run stays beside the new model
    assert main(QUICK + ["--seed", "1", "--out", str(run), "--overwrite"]) == 0
    assert not (run / "checkpoint.pt").exists()
    config = json.loads((run / "config.json").read_text())
    assert config["dataset"] == "ocr-small" and config["solver"]["seed"] == 1 and config["lam"] == 0.05
    assert config["environment"]["torch"] == torch.__version__ and "git_revision" in config["environment"]


@pytest.mark.parametrize("case", ["batch-size", "text-resume", "model-as-resume"])
def test_a_refused_run_writes_nothing_and_its_corrected_rerun_runs(tmp_path, capsys, case):
    """A refusal that comes after the task is loaded (a batch larger than n, a resume file that is
    not a checkpoint) leaves no directory and no config.json behind: the corrected rerun needs no
    --overwrite."""
    out = tmp_path / "run"
    bad = {"batch-size": ["--batch-size", "100000"], "text-resume": ["--resume", str(tmp_path / "notes.txt")],
           "model-as-resume": ["--resume", str(tmp_path / "other" / "model.pt")]}[case]
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    if case == "model-as-resume":
        assert main(QUICK + ["--out", str(tmp_path / "other")]) == 0
    assert main(QUICK + ["--out", str(out), *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("batch_size" in err or "resume:" in err)
    assert not out.exists()
    assert main(QUICK + ["--out", str(out)]) == 0
    assert (out / "config.json").is_file() and (out / "model.pt").is_file()


def test_overwrite_replaces_the_earlier_run_only_once_the_new_one_passes_its_checks(tmp_path, capsys):
    """--overwrite with a late refusal (batch size) or a resume under another lambda keeps every file
    of the earlier run byte for byte, config.json included; a run that passes its checks replaces it."""
    run = tmp_path / "run"
    assert main(QUICK + ["--out", str(run), "--checkpoint"]) == 0
    before = {f: (run / f).read_bytes() for f in ("history.json", "model.pt", "checkpoint.pt", "config.json")}
    assert main(QUICK + ["--out", str(run), "--overwrite", "--batch-size", "100000"]) == 2
    assert all((run / f).read_bytes() == b for f, b in before.items())
    other = [a if a != "0.05" else "0.5" for a in QUICK]
    assert main(other + ["--out", str(run), "--resume", str(run / "checkpoint.pt")]) == 2
    assert "lam" in capsys.readouterr().err
    assert all((run / f).read_bytes() == b for f, b in before.items())
    assert main(QUICK + ["--seed", "1", "--out", str(run), "--overwrite"]) == 0
    assert not (run / "checkpoint.pt").exists() and (run / "model.pt").read_bytes() != before["model.pt"]


def test_concurrent_runs_cannot_share_a_directory(tmp_path, capsys):
    run = tmp_path / "run"
    with RunDir(run):
        assert (run / LOCK).read_text() == str(os.getpid())
        assert main(QUICK + ["--out", str(run)]) == 2
        assert "is in use by another run" in capsys.readouterr().err
    assert not (run / LOCK).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / LOCK).write_text(str(dead.pid))                      # the lock of a run that died
    (run / ".history.json.abc.tmp").write_text("half")            # and a write it left midway
    assert main(QUICK + ["--out", str(run)]) == 0
    assert not (run / LOCK).exists() and not (run / ".history.json.abc.tmp").exists()


@pytest.mark.long
def test_killed_train_run_resumes_exactly(tmp_path):
    """A real kill -9 of ssvm-train mid-run (the process is still training), then --resume from the
    last checkpoint: the history and w equal the uninterrupted run's."""
    args = ["--dataset", "ocr-small", "--lam", "0.01", "--gap-check", "1", "--passes", "40", "--seed", "2",
            "--quiet", "--checkpoint"]
    killed, full = tmp_path / "killed", tmp_path / "full"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.train", *args, "--out", str(killed)], env=env)
    deadline = time.time() + 120
    while not (killed / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "history.json").exists()                 # it died mid-run
    assert main(args + ["--out", str(killed), "--resume", str(killed / "checkpoint.pt")]) == 0
    assert main(args + ["--out", str(full)]) == 0
    h_res = json.loads((killed / "history.json").read_text())
    h_full = json.loads((full / "history.json").read_text())
    assert len(h_full) == 21                                      # 40 passes: a step pass + a gap pass per check
    assert strip(h_res) == strip(h_full)
    assert torch.equal(load_model(killed / "model.pt")["w"], load_model(full / "model.pt")["w"])


def _as_from_a_terminal():
    """Child set-up for the Ctrl-C tests: SIGINT at its default disposition, as a shell starts a command.
    The test process may have it ignored (Lightning's trainer sets SIG_IGN for good after it handles a
    KeyboardInterrupt in an earlier test of this process), and an ignored SIGINT is inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_without_checkpoint_keeps_its_work(tmp_path, sig):
    """Ctrl-C / SIGTERM mid-run, no --checkpoint: the run closes its interval with an exact gap check,
    writes history.json and model.pt of that point, says so in one line and exits 130 (143 for SIGTERM)."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.train", "--dataset", "ocr-small", "--lam", "0.01",
                             "--gap-check", "5", "--passes", "100000", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    for line in proc.stdout:                                      # the first gap check: training is under way
        if line.startswith("pass") and not line.startswith("pass     0.0"):
            break
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == (130 if sig == signal.SIGINT else 143)
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith("ssvm-train: interrupted at") and "exact duality gap there" in last_line
    assert "Traceback" not in stderr
    history = json.loads((out / "history.json").read_text())
    assert 5.0 < history[-1]["passes"] < 100000 and history[-1]["gap"] > 0
    model = load_model(out / "model.pt")
    task = load_task("ocr-small")
    # model.pt is the point the last record certifies: its primal objective, recomputed
    w = model["w"]
    assert task.store(0.01).primal_at(w) == pytest.approx(history[-1]["primal"], rel=1e-9)


def test_too_little_space_is_refused_before_training_and_a_failed_final_write_keeps_the_results(
        tmp_path, capsys, monkeypatch):
    import shutil as sh
    from collections import namedtuple

    import ssvm_torch.cli.results as results_cli          # where ssvm-train's final files are written
    usage = namedtuple("usage", "total used free")
    real = sh.disk_usage
    monkeypatch.setattr(sh, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    out = tmp_path / "run"
    assert main(QUICK + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "model.pt, history.json and test_predictions.json needs about" in err and not (out / "history.json").exists()
    monkeypatch.setattr(sh, "disk_usage", real)
    saved = results_cli.save_model

    def full_disk(where, *a, **k):
        if Path(where) == out:
            raise OSError(28, "No space left on device")
        return saved(where, *a, **k)
    monkeypatch.setattr(results_cli, "save_model", full_disk)
    assert main(QUICK + ["--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "No space left on device" in err and "they are in" in err
    rescue = Path(err.split("they are in ")[1].split(" ")[0])
    assert load_model(rescue / "model.pt")["w"].numel() > 0 and (rescue / "history.json").is_file()
    shutil.rmtree(rescue)


# -- bad input: one line naming the field, exit code 2 ------------------------------------------
@pytest.mark.parametrize("argv,needle", [
    (["--passes", "inf"], "passes: expected a finite number > 0"),
    (["--passes", "nan"], "passes: expected a finite number > 0"),
    (["--seed", "100000000000000000000"], "seed: expected an int in [0, 2^63)"),
    (["--seed", "-1"], "seed: expected an int in [0, 2^63)"),
    (["--device", "meta"], "device: expected 'cpu' or 'cuda[:N]'"),
    (["--gap-threshold", "inf"], "gap_threshold: expected a finite number >= 0"),
    (["--gap-check", "inf"], "gap_check: expected a finite number > 0"),
    (["--dataset", "ocr-small", "--kernels", "numba", "--dtype", "float32"], "kernels: 'numba' needs CPU float64"),
    (["--dataset", "scene", "--kernels", "numba", "--dtype", "float32"], "kernels: 'numba' needs a CPU float64 store"),
])
def test_bad_options_fail_in_one_line(tmp_path, capsys, argv, needle):
    assert main(["--dataset", "ocr-small", "--quiet", "--out", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


@pytest.mark.long
@pytest.mark.parametrize("change,field", [(["--dataset", "hansards"], "dataset"), (["--dtype", "float32"], "dtype"),
                                          (["--lam", "0.5"], "lam")])
def test_checkpoint_of_another_run_is_refused(tmp_path, capsys, change, field):
    run = tmp_path / "run"
    assert main(QUICK + ["--out", str(run), "--checkpoint"]) == 0
    assert main(QUICK + ["--passes", "4", "--out", str(run), "--resume", str(run / "checkpoint.pt"), *change]) == 2
    assert f"resume: {run / 'checkpoint.pt'} is a checkpoint of {field} = " in capsys.readouterr().err


def test_labels_and_features_are_never_coerced_silently():
    from ssvm_torch import ChainData, FlatData
    x = [np.zeros((3, 2))]
    with pytest.raises(SSVMInputError, match=r"ys\[0\]: expected integer labels.*1.7"):
        ChainData.from_sequences(x, [np.array([0, 1.7, 2.2])], 3)
    with pytest.raises(SSVMInputError, match=r"xs\[0\]: expected a numeric array"):
        ChainData.from_sequences([np.array([["a", "b"]])], [np.array([0])], 3)
    with pytest.raises(SSVMInputError, match=r"xs\[0\]: expected a numeric array of one shape"):
        ChainData.from_sequences([[[0.0, 1.0], [2.0]]], [np.array([0, 1])], 3)
    with pytest.raises(SSVMInputError, match="Y: expected integer labels"):
        FlatData(np.zeros((3, 2)), np.array([0, 1.5, 2]))
    data = ChainData.from_sequences(x, [np.array([0, 1, 2], dtype=np.int32)], 3)     # any integer dtype is fine
    assert data.Y.dtype == torch.int64
    direct = ChainData(torch.zeros(3, 2), torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 3]), 3)
    assert direct.Y.dtype == torch.int64
    assert ChainData.from_sequences(x, [np.array([0.0, 1.0, 2.0])], 3).Y.tolist() == [0, 1, 2]


def test_extreme_scales_are_warned_about():
    from ssvm_torch import ChainData, FlatData
    with pytest.warns(UserWarning, match="X: values up to 1e.308"):
        ChainData.from_sequences([np.full((2, 2), 1e308)], [np.array([0, 1])], 2)
    with pytest.warns(UserWarning, match="X: values up to"):
        FlatData(np.full((3, 2), 1e200), np.array([0, 1, 0]))
    task = load_task("ocr-small")
    with pytest.warns(UserWarning, match="lam: lam n = .* outside"):
        task.lam(1e300)


def test_lightning_errors_in_one_line(tmp_path, capsys):
    from ssvm_torch.lightning.cli import main as lightning_main
    a_file = tmp_path / "file"
    a_file.write_text("x")
    base = ["fit", "--config", str(Path(__file__).resolve().parents[1] / "recipes" / "ocr_small.yaml"),
            "--model.passes", "1", "--trainer.enable_progress_bar", "false"]
    assert lightning_main(base + ["--trainer.default_root_dir", str(a_file)]) == 2
    assert "trainer.default_root_dir: cannot write logs" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert lightning_main(base + ["--trainer.default_root_dir", str(tmp_path / "r"),
                                      "--trainer.accelerator", "gpu"]) == 2
        assert "error: trainer:" in capsys.readouterr().err
    # a jsonargparse message is kept whole on one line (it was cut at 400 characters, mid-word: "Expec")
    from ssvm_torch.deep.__main__ import main as deep_main
    assert deep_main(["fit", "--config", str(Path(__file__).resolve().parents[1] / "recipes" / "conll_deep_hinge.yaml"),
                      "--model.hidden", "abc", "--trainer.default_root_dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'Parser key "hidden": Expected a <class \'int\'>. Got value: abc' in err
    from ssvm_torch.lightning.cli import MESSAGE_CHARS, one_line
    long = one_line("word " * 400)
    assert len(long) <= MESSAGE_CHARS and long.endswith("word [...]")


@pytest.mark.long
def test_data_dir_points_the_commands_at_a_copy_of_the_datasets(tmp_path, capsys, monkeypatch):
    copy = tmp_path / "data"
    shutil.copytree(data_dir(), copy)
    monkeypatch.setenv("SSVM_TORCH_DATA", str(tmp_path / "nowhere"))
    assert main(QUICK + ["--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "set SSVM_TORCH_DATA" in err and "nowhere" in err
    assert main(QUICK + ["--data-dir", str(copy), "--out", str(tmp_path / "b")]) == 0
    assert os.environ["SSVM_TORCH_DATA"] == str(tmp_path / "nowhere")     # restored after the command
    assert main(QUICK + ["--data-dir", str(tmp_path / "missing"), "--out", str(tmp_path / "c")]) == 2
    assert "data_dir: expected a folder with the datasets" in capsys.readouterr().err
    assert path_main(["--dataset", "ocr-small", "--eps", "0.5", "--quiet", "--data-dir", str(copy),
                      "--out", str(tmp_path / "path")]) == 0


# -- every fault ends in one line (issue 48, group 2) --------------------------------------------
def test_a_truncated_npz_without_a_checksum_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    whole = (data_dir() / "ocr_letters.npz").read_bytes()
    (data / "ocr_letters.npz").write_bytes(whole[:len(whole) // 2])
    assert main(QUICK + ["--data-dir", str(data), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ocr_letters.npz is damaged or not this dataset's npz" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_cuda_is_one_line_in_every_entry_point(tmp_path, capsys):
    from ssvm_torch import MulticlassSSVM
    assert path_main(["--dataset", "ocr-small", "--device", "cuda", "--quiet", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err.strip() == "ssvm-path: error: device: 'cuda' requested but no CUDA device is available"
    assert not (tmp_path / "p").exists()
    with pytest.raises(SSVMInputError, match="device: 'cuda' requested but no CUDA device is available"):
        MulticlassSSVM(device="cuda").fit(np.random.default_rng(0).random((9, 3)), np.arange(9) % 3)


def test_ctrl_c_before_the_run_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    import ssvm_torch.cli.train as train_cli

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(train_cli, "load_task", interrupted)       # e.g. while numba compiles at start-up
    assert main(QUICK + ["--out", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ssvm-train: interrupted (Ctrl-C) before the run had written anything")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_write_on_a_full_disk_names_the_full_disk(tmp_path, monkeypatch, capsys):
    """The audit's case: torch.save on a full disk raises RuntimeError "unexpected pos ...", which the
    run quoted; the line must say that the disk is full, and the run keeps its last good checkpoint."""
    import ssvm_torch.atomic as atomic
    real_save, calls = torch.save, []

    def save_on_a_filling_disk(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 3:                                  # the third file written: the disk is full
            monkeypatch.setattr(atomic, "free_bytes", lambda folder: 4096)
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
        return real_save(obj, f, *a, **k)
    monkeypatch.setattr(torch, "save", save_on_a_filling_disk)
    out = tmp_path / "run"
    assert main(QUICK + ["--passes", "5", "--out", str(out), "--checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected pos" not in err
    assert f"No space left on device ({out} has 4096 bytes free)" in err and "holds the last good one" in err
    with pytest.raises(RuntimeError, match="unexpected pos"):     # room left: the writer's own error stands
        monkeypatch.setattr(atomic, "free_bytes", lambda folder: 1 << 30)
        atomic.atomic_write(tmp_path / "x", lambda f: (_ for _ in ()).throw(RuntimeError("unexpected pos 1 vs 0")))
    assert not list(tmp_path.glob(".x.*"))


@pytest.mark.parametrize("stop", ["KeyboardInterrupt", "Terminated", "SIGTERMException"])
def test_a_stop_during_a_torch_save_is_the_stop_and_keeps_the_previous_file(tmp_path, stop):
    """Ctrl-C or SIGTERM (the CLI's handler raises Terminated; Lightning's SIGTERMException) inside torch.save's
    zip writer makes its cleanup fail ("unexpected pos 64 vs 0", which a Lightning fit then reported as a crash,
    exit 1, and kept nothing of the run: the SIGTERM case of test_faults_trees.py's interrupted fit): atomic_write
    raises the stop itself, the target keeps its previous content and no temporary file is left."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from ssvm_torch import atomic
    from ssvm_torch.errors import Terminated
    raised = {"KeyboardInterrupt": KeyboardInterrupt, "Terminated": Terminated, "SIGTERMException": SIGTERMException}
    raised = raised[stop]
    target = tmp_path / "last.ckpt"
    torch.save({"epoch": 0}, target)
    before = target.read_bytes()

    class CtrlCOnThirdWrite:
        """The temporary file, with Ctrl-C arriving during torch.save's third write to it."""
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += 1
            if self.n == 3:
                raise raised
            return self.f.write(data)

        def flush(self):
            self.f.flush()

    def save_interrupted(f):
        torch.save({"w": torch.zeros(1000)}, CtrlCOnThirdWrite(f))
    with pytest.raises(raised):
        atomic.atomic_write(target, save_interrupted)
    assert target.read_bytes() == before and not list(tmp_path.glob(".last.ckpt.*"))


def test_a_checkpoint_write_that_fails_stops_the_run_and_keeps_the_last_good_one(tmp_path, monkeypatch, capsys):
    """The disk fills while the third checkpoint is written: one line, the run stops at that check,
    history.json and model.pt are written, checkpoint.pt is the first (good) one."""
    import ssvm_torch.cli.checkpoints as writes_cli
    real, calls = writes_cli.save_checkpoint, []

    def filling(path, *a, **k):
        calls.append(path)
        if len(calls) == 3:
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
        return real(path, *a, **k)
    monkeypatch.setattr(writes_cli, "save_checkpoint", filling)
    out = tmp_path / "run"
    assert main(QUICK + ["--passes", "5", "--out", str(out), "--checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "writing the checkpoint at" in err and "holds the last good one" in err
    history = json.loads((out / "history.json").read_text())
    assert history[-1]["passes"] < 5 and (out / "model.pt").is_file()
    from ssvm_torch.outputs import load_checkpoint
    kept = load_checkpoint(out / "checkpoint.pt")["state"]
    assert kept["oracle_calls"] > 0 and kept["checks"] == 1


def test_the_disk_room_message_gives_real_figures(tmp_path, monkeypatch, capsys):
    import shutil as sh
    from collections import namedtuple
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(sh, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    assert main(QUICK + ["--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "has 1000 B free" in err and "0 MB" not in err


@pytest.mark.long
def test_ctrl_c_during_the_path_keeps_the_breakpoints_certified_so_far(tmp_path):
    """SIGINT while ssvm-path computes: the breakpoint under way is finished, path.pt / path.json hold
    every breakpoint certified so far (lam_end where they stop), one line says so, exit 130."""
    from ssvm_torch.path import RegPath
    out = tmp_path / "path"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ssvm_torch.cli.path", "--dataset", "ocr-small", "--eps", "0.01",
                             "--lam-min", "1e-9", "--out", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    seen = 0
    for line in proc.stdout:                                      # two breakpoints solved: the path is under way
        seen += line.startswith("lam")
        if seen == 3:
            break
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in stderr
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith("ssvm-path: interrupted after") and "certified from lambda" in last_line
    path = RegPath.load(out)
    assert len(path.lambdas) >= 3 and path.lam_end > 0 and len(path.records) == len(path.lambdas)
    assert path.lam_end < float(path.lambdas[-1])


@pytest.mark.parametrize("where", ["missing-mount", "file-in-the-way"])
def test_an_unwritable_default_root_dir_is_one_line_in_the_lightning_and_deep_clis(tmp_path, capsys, where):
    from ssvm_torch.deep.__main__ import main as deep_main
    from ssvm_torch.lightning.cli import main as lightning_main
    if where == "file-in-the-way":
        (tmp_path / "file").write_text("x")
        root = tmp_path / "file" / "logs"
    else:
        root = Path("/proc/sys/ssvm-torch-nowhere")                   # /proc/sys creates nothing, even for root
    runs = ((lightning_main, ["fit", "--config", "recipes/ocr_small.yaml", "--model.passes", "1"]),
            (deep_main, ["fit", "--config", "recipes/ocr_deep_hinge.yaml", "--model.pretrain_epochs", "0",
                         "--model.train_size", "50", "--trainer.max_epochs", "1"]))
    for cli, argv in runs:
        assert cli(argv + ["--trainer.default_root_dir", str(root)]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and "trainer.default_root_dir: cannot write logs at" in err[0]


def test_a_refused_lightning_or_deep_run_leaves_no_log_folder(tmp_path, capsys):
    """A refusal after the trainer claimed its version folder (an option the module checks) removes
    what the start wrote (version_N with config.yaml and an empty event file, and the folders it
    created): the corrected rerun gets version_0 of a clean root."""
    from ssvm_torch.deep.__main__ import main as deep_main
    from ssvm_torch.lightning.cli import main as lightning_main
    runs = ((lightning_main, ["fit", "--config", "recipes/ocr_small.yaml", "--model.passes", "1", "--model.lam", "-1"]),
            (deep_main, ["fit", "--config", "recipes/ocr_deep_hinge.yaml", "--model.pretrain_epochs", "0",
                         "--model.train_size", "50", "--trainer.max_epochs", "1", "--model.lam", "-1"]))
    for cli, argv in runs:
        root = tmp_path / cli.__module__
        assert cli(argv + ["--trainer.default_root_dir", str(root)]) == 2
        assert "lam" in capsys.readouterr().err
        assert not root.exists()


@pytest.mark.long
def test_deep_checkpoints_are_what_they_claim(tmp_path, capsys):
    """A checkpoint of the OCR module given to the CoNLL recipe is refused naming both modules (even
    with a matching train_size); a weight changed inside a deep checkpoint is refused (the SHA-256
    covers the weights and optimizer states), and the untouched checkpoint resumes."""
    from ssvm_torch.deep.__main__ import main as deep_main
    root = tmp_path / "ocr"
    ocr = ["fit", "--config", "recipes/ocr_deep_hinge.yaml", "--model.pretrain_epochs", "0", "--model.train_size", "50"]
    assert deep_main(ocr + ["--trainer.max_epochs", "1", "--trainer.default_root_dir", str(root)]) == 0
    ckpt = next(root.rglob("*.ckpt"))
    capsys.readouterr()
    conll = ["fit", "--config", "recipes/conll_deep_hinge.yaml", "--model.train_size", "50", "--trainer.max_epochs", "1",
             "--trainer.default_root_dir", str(tmp_path / "conll"), "--ckpt_path", str(ckpt)]
    assert deep_main(conll) == 2
    err = capsys.readouterr().err
    assert "is a checkpoint of the module DeepChainModule" in err and "this run trains ConllChunker" in err
    assert "conll_deep_hinge.yaml" in err
    state = torch.load(ckpt, weights_only=True)
    name = next(k for k in state["state_dict"] if k.endswith("weight"))
    state["state_dict"][name] = state["state_dict"][name] + 1e-3
    damaged = tmp_path / "damaged.ckpt"
    torch.save(state, damaged)
    resume = ocr + ["--trainer.max_epochs", "2", "--trainer.default_root_dir", str(root)]
    assert deep_main(resume + ["--ckpt_path", str(damaged)]) == 2
    assert "the weights or the optimizer states are damaged" in capsys.readouterr().err
    assert deep_main(resume + ["--ckpt_path", str(ckpt)]) == 0


def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path):
    """SIGINT while ssvm-train imports torch and the package (before any of its code runs): the
    console script's guard answers in one line with exit status 130 and nothing is written."""
    script = Path(sys.executable).parent / "ssvm-train"
    if not script.is_file():
        pytest.skip("the console script is not installed in this environment")
    proc = subprocess.Popen([str(script), "--dataset", "ocr-small", "--out", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    time.sleep(0.6)                                   # imports take seconds; the guard is in place at once
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("ssvm-train: interrupted (Ctrl-C)")
    assert not (tmp_path / "run").exists()


def test_checkpoint_room_is_its_sparse_size_now_with_a_note_when_it_could_outgrow_the_disk(tmp_path, monkeypatch,
                                                                                            capsys):
    """--checkpoint asks the disk for the checkpoint as it is written (sparse; the packed size of the store's state,
    which equals the file's tensors) and, when the free space is below its dense bound, starts with one note on
    stderr instead of refusing; below the sparse size it refuses as before."""
    import io
    import shutil as sh
    from collections import namedtuple

    from ssvm_torch.portable import pack, packed_bytes
    from ssvm_torch.tasks import load_task
    state = load_task("ocr-small").store(0.05).state_dict()
    sparse, dense = packed_bytes(state, sparse=True), packed_bytes(state)
    buf = io.BytesIO()
    torch.save(pack(state, True), buf)
    assert sparse < dense and sparse <= buf.tell() < sparse + 64 * 1024         # the tensors plus the archive's records
    usage = namedtuple("usage", "total used free")
    for free, code, said in ((int(1.3 * sparse) + 10 ** 6, 0, "can grow to"), (int(sparse), 2, "one checkpoint needs")):
        monkeypatch.setattr(sh, "disk_usage", lambda p, free=free: usage(10 ** 12, 10 ** 12 - free, free))
        out = tmp_path / f"run{code}"
        assert main(QUICK + ["--out", str(out), "--checkpoint"]) == code
        assert said in capsys.readouterr().err
