"""The Lightning loop: same trajectory as the plain engine, exact resume (also after SIGKILL),
atomic checkpoints, TensorBoard event files, LightningCLI recipes, clear errors."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ssvm_torch.devices import host_guard
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.lightning import AtomicCheckpointIO, BlockChunks, SSVMModule
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]


def strip(history):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


def trainer(tmp_path, **kw):
    # the CPU unless a test asks for a GPU: the trajectories are compared with the plain engine's on the CPU
    # (Lightning's default accelerator "auto" put the store on CUDA on a GPU machine: the device check's failure)
    kw.setdefault("accelerator", "cpu")
    kw.setdefault("max_epochs", -1)
    kw.setdefault("callbacks", [ModelCheckpoint(save_top_k=0, save_last=True)])
    return L.Trainer(default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                     log_every_n_steps=1, **kw)


def plain_history(dataset="ocr-small", lam=0.01, **cfg):
    task = load_task(dataset)
    store = task.store(lam)
    solver = Solver(store, SolverConfig(**cfg), evaluate=task.evaluate)
    return solver.run(), store.w, solver.model_point()[0]


@pytest.mark.long
@pytest.mark.parametrize("cfg", [dict(sampling="gap"), dict(sampling="perm", step="best", cache=True),
                                 dict(solver="fw", gap_check=2), dict(sampling="gap", batch_size=16)],
                         ids=["gap", "perm-best-cache", "fw", "minibatch"])
def test_same_trajectory_as_plain_engine(tmp_path, cfg):
    cfg = {"passes": 6, "gap_check": 2, "seed": 3, **cfg}
    module = SSVMModule(dataset="ocr-small", lam=0.01, **cfg)
    trainer(tmp_path).fit(module)
    hist, w, model_w = plain_history(**cfg)
    assert len(hist) >= 3 and strip(module.solver.finish()) == strip(hist)     # the last record: the model's
    assert torch.equal(module.solver.dual.w, w)
    written = json.loads((Path(module.output_dir()) / "history.json").read_text())
    assert strip(written) == strip(hist)
    model = torch.load(Path(module.output_dir()) / "model.pt")
    assert torch.equal(model["w"], model_w) and model["dataset"] == "ocr-small"
    predictions = json.loads((Path(module.output_dir()) / "test_predictions.json").read_text())
    assert predictions == module.task.predictions(model_w) and predictions["split"] == "ocr-small-test"


def test_chunks_smaller_than_a_pass_draw_the_same_blocks(tmp_path):
    """blocks_per_step < n: more training steps, the same draws (recompute_every is never hit)."""
    module = SSVMModule(dataset="ocr-small", lam=0.01, passes=4, gap_check=2, seed=1, blocks_per_step=100)
    trainer(tmp_path).fit(module)
    assert len(BlockChunks(module.solver, 100)) == 13            # 2 passes of 626 blocks in chunks of 100
    hist, _, _ = plain_history(passes=4, gap_check=2, seed=1)
    ours = strip(module.solver.finish())
    assert [r["gap"] for r in ours] == pytest.approx([r["gap"] for r in hist], rel=1e-12)
    assert module.trainer.global_step == 2 * 13


@pytest.mark.slow       # test_killed_run_resumes_exactly checks the same history through the CLI in the fast tier
def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    cfg = dict(dataset="ocr-small", lam=0.01, passes=9, gap_check=2, seed=5, step="pairwise", cache=True)
    full = SSVMModule(**cfg)
    trainer(tmp_path / "full").fit(full)
    first = SSVMModule(**cfg)
    trainer(tmp_path / "cut", max_epochs=2).fit(first)            # stopped by the trainer after 2 epochs
    ckpt = tmp_path / "cut" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert ckpt.is_file() and len(first.history) == 3            # start + 2 gap checks
    assert "ssvm_solver" in torch.load(ckpt, weights_only=True)  # what LightningCLI reads before resuming
    resumed = SSVMModule(**cfg)
    trainer(tmp_path / "cut").fit(resumed, ckpt_path=ckpt)
    assert strip(resumed.history) == strip(full.history)
    assert torch.equal(resumed.solver.dual.w, full.solver.dual.w)
    for x, y in zip(resumed.solver.sets, full.solver.sets):      # active sets and caches too
        assert x.alpha == y.alpha and all(np.array_equal(a, b) for a, b in zip(x.labels, y.labels))


@pytest.mark.long
def test_killed_run_resumes_exactly(tmp_path):
    """SIGKILL a CLI run at a random moment after its first checkpoint: last.ckpt is whole, and
    resuming from it gives the history of an uninterrupted run."""
    root = tmp_path / "killed"
    cmd = [sys.executable, "-m", "ssvm_torch.lightning", "fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"),
           "--model.passes", "200", "--model.gap_check", "1", "--model.gap_threshold", "0", "--model.seed", "2",
           "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    ckpt = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(float(np.random.default_rng().uniform(0.0, 0.3)))
    assert proc.poll() is None, "the run ended before it could be killed mid-run"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ckpt.exists(), "the run never wrote a checkpoint"
    assert not (root / "lightning_logs" / "version_0" / "history.json").exists()     # it died mid-run
    state = torch.load(ckpt, weights_only=True)             # whole, not truncated
    done = state["ssvm_solver"]["solver"]["state"]["history"][-1]["passes"]
    target = done + 4
    resumed = SSVMModule(dataset="ocr-small", lam=0.01, passes=target, gap_check=1, seed=2, gap_threshold=0.0)
    trainer(root).fit(resumed, ckpt_path=ckpt)
    hist, w, _ = plain_history(passes=target, gap_check=1, seed=2)
    assert strip(resumed.solver.finish()) == strip(hist)
    assert torch.equal(resumed.solver.dual.w, w)                 # bit for bit


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"x": torch.arange(3)}, path)

    def dying_save(obj, f, *a, **k):
        f.write(b"partial bytes")
        raise KeyboardInterrupt                               # killed in the middle of the write
    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"x": torch.arange(5)}, path)
    monkeypatch.undo()
    assert torch.equal(io.load_checkpoint(path)["x"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_tensorboard_events_hold_scalars_histograms_and_hparams(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
    module = SSVMModule(dataset="ocr-small", lam=0.01, passes=6, gap_check=2, step="best", cache=True)
    trainer(tmp_path).fit(module)
    acc = EventAccumulator(str(Path(module.output_dir())), size_guidance={"tensors": 0, "histograms": 0}).Reload()
    tags = acc.Tags()
    for name in ("gap", "gap_estimate", "primal", "dual", "train_error", "test_error", "oracle_calls", "passes",
                 "step_size_mean", "full_step_rate", "cache_hit_rate"):
        assert f"ssvm/{name}" in tags["scalars"], name
    gaps = acc.Scalars("ssvm/gap")
    assert [e.value for e in gaps] == pytest.approx([r["gap"] for r in module.history])
    assert [e.step for e in gaps] == [r["oracle_calls"] for r in module.history]
    assert {"ssvm/block_gaps", "ssvm/sampling_prob"} <= set(tags["histograms"])
    hist = acc.Histograms("ssvm/block_gaps")[-1].histogram_value
    assert hist.num == module.solver.dual.n and hist.sum == pytest.approx(module.history[-1]["gap"])
    start = plugin_data_pb2.HParamsPluginData.FromString(
        acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content).session_start_info
    assert start.hparams["dataset"].string_value == "ocr-small" and start.hparams["lam"].number_value == 0.01


@pytest.mark.slow          # the slow tier (SSVM_SLOW=1): keeps the fast CI tier short
def test_cli_recipe_runs_and_resumes(tmp_path):
    root = tmp_path / "cli"
    base = [sys.executable, "-m", "ssvm_torch.lightning", "fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"),
            "--model.gap_check", "1", "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    r = subprocess.run(base + ["--model.passes", "2"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "exact duality gap:" in r.stdout and "test error:" in r.stdout
    v0 = root / "lightning_logs" / "version_0"
    assert {"history.json", "model.pt", "config.yaml", "hparams.yaml"} <= {p.name for p in v0.iterdir()}
    assert any(p.name.startswith("events.out.tfevents") for p in v0.iterdir())
    assert json.loads((v0 / "history.json").read_text())[-1]["passes"] == 2.0
    r = subprocess.run(base + ["--model.passes", "4", "--ckpt_path", str(v0 / "checkpoints" / "last.ckpt")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    hist = json.loads((v0 / "history.json").read_text())           # the resumed run continues in its directory
    assert [h["passes"] for h in hist] == [0.0, 2.0, 4.0] and not (root / "lightning_logs" / "version_1").exists()
    assert "resumed at 2.0 effective passes" in r.stdout
    bad = subprocess.run(base + ["--model.solver", "newton"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode != 0 and "solver" in bad.stderr and "newton" in bad.stderr


def test_bad_arguments_fail_clearly(tmp_path):
    with pytest.raises(SSVMInputError, match="sampling"):
        SSVMModule(sampling="importance")
    with pytest.raises(SSVMInputError, match="blocks_per_step"):
        SSVMModule(blocks_per_step=0)
    with pytest.raises(SSVMInputError, match="dtype"):
        SSVMModule(dtype="float16")
    module = SSVMModule(passes=2, gap_check=1)
    trainer(tmp_path).fit(module)
    with pytest.raises(SSVMInputError, match="ssvm_solver"):
        module.on_load_checkpoint({"state_dict": {}})


class GuardTrainingSteps(L.Callback):
    """host_guard around every training step (a chunk of solver steps); Lightning's own set-up, data
    loading and logging stay outside, as they are host-side by design."""

    steps = 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.ctx = host_guard()
        self.ctx.__enter__()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.ctx.__exit__(None, None, None)
        self.ctx = None
        self.steps += 1

    def on_exception(self, trainer, module, exception):
        if getattr(self, "ctx", None) is not None:
            self.ctx.__exit__(type(exception), exception, None)
            self.ctx = None


def test_lightning_training_steps_never_leave_the_device(tmp_path):
    """The CPU guard of the device path (tests/test_device_guard.py, where the gap passes are guarded
    too) around every Lightning training step on the pure-torch kernels, mini-batch steps included."""
    module = SSVMModule(dataset="ocr-small", lam=0.01, passes=4, gap_check=1, seed=2, batch_size=32, kernels="torch",
                        blocks_per_step=5, histograms=False)
    guard = GuardTrainingSteps()
    trainer(tmp_path, callbacks=[ModelCheckpoint(save_top_k=0, save_last=True), guard]).fit(module)
    assert module.solver.dual.kernels == "torch" and module.history[-1]["passes"] >= 4
    assert guard.steps == 2 * 4                   # 2 epochs of 20 mini-batch steps in chunks of 5


@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_accelerator_needs_no_code_change(tmp_path, accelerator):
    """The same module on either accelerator follows the plain engine's trajectory; the CPU case keeps the
    GPU case's own code exercised where CI has no GPU (its unpacking once broke unseen)."""
    module = SSVMModule(dataset="ocr-small", lam=0.01, passes=4, gap_check=2, seed=3)
    trainer(tmp_path, accelerator=accelerator, devices=1).fit(module)
    assert module.solver.dual.w.is_cuda == (accelerator == "gpu")
    hist, _, _ = plain_history(passes=4, gap_check=2, seed=3)
    assert [r["gap"] for r in module.history] == pytest.approx([r["gap"] for r in hist], rel=1e-6)
    assert len(hist) >= 3


def test_version_directories_are_claimed_and_resume_stays_in_its_own(tmp_path, capsys):
    from ssvm_torch.lightning.cli import claim_version, main
    logs = tmp_path / "claims"
    assert [claim_version(logs) for _ in range(2)] == ["version_0", "version_1"]
    (logs / "version_7").mkdir()
    assert claim_version(logs) == "version_8"                   # never a directory another run holds
    root = tmp_path / "root"
    base = ["fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"), "--model.gap_check", "1",
            "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    assert main(base + ["--model.passes", "2"]) == 0
    ckpt = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert main(base + ["--model.passes", "6", "--ckpt_path", str(ckpt)]) == 0
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]   # one run, one directory
    hist = json.loads((root / "lightning_logs" / "version_0" / "history.json").read_text())
    assert [r["passes"] for r in hist] == [0.0, 2.0, 4.0, 6.0]
    assert main(base + ["--model.lam", "abc"]) == 2
    err = capsys.readouterr().err
    assert "python -m ssvm_torch.lightning: error:" in err and "model.lam" in err and err.count("\n") == 1


def test_a_resumed_run_names_the_edited_config_values_it_does_not_take(tmp_path, capsys):
    """A recipe edited between a run and its resume: the checkpoint's hyper-parameters win (Lightning's rule: the
    run goes on as it was), and one line on stderr names each value the config file changed and the run keeps; a
    --model flag on the command line still wins and is not named."""
    from ssvm_torch.lightning.cli import main
    root = tmp_path / "root"
    base = ["fit", "--model.gap_check", "1", "--trainer.default_root_dir", str(root),
            "--trainer.enable_progress_bar", "false"]
    recipe = ROOT / "recipes" / "ocr_small.yaml"
    assert main(["fit", "--config", str(recipe)] + base[1:] + ["--model.passes", "2"]) == 0
    edited = tmp_path / "edited.yaml"
    text = recipe.read_text()
    assert "  gap_threshold: 1e-3\n" in text and "  passes: 200\n" in text
    edited.write_text(text.replace("  gap_threshold: 1e-3\n", "  gap_threshold: 1e-4\n"))
    capsys.readouterr()
    ckpt = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert main(["fit", "--config", str(edited)] + base[1:] + ["--model.passes", "4", "--ckpt_path", str(ckpt)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ckpt_path:")]
    assert len(notes) == 1 and "gap_threshold = 0.001 (the config file: 0.0001)" in notes[0], notes
    # passes: 2 in the checkpoint, 200 in the file, 4 on the command line: the flag is taken, and not named
    assert "passes" not in notes[0]
    hist = json.loads((root / "lightning_logs" / "version_0" / "history.json").read_text())
    assert hist[-1]["passes"] == 4.0


def test_a_checkpoint_of_another_run_or_a_damaged_one_is_refused_by_name(tmp_path, capsys):
    from ssvm_torch.lightning.cli import main
    root = tmp_path / "root"
    base = ["fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"), "--model.gap_check", "1",
            "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    assert main(base + ["--model.passes", "1"]) == 0
    ckpt = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    history = root / "lightning_logs" / "version_0" / "history.json"
    before = history.read_text()
    capsys.readouterr()
    # another dataset or lambda, from the command line or from a config file: refused, nothing trained
    other = tmp_path / "other.yaml"
    other.write_text((ROOT / "recipes" / "ocr_small.yaml").read_text().replace("lam: 0.01", "lam: 0.05"))
    for extra in (["--model.dataset", "ocr-large"], ["--config", str(other)]):
        assert main(base + extra + ["--ckpt_path", str(ckpt)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "ckpt_path:" in err and "is a checkpoint of" in err
    assert "lam = 0.01" in err and "lam = 0.05" in err
    damaged = tmp_path / "cut.ckpt"
    damaged.write_bytes(ckpt.read_bytes()[:5000])
    for path, words in ((damaged, "not a readable Lightning checkpoint"), (tmp_path, "is a directory"),
                        (tmp_path / "none.ckpt", "does not exist")):
        assert main(base + ["--ckpt_path", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "ckpt_path: " in err and words in err
    assert history.read_text() == before                # the refused runs trained nothing
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]


def test_a_fresh_run_is_quiet_keeps_one_last_checkpoint_and_files_follow_the_umask(tmp_path, capfd, recwarn):
    import os

    from ssvm_torch.lightning.cli import main
    root = tmp_path / "root"
    old = os.umask(0o022)
    try:
        assert main(["fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"), "--model.gap_check", "1",
                     "--model.passes", "3", "--trainer.default_root_dir", str(root)]) == 0
    finally:
        os.umask(old)
    out, err = capfd.readouterr()
    for noise in ("litlogger", "LeafSpec", "Epoch "):
        assert noise not in out + err
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]
    run = root / "lightning_logs" / "version_0"
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["last.ckpt"]
    for name in ("history.json", "model.pt", "checkpoints/last.ckpt"):
        assert (run / name).stat().st_mode & 0o777 == 0o644, name
    # the one last.ckpt is the newest state: resuming it continues after the last gap check
    assert main(["fit", "--config", str(ROOT / "recipes" / "ocr_small.yaml"), "--model.gap_check", "1",
                 "--model.passes", "6", "--trainer.default_root_dir", str(root), "--ckpt_path",
                 str(run / "checkpoints" / "last.ckpt")]) == 0
    assert [r["passes"] for r in json.loads((run / "history.json").read_text())] == [0.0, 2.0, 4.0, 6.0]


def test_hp_metric_is_the_result_and_the_progress_bar_ends_on_the_last_record(tmp_path, capsys):
    """TensorBoard's hp_metric holds the final exact gap (no -1 placeholder) with the test error beside
    it; the progress bar's last postfix shows the final record's passes and gap."""
    import re

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ssvm_torch.lightning.cli import main as lightning_main
    root = tmp_path / "runs"
    assert lightning_main(["fit", "--config", "recipes/ocr_small.yaml", "--model.passes", "4", "--model.gap_check", "2",
                           "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "true"]) == 0
    captured = capsys.readouterr()
    history = json.loads(next(root.rglob("history.json")).read_text())
    events = EventAccumulator(str(next(root.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    hp = [e.value for e in events.Scalars("hp_metric")]
    assert hp and -1.0 not in hp and hp[-1] == pytest.approx(history[-1]["gap"], rel=1e-6)
    assert events.Scalars("hp/test_error")[-1].value == pytest.approx(history[-1]["test_error"], rel=1e-6)
    lines = [ln for ln in (captured.err + captured.out).replace("\r", "\n").splitlines() if "duality" not in ln]
    gaps = [m for ln in lines for m in re.findall(r"\bgap[:=] ?([0-9.e+-]+)", ln)]
    passes = [m for ln in lines for m in re.findall(r"\bpasses[:=] ?([0-9.e+-]+)", ln)]
    assert gaps and passes, "no progress bar values"
    assert float(passes[-1]) == pytest.approx(history[-1]["passes"], rel=1e-3)
    assert float(gaps[-1]) == pytest.approx(history[-1]["gap"], rel=2e-3)


def test_a_finished_run_resumed_with_its_budget_takes_no_step(tmp_path):
    """last.ckpt of a run that met its pass budget: resumed with the same budget it stops where it stopped (the
    solver's loaded state meets its stopping criterion: solvers.config.resumed_stop), no further interval."""
    cfg = dict(dataset="ocr-small", lam=0.01, passes=4, gap_check=2, seed=5)
    done = SSVMModule(**cfg)
    trainer(tmp_path / "run").fit(done)
    ckpt = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert ckpt.is_file() and done.solver.state.done
    resumed = SSVMModule(**cfg)
    trainer(tmp_path / "run").fit(resumed, ckpt_path=ckpt)
    assert strip(resumed.solver.finish()) == strip(done.solver.finish())
    assert torch.equal(resumed.solver.dual.w, done.solver.dual.w)
