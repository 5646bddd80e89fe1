"""What a block step and a gap pass of the linear semi-Markov SSVM cost on CoNLL-2000 (one CPU thread, float64),
against the chain SSVM on the same sentences and attributes (Sha & Pereira's template, BIO tags):

* ``step``: one BCFW block step (``fw_corner`` + ``fw_move``, the loss-augmented decode, the block gap and the
  move) of the compact semi-Markov store (:class:`ssvm_torch.stores.SegmentDual`), of the chain store's compiled
  path and of its torch path (:class:`ssvm_torch.stores.ChainDual`, ``kernels="numba"`` / ``"torch"``); medians
  over ``--steps`` blocks, the three stores alternated block by block, each at its own point after a warm-up pass
  over the same blocks;
* ``gap_pass``: one exact gap pass over the ``--train-size`` first sentences (medians of ``--repeats``).

``--compare SEG_RUN CHAIN_RUN``: two ``ssvm-train`` run directories (``--dataset conll2000-segments`` and
``--dataset conll2000`` with the same attributes, loss, lambda and passes) scored on the test file side by side:
their chunk F1, the paired bootstrap of the difference over test sentences (benchmarks/bench_conll_deep.py's), and
each run's last record (passes, exact gap, solver seconds; a latent run's, ``--hide-labels``: CCCP's outer steps
and objective).

``--minibatch``: mini-batch BCFW (tau = ``--tau``, ``--passes`` passes, gap sampling) with the joint direction
dense (the store's only one before 2026-12-03) and as the sparse vector of its touched coordinates, side by side
(the two runs alternated, medians of ``--repeats``, their gaps checked equal); lam 0.03, ``--train-size`` sentences.

``--before DIR --commit C``: the semi-Markov store of an earlier commit against this one on the same sentences,
side by side in one process through the calls users make: solver runs (``make_solver(...).run()``, gap sampling,
``--passes`` passes with the exact gap every pass, medians of ``--repeats`` runs, the two versions alternated) of
each step rule in ``--rules`` (FW, pairwise, FW + cache, away; ``minibatch``: mini-batch BCFW at tau = 64;
``cutting-plane``: the 1-slack cutting plane, its constraints as joint segmentations) and the gap pass at the point
the first rule's runs end; torch on one thread, numba on its default threads (recorded). The earlier package is
imported under another name (``git worktree add /tmp/old C && cp -r /tmp/old/ssvm_torch DIR/ssvm_torch_before``).

Usage: python benchmarks/bench_segments_ssvm.py [--train-size 2000] [--steps 600]
       [--out benchmarks/results/segments_ssvm_cpu.json]
       python benchmarks/bench_segments_ssvm.py --compare runs/seg runs/chain [--out ...segments_ssvm_conll.json]
       python benchmarks/bench_segments_ssvm.py --minibatch --train-size 8936 --passes 2 --repeats 3 [--tau 64]
       python benchmarks/bench_segments_ssvm.py --before /tmp/before --commit C [--train-size 8936]
       [--out benchmarks/results/segments_ssvm_versions.json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numba
import torch

from ssvm_torch.stores import make_store
from ssvm_torch.tasks import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commits import add_before_options, before_and_now  # noqa: E402


def stores(train_size: int):
    seg = load_task("conll2000-segments", train_size=train_size, features="sha-pereira")
    chain = load_task("conll2000", train_size=train_size, features="sha-pereira", tags="bio")
    lam = 1.0 / train_size
    out = {"semimarkov": make_store(seg.model, seg.train, lam, kernels="numba"),
           "semimarkov_torch": make_store(seg.model, seg.train, lam, kernels="torch"),
           "chain_numba": make_store(chain.model, chain.train, lam, kernels="numba"),
           "chain_torch": make_store(chain.model, chain.train, lam, kernels="torch")}
    return out, {"semimarkov_d": seg.model.d, "chain_d": chain.model.d, "L": seg.model.L, "K": seg.model.K,
                 "chain_states": chain.model.K}


def step_times(all_stores: dict, blocks: list[int]) -> dict:
    def step(store, i):
        corner = store.fw_corner(i)
        gamma = min(max(corner.gap / (store.lam * corner.sqnorm), 0.0), 1.0) if corner.sqnorm > 0 else 0.0
        store.fw_move(i, corner, gamma)
    for store in all_stores.values():                   # warm-up: compiled kernels, caches, a moved point
        for i in blocks:
            step(store, i)
    times = {k: [] for k in all_stores}
    for i in blocks:
        for name, store in all_stores.items():
            t0 = time.perf_counter()
            step(store, i)
            times[name].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def pass_times(all_stores: dict, repeats: int) -> dict:
    times = {k: [] for k in all_stores}
    for store in all_stores.values():
        store.gap_pass()
    for _ in range(repeats):
        for name, store in all_stores.items():
            t0 = time.perf_counter()
            store.gap_pass()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def test_tags(run: Path) -> tuple[list, list, dict]:
    """(predicted BIO tags of every test sentence, the file's gold tags, the run's last record) of a run directory,
    the task rebuilt from its config.json and decoded at its saved w."""
    from ssvm_torch.constraints import bioes_to_bio
    from ssvm_torch.outputs import load_model
    from ssvm_torch.segments import tags_from_segments
    config = json.loads((run / "config.json").read_text())
    options = {k: config[k] for k in ("features", "min_count", "loss") if config.get(k) is not None}
    if config["dataset"] == "conll2000":
        options["tags"] = config.get("tags") or "bio"
    problem = load_task(config["dataset"], train_size=config.get("train_size"), **options)
    w = load_model(run / "model.pt")["w"].to(torch.float64)
    test = problem.test
    if config["dataset"] == "conll2000-segments":
        pred = problem.model.predict(w, test)
        tags = tags_from_segments(pred, test.lengths, problem.train.meta["segment_labels"])
    else:
        labels = problem.model.predict_ragged(w, test).tolist()
        names = test.meta["tag_names"]
        names = bioes_to_bio(names) if test.meta.get("tag_scheme") == "BIOES" else names
        off = test.offsets.tolist()
        tags = [[names[k] for k in labels[off[i]:off[i + 1]]] for i in range(test.n)]
    last = json.loads((run / "history.json").read_text())[-1]
    keys = ("passes", "gap", "primal", "time_s", "test_f1", "outer", "objective")     # the last two: latent runs
    return tags, test.meta["tags"], {k: last[k] for k in keys if k in last}


def compare(seg_run: Path, chain_run: Path, draws: int) -> dict:
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_conll_deep import chunk_counts, f1_of, paired_bootstrap
    from seqeval.metrics import f1_score
    out = {}
    counts = []
    for name, run in (("semimarkov", seg_run), ("chain", chain_run)):
        tags, gold, last = test_tags(run)
        f1 = 100 * f1_score(gold, tags)
        c = chunk_counts(gold, tags)
        assert abs(f1_of(c) - f1) < 1e-9 and abs(f1 - last["test_f1"]) < 1e-6, (name, f1, last["test_f1"])
        counts.append([c])
        out[name] = {"run": str(run), "test_f1": f1, **last,
                     "config": {k: v for k, v in json.loads((run / "config.json").read_text()).items()
                                if k in ("dataset", "features", "min_count", "loss", "lam", "tags", "constraints")}}
    out["difference"] = paired_bootstrap(counts[0], counts[1], draws)
    return out


def minibatch_times(train_size: int | None, tau: int, passes: float, repeats: int) -> dict:
    """Solver seconds of mini-batch BCFW with the dense and the sparse direction (module docstring)."""
    from ssvm_torch.solvers import Solver, SolverConfig
    task = load_task("conll2000-segments", train_size=train_size, features="sha-pereira")
    times, gaps = {"dense": [], "sparse": []}, {}
    for _ in range(repeats):
        for name in times:
            store = make_store(task.model, task.train, 0.03)
            store.sparse_direction = name == "sparse"
            hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", batch_size=tau, passes=passes,
                                              gap_check=passes, seed=0)).run()
            times[name].append(hist[-1]["time_s"])
            gaps[name] = hist[-1]["gap"]
    if abs(gaps["dense"] - gaps["sparse"]) > 1e-9 * abs(gaps["dense"]):
        raise SystemExit(f"the dense and sparse directions' runs differ: {gaps}")
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"n": task.train.n, "d": task.model.d, "tau": tau, "passes": passes, "repeats": repeats, "seconds": times,
            "median_s": med, "speedup": med["dense"] / med["sparse"], "gap": gaps["sparse"]}


#: the step rules of Osokin et al. 2016 that ``--before`` runs: SolverConfig fields
STEP_RULES = {"fw": {}, "pairwise": {"step": "pairwise"}, "cache": {"cache": True}, "away": {"step": "away"},
              "minibatch": {"batch_size": 64}, "cutting-plane": {"solver": "cutting-plane"}}


def versions(before: Path, commit: str, train_size: int, passes: int, repeats: int, rules: list[str]) -> dict:
    """Solver runs of every step rule in ``rules`` and gap passes, the earlier package (``before``/ssvm_torch_before)
    against this one (module docstring); the two runs' last records must agree (the same trajectory) or the
    figures are refused."""
    os.environ.setdefault("SSVM_TORCH_DATA", str(Path("datasets").resolve()))
    packages = before_and_now(before)
    tasks = {tag: importlib.import_module(f"{pkg.__name__}.tasks").load_task(
        "conll2000-segments", train_size=train_size, features="sha-pereira") for tag, pkg in packages.items()}
    lam = 1.0 / tasks["now"].train.n

    def run(tag, rule):
        pkg, task = packages[tag], tasks[tag]
        store = pkg.make_store(task.model, task.train, lam, kernels="numba")
        config = pkg.SolverConfig(**{"solver": "bcfw", "sampling": "gap", "passes": passes, "gap_check": 1, "seed": 0,
                                     **STEP_RULES[rule]})
        solver = importlib.import_module(f"{pkg.__name__}.solvers").make_solver(store, config)
        t0 = time.perf_counter()
        hist = solver.run()
        return time.perf_counter() - t0, hist[-1], store

    out = {"commit_before": commit, "train_size": tasks["now"].train.n, "passes": passes, "repeats": repeats,
           "torch_threads": 1, "numba_threads": numba.get_num_threads(), "solver_run_s": {}, "solver_speedup": {},
           "last_record": {}}
    for rule in rules:
        runs = {tag: [] for tag in packages}
        for tag in packages:                                 # warm-up: compiled kernels, the feature cache
            run(tag, rule)
        for _ in range(repeats):
            for tag in packages:
                runs[tag].append(run(tag, rule))
        last = {tag: r[-1][1] for tag, r in runs.items()}
        if abs(last["before"]["gap"] - last["now"]["gap"]) > 1e-9 * max(1.0, abs(last["now"]["gap"])):
            raise SystemExit(f"the two versions' {rule} runs differ: {last}")
        solver_s = {tag: statistics.median(t for t, _, _ in r) for tag, r in runs.items()}
        out["solver_run_s"][rule], out["last_record"][rule] = solver_s, last["now"]
        out["solver_speedup"][rule] = solver_s["before"] / solver_s["now"]
        if rule == rules[0]:                                 # the gap pass at the point this rule's runs end
            passes_s = {tag: [] for tag in packages}
            for _ in range(repeats):
                for tag in packages:
                    t0 = time.perf_counter()
                    runs[tag][-1][2].gap_pass()
                    passes_s[tag].append(time.perf_counter() - t0)
            out["gap_pass_s"] = {tag: statistics.median(v) for tag, v in passes_s.items()}
            out["gap_pass_speedup"] = out["gap_pass_s"]["before"] / out["gap_pass_s"]["now"]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="default benchmarks/results/segments_ssvm_cpu.json "
                   "(segments_ssvm_conll.json with --compare)")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("SEG_RUN", "CHAIN_RUN"))
    p.add_argument("--draws", type=int, default=1000)
    add_before_options(p, required=False)
    p.add_argument("--passes", type=int, default=10)
    p.add_argument("--rules", default="fw,pairwise,cache,away", help=f"step rules for --before, of {list(STEP_RULES)}")
    p.add_argument("--minibatch", action="store_true", help="mini-batch BCFW, dense vs sparse direction")
    p.add_argument("--tau", type=int, default=64)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.minibatch:
        result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
                  **minibatch_times(args.train_size, args.tau, args.passes, args.repeats)}
        print(f"mini-batch tau {args.tau}: dense {result['median_s']['dense']:.1f} s, sparse "
              f"{result['median_s']['sparse']:.1f} s: {result['speedup']:.2f}x (medians of {args.repeats})")
        path = Path(args.out or "benchmarks/results/segments_minibatch.json")
        path.write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
        return
    if args.before:
        if not args.commit:
            p.error("--before needs --commit (the earlier package's commit, recorded in the JSON)")
        unknown = sorted(set(args.rules.split(",")) - set(STEP_RULES))
        if unknown:
            p.error(f"--rules: expected names of {list(STEP_RULES)}, got {unknown}")
        result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                  **versions(args.before, args.commit, args.train_size, args.passes, args.repeats,
                           args.rules.split(","))}
        for rule, times in result["solver_run_s"].items():
            print(f"{rule:9s} solver run {times['before']:7.3f} s before, {times['now']:7.3f} s now: "
                  f"{result['solver_speedup'][rule]:.2f}x")
        gp = result["gap_pass_s"]
        print(f"gap pass  {gp['before']:.4f} s before, {gp['now']:.4f} s now: {result['gap_pass_speedup']:.2f}x")
        path = Path(args.out or "benchmarks/results/segments_ssvm_versions.json")
        path.write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
        return
    if args.compare:
        result = compare(*args.compare, args.draws)
        for k in ("semimarkov", "chain"):
            r = result[k]
            solved = (f"gap {r['gap']:.2e} after {r['passes']:.0f} passes" if "gap" in r
                      else f"CCCP objective {r['objective']:.5f} after {r['outer']} outer steps")
            print(f"{k:10s} test F1 {r['test_f1']:.2f}  {solved}, {r['time_s']:.0f} s")
        print("difference (semi-Markov - chain):", result["difference"])
        path = Path(args.out or "benchmarks/results/segments_ssvm_conll.json")
        path.write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
        return
    all_stores, shape = stores(args.train_size)
    blocks = list(range(min(args.steps, args.train_size)))
    step = step_times(all_stores, blocks)
    gap = pass_times(all_stores, args.repeats)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float64", "train_size": args.train_size, "steps": len(blocks), **shape,
              "step_ms": step, "gap_pass_s": gap,
              "step_ratio_vs_chain_numba": step["semimarkov"] / step["chain_numba"],
              "step_ratio_vs_chain_torch": step["semimarkov"] / step["chain_torch"]}
    for k, v in step.items():
        print(f"block step {k:12s} {v:8.3f} ms   gap pass {gap[k]:7.3f} s")
    path = Path(args.out or "benchmarks/results/segments_ssvm_cpu.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
