"""The latent SSVM through its scikit-learn estimator (``LatentChainSSVM``, docs/latent.md) on OCR words given as
the lists of per-letter arrays a user holds, a fraction of the training letters marked unlabeled (-1) by a NumPy
seed, against ``ChainSSVM`` on every label with the same solver budget: the test error (mean per-word normalized
Hamming loss, the papers' figure), the share of unlabeled training letters the transduction completes right, CCCP's
objective per step and the wall time. lambda and the budgets are fixed in advance (no model selection).

Usage: python benchmarks/bench_latent_estimator.py [--dataset ocr-small] [--lam 0.01] [--fraction 0.5] [--seed 0]
       [--passes 30] [--max-outer 5] [--out benchmarks/results/latent_estimator_ocr-small.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from ssvm_torch import ChainSSVM, LatentChainSSVM, load_task
from ssvm_torch.atomic import atomic_write_bytes


def sequences(data):
    off, X, Y = data.offsets.tolist(), data.X.numpy(), data.Y.numpy()
    return [X[a:b] for a, b in zip(off, off[1:])], [Y[a:b] for a, b in zip(off, off[1:])]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="ocr-small")
    p.add_argument("--lam", type=float, default=0.01)
    p.add_argument("--fraction", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--passes", type=float, default=30)
    p.add_argument("--max-outer", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    task = load_task(args.dataset)
    (xs, ys), (xt, yt) = sequences(task.train), sequences(task.test)
    rng = np.random.default_rng(args.seed)
    part = [np.where(rng.random(len(y)) < args.fraction, -1, y) for y in ys]
    hidden = np.concatenate([y == -1 for y in part])
    common = dict(lam=args.lam, passes=args.passes, step="pairwise", cache=True, n_states=task.model.K)
    t = time.perf_counter()
    est = LatentChainSSVM(max_outer=args.max_outer, **common).fit(xs, part)
    latent_s = time.perf_counter() - t
    right = np.concatenate(est.transduction_) == np.concatenate(ys)
    t = time.perf_counter()
    full = ChainSSVM(**common).fit(xs, ys)
    full_s = time.perf_counter() - t
    out = {"dataset": args.dataset, "lam": args.lam, "fraction": args.fraction, "seed": args.seed,
           "passes": args.passes, "max_outer": args.max_outer, "hidden_letters": int(hidden.sum()),
           "letters": int(len(hidden)), "machine": platform.processor() or platform.machine(),
           "latent": {"test_error": 1.0 - est.score(xt, yt), "transduction_accuracy": float(right[hidden].mean()),
                      "observed_kept": bool(right[~hidden].all()), "objective": est.objective_,
                      "accepted_steps": est.n_iter_, "inner_gap": est.gap_, "fit_s": latent_s,
                      "objectives": [r["objective"] for r in est.latent_history_]},
           "full": {"test_error": 1.0 - full.score(xt, yt), "gap": full.gap_, "fit_s": full_s}}
    print(f"{args.dataset}: {out['hidden_letters']} of {out['letters']} training letters unlabeled; "
          f"LatentChainSSVM test error {out['latent']['test_error']:.4f} ({est.n_iter_} CCCP steps, "
          f"{latent_s:.1f} s), transduction {100 * out['latent']['transduction_accuracy']:.1f}% right; "
          f"ChainSSVM on every label {out['full']['test_error']:.4f} ({full_s:.1f} s)")
    path = args.out or f"benchmarks/results/latent_estimator_{args.dataset}.json"
    atomic_write_bytes(path, json.dumps(out, indent=1).encode())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
