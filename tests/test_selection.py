"""Lambda chosen on a development split: the warm grid's table, the choice, the refit through
``ssvm-train --select-lam``, and that the selection never reads the test file."""
import json
import shutil

import pytest
import torch

from ssvm_torch import SSVMInputError
from ssvm_torch.cli.train import main
from ssvm_torch.data import data_dir
from ssvm_torch.selection import select_lambda
from ssvm_torch.tasks import load_task


def test_the_grid_runs_on_fit_and_scores_on_dev_without_the_test_file(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(data_dir() / "conll2000_train.txt.gz", data)         # no test file at all
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    fit = load_task("conll2000", train_size=200, heldout=0.1, features="rich", loss="hamming")
    assert (fit.n_train, fit.n_test, fit.test.name) == (180, 20, "conll2000-dev")
    lam, table = select_lambda(fit, [1e-3, 1e-1, 1e-2], passes=3)
    assert [r["lam"] for r in table] == [1e-1, 1e-2, 1e-3]               # from the largest down (warm starts)
    assert all(r["passes"] >= 3 for r in table)
    assert [r["cumulative_passes"] for r in table] == sorted(r["cumulative_passes"] for r in table)
    best = max(r["dev_f1"] for r in table)
    assert lam == max(r["lam"] for r in table if r["dev_f1"] == best)   # the best dev F1, ties to the larger
    with pytest.raises(SSVMInputError, match="data file"):
        load_task("conll2000", train_size=200)                           # the test file is needed only here


def test_cli_select_lam_refits_on_all_training_data(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--dataset", "conll2000", "--train-size", "150", "--select-lam", "--lams", "1e-1", "1e-2",
                 "--min-counts", "1", "2", "--passes", "3", "--gap-check", "3", "--out", str(out)]) == 0
    sel = json.loads((out / "selection.json").read_text())
    assert sel["n_fit"] + sel["n_dev"] == 150 and sel["heldout"] == 0.1 and len(sel["table"]) == 4
    assert {"dev_f1", "dev_error", "gap", "passes", "min_count", "d"} <= set(sel["table"][0])
    best = max(r["dev_f1"] for r in sel["table"])
    chosen = next(r for r in sel["table"] if r["lam"] == sel["lam"] and r["min_count"] == sel["min_count"])
    assert chosen["dev_f1"] == best and sel["table"][0]["d"] > sel["table"][2]["d"]      # the cut-off shrinks d
    config = json.loads((out / "config.json").read_text())
    assert config["lam"] == sel["lam"] and config["selection"]["table"] == sel["table"]
    hist = json.loads((out / "history.json").read_text())
    assert "test_f1" in hist[-1] and hist[-1]["passes"] >= 3
    model = torch.load(out / "model.pt", weights_only=True)
    assert model["lam"] == sel["lam"] and model["feature_layout"]["featurization"]["template"] == "rich-edges"   # conll2000's default
    assert model["feature_layout"]["featurization"]["min_count"] == sel["min_count"]
    printed = capsys.readouterr().out
    assert "selecting lambda on a dev split: 135 fit / 15 dev" in printed and "test chunk F1" in printed


@pytest.mark.parametrize("argv,needle", [
    (["--dataset", "conll2000", "--select-lam", "--lam", "0.1"], "drop --lam"),
    (["--dataset", "ocr-small", "--select-lam"], "select_lam: needs a task with a development split"),
    (["--dataset", "conll2000", "--select-lam", "--solver", "ssg"], "not with torchrun or --solver ssg"),
    (["--dataset", "ocr-small", "--features", "rich"], "features: only supported for"),
    (["--dataset", "scene", "--loss", "hamming"], "loss: only for the chain, segment and tree tasks"),
    (["--dataset", "conll2000", "--features", "w[0] q[1]"], "template item 'q[1]'"),
    (["--dataset", "conll2000", "--min-counts", "1", "2"], "min_counts: a grid of cut-offs is for --select-lam"),
])
def test_bad_selection_and_feature_options_are_refused(argv, needle, tmp_path, capsys):
    extra = ["--train-size", "50"] if argv[1] == "conll2000" else []
    assert main(argv + extra + ["--passes", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert not (tmp_path / "o" / "history.json").exists()


@pytest.mark.long
def test_select_lam_resumes_its_grid_and_its_refit_exactly(tmp_path, capsys, monkeypatch):
    """``--select-lam --checkpoint``: a grid stopped in its second cut-off (here by a failed checkpoint write, which
    ends the grid at that lambda's next gap check and names the last good checkpoint) resumed with ``--resume``
    gives the uninterrupted run's selection table, history and weights; the refit's own checkpoint resumes the
    refit (the grid skipped: selection.json read back)."""
    import errno

    args = ["--dataset", "conll2000", "--train-size", "150", "--select-lam", "--lams", "1e-1", "1e-2", "1e-3",
            "--min-counts", "1", "2", "--passes", "3", "--gap-check", "3", "--checkpoint", "--quiet"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert main([*args, "--out", str(full)]) == 0
    import ssvm_torch.cli.checkpoints as writes_cli
    real, calls = writes_cli.save_checkpoint, []

    def full_disk(path, state, run):
        calls.append(state["min_count"])
        if len(calls) == 5:                          # the second lambda of the second cut-off
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, state, run)
    monkeypatch.setattr(writes_cli, "save_checkpoint", full_disk)
    capsys.readouterr()
    assert main([*args, "--out", str(cut)]) == 2
    err = capsys.readouterr().err
    assert "writing the checkpoint after 2 lambdas at min count 2 failed (No space left on device)" in err
    assert "holds the last good one (taken after 1 lambdas at min count 2)" in err
    assert not (cut / "selection.json").exists() and calls == [1, 1, 1, 2, 2]
    monkeypatch.setattr(writes_cli, "save_checkpoint", real)
    loud = [a for a in args if a != "--quiet"]
    assert main([*loud, "--out", str(cut), "--resume", str(cut / "checkpoint.pt")]) == 0
    printed = capsys.readouterr().out
    assert f"resumed the lambda grid from {cut / 'checkpoint.pt'} at min count 2" in printed
    assert [line.split()[1] for line in printed.splitlines() if line.startswith("  lam ")] == ["0.01", "0.001"]

    def table(run):
        return [{k: v for k, v in r.items() if k != "cumulative_time_s"}
                for r in json.loads((run / "selection.json").read_text())["table"]]

    def history(run):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in json.loads((run / "history.json").read_text())]
    assert table(cut) == table(full) and len(table(full)) == 6
    assert history(cut) == history(full)
    assert torch.equal(torch.load(cut / "model.pt", weights_only=True)["w"],
                       torch.load(full / "model.pt", weights_only=True)["w"])
    # the refit's checkpoint (its last gap check): the grid is skipped, the refit ends where it ended
    assert main([*args, "--out", str(full), "--resume", str(full / "checkpoint.pt")]) == 0
    assert history(full) == history(cut)
