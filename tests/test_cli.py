"""ssvm-train end to end on OCR-small: outputs follow the contract, bad options fail clearly,
--checkpoint/--resume continues a run exactly."""
import json
import subprocess
import sys

import pytest
import torch

from ssvm_torch.cli.train import main

KEYS = {"passes", "oracle_calls", "time_s", "primal", "dual", "gap", "gap_estimate", "train_error", "test_error"}


def test_train_cli_writes_history_and_model(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--dataset", "ocr-small", "--lam", "0.01", "--passes", "6", "--gap-check", "2",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "exact duality gap:" in text and "test error:" in text
    hist = json.loads((out / "history.json").read_text())
    assert len(hist) == 3 and all(KEYS <= set(r) for r in hist)
    assert [r["passes"] for r in hist] == [0.0, 3.0, 6.0]
    assert hist[-1]["gap"] < hist[0]["gap"] and hist[-1]["gap"] == pytest.approx(hist[-1]["primal"] - hist[-1]["dual"])
    assert hist[-1]["test_error"] < 0.5
    model = torch.load(out / "model.pt")
    assert model["w"].dtype == torch.float64 and model["w"].shape == (4082,)
    assert model["lam"] == 0.01 and model["dataset"] == "ocr-small"
    assert model["feature_layout"]["d"] == 4082 and model["feature_layout"]["transition"] == [3406, 4082]


def test_resume_continues_exactly(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["--dataset", "ocr-small", "--lam", "0.01", "--gap-check", "1", "--seed", "3", "--quiet"]
    assert main(common + ["--passes", "6", "--out", str(a)]) == 0
    assert main(common + ["--passes", "2", "--out", str(b), "--checkpoint"]) == 0
    assert (b / "checkpoint.pt").is_file() and not (b / "checkpoint.pt.tmp").exists()
    assert main(common + ["--passes", "6", "--out", str(b), "--resume", str(b / "checkpoint.pt")]) == 0
    ha = json.loads((a / "history.json").read_text())
    hb = json.loads((b / "history.json").read_text())
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]
    assert strip(ha) == strip(hb)
    assert torch.equal(torch.load(a / "model.pt")["w"], torch.load(b / "model.pt")["w"])


@pytest.mark.parametrize("every", [3, 0])
def test_eval_every_thins_the_records_not_the_run(tmp_path, every):
    """--eval-every k: the same trajectory and model as evaluating every check; the errors only in the records
    whose index is a multiple of k (none for 0) and in the last, equal to the full run's there."""
    common = ["--dataset", "ocr-small", "--lam", "0.01", "--gap-check", "1", "--passes", "14", "--seed", "2", "--quiet"]
    assert main(common + ["--out", str(tmp_path / "full")]) == 0
    assert main(common + ["--out", str(tmp_path / "thin"), "--eval-every", str(every)]) == 0
    full, thin = (json.loads((tmp_path / r / "history.json").read_text()) for r in ("full", "thin"))
    assert len(full) == len(thin) == 8
    evaluated = [i for i, r in enumerate(thin) if "test_error" in r]
    assert evaluated == ([0, 3, 6, 7] if every == 3 else [7])
    for i, (a, b) in enumerate(zip(full, thin)):
        a = {k: v for k, v in a.items() if k != "time_s"}
        b = {k: v for k, v in b.items() if k != "time_s"}
        assert (b == a) if i in evaluated else (b == {k: v for k, v in a.items() if not k.startswith(("train_", "test_"))})
    assert torch.equal(torch.load(tmp_path / "full" / "model.pt")["w"], torch.load(tmp_path / "thin" / "model.pt")["w"])


@pytest.mark.parametrize("argv,needle", [
    (["--dataset", "mnist"], "dataset: expected one of"),
    (["--lam", "0"], "lam: expected a finite number > 0"),
    (["--lam", "-1"], "lam: expected a finite number > 0"),
    (["--gap-check", "0"], "gap_check: expected a finite number > 0"),
    (["--resume", "/nonexistent/ck.pt"], "resume: expected a checkpoint file"),
    (["--device", "tpu:x"], "device: expected a torch device"),
    (["--dataset", "conll2000", "--train-size", "0"], "train_size: expected an int in [1, 8936]"),
    (["--max-cache", "0", "--cache"], "max_cache: expected an int >= 1"),
    (["--eval-every", "-1"], "eval_every: expected an int >= 0"),
])
def test_cli_bad_input(tmp_path, capsys, argv, needle):
    assert main(argv + ["--passes", "1", "--out", str(tmp_path)]) == 2
    assert needle in capsys.readouterr().err


def test_module_entry_point_help():
    r = subprocess.run([sys.executable, "-m", "ssvm_torch.train", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--gap-threshold" in r.stdout


@pytest.mark.long
def test_the_commands_import_only_what_they_use():
    """ssvm-train's and ssvm-parse's modules load neither Lightning (ssvm-parse parses text with a saved network)
    nor scipy's solvers and sparse matrices (imported where a model uses them): every command starts without
    their seconds of imports (benchmarks/results/startup_commits.json)."""
    code = ("import sys, ssvm_torch.cli.train, ssvm_torch.deep.ud_parse; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torchmetrics') "
            "or m.startswith(('scipy.optimize', 'scipy.sparse', 'scipy.spatial', 'scipy.cluster')))); "
            # ssvm-deep still knows its modules by their short names (ssvm_torch.deep's names load on first use)
            "from ssvm_torch.deep.__main__ import main; "
            "sys.exit(main(['fit', '--model', 'UDParser', '--print_config']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "[]", r.stdout[:500] + r.stderr[-2000:]
    assert "class_path: ssvm_torch.deep.UDParser" in r.stdout


def test_cli_variants(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["--dataset", "ocr-small", "--lam", "0.1", "--passes", "4", "--gap-check", "2", "--step", "best",
                 "--cache", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cache hit rate" in text
    hist = json.loads((out / "history.json").read_text())
    assert {"cache_hit_rate", "pairwise_steps", "away_steps", "drop_steps"} <= set(hist[-1])
    assert main(["--solver", "fw", "--step", "pairwise", "--passes", "1", "--out", str(out)]) == 2
    assert "step: expected 'fw' without cache" in capsys.readouterr().err


@pytest.mark.parametrize("dataset,needle", [("scene", "Hamming loss"), ("ocr-letters", "0/1 error per letter")])
def test_cli_flat_datasets(tmp_path, capsys, dataset, needle):
    out = tmp_path / dataset
    assert main(["--dataset", dataset, "--lam", "0.01", "--passes", "2", "--gap-check", "1", "--out", str(out)]) == 0
    assert needle in capsys.readouterr().out
    hist = json.loads((out / "history.json").read_text())
    assert KEYS <= set(hist[-1]) and hist[-1]["gap"] < hist[0]["gap"]
    model = torch.load(out / "model.pt")
    assert model["w"].shape == (model["feature_layout"]["d"],) and model["dataset"] == dataset


@pytest.mark.parametrize("extra", [[], ["--unary-only"], ["--step", "best", "--cache"], ["--solver", "ssg"]])
def test_cli_segmentation(tmp_path, capsys, extra):
    out = tmp_path / "seg"
    assert main(["--dataset", "segmentation-synth", "--train-size", "30", "--lam", "0.01", "--passes", "3",
                 "--gap-check", "1", "--out", str(out)] + extra) == 0
    assert "class-balanced Hamming loss" in capsys.readouterr().out
    hist = json.loads((out / "history.json").read_text())
    assert KEYS <= set(hist[-1]) and hist[-1]["test_error"] < 0.5
    model = torch.load(out / "model.pt")
    layout = model["feature_layout"]
    assert model["w"].shape == (layout["d"],) and (layout["pairwise"] is None) == ("--unary-only" in extra)
    if layout["pairwise"]:
        assert bool((model["w"][layout["pairwise"][0]:] >= 0).all())


def test_cli_segmentation_refuses_averaging(tmp_path, capsys):
    assert main(["--dataset", "segmentation-synth", "--averaging", "--passes", "1", "--out", str(tmp_path)]) == 2
    assert "averaging: not supported with box constraints" in capsys.readouterr().err
    assert main(["--dataset", "scene", "--unary-only", "--passes", "1", "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("module", ["ssvm_torch.cli.train", "ssvm_torch.cli.path"])
def test_every_option_has_help_and_default(module):
    import importlib
    import re
    parser = importlib.import_module(module).build_parser()
    assert parser.description and parser.description.endswith(".") and "``" not in parser.description
    text = parser.format_help().split("options:", 1)[1]
    entries = re.split(r"\n(?=  -)", text.strip("\n"))
    assert len(entries) >= 15
    for entry in entries:
        first, *rest = entry.splitlines()
        described = re.search(r"\S\s{2,}\S", first.strip()) or any(line.strip() for line in rest)
        assert described, f"{module}: {first.strip()} has no help text"
        if "(default: None)" in entry:                          # a None default is explained
            assert "None = " in " ".join(entry.split()), f"{module}: {first.strip()} does not say what None means"


@pytest.mark.parametrize("solver", ["eg", "deg", "cutting-plane"])
def test_cli_other_solvers_write_the_same_records(tmp_path, capsys, solver):
    from ssvm_torch import load_task
    out = tmp_path / solver
    assert main(["--dataset", "ocr-small", "--lam", "0.01", "--solver", solver, "--sampling", "perm", "--passes", "4",
                 "--gap-check", "2", "--out", str(out)]) == 0
    hist = json.loads((out / "history.json").read_text())
    assert all(KEYS <= set(r) for r in hist) and [r["passes"] for r in hist] == [0.0, 2.0, 4.0]
    assert hist[-1]["gap"] == pytest.approx(hist[-1]["primal"] - hist[-1]["dual"])
    w = torch.load(out / "model.pt")["w"]
    task = load_task("ocr-small")
    d = task.store(0.01)
    d.w.copy_(w)
    assert d.primal(d.gap_pass().H) == pytest.approx(hist[-1]["primal"], rel=1e-10)     # primal is model.pt's


def test_the_commands_return_freed_memory_on_glibc():
    """ssvm-train / ssvm-path fix glibc's mmap threshold (cli/entry.py): large temporaries go back to
    the system when freed instead of fragmenting the heap."""
    import platform
    from ssvm_torch.cli.entry import return_freed_memory
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert return_freed_memory() is True


@pytest.mark.parametrize("solver, shown", [("bcfw", "(gap sampling)"), ("ssg", "(uniform sampling)"),
                                           ("eg", "(gap sampling)"), ("deg", None), ("cutting-plane", None),
                                           ("fw", None)])
def test_header_names_the_sampling_the_solver_runs(tmp_path, capsys, solver, shown):
    """The run's header names the block sampling the solver runs (SolverConfig.block_sampling): none for the batch
    solvers, uniform for SSG asked for gap sampling (its steps leave no block gaps), the asked one otherwise."""
    assert main(["--dataset", "ocr-small", "--lam", "0.01", "--solver", solver, "--sampling", "gap", "--passes", "1",
                 "--gap-check", "1", "--out", str(tmp_path / solver)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "solver = " in line)
    if shown is None:
        assert "sampling" not in header, header
    else:
        assert shown in header, header
