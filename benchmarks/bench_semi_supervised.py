"""Whole words (sentences) hidden against single letters (positions) hidden (``hide_labels(..., sentences=True)``,
``ssvm-train --hide-sentences``), the latent SSVM on OCR or CoNLL-2000 chunking, one CPU thread, over several
hiding seeds:

* ``full``: the SSVM on every label, once (every row's solver: BCFW with gap sampling, ``--step``, ``--passes``
  passes and an exact gap every 10; CCCP's inner problems the same);
* per seed and mode (``letters``: round(f N) letters hidden; ``words``: round(f n) whole words hidden, the
  semi-supervised setting):
  ``observed_words``: the SSVM on the words whose letters are all observed (the rest dropped: what a user without
  the latent SSVM trains), and ``latent``: CCCP from the letter-wise start (ssvm_torch.latent.train_latent).

Scored on the test fold (OCR: mean per-word normalized Hamming loss, the papers' figure, ``test_error``; CoNLL-2000:
chunk F1, ``test_f1``); lambda and the budgets are
fixed in advance (no model selection, nothing looks at the test fold). The summary gives each row's mean and
standard deviation over the seeds and the paired difference latent - observed_words.

Usage: python benchmarks/bench_semi_supervised.py [--dataset ocr-small] [--lam 0.01] [--fraction 0.5]
       [--seeds 0 1 2 3 4] [--max-outer 20] [--passes 30] [--step fw] [--features sha-pereira (conll2000)]
       [--out benchmarks/results/semi_supervised_ocr-small.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.latent import hide_labels, train_latent
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store
from ssvm_torch.tasks import load_task


def ssvm(model, data, lam, config):
    """(w, last history record) of the SSVM on ``data``."""
    solver = Solver(make_store(model, data, lam), config)
    history = solver.run()
    return solver.model_point()[0], history[-1]


def spread(values: list) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ocr-small", choices=["ocr-small", "ocr-large", "conll2000"])
    ap.add_argument("--features", default=None, help="conll2000: the feature template (None: the task's default)")
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--max-outer", type=int, default=20)
    ap.add_argument("--passes", type=float, default=30)
    ap.add_argument("--step", default="fw", choices=["fw", "pairwise", "away"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    config = SolverConfig(passes=args.passes, gap_check=10, step=args.step, cache=args.step != "fw").validate()
    out = args.out or Path(__file__).parent / "results" / f"semi_supervised_{args.dataset}.json"
    torch.set_num_threads(1)
    problem = load_task(args.dataset, **({"features": args.features} if args.features else {}))
    model, train, test = problem.model, problem.train, problem.test
    result = {"dataset": args.dataset, "lam": args.lam, "fraction": args.fraction, "seeds": args.seeds,
              "max_outer": args.max_outer, "passes": args.passes, "step": args.step, "train_words": train.n, "train_letters": int(train.Y.shape[0]),
              "machine": platform.platform(), "torch": torch.__version__, "runs": []}

    key = "test_f1" if "tag_names" in test.meta else "test_error"
    result["metric"] = key

    def error(w) -> float:
        """The test figure of ``key`` (a chunk F1 for CoNLL-2000, else the per-word error)."""
        return float(problem.evaluate(w)[key]) if key == "test_f1" else float(model.metrics(w, test)["error"])
    t0 = time.perf_counter()
    w, rec = ssvm(model, train, args.lam, config)
    result["full"] = {key: error(w), "gap": float(rec["gap"]), "time_s": time.perf_counter() - t0}
    print("full", result["full"], flush=True)
    for seed in args.seeds:
        for mode in ("letters", "words"):
            hidden = hide_labels(train, args.fraction, seed, sentences=mode == "words")
            seen = [i for i in range(hidden.n)
                    if bool(hidden.observed[int(hidden.offsets[i]):int(hidden.offsets[i + 1])].all())]
            t0 = time.perf_counter()
            w, rec = ssvm(model, train.subset(seen), args.lam, config)
            observed = {key: error(w), "words": len(seen), "time_s": time.perf_counter() - t0}
            t0 = time.perf_counter()
            w, records = train_latent(model, hidden, args.lam, config, max_outer=args.max_outer)
            latent = {key: error(w), "outer_steps": len(records) - 1, "objective": records[-1]["objective"],
                      "time_s": time.perf_counter() - t0}
            run = {"seed": seed, "mode": mode, "hidden_letters": int((~hidden.observed).sum()),
                   "observed_words": observed, "latent": latent}
            result["runs"].append(run)
            print(json.dumps(run), flush=True)
    summary = {}
    for mode in ("letters", "words"):
        runs = [r for r in result["runs"] if r["mode"] == mode]
        summary[mode] = {"hidden_letters": spread([r["hidden_letters"] for r in runs]),
                         "observed_words": spread([r["observed_words"][key] for r in runs]),
                         "latent": spread([r["latent"][key] for r in runs]),
                         "latent_minus_observed_words": spread([r["latent"][key] - r["observed_words"][key]
                                                                for r in runs])}
        s = summary[mode]
        print(f"{mode:>7} hidden: observed words only {s['observed_words']['mean']:.4f} ± {s['observed_words']['sd']:.4f}"
              f", latent {s['latent']['mean']:.4f} ± {s['latent']['sd']:.4f} (paired latent - observed "
              f"{s['latent_minus_observed_words']['mean']:+.4f} ± {s['latent_minus_observed_words']['sd']:.4f}); "
              f"full {result['full'][key]:.4f} ({key})", flush=True)
    result["summary"] = summary
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
