"""The audit of the tree and parser surfaces (issue 75): interrupted runs keep their work and say how to resume
(--select-lam's grid and refit, the neural fits, a second Ctrl-C, SIGTERM), and every other case ends in one
line naming the field (parser sizes, the tree functions' flags and devices, the layer's cost, the exchanges a
tree task can run, resumes across ranks, multi-label scores)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.cli.train import main as train_main
from ssvm_torch.deep.__main__ import main as deep_main
from ssvm_torch.errors import SSVMInputError, run_cli
from ssvm_torch.nn import DependencyTree
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.trees import dependency_decode, dependency_hinge, is_tree
from test_faults import _as_from_a_terminal
from test_ud_deep import RECIPES, TINY

CONLL_GRID = ["--dataset", "conll2000", "--train-size", "150", "--select-lam", "--lams", "1e-1", "1e-2", "1e-3",
              "--passes", "3", "--gap-check", "1"]


def test_ctrl_c_in_the_lambda_grid_keeps_the_rows_it_finished(tmp_path, monkeypatch, capsys):
    """Ctrl-C as the second lambda of a three-lambda grid starts: that lambda stops at its first gap check (stop
    reason "interrupted"), the grid ends, selection.json holds the two rows marked incomplete, one line says so
    and names --lam, exit 130, no lock left."""
    import ssvm_torch.path as path
    real, calls = path._solve, []

    def solve(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)                 # the run's handler sets its flag
        return real(*a, **k)
    monkeypatch.setattr(path, "_solve", solve)
    out = tmp_path / "run"
    assert train_main(CONLL_GRID + ["--passes", "50", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ssvm-train: interrupted in the lambda grid after 2 of 3 rows (the last stopped early")
    assert "--lam" in err[-1] and "selection.json" in err[-1] and "Traceback" not in "\n".join(err)
    sel = json.loads((out / "selection.json").read_text())
    assert sel["complete"] is False and len(sel["table"]) == 2 and sel["table"][-1]["stop_reason"] == "interrupted"
    assert sel["table"][-1]["passes"] < 50 and not (out / "model.pt").exists()
    assert not (out / ".ssvm-run.lock").exists()


def test_sigterm_after_the_grid_stops_before_the_refit_and_names_the_lambda(tmp_path, monkeypatch, capsys):
    """SIGTERM while the refit's data loads (after the grid): selection.json is written, no refit starts, the
    line names --lam / --min-count, exit 143, no stale lock."""
    import ssvm_torch.cli.train as train_cli
    real, calls = train_cli.load_task, []

    def loading(*a, **k):
        calls.append(1)
        if len(calls) == 1:                                    # the refit's (the grid loads its split in cli/grid.py)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)
    monkeypatch.setattr(train_cli, "load_task", loading)
    out = tmp_path / "run"
    assert train_main(CONLL_GRID[:6] + ["1e-1", "--passes", "2", "--gap-check", "1", "--out", str(out)]) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]
    sel = json.loads((out / "selection.json").read_text())
    assert last.startswith("ssvm-train: interrupted after the lambda grid, before the refit")
    assert f"--lam {sel['lam']:g} --min-count {sel['min_count']}" in last
    assert "complete" not in sel and not (out / "model.pt").exists() and not (out / ".ssvm-run.lock").exists()


def test_a_second_ctrl_c_lists_what_the_run_had_written(tmp_path, capsys):
    """A Ctrl-C that lands after a run wrote its files (the second of two, 0.3 s apart, during the final writes):
    the line names the files, each whole, instead of "before the run had results to write"."""
    written = [tmp_path / "history.json", tmp_path / "model.pt"]

    def run(args):
        for f in written:
            atomic_write_bytes(f, b"{}")
        raise KeyboardInterrupt
    assert run_cli("ssvm-train", run, None) == 130
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "interrupted (Ctrl-C); it had written" in line
    assert all(str(f) in line for f in written) and "whole" in line

    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert run_cli("ssvm-train", terminated, None) == 143
    assert capsys.readouterr().err.startswith("ssvm-train: interrupted (SIGTERM)")


def test_a_late_sigterm_after_a_dead_peer_keeps_the_ranks_one_line(capsys):
    """torchrun's agent sends SIGTERM to the surviving ranks once one has died, which can land while a rank is
    already stopping on its DistributedError: while that exception unwinds (here: in a finally block) or while its
    line is being written (here: inside str(e), as the except clause formats it). Either way the rank ends with the
    DistributedError's one line and exit 1: no Terminated traceback (the slow tier's kill-rank-0 case caught one),
    no "interrupted (SIGTERM)" line instead. SIGTERM's handler is the previous one afterwards."""
    from ssvm_torch.errors import DistributedError

    class LateSignal(DistributedError):
        def __str__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            return "distributed: a collective failed (peer closed); another rank died"

    def while_unwinding(args):
        try:
            raise DistributedError("distributed: a collective failed (peer closed); another rank died")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    def while_writing(args):
        raise LateSignal()

    before = signal.getsignal(signal.SIGTERM)
    for fn in (while_unwinding, while_writing):
        assert run_cli("ssvm-train", fn, None) == 1
        err = capsys.readouterr().err
        assert err == "ssvm-train: distributed: a collective failed (peer closed); another rank died\n"
        assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["ctrl-c", "sigterm"])
def test_an_interrupted_neural_fit_keeps_its_best_epoch_and_resumes(tmp_path, sig):
    """The parser's fit stopped after its first epoch: history.json, parser.pt (the best epoch's weights) and a
    results.json that says "interrupted" are written, the last line gives the epoch, the best dev LAS, the
    checkpoint and the command, exit 130 / 143; that command resumes the run to its end."""
    root = tmp_path / "fit"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "ssvm_torch.deep", "fit", "--config", str(RECIPES / "ud_deep_hinge.yaml"), *TINY,
           "--trainer.max_epochs", "40", "--trainer.default_root_dir", str(root)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_as_from_a_terminal)
    for line in proc.stdout:                                   # the first epoch has ended
        if line.startswith("epoch 0:"):
            break
    deadline = time.time() + 120                               # and its checkpoint is written: epoch 1 under way
    while not list(root.glob("lightning_logs/version_*/checkpoints/last.ckpt")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"python -m ssvm_torch.deep: interrupted ({'Ctrl-C' if sig == signal.SIGINT else 'SIGTERM'})"
                           " in epoch ") and "best dev LAS" in last and "resume with python -m ssvm_torch.deep fit" in last
    run = sorted(root.glob("lightning_logs/version_*"))[-1]
    results = json.loads((run / "results.json").read_text())
    assert results["interrupted"] is True and "test_las" not in results
    assert json.loads((run / "history.json").read_text()) and (run / "parser.pt").is_file()
    config, ckpt = last.split("--config ")[1].split(" --ckpt_path ")
    ckpt = ckpt.split(" ")[0]
    assert deep_main(["fit", "--config", config, "--ckpt_path", ckpt, "--trainer.max_epochs", "2"]) == 0
    assert "test_las" in json.loads((run / "results.json").read_text())


@pytest.mark.parametrize("args, expected", [
    (["--model.upos_dim", "0"], "upos_dim: expected an int >= 1"),
    (["--model.word_dim", "0"], "word_dim: expected an int >= 1"),
    (["--model.rel_dim", "0"], "rel_dim: expected an int >= 1"),
    (["--model.hidden", "0"], "hidden: expected an int >= 1"),
    (["--model.layers", "0"], "layers: expected an int >= 1"),
    (["--model.arc_dim", "-5"], "arc_dim: expected an int >= 1"),
    (["--model.char_filters", "0"], "char_filters: expected an int >= 1")])
def test_parser_sizes_below_one_are_refused_in_one_line(tmp_path, capsys, args, expected):
    base = ["fit", "--config", str(RECIPES / "ud_deep_crf.yaml"), *TINY, "--trainer.default_root_dir", str(tmp_path)]
    assert deep_main(base + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not list(tmp_path.glob("**/parser.pt"))


def test_the_tree_functions_refuse_what_they_cannot_mean():
    """Flags given as strings (any string is truthy), lengths beyond N - 1, meta tensors, a cost tensor for the
    layer: each refused naming the field."""
    S = torch.zeros(2, 5, 5)
    gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 0, 1, 2, 3]])
    with pytest.raises(SSVMInputError, match="projective: expected True or False, got 'False'"):
        dependency_decode(S, projective="False")
    with pytest.raises(SSVMInputError, match="multiroot: expected True or False, got 'no'"):
        dependency_hinge(S, gold, multiroot="no")
    with pytest.raises(SSVMInputError, match=r"lengths: expected values in \[0, 4\]"):
        is_tree(gold, torch.tensor([4, 7]))
    with pytest.raises(SSVMInputError, match="arc_scores: expected a tensor with data"):
        dependency_decode(torch.zeros(2, 5, 5, device="meta"))
    with pytest.raises(SSVMInputError, match="heads: expected a tensor with data"):
        dependency_hinge(S, gold.to("meta"))
    with pytest.raises(SSVMInputError, match="lengths: expected a tensor with data"):
        dependency_decode(S, lengths=torch.tensor([4, 4], device="meta"))
    with pytest.raises(SSVMInputError, match=r"cost: expected 'hamming', 'normalized' or a number for the layer .*"
                                             r"got a tensor of shape \(4,\)"):
        DependencyTree(cost=torch.ones(4))


def test_the_layer_under_torch_compile_and_its_checks_outside():
    """Under torch.compile the value checks are skipped in the graph: gold heads with a cycle give a finite
    loss. check_inputs, called outside the compiled region, refuses them by name."""
    layer = DependencyTree(loss="crf")
    S = torch.randn(1, 4, 4)
    cycle = torch.tensor([[-1, 2, 1, 0]])                       # words 1 and 2 head each other
    compiled = torch.compile(lambda s, h: layer(s, h), backend="eager", fullgraph=False)
    assert torch.isfinite(compiled(S, cycle))
    with pytest.raises(SSVMInputError, match="heads: row 0 is not a projective single-root dependency tree"):
        layer.check_inputs(S, cycle)
    layer.check_inputs(S, torch.tensor([[-1, 2, 0, 2]]))       # a tree: no error


def test_an_empty_feature_template_is_refused(tmp_path, capsys):
    assert train_main(["--dataset", "ud-ewt", "--features", "", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ssvm-train: error: features: expected a name (or leave the option out for the task's default), " \
                  "got an empty string"
    assert not (tmp_path / "x").exists()


def test_exchange_advice_names_what_runs_a_tree_task(tmp_path, capsys):
    """One process: columns refused for a tree task with the advice that works, gather / allreduce refused as
    changing nothing for it (they were ignored). Under torchrun (the check called as rank 0 of 2 sees it): the
    block shards and columns refused with the same advice, shared / rounds refusing the solver options and
    (shared) dtypes and kernels they cannot run, by their own name."""
    from ssvm_torch.distributed import TREES_RUN, check_exchange
    from ssvm_torch.solvers.config import SolverConfig
    from ssvm_torch.tasks import load_task
    assert train_main(["--dataset", "ud-ewt", "--train-size", "50", "--features", "basic", "--exchange", "columns",
                       "--out", str(tmp_path / "columns")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dependency-tree task: run it in one process" in err, err
    task = load_task("ud-ewt", train_size=50, features="basic")
    for exchange in ("gather", "allreduce"):
        with pytest.raises(SSVMInputError, match=f"exchange: '{exchange}' .*which no exchange changes: drop --exchange"):
            check_exchange(exchange, exchange, task, size=1)
    one = SolverConfig(solver="bcfw", batch_size=1)
    four = SolverConfig(solver="bcfw", batch_size=4)
    for exchange in ("gather", "allreduce", "auto", "columns"):
        with pytest.raises(SSVMInputError, match="exchange: .*" + TREES_RUN.replace("(", r"\(").replace(")", r"\)")):
            check_exchange(exchange, exchange, task, config=four, size=2)
    for kw, said in ((dict(batch_size=4), "--batch-size 4"), (dict(step="pairwise"), "--step pairwise"),
                     (dict(averaging=True), "--averaging"), (dict(solver="ssg"), "--solver ssg"),
                     (dict(solver="fw"), "--solver fw")):
        for exchange in ("shared", "rounds"):
            with pytest.raises(SSVMInputError, match=f"exchange: '{exchange}' runs BCFW with batch size 1.*{said}"):
                check_exchange(exchange, exchange, task, config=SolverConfig(**{"solver": "bcfw", **kw}), size=2)
    with pytest.raises(SSVMInputError, match="exchange: 'shared' steps the compiled CPU kernels .*--dtype float32"):
        check_exchange("shared", "shared", task, dtype=torch.float32, config=one, size=2)
    with pytest.raises(SSVMInputError, match="exchange: 'shared' steps .*--kernels torch: drop it, or use --exchange rounds"):
        check_exchange("shared", "shared", task, kernels="torch", config=one, size=2)
    check_exchange("shared", "shared", task, config=one, size=2)        # what runs: no error
    check_exchange("rounds", "rounds", task, config=one, size=2)


def test_resuming_across_ranks_or_exchanges_says_both_sides(tmp_path):
    ck = tmp_path / "checkpoint.pt"
    run = {"dataset": "ud-ewt", "lam": 0.01, "world_size": 2, "exchange": "shared"}
    save_checkpoint(ck, {"x": torch.zeros(1)}, run)
    for other, said in (({"world_size": 1, "exchange": "none"}, "written by 2 ranks with exchange shared; this run has "
                                                                  "1 rank with exchange none"),
                        ({"exchange": "rounds", "round_steps": 20}, "this run has 2 ranks with exchange rounds, 20 steps "
                                                                     "per round")):
        with pytest.raises(SSVMInputError, match=said):
            load_checkpoint(ck, {**run, **other})
    assert load_checkpoint(ck, run) == {"x": torch.zeros(1)}


def test_multilabel_score_refuses_what_fit_refuses():
    from ssvm_torch import MultiLabelSSVM
    rng = np.random.default_rng(0)
    X, Y = rng.random((20, 4)), (rng.random((20, 3)) < 0.5).astype(int)
    est = MultiLabelSSVM(passes=2).fit(X, Y)
    with pytest.raises(SSVMInputError, match=r"y: expected entries in \{0, 1\}.*got \[2\]"):
        est.score(X, Y * 2)


@pytest.mark.slow
def test_sigterm_to_one_rank_of_a_shared_exchange_run_lets_rank_0_write(tmp_path):
    """torchrun --nproc-per-node 2 --exchange shared on ud-ewt, SIGTERM to rank 1: the ranks agree to stop, rank 0
    writes history.json, model.pt and test_predictions.json before any rank exits (the launcher ends the others
    once one exits with a failure code), each rank ends in one line, exit 143, no stale lock."""
    from test_distributed import _torchrun_ranks, free_port
    out = tmp_path / "run"
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                             str(free_port()), "-m", "ssvm_torch.cli.train", "--dataset", "ud-ewt", "--train-size",
                             "300", "--features", "basic", "--exchange", "shared", "--passes", "100000",
                             "--gap-check", "1", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        for line in proc.stdout:                                 # the first gap check after the start
            if line.startswith("pass") and not line.startswith("pass     0.0"):
                break
        ranks = _torchrun_ranks(proc.pid)
        os.kill(ranks[1], signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    ours = [line for line in stderr.splitlines() if line.startswith("ssvm-train: ") and "interrupted at" in line]
    assert len(ours) == 2 and any("wrote" in line and "test_predictions.json" in line for line in ours), stderr[-3000:]
    assert (out / "test_predictions.json").is_file() and (out / "model.pt").is_file()
    assert proc.returncode != 0 and "exitcode  : 143" in stderr and "exitcode  : 130" not in stderr     # both ranks
    assert not (out / ".ssvm-run.lock").exists()


@pytest.mark.parametrize("script", ["ssvm-deep", "ssvm-parse"])
def test_ctrl_c_while_a_neural_command_starts_is_one_line(tmp_path, script):
    """The neural commands' console scripts (ssvm-deep = python -m ssvm_torch.deep, ssvm-parse = python -m
    ssvm_torch.deep.ud_parse) import inside the same guard as ssvm-train: SIGINT during the imports ends in
    one line, exit 130, no traceback."""
    path = Path(sys.executable).parent / script
    if not path.is_file():
        pytest.skip("the console script is not installed in this environment")
    args = (["fit", "--config", str(RECIPES / "ud_deep_crf.yaml")] if script == "ssvm-deep"
            else ["--model", str(tmp_path / "parser.pt"), "--input", str(tmp_path / "in"), "--output",
                  str(tmp_path / "out")])
    proc = subprocess.Popen([str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)
    time.sleep(0.6)                                           # imports take seconds; the guard is in place at once
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(f"{script}: interrupted (Ctrl-C)")
