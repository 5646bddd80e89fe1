"""What the constituency SSVM costs on UD English-EWT's phrase structures (``--dataset ud-ewt-spans``; one CPU thread,
float64), and what a trained run scored:

* ``step``: one BCFW block step (``fw_corner`` + ``fw_move``: the fencepost potentials, the loss-augmented CKY, the
  block gap and the move) of the compact store (:class:`ssvm_torch.stores.SpanDual`) with its compiled steps
  (``kernels="numba"``, stores/span_kernels.py) and with its torch path (``kernels="torch"``, the code a GPU runs),
  the two stores alternated block by block, each at its own point after a warm-up pass over the same blocks;
  medians over ``--steps`` blocks;
* ``gap_pass``: one exact gap pass over the training sentences with each path (medians of ``--repeats``);
* ``state``: the bytes of the store's block state against the n dense d-vectors of the generic store.

``--before DIR --commit C``: an earlier package against this one, side by side in one process through the calls
users make, the two alternated in every repeat (medians of ``--repeats``): a BCFW run with gap sampling and the
exact gap every pass (``Solver(...).run()``, ``--passes`` passes, ``--train-size`` sentences; the two runs' gaps
must agree), and the constituency layer's structured hinge (``span_hinge``, forward and backward, labeled float32
scores (B, n, L) = (32, 40, 18)). The earlier package is imported under another name (``git worktree add /tmp/old
C && cp -r /tmp/old/ssvm_torch DIR/ssvm_torch_before``).

``--runs DIR``: an ``ssvm-train --select-lam`` run directory summarized (each lambda's dev F1 and gap, the refit's
test F1, passes and seconds) into the JSON beside the timings.

Usage: python benchmarks/bench_span_ssvm.py [--steps 2000] [--repeats 3] [--runs /path/select]
       [--out benchmarks/results/span_ssvm_cpu.json]
       python benchmarks/bench_span_ssvm.py --before /tmp/before --commit C [--train-size 2000] [--passes 3]
       [--out benchmarks/results/span_ssvm_versions.json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numba
import torch

from ssvm_torch import make_store
from ssvm_torch.tasks import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store_versions import timed_run  # noqa: E402
from commits import add_before_options, before_and_now  # noqa: E402


def steps(stores: dict, blocks: list) -> dict:
    """Seconds of each block step of each store, the stores alternated block by block."""
    out = {k: [] for k in stores}
    for i in blocks:
        for name, store in stores.items():
            t0 = time.perf_counter()
            corner = store.fw_corner(i)
            if corner.sqnorm > 0 and corner.gap > 0:
                gamma = min(1.0, corner.gap / (store.lam * corner.sqnorm))
                store.fw_move(i, corner, gamma)
            out[name].append(time.perf_counter() - t0)
    return out


def summarize_runs(run: Path) -> dict:
    """The select-lam run's grid (dev F1 and gap per lambda) and its refit (test F1, gap, passes, seconds)."""
    out = {}
    sel = run / "selection.json"
    if sel.exists():
        out["selection"] = json.loads(sel.read_text())
    hist = json.loads((run / "history.json").read_text())
    last = hist[-1]
    out["refit"] = {k: last.get(k) for k in ("passes", "gap", "primal", "dual", "test_f1", "test_unlabeled_f1",
                                             "test_error", "test_position_error", "train_error", "time_s")}
    out["config"] = json.loads((run / "config.json").read_text())
    return out


def versions(before: Path, commit: str, train_size: int, passes: int, repeats: int) -> dict:
    """The earlier package (``before``/ssvm_torch_before) against this one: solver runs and the layer's hinge."""
    packages = before_and_now(before)
    tasks = {k: importlib.import_module(f"{p.__name__}.tasks").load_task("ud-ewt-spans", train_size=train_size)
             for k, p in packages.items()}
    hinges = {k: importlib.import_module(f"{p.__name__}.spans").span_hinge for k, p in packages.items()}
    g = torch.Generator().manual_seed(0)
    B, n, L = 32, 40, 18
    S = torch.randn(B, n + 1, n + 1, L, generator=g)
    trees = [[(i, j) for i, j in binary_tree(0, n, g)] for _ in range(B)]
    gold = torch.full((B, n + 1, n + 1), -1, dtype=torch.int64)
    for b, tree in enumerate(trees):
        for i, j in tree:
            gold[b, i, j] = int(torch.randint(L, (1,), generator=g))
    solver_s, hinge_s, gaps = {k: [] for k in packages}, {k: [] for k in packages}, {}
    for r in range(repeats + 1):                        # repeat 0 warms up (numba's compiles): not recorded
        for tag, pkg in packages.items():
            elapsed, gaps[tag] = timed_run(pkg, tasks[tag], 1.0 / tasks[tag].n_train, passes)
            if r:
                solver_s[tag].append(elapsed)

            def hinge():
                x = S.clone().requires_grad_(True)
                hinges[tag](x, gold).sum().backward()
            hinge()
            t0 = time.perf_counter()
            for _ in range(5):
                hinge()
            if r:
                hinge_s[tag].append((time.perf_counter() - t0) / 5)
    if abs(gaps["before"] - gaps["now"]) > 1e-9 * max(1.0, abs(gaps["now"])):
        raise SystemExit(f"the two versions' runs end at different gaps: {gaps}")
    med = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in (("solver_s", solver_s),
                                                                                 ("hinge_s", hinge_s))}
    return {"commit_before": commit, "train_size": tasks["now"].n_train, "passes": passes, "repeats": repeats,
            "gap": gaps["now"], **med, "solver_speedup": med["solver_s"]["before"] / med["solver_s"]["now"],
            "hinge_speedup": med["hinge_s"]["before"] / med["hinge_s"]["now"],
            "solver_s_all": solver_s, "hinge_s_all": hinge_s}


def binary_tree(i: int, j: int, g: torch.Generator) -> list:
    """The spans of a random binary tree over fenceposts i..j."""
    if j - i == 1:
        return [(i, j)]
    k = int(torch.randint(i + 1, j, (1,), generator=g))
    return [(i, j)] + binary_tree(i, k, g) + binary_tree(k, j, g)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--train-size", type=int, default=None)
    p.add_argument("--runs", default=None, help="an ssvm-train --select-lam run directory to summarize")
    add_before_options(p, required=False)
    p.add_argument("--passes", type=int, default=3, help="--before: BCFW passes per solver run")
    p.add_argument("--out", default="benchmarks/results/span_ssvm_cpu.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    if args.before:
        if not args.commit:
            p.error("--before needs --commit (the earlier package's commit, recorded in the JSON)")
        result = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__},
                  **versions(args.before, args.commit, args.train_size or 2000, args.passes, args.repeats)}
        print(json.dumps({k: v for k, v in result.items() if not k.endswith("_all")}, indent=1))
        Path(args.out).write_text(json.dumps(result, indent=1))
        return
    problem = load_task("ud-ewt-spans", train_size=args.train_size)
    train, lam = problem.train, 1.0 / problem.train.n
    t0 = time.perf_counter()
    stores = {"numba": make_store(problem.model, train, lam, kernels="numba")}
    build = time.perf_counter() - t0
    stores["torch"] = make_store(problem.model, train, lam, kernels="torch")
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randperm(train.n, generator=gen)[:args.steps].tolist()
    steps(stores, blocks)                                                 # warm-up: every store leaves w = 0
    timed = steps(stores, blocks)
    gap = {k: [] for k in stores}
    for _ in range(args.repeats):
        for name, store in stores.items():
            t0 = time.perf_counter()
            store.gap_pass()
            gap[name].append(time.perf_counter() - t0)
    store = stores["numba"]
    state = sum(getattr(store, k).numel() * getattr(store, k).element_size() for k in store.STATE_TENSORS)
    gram = store.G.numel() * store.G.element_size()
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1},
        "data": {"sentences": train.n, "words": int(train.lengths.sum()), "d": problem.model.d,
                 "fencepost_features": problem.model.F, "labels": problem.model.L},
        "store_build_s": build,
        "step_ms": {k: 1e3 * statistics.median(v) for k, v in timed.items()},
        "step_ms_all": {k: [1e3 * x for x in v] for k, v in timed.items()},
        "gap_pass_s": {k: statistics.median(v) for k, v in gap.items()},
        "gap_pass_s_all": gap,
        "state_bytes": {"block_state": state, "gram": gram, "dense_store": train.n * problem.model.d * 8},
    }
    if args.runs:
        result["run"] = summarize_runs(Path(args.runs))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_all")}, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
