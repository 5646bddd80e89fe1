"""CoNLL-2000 at full scale: templates with honest lambda selection, CRFsuite side by side, and the seed-000 study.

  select    for each template of --templates (sha-pereira, rich, or template strings): featurization
            seconds (cold and cached), lambda chosen on the dev split (the last 10% of the training
            sentences) by the warm-started grid of ssvm_torch.selection (--lams, --passes each), one
            refit on all 8,936 training sentences (--passes), then test chunk F1 / per-token error,
            solver seconds and seconds per effective pass; each template in its own process so that
            the peak RSS is that template's.
  crfsuite  python-crfsuite (L-BFGS CRF, L2 weight c2) on exactly the same node attributes of each
            template, c2 chosen on the same dev split (--c2s), refit on all training sentences:
            test F1, training seconds, peak RSS (own process). CRFsuite has no edge-observation
            features, so ``edge:`` items are left out of its attributes.
  seed0     the first 1,000 training sentences: batch FW vs BCFW-uniform vs BCFW-gap, exact gap every
            100 iterations, iterations to reach gap 0.01 (figure conll_seed0.png).

Writes benchmarks/results/conll_<part>.json (+ conll_seed0.png).
Usage: python benchmarks/bench_conll.py [--parts select crfsuite seed0] [--templates sha-pereira rich]
       python benchmarks/bench_conll.py --parts select --templates rich-edges --losses hamming --constraints none bio
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, make_store
from ssvm_torch.data.conll import chunk_f1, load_conll2000
from ssvm_torch.data.templates import get_template
from ssvm_torch.selection import select_lambda
from ssvm_torch.tasks import load_task

RESULTS = Path(__file__).parent / "results"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_own_process(part: str, template: str, args, loss: str = "normalized", constraints: str = "none") -> dict:
    """Runs one template of a part in a fresh interpreter (its own peak RSS) and returns its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        cmd = [sys.executable, __file__, "--one", part, "--template", template, "--json", str(out),
               "--passes", str(args.passes), "--lams", *map(str, args.lams), "--c2s", *map(str, args.c2s),
               "--hamming-lams", *map(str, args.hamming_lams),
               "--min-count", str(args.min_count), "--loss", loss, "--constraint", constraints, "--tag-scheme", args.tags]
        subprocess.run(cmd, check=True)
        return json.loads(out.read_text())


def featurization_seconds(template, min_count) -> dict:
    """Cold (empty cache) and cached load times of the full train/test designs."""
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("SSVM_TORCH_CACHE")
        os.environ["SSVM_TORCH_CACHE"] = cache
        try:
            t0 = time.perf_counter()
            train, _ = load_conll2000(features=template, min_count=min_count)
            cold_total = time.perf_counter() - t0
            info = train.meta["featurization"]
            t0 = time.perf_counter()
            load_conll2000(features=template, min_count=min_count)
            cached_total = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("SSVM_TORCH_CACHE")
            else:
                os.environ["SSVM_TORCH_CACHE"] = old
    return {"featurize_s": info["seconds"], "load_cold_s": cold_total, "load_cached_s": cached_total,
            "n_attributes": info["n_attributes"], "n_edge_attributes": info["n_edge_attributes"]}


def one_select(args) -> dict:
    """One template and loss: featurization, lambda on dev, refit, test."""
    out = {"template": args.template, "loss": args.loss, "constraints": args.constraint, "tags": args.tag_scheme,
           **featurization_seconds(args.template, args.min_count)}
    fit = load_task("conll2000", features=args.template, min_count=args.min_count, heldout=0.1, loss=args.loss,
                    constraints=args.constraint, tags=args.tag_scheme)
    t0 = time.perf_counter()
    lams = args.hamming_lams if args.loss == "hamming" else args.lams
    lam, table = select_lambda(fit, lams, passes=args.passes, progress=lambda r: print(
        f"  [{args.template[:20]}] lam {r['lam']:g}: dev F1 {r['test_f1']:.2f}, gap {r['gap']:.2e}", flush=True))
    out.update({"selection": table, "lam": lam, "selection_s": time.perf_counter() - t0})
    del fit
    gc.collect()                                   # the fit split's store is gone before the refit's is built
    task = load_task("conll2000", features=args.template, min_count=args.min_count, loss=args.loss,
                     constraints=args.constraint, tags=args.tag_scheme)
    dual = task.store(lam)
    hist = Solver(dual, SolverConfig(solver="bcfw", sampling="gap", passes=args.passes, gap_check=10),
                  evaluate=task.evaluate).run()
    last = hist[-1]
    out.update({"n": task.n_train, "d": task.d, "passes": last["passes"], "solver_s": last["time_s"],
                "s_per_pass": last["time_s"] / last["passes"], "gap": last["gap"], "primal": last["primal"],
                "test_f1": last["test_f1"], "test_position_error": last["test_position_error"],
                "test_error": last["test_error"], "peak_rss_mb": rss_mb(), "history": hist})
    return out


def crfsuite_items(data):
    """Per sentence, per token: the token's attribute ids as strings (CRFsuite's attribute names)."""
    crow, cols = data.X.crow_indices().numpy(), data.X.col_indices().numpy()
    off = data.offsets.numpy()
    names = np.array([f"a{i}" for i in range(data.X.shape[1])], dtype=object)
    for i in range(data.n):
        yield [names[cols[crow[r]:crow[r + 1]]].tolist() for r in range(off[i], off[i + 1])]


def crfsuite_fit_predict(train, others, c2: float, path: str) -> tuple[list, float]:
    """Trains CRFsuite's L-BFGS CRF (c1 = 0, L2 weight c2, its default stopping rule) on ``train``
    and tags each of ``others``; returns (ragged label tensors, training seconds)."""
    import pycrfsuite
    trainer = pycrfsuite.Trainer(verbose=False)
    names = train.meta["tag_names"]
    for items, tags in zip(crfsuite_items(train), train.meta["tags"]):
        trainer.append(items, tags)
    trainer.set_params({"c1": 0.0, "c2": c2})
    t0 = time.perf_counter()
    trainer.train(path)
    seconds = time.perf_counter() - t0
    del trainer
    tagger = pycrfsuite.Tagger()
    tagger.open(path)
    index = {t: k for k, t in enumerate(names)}
    preds = [torch.tensor([index[t] for items in crfsuite_items(d) for t in tagger.tag(items)]) for d in others]
    tagger.close()
    return preds, seconds


def one_crfsuite(args) -> dict:
    """CRFsuite on one template's node attributes: c2 on dev, refit, test."""
    template = get_template(args.template)
    node_only = " ".join(template.item_name(it) for it in template.items) if template.edge_items else args.template
    fit, dev = load_conll2000(features=node_only, min_count=args.min_count, heldout=0.1)
    out = {"template": args.template, "attributes": fit.X.shape[1], "selection": []}
    with tempfile.TemporaryDirectory() as tmp:
        for c2 in args.c2s:
            (pred,), sec = crfsuite_fit_predict(fit, [dev], c2, f"{tmp}/m.crfsuite")
            out["selection"].append({"c2": c2, "lam_equivalent": 2 * c2 / fit.n, "dev_f1": chunk_f1(dev, pred)["f1"],
                                     "train_s": sec})
            print(f"  [crfsuite {args.template[:20]}] c2 {c2:g}: dev F1 {out['selection'][-1]['dev_f1']:.2f} "
                  f"({sec:.0f} s)", flush=True)
        best = max(out["selection"], key=lambda r: (r["dev_f1"], r["c2"]))
        del fit, dev
        train, test = load_conll2000(features=node_only, min_count=args.min_count)
        (pred,), sec = crfsuite_fit_predict(train, [test], best["c2"], f"{tmp}/m.crfsuite")
    f1 = chunk_f1(test, pred)
    out.update({"c2": best["c2"], "train_s": sec, "test_f1": f1["f1"],
                "test_position_error": float((pred != test.Y).double().mean()), "peak_rss_mb": rss_mb()})
    return out


def part_select(args):
    runs = [in_own_process("select", t, args, loss, c) for t in args.templates for loss in args.losses
            for c in args.constraints]
    for r in runs:
        if args.brief:
            r.pop("history", None)
        print(f"{r['template'][:40]:40s} {r['loss']:10s} tags {r['tags']:5s} constraints {r['constraints']:5s} d = {r['d']:,}, featurize {r['featurize_s']:.2f} s (cached load "
              f"{r['load_cached_s']:.2f} s), lam = {r['lam']:g} (dev), {r['passes']:.0f} passes in {r['solver_s']:.1f} s "
              f"({r['s_per_pass']:.2f} s/pass), gap {r['gap']:.2e}, test F1 {r['test_f1']:.2f}, peak RSS "
              f"{r['peak_rss_mb']:.0f} MB", flush=True)
    # conll_select.json stays as it is; runs with constraints or BIOES tags go to conll_select_<tags>_constraints.json
    name = "select" if args.constraints == ["none"] and args.tags == "bio" else f"select_{args.tags}_constraints"
    save(name, {"passes": args.passes, "lams": args.lams, "hamming_lams": args.hamming_lams, "runs": runs})


def part_crfsuite(args):
    runs = [in_own_process("crfsuite", t, args) for t in args.templates]
    for r in runs:
        print(f"CRFsuite {r['template'][:40]:40s} c2 = {r['c2']:g} (dev), {r['train_s']:.0f} s, test F1 "
              f"{r['test_f1']:.2f}, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    save("crfsuite", {"c2s": args.c2s, "runs": runs})


def part_seed0(args):
    train, _ = load_conll2000(train_size=1000)
    model = ChainModel.for_data(train)
    lam = 1.0 / train.n
    out = {"n": train.n, "lam": lam, "methods": {}}

    def evaluate(w):
        return {"train_error": model.metrics(w, train)["error"]}

    methods = {"fw": dict(solver="fw", gap_check=1), "bcfw-uniform": dict(sampling="uniform", gap_check=0.1,
                                                                            gap_refresh=0),
               "bcfw-gap": dict(sampling="gap", gap_check=0.1, gap_refresh=10)}
    for name, cfg in methods.items():
        seeds = [0] if name == "fw" else range(args.seeds)
        runs = []
        for seed in seeds:
            dual = make_store(model, train, lam)
            hist = Solver(dual, SolverConfig(passes=args.seed0_passes, seed=seed, **cfg), evaluate=evaluate).run()
            it = [r["steps"] * (train.n if name == "fw" else 1) for r in hist]     # FW: n block updates per step
            reach = next((i for i, r in zip(it, hist) if r["gap"] <= 0.01), None)
            runs.append({"iterations": it, "gap": [r["gap"] for r in hist], "time_s": [r["time_s"] for r in hist],
                         "train_error": [r["train_error"] for r in hist], "iterations_to_0.01": reach})
        reached = [r["iterations_to_0.01"] for r in runs]
        out["methods"][name] = {"runs": runs, "iterations_to_0.01_median":
                                statistics.median(reached) if all(x is not None for x in reached) else None}
        print(f"seed-000 study ({train.n} sentences, lam = {lam:g}) {name}: iterations to gap 0.01 = {reached}",
              flush=True)
    g, u = (out["methods"][k]["iterations_to_0.01_median"] for k in ("bcfw-gap", "bcfw-uniform"))
    if g and u:
        out["gap_vs_uniform_fewer_iterations"] = 1 - g / u
        print(f"gap sampling needs {100 * (1 - g / u):.0f}% fewer iterations than uniform to reach gap 0.01")
    save("seed0", out)
    plot_seed0(out)


def plot_seed0(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for name, m in out["methods"].items():
        r = m["runs"][0]
        for row, key in enumerate(("gap", "train_error")):
            for col, x in enumerate(("iterations", "time_s")):
                ax = axes[row][col]
                (ax.semilogy if key == "gap" else ax.plot)(r[x], r[key], label=name)
                ax.set_xlabel("iterations (block updates)" if x == "iterations" else "CPU time (s)")
                ax.set_ylabel("duality gap" if key == "gap" else "train error")
                ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    axes[0][0].set_title(f"CoNLL-2000, first {out['n']} sentences, lambda = {out['lam']:g}")
    fig.tight_layout()
    fig.savefig(RESULTS / "conll_seed0.png", dpi=90)


def save(part, obj):
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"conll_{part}.json").write_text(json.dumps(obj, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", nargs="+", default=["select", "crfsuite", "seed0"], choices=["select", "crfsuite", "seed0"])
    ap.add_argument("--templates", nargs="+", default=["sha-pereira", "rich"])
    ap.add_argument("--losses", nargs="+", default=["normalized", "hamming"], choices=["normalized", "hamming"])
    ap.add_argument("--lams", nargs="+", type=float, default=[1e-1, 3e-2, 1e-2, 3e-3],
                    help="the grid with the normalized Hamming loss")
    ap.add_argument("--hamming-lams", nargs="+", type=float, default=[1e-2, 3e-3, 1e-3, 3e-4],
                    help="the grid with the Hamming count (a loss ~24x larger per sentence: lambda ~24x smaller)")
    ap.add_argument("--loss", default="normalized", help=argparse.SUPPRESS)
    ap.add_argument("--constraints", nargs="+", default=["none"], choices=["none", "bio", "iob1", "bioes"],
                    help="select: tag constraints of the runs (with any but none, or --tags bioes: conll_select_<tags>_constraints.json)")
    ap.add_argument("--constraint", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--tags", default="bio", choices=["bio", "bioes"], help="select: the tag scheme trained on")
    ap.add_argument("--tag-scheme", default="bio", help=argparse.SUPPRESS)
    ap.add_argument("--c2s", nargs="+", type=float, default=[0.01, 0.03, 0.1, 0.3])
    ap.add_argument("--min-count", type=int, default=1)
    ap.add_argument("--passes", type=float, default=50)
    ap.add_argument("--seed0-passes", type=float, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--brief", action="store_true", help="leave the refit histories out of the JSON")
    ap.add_argument("--one", choices=["select", "crfsuite"], help=argparse.SUPPRESS)
    ap.add_argument("--template", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.one:
        Path(args.json).write_text(json.dumps({"select": one_select, "crfsuite": one_crfsuite}[args.one](args)))
        return
    for part in args.parts:
        {"select": part_select, "crfsuite": part_crfsuite, "seed0": part_seed0}[part](args)


if __name__ == "__main__":
    main()
