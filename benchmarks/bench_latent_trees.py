"""The latent SSVM over trees from partial annotation (docs/latent.md): ``ssvm-train --hide-labels`` run directories
on ``ud-ewt-spans`` (hidden spans of the gold trees, and with ``--hide-bracket-labels`` hidden labels of observed
brackets) and ``ud-ewt`` (hidden heads), single parts or whole sentences (``--hide-sentences``), summarized, one record per CCCP
outer step: the objective J (never rising), the inner problem's certified gap and passes, the completed parts that
moved, and the test figures of the step's model (labeled / unlabeled bracket F1, or UAS; reported, never used to
choose: lambda and the budgets are the full-annotation runs' of docs/structures.md, CCCP returns the point of the
lowest J).

The runs' small files (config.json, latent.json) are copied under ``--copy DIR`` (hidden.json is left out: the
seed in config.json draws the same hidden parts).

Usage: python benchmarks/bench_latent_trees.py --runs RUN [RUN ...] [--copy benchmarks/results/latent_trees_runs]
       [--out benchmarks/results/latent_trees.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

from ssvm_torch.atomic import atomic_write_bytes


def summarize(run: Path) -> dict:
    """One run directory's configuration and outer steps."""
    config = json.loads((run / "config.json").read_text())
    records = json.loads((run / "latent.json").read_text())
    spans = config["dataset"] == "ud-ewt-spans"
    steps = []
    for r in records:
        step = {k: r.get(k) for k in ("outer", "objective", "candidate_objective", "inner_gap", "inner_passes",
                                      "changed", "accepted", "time_s")}
        if spans:
            step.update(test_f1=r["test_f1"], test_unlabeled_f1=r["test_unlabeled_f1"])
        else:
            step.update(test_uas=100.0 * (1.0 - r["test_error"]))
        steps.append(step)
    metric = "test_f1" if spans else "test_uas"
    # runs made before --latent-start existed (config.json without it) started at w = 0
    start = config.get("latent_start", "zeros")
    return {"run": run.name, "dataset": config["dataset"], "start": start, "hide_labels": config["hide_labels"],
            "hide_bracket_labels": config.get("hide_bracket_labels", 0.0),
            "hide_sentences": config.get("hide_sentences", False),
            "unlabeled": config.get("unlabeled_brackets", 0),
            "hide_seed": config["hide_seed"], "hidden": config["hidden_positions"], "lam": config["lam"],
            "inner": config["solver"], "steps": steps, "metric": metric, "first_step": steps[1][metric],
            "final": steps[-1][metric], "objective": [steps[0]["objective"], steps[-1]["objective"]],
            "seconds": steps[-1]["time_s"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, required=True)
    p.add_argument("--copy", type=Path, default=None)
    p.add_argument("--out", default="benchmarks/results/latent_trees.json")
    args = p.parse_args(argv)
    out = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "runs": [summarize(r) for r in args.runs]}
    for run, s in zip(args.runs, out["runs"]):
        print(f"{s['dataset']:13s} {s['run']:9s} start {s['start']:5s} hidden {s['hide_labels']:.0%} ({s['hidden']:,})"
              + (" whole sentences" if s["hide_sentences"] else "")
              + (f", labels of {s['unlabeled']:,} brackets" if s["unlabeled"] else "") + ": "
              f"{s['metric']} {s['steps'][0][s['metric']]:.2f} at the start, {s['first_step']:.2f} after one CCCP step -> {s['final']:.2f} after {len(s['steps']) - 1}; J "
              f"{s['objective'][0]:.4f} -> {s['objective'][1]:.4f}; {s['seconds']:.0f} s")
        if args.copy:
            target = args.copy / run.name
            target.mkdir(parents=True, exist_ok=True)
            for name in ("config.json", "latent.json"):
                shutil.copyfile(run / name, target / name)
    atomic_write_bytes(Path(args.out), json.dumps(out, indent=1).encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
