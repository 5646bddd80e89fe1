"""The latent structured SVM on OCR with a fraction of the training letters hidden (issue 73), one CPU thread:

* ``full``: the SSVM on every label (the inner solver's configuration, ssvm_torch.latent.INNER);
* ``letters``: CCCP's start alone (a letter-wise SSVM on the observed letters, ssvm_torch.latent.letter_start);
* ``observed_words``: the SSVM on the words whose letters are all observed (the other words dropped);
* ``latent``: CCCP from ``letters`` (ssvm_torch.latent.train_latent), every outer step a record.

Each is scored on the test fold (test error: mean per-word normalized Hamming loss, the papers' figure, and
the per-letter error); the hidden positions come from ``--hide-seed`` (ssvm_torch.latent.hide_labels).
Model selection does not look at the test fold: lambda and the solver budgets are fixed in advance (the
full-label run's lambda of docs/results.md).

The JSON is rewritten after every stage and outer step; ``--resume`` keeps the baselines already in it.

Usage: python benchmarks/bench_latent.py [--dataset ocr-large] [--lam 1e-3] [--fraction 0.5] [--hide-seed 0]
       [--max-outer 20] [--resume] [--out benchmarks/results/latent_ocr-large.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.latent import INNER, hide_labels, letter_start, train_latent
from ssvm_torch.solvers import Solver
from ssvm_torch.stores import make_store
from ssvm_torch.tasks import load_task


def ssvm(model, data, lam):
    """(w, last history record) of the SSVM on ``data`` with the inner configuration."""
    solver = Solver(make_store(model, data, lam), INNER)
    history = solver.run()
    return solver.model_point()[0], history[-1]


def report(result: dict) -> str:
    """The JSON's two tables: the four models' test errors, and CCCP's outer steps."""
    rows, records = result["rows"], result["records"]
    latent = rows.get("latent") or ({"error": records[-1]["test_error"], "position_error": records[-1]["test_position_error"],
                                     "outer_steps": records[-1]["outer"], "time_s": records[-1]["time_s"]} if records else None)
    lines = ["| model | training labels | test error (word) | per-letter error |", "| --- | --- | --- | --- |"]
    named = [("full", "every letter"), ("letters", "observed letters, one by one (CCCP's start)"),
             ("observed_words", f"the {rows.get('observed_words', {}).get('words', '?')} words with every letter observed"),
             ("latent", f"observed letters, CCCP ({latent['outer_steps'] if latent else '?'} outer steps)")]
    for key, text in named:
        row = latent if key == "latent" else rows.get(key)
        if row:
            lines.append(f"| {key} | {text} | {row['error']:.4f} | {row['position_error']:.4f} |")
    lines += ["", "| outer step | objective J | inner gap | completions changed | test error | seconds |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in records:
        gap = "–" if r["inner_gap"] is None else f"{r['inner_gap']:.2e}"
        changed = "–" if r["changed"] is None else str(r["changed"])
        lines.append(f"| {r['outer']} | {r['objective']:.5f} | {gap} | {changed} | {r['test_error']:.4f} | "
                     f"{r['time_s']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ocr-large", choices=["ocr-small", "ocr-large"])
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--hide-seed", type=int, default=0)
    ap.add_argument("--max-outer", type=int, default=20)
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out (same settings)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", action="store_true", help="print the tables of --out as markdown and exit")
    args = ap.parse_args(argv)
    out = args.out or Path(__file__).parent / "results" / f"latent_{args.dataset}.json"
    if args.report:
        print(report(json.loads(out.read_text())))
        return 0
    torch.set_num_threads(1)
    problem = load_task(args.dataset)
    model, train, test = problem.model, problem.train, problem.test
    hidden = hide_labels(train, args.fraction, args.hide_seed)
    result = {"dataset": args.dataset, "lam": args.lam, "fraction": args.fraction, "hide_seed": args.hide_seed,
              "train_words": train.n, "train_letters": int(train.Y.shape[0]),
              "hidden_letters": int((~hidden.observed).sum()), "inner": dict(vars(INNER)), "rows": {}, "records": [],
              "machine": platform.platform(), "torch": torch.__version__}
    if args.resume and out.is_file():
        before = json.loads(out.read_text())
        same = ("dataset", "lam", "fraction", "hide_seed", "hidden_letters", "inner")
        if any(before.get(k) != result[k] for k in same):
            raise SystemExit(f"--resume: {out} was written with other settings")
        result["rows"] = {k: v for k, v in before["rows"].items() if k != "latent"}
    rows = result["rows"]

    def save():                          # after every stage and every outer step: a cut run keeps what it did
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())

    def metrics(w):
        return {f"test_{k}": v for k, v in model.metrics(w, test).items()}

    if "full" not in rows:
        t0 = time.perf_counter()
        w, rec = ssvm(model, train, args.lam)
        rows["full"] = {**model.metrics(w, test), "gap": float(rec["gap"]), "time_s": time.perf_counter() - t0}
        save()
    print("full", rows["full"], flush=True)

    if "letters" not in rows:
        t0 = time.perf_counter()
        w = letter_start(model, hidden, args.lam)
        rows["letters"] = {**model.metrics(w, test), "time_s": time.perf_counter() - t0}
        save()
    print("letters", rows["letters"], flush=True)

    if "observed_words" not in rows:
        whole = [i for i in range(hidden.n)
                 if bool(hidden.observed[int(hidden.offsets[i]):int(hidden.offsets[i + 1])].all())]
        t0 = time.perf_counter()
        w, rec = ssvm(model, train.subset(whole), args.lam)
        rows["observed_words"] = {**model.metrics(w, test), "words": len(whole), "gap": float(rec["gap"]),
                                  "time_s": time.perf_counter() - t0}
        save()
    print("observed_words", rows["observed_words"], flush=True)

    def step(record):
        result["records"].append(record)
        save()
        print("outer", record, flush=True)

    t0 = time.perf_counter()
    w, records = train_latent(model, hidden, args.lam, max_outer=args.max_outer, progress=step, evaluate=metrics)
    rows["latent"] = {**model.metrics(w, test), "outer_steps": len(records) - 1, "time_s": time.perf_counter() - t0}
    save()
    print("latent", rows["latent"], f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
