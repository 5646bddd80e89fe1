"""Neural CoNLL-2000 chunkers: the recipes ``recipes/conll_deep_{hinge,crf,hybrid_hinge,hybrid_crf,
hybrid_softmax_margin}.yaml``, seed 0 each, then seeds 1 and 2 of the dev-best configuration of each
head (hinge, softmax-margin, CRF); the table against the linear BCFW models; a paired bootstrap of
each margin head against the CRF head. Each run's epochs are chosen on dev: early stopping on dev F1
with ``patience`` under a cap (100) that no run reaches.

``--train``: runs the recipes one after another (``python -m ssvm_torch.deep fit``, two threads; on
  a two-core machine parallel runs slow each other several-fold), each into ``RUNS/<recipe>_s<seed>``;
  a run directory that already holds ``results.json`` is kept (the queue can be restarted).
  Configurations are ranked by seed-0 *dev* F1 only.
``--report`` (the default): reads every ``RUNS/*_s*/**/results.json``, recomputes each test F1 from
  its ``test_predictions.pt`` and the test file (seqeval, default conlleval mode) and checks it against
  ``results.json``; mean +- sample std over seeds of test F1, dev F1, epochs, s/epoch (mean and
  median epoch of each run), peak RSS; the
  linear rows from ``conll_select.json`` (BIO, no constraints) and
  ``conll_select_{bio,bioes}_constraints.json`` (lambda chosen on the same dev split); a paired
  bootstrap (test sentences resampled with replacement, ``--draws`` draws; Koehn 2004,
  Berg-Kirkpatrick et al. 2012) between the dev-best configuration of each margin head (hinge,
  softmax-margin) and the dev-best CRF configuration: the
  F1 difference of the seed-averaged systems, its 95% interval and the one-sided p-value (share of
  draws whose difference has the other sign); copies the dev-best configuration's seed-0
  predictions to ``conll_deep_test_predictions.pt``.

``--archive``: copies each finished run's small files (config.json, history.json, results.json,
  test_predictions.pt; not the weights) to ``benchmarks/results/conll_deep_runs/<recipe>_s<seed>/``,
  so the table is recomputed from the repository alone: ``--runs benchmarks/results/conll_deep_runs``.

Usage: python benchmarks/bench_conll_deep.py --train --runs runs/conll_deep --archive
       python benchmarks/bench_conll_deep.py --runs benchmarks/results/conll_deep_runs
Writes benchmarks/results/conll_deep.json (+ conll_deep_test_predictions.pt).
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from ssvm_torch.data.conll import read_conll
from ssvm_torch.data.types import data_file
from ssvm_torch.outputs import load_torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECIPES = ("hybrid_hinge", "hybrid_crf", "hinge", "crf", "hybrid_softmax_margin", "softmax_margin")
HEAD = {"hinge": "hinge", "hybrid_hinge": "hinge", "crf": "crf", "hybrid_crf": "crf",
        "hybrid_softmax_margin": "softmax_margin", "softmax_margin": "softmax_margin"}
HEADS = ("hinge", "softmax_margin", "crf")
MARGIN_HEADS = ("hinge", "softmax_margin")            # each compared with the CRF head by the paired bootstrap
# the semi-Markov heads (docs/segments.md), each compared with the neural chain head of its loss on the seeds both
# have (paired bootstrap; s/epoch of runs trained side by side, except the hybrid pair, whose chain runs are the
# earlier archived ones); they take no part in the chain heads' ranking
SEGMENT_PAIRS = {"semimarkov_crf": "crf", "semimarkov_hinge": "hinge", "semimarkov_softmax_margin": "softmax_margin",
                 "hybrid_semimarkov_softmax_margin": "hybrid_softmax_margin"}


def run_dir(runs: Path, recipe: str, seed: int) -> Path | None:
    """The newest version directory of one run that finished (holds results.json)."""
    found = sorted((runs / f"{recipe}_s{seed}").glob("**/results.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


ARCHIVE = RESULTS / "conll_deep_runs"
ARCHIVED = ("config.json", "history.json", "results.json", "test_predictions.pt")


def archive(runs: Path) -> list:
    """Copy the small files of every finished run under ``runs`` into :data:`ARCHIVE`."""
    done = []
    for recipe in RECIPES + tuple(SEGMENT_PAIRS):
        for seed in range(3):
            d = run_dir(runs, recipe, seed)
            if d is None:
                continue
            dest = ARCHIVE / f"{recipe}_s{seed}"
            dest.mkdir(parents=True, exist_ok=True)
            for name in ARCHIVED:
                shutil.copyfile(d / name, dest / name)
            done.append(dest.name)
    return done


def dev_f1(runs: Path, recipe: str, seed: int = 0) -> float:
    d = run_dir(runs, recipe, seed)
    return json.loads((d / "results.json").read_text())["dev_f1"] if d else float("-inf")


def train(runs: Path, threads: int) -> None:
    def one(recipe, seed):
        if run_dir(runs, recipe, seed) is not None:
            return
        out = runs / f"{recipe}_s{seed}"
        cmd = [sys.executable, "-m", "ssvm_torch.deep", "fit", "--config", str(ROOT / "recipes" / f"conll_deep_{recipe}.yaml"),
               "--model.seed", str(seed), "--seed_everything", str(seed), "--model.threads", str(threads),
               "--trainer.default_root_dir", str(out)]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)

    for recipe in RECIPES:
        one(recipe, 0)
    best = [max((r for r in RECIPES if HEAD[r] == head), key=lambda r: dev_f1(runs, r)) for head in HEADS]
    for seed in (1, 2):
        for recipe in best:
            one(recipe, seed)
    for seed in range(3):
        for segments, chain in SEGMENT_PAIRS.items():
            one(chain, seed)
            one(segments, seed)


# -- chunk counts per sentence: F1 of any resample is a ratio of sums -------------------------------
def chunk_counts(gold: list, pred: list) -> np.ndarray:
    """(n, 3) per-sentence counts (correct, predicted, gold chunks) in seqeval's default (conlleval)
    chunk reading; F1 = 2 correct / (predicted + gold) over any set of sentences."""
    from seqeval.metrics.sequence_labeling import get_entities
    out = np.zeros((len(gold), 3), dtype=np.int64)
    for i, (g, p) in enumerate(zip(gold, pred)):
        gs, ps = set(get_entities(list(g))), set(get_entities(list(p)))
        out[i] = len(gs & ps), len(ps), len(gs)
    return out


def f1_of(counts: np.ndarray) -> np.ndarray:
    """F1 in % of per-sentence counts (n, 3) summed over the sentences."""
    c, p, g = counts.sum(0)
    return float(200.0 * c / max(p + g, 1))


def paired_bootstrap(a: list, b: list, draws: int, seed: int = 0) -> dict:
    """Paired bootstrap of the F1 difference mean_seeds F1(a) - mean_seeds F1(b): ``a`` and ``b`` are
    lists (one per seed) of (n, 3) count arrays on the same test sentences; each draw resamples the n
    sentences with replacement, the same sentences for every system and seed."""
    rng = np.random.default_rng(seed)
    n = a[0].shape[0]
    observed = float(np.mean([f1_of(x) for x in a]) - np.mean([f1_of(x) for x in b]))
    diffs = np.empty(draws)
    for k in range(draws):
        idx = rng.integers(0, n, n)
        diffs[k] = np.mean([f1_of(x[idx]) for x in a]) - np.mean([f1_of(x[idx]) for x in b])
    sign = 1.0 if observed >= 0 else -1.0
    return {"draws": draws, "observed_diff": observed, "ci95": [float(np.percentile(diffs, 2.5)),
                                                               float(np.percentile(diffs, 97.5))],
            "p_value": float(np.mean(sign * diffs <= 0)), "mean_diff": float(diffs.mean())}


def mean_std(xs: list) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None, "values": xs}


def linear_rows() -> list:
    rows = []
    for name in ("conll_select", "conll_select_bio_constraints", "conll_select_bioes_constraints"):
        path = RESULTS / f"{name}.json"
        if not path.is_file():
            continue
        for r in json.loads(path.read_text())["runs"]:
            if r["template"] != "rich-edges" or r["loss"] != "hamming":
                continue
            key = (r.get("tags", "bio"), r.get("constraints", "none"))
            if any((x["tags"], x["constraints"]) == key for x in rows):
                continue                          # the same configuration rerun in a later study: the first counts
            dev = max(s["dev_f1"] for s in r["selection"] if s["lam"] == r["lam"])
            rows.append({"system": f"linear BCFW ({r.get('tags', 'bio').upper()}, constraints {r.get('constraints', 'none')})",
                         "tags": r.get("tags", "bio"), "constraints": r.get("constraints", "none"), "lam": r["lam"],
                         "test_f1": mean_std([r["test_f1"]]), "dev_f1": mean_std([dev]), "passes": r["passes"],
                         "s_per_pass": r["s_per_pass"], "peak_rss_mb": mean_std([r["peak_rss_mb"]]), "source": path.name})
    return rows


def report(runs: Path, draws: int) -> dict:
    test = read_conll(data_file("conll2000_test.txt.gz"))
    gold = [[t[2] for t in s] for s in test]
    from seqeval.metrics import f1_score
    rows, counts = [], {}
    for recipe in RECIPES + tuple(SEGMENT_PAIRS):
        seeds = [s for s in range(3) if run_dir(runs, recipe, s) is not None]
        if not seeds:
            continue
        per = []
        for s in seeds:
            d = run_dir(runs, recipe, s)
            res = json.loads((d / "results.json").read_text())
            pred = load_torch(d / "test_predictions.pt", "predictions")["predictions"]
            assert len(pred) == len(gold) and all(len(p) == len(g) for p, g in zip(pred, gold)), d
            f1 = 100 * f1_score(gold, pred)
            assert abs(f1 - res["test_f1"]) < 1e-9, (d, f1, res["test_f1"])
            c = chunk_counts(gold, pred)
            assert abs(f1_of(c) - f1) < 1e-9, (f1_of(c), f1)
            counts.setdefault(recipe, []).append(c)
            history = json.loads((d / "history.json").read_text())
            # the median epoch: other work on the machine inflates single epochs, never shortens them
            res["s_per_epoch_median"] = statistics.median(r["seconds"] for r in history)
            per.append({"seed": s, "dir": str(d.relative_to(ROOT) if d.is_relative_to(ROOT) else d), **res})
        cfg = json.loads((run_dir(runs, recipe, seeds[0]) / "config.json").read_text())
        structure = cfg.get("structure", "chain")
        rows.append({"system": f"{'hybrid' if cfg['features'] else 'neural'} "
                               f"{'semi-Markov ' if structure == 'semimarkov' else ''}{cfg['loss']}",
                     "recipe": f"recipes/conll_deep_{recipe}.yaml", "structure": structure, "head": cfg["loss"], "features": cfg["features"], "tags": cfg["tags"], "constraints": cfg["constraints"],
                     "seeds": seeds, "test_f1": mean_std([p["test_f1"] for p in per]),
                     "dev_f1": mean_std([p["dev_f1"] for p in per]), "epochs": mean_std([p["epochs"] for p in per]),
                     "best_epoch": mean_std([p["best_epoch"] for p in per]),
                     "s_per_epoch": mean_std([p["s_per_epoch"] for p in per]),
                     "s_per_epoch_median": mean_std([p["s_per_epoch_median"] for p in per]),
                     "peak_rss_mb": mean_std([p["peak_rss_mb"] for p in per]), "n_parameters": per[0]["n_parameters"],
                     "runs": per})
    out = {"machine": platform.processor() or platform.machine(), "linear": linear_rows(), "neural": rows}
    chain_rows = [r for r in rows if r["structure"] == "chain"]
    by_dev = {head: max((r for r in chain_rows if r["head"] == head), key=lambda r: r["runs"][0]["dev_f1"],
                        default=None) for head in HEADS}
    out["bootstrap"] = []
    for head in MARGIN_HEADS:
        if by_dev[head] and by_dev["crf"]:
            h, c = (Path(by_dev[k]["recipe"]).stem.removeprefix("conll_deep_") for k in (head, "crf"))
            out["bootstrap"].append({"a": h, "b": c, "seeds_a": by_dev[head]["seeds"], "seeds_b": by_dev["crf"]["seeds"],
                                     **paired_bootstrap(counts[h], counts[c], draws)})
    out["segments"] = segment_pairs(rows, counts, draws)
    out["partial"] = partial_rows(runs, gold, draws)
    out["partial_pairs"] = partial_pairs(runs, gold, draws)
    if chain_rows:
        best = max(chain_rows, key=lambda r: r["runs"][0]["dev_f1"])
        src = ROOT / best["runs"][0]["dir"] / "test_predictions.pt"
        shutil.copyfile(src, RESULTS / "conll_deep_test_predictions.pt")
        pred = load_torch(RESULTS / "conll_deep_test_predictions.pt", "predictions")["predictions"]
        out["committed_predictions"] = {"file": "benchmarks/results/conll_deep_test_predictions.pt",
                                        "recipe": best["recipe"], "seed": 0, "test_f1": 100 * f1_score(gold, pred),
                                        "sentences": len(pred), "tokens": sum(map(len, pred))}
    return out


def segment_pairs(rows: list, counts: dict, draws: int) -> list:
    """Each semi-Markov head against the neural chain head of its loss on the seeds both have: test and dev F1,
    the paired bootstrap of test F1, and the median s/epoch of each seed's two runs (trained side by side)."""
    by_recipe = {Path(r["recipe"]).stem.removeprefix("conll_deep_"): r for r in rows}
    out = []
    for segments, chain in SEGMENT_PAIRS.items():
        if segments not in by_recipe or chain not in by_recipe:
            continue
        a, b = by_recipe[segments], by_recipe[chain]
        seeds = sorted(set(a["seeds"]) & set(b["seeds"]))
        pick = lambda row: [run for run in row["runs"] if run["seed"] in seeds]          # noqa: E731
        ca = [c for s, c in zip(a["seeds"], counts[segments]) if s in seeds]
        cb = [c for s, c in zip(b["seeds"], counts[chain]) if s in seeds]
        out.append({"a": segments, "b": chain, "seeds": seeds,
                    "test_f1_a": mean_std([r["test_f1"] for r in pick(a)]),
                    "test_f1_b": mean_std([r["test_f1"] for r in pick(b)]),
                    "dev_f1_a": mean_std([r["dev_f1"] for r in pick(a)]),
                    "dev_f1_b": mean_std([r["dev_f1"] for r in pick(b)]),
                    "s_per_epoch_median_a": [r["s_per_epoch_median"] for r in pick(a)],
                    "s_per_epoch_median_b": [r["s_per_epoch_median"] for r in pick(b)],
                    **paired_bootstrap(ca, cb, draws)})
    return out


def partial_rows(runs: Path, gold: list, draws: int) -> list:
    """Runs trained with hidden labels (a name with ``partial``, config.json ``hide_fraction`` > 0; issue 73:
    ``recipes/partial50_all.sh``; the plain chain and semi-Markov heads: docs/segments.md), each against the
    full-annotation run of its structure, features, loss and seed: test F1 recomputed and checked as above, the
    difference and its paired bootstrap."""
    from seqeval.metrics import f1_score
    out = []
    for d in sorted(runs.glob("*partial*_s*")):
        config = json.loads((d / "config.json").read_text())
        if not config.get("hide_fraction"):
            continue
        res = json.loads((d / "results.json").read_text())
        pred = load_torch(d / "test_predictions.pt", "predictions")["predictions"]
        f1 = 100 * f1_score(gold, pred)
        assert abs(f1 - res["test_f1"]) < 1e-9, (d, f1, res["test_f1"])
        full = ("semimarkov_" if config.get("structure") == "semimarkov" else "hybrid_" if config["features"]
                else "") + config["loss"]
        seed = config["seed"]
        row = {"run": d.name, "loss": config["loss"], "seed": seed, "hide_fraction": config["hide_fraction"],
               "hidden_positions": res["hidden_positions"], "fit_positions": res["fit_positions"], "test_f1": f1,
               "dev_f1": res["dev_f1"], "epochs": res["epochs"], "best_epoch": res["best_epoch"], "full_run": None}
        twin_dir = run_dir(runs, full, seed)
        if twin_dir is not None:
            twin = json.loads((twin_dir / "results.json").read_text())
            twin_pred = load_torch(twin_dir / "test_predictions.pt", "predictions")["predictions"]
            row.update(full_run=f"{full}_s{seed}", full_test_f1=twin["test_f1"], full_dev_f1=twin["dev_f1"],
                       bootstrap=paired_bootstrap([chunk_counts(gold, pred)], [chunk_counts(gold, twin_pred)], draws))
        out.append(row)
    return out


# partial-annotation runs compared over the seeds both have: the semi-Markov head against the chain head of its loss
# (the same hidden positions and encoder), and each against the full-annotation runs of its seeds
PARTIAL_PAIRS = [(f"semimarkov_partial50_{loss}", f"chain_partial50_{loss}") for loss in ("crf", "hinge")] + \
    [(f"{kind}_partial50_{loss}", f"{full}{loss}") for loss in ("crf", "hinge")
     for kind, full in (("semimarkov", "semimarkov_"), ("chain", ""))]


def partial_pairs(runs: Path, gold: list, draws: int) -> list:
    """Seed-averaged test F1 of two run families on their common seeds and the paired bootstrap of the
    difference (``PARTIAL_PAIRS``)."""
    from seqeval.metrics import f1_score
    out = []
    for a, b in PARTIAL_PAIRS:
        seeds = [s for s in range(3) if run_dir(runs, a, s) is not None and run_dir(runs, b, s) is not None]
        if not seeds:
            continue
        counts, f1 = {a: [], b: []}, {a: [], b: []}
        for name in (a, b):
            for s in seeds:
                pred = load_torch(run_dir(runs, name, s) / "test_predictions.pt", "predictions")["predictions"]
                counts[name].append(chunk_counts(gold, pred))
                f1[name].append(100 * f1_score(gold, pred))
        out.append({"a": a, "b": b, "seeds": seeds, "test_f1_a": mean_std(f1[a]), "test_f1_b": mean_std(f1[b]),
                    **paired_bootstrap(counts[a], counts[b], draws)})
    return out


def print_table(out: dict) -> None:
    def fmt(ms, d=2):
        return f"{ms['mean']:.{d}f}" + (f" +- {ms['std']:.{d}f}" if ms["std"] is not None else "")
    for r in out["linear"]:
        print(f"{r['system']:45s} test F1 {fmt(r['test_f1'])}, dev F1 {fmt(r['dev_f1'])}, lam {r['lam']:g}, "
              f"{r['s_per_pass']:.2f} s/pass, peak RSS {r['peak_rss_mb']['mean']:.0f} MB")
    for r in out["neural"]:
        print(f"{r['system']:45s} test F1 {fmt(r['test_f1'])} ({len(r['seeds'])} seeds), dev F1 {fmt(r['dev_f1'])}, "
              f"{fmt(r['epochs'], 1)} epochs, {fmt(r['s_per_epoch_median'], 1)} s/epoch (median), peak RSS "
              f"{r['peak_rss_mb']['mean']:.0f} MB")
    for b in out.get("segments", []):
        print(f"{b['a']} - {b['b']} (seeds {b['seeds']}): test F1 {b['test_f1_a']['mean']:.2f} vs "
              f"{b['test_f1_b']['mean']:.2f}, {b['observed_diff']:+.3f}, 95% CI [{b['ci95'][0]:+.3f}, "
              f"{b['ci95'][1]:+.3f}]; s/epoch (median) {b['s_per_epoch_median_a']} vs {b['s_per_epoch_median_b']}")
    for b in out.get("bootstrap", []):
        print(f"paired bootstrap {b['a']} - {b['b']}: {b['observed_diff']:+.3f} F1, 95% CI [{b['ci95'][0]:+.3f}, "
              f"{b['ci95'][1]:+.3f}], p = {b['p_value']:.3f} ({b['draws']} draws)")
    for r in out.get("partial", []):
        against = (f"; {r['full_run']} {r['full_test_f1']:.2f}, difference {r['bootstrap']['observed_diff']:+.2f} "
                   f"(95% CI [{r['bootstrap']['ci95'][0]:+.2f}, {r['bootstrap']['ci95'][1]:+.2f}])"
                   if r["full_run"] else "")
        print(f"{r['run']}: {r['hidden_positions']} of {r['fit_positions']} labels hidden, test F1 {r['test_f1']:.2f}, "
              f"dev F1 {r['dev_f1']:.2f}, {r['epochs']} epochs{against}")
    for b in out.get("partial_pairs", []):
        print(f"{b['a']} - {b['b']} (seeds {b['seeds']}): test F1 {b['test_f1_a']['mean']:.2f} vs "
              f"{b['test_f1_b']['mean']:.2f}, {b['observed_diff']:+.2f}, 95% CI [{b['ci95'][0]:+.2f}, "
              f"{b['ci95'][1]:+.2f}]")
    if "committed_predictions" in out:
        c = out["committed_predictions"]
        print(f"{c['file']}: {c['recipe']} seed 0, test F1 {c['test_f1']:.2f} ({c['sentences']} sentences, "
              f"{c['tokens']} tokens)")


def markdown(out: dict) -> str:
    """The docs/results.md table of ``out`` (linear rows, then the neural ones)."""
    def ms(x, d=2):
        return f"{x['mean']:.{d}f}" + (f" ± {x['std']:.{d}f}" if x["std"] is not None else "")
    rows = ["| system | seeds | **test F1** | dev F1 | epochs (best) | s / epoch (median) | peak RSS |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in out["linear"]:
        rows.append(f"| {r['system']}, λ = {r['lam']:g} (dev) | – | **{ms(r['test_f1'])}** | {ms(r['dev_f1'])} | "
                    f"{r['passes']:.0f} passes | {r['s_per_pass']:.2f} s / pass | {r['peak_rss_mb']['mean'] / 1024:.2f} GB |")
    for r in out["neural"]:
        seeds = ", ".join(f"{p['test_f1']:.2f}" for p in r["runs"])
        rows.append(f"| {r['system']} (`{Path(r['recipe']).name}`) | {len(r['seeds'])} ({seeds}) | "
                    f"**{ms(r['test_f1'])}** | {ms(r['dev_f1'])} | {ms(r['epochs'], 1)} ({ms(r['best_epoch'], 1)}) | "
                    f"{ms(r['s_per_epoch_median'], 1)} | {max(p['peak_rss_mb'] for p in r['runs']) / 1024:.2f} GB |")
    if out.get("partial"):
        rows += ["", "| run (labels hidden) | test F1 | dev F1 | epochs (best) | full-annotation run: test F1 | "
                 "difference (95% CI, paired bootstrap) |", "| --- | --- | --- | --- | --- | --- |"]
        for r in out["partial"]:
            b = r.get("bootstrap")
            rows.append(f"| {r['run']} ({r['hidden_positions']} of {r['fit_positions']}) | **{r['test_f1']:.2f}** | "
                        f"{r['dev_f1']:.2f} | {r['epochs']} ({r['best_epoch']}) | "
                        + (f"{r['full_run']}: {r['full_test_f1']:.2f} | {b['observed_diff']:+.2f} "
                           f"[{b['ci95'][0]:+.2f}, {b['ci95'][1]:+.2f}] |" if b else "– | – |"))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="runs/conll_deep", help="directory of the run directories")
    ap.add_argument("--train", action="store_true", help="train the queue first (hours on 2 cores)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--archive", action="store_true", help="copy the finished runs' small files into the repository")
    ap.add_argument("--markdown", action="store_true", help="also print the docs/results.md table")
    args = ap.parse_args()
    runs = Path(args.runs).resolve()
    if args.train:
        train(runs, args.threads)
    if args.archive:
        print("archived:", ", ".join(archive(runs)))
        runs = ARCHIVE
    out = report(runs, args.draws)
    print_table(out)
    if args.markdown:
        print(markdown(out))
    (RESULTS / "conll_deep.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
