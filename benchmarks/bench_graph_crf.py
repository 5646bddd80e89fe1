"""The multi-class pairwise model on general graphs (models/graph_crf.py) on the shipped data.

  scene   the complete 6-node label graph of each image (data/graph_views.py): the LP-relaxed SSVM
          (local-polytope oracle, Finley & Joachims 2008) against the exact SSVM of the same model
          (enumeration of the 2^6 labelings, and branch and bound over the LP: ``inference="exact"``, which
          must land where enumeration does). lambda chosen per oracle on a held-out fifth of the
          training images (242, seeded random: the file is sorted by label set), then refit on all 1,211;
          the test set is read once, at the end.
          Reported: test Hamming loss, the share of test images whose LP vertex is fractional, the final
          duality gap (of the relaxed problem for the LP), time per pass.
  multilabel  models/flat.py's MultiLabelModel (the same graph's model, exact, without the 1/N) under the same
          protocol, as the reference the graph model is checked against.
  ocr     OCR-small words as letter chains (forests: the LP is exact, solved by max-sum), against the
          chain model of models/chain.py at the same lambda (its own feature map: unscaled, with first /
          last label biases), as context for the error and the time per block step.
  lp      the LP's cost: milliseconds per LP (oracles/local_polytope.py: roof duality for K = 2, cached HiGHS
          models otherwise) on scene's graphs and on random complete graphs; HiGHS' presolve on / off on scene's
          graphs and a 30 x 30 grid; for K = 2, roof duality's max flow against the simplex (scene, grids).

Writes benchmarks/results/graph_crf.json.
Usage: python benchmarks/bench_graph_crf.py [--parts scene multilabel ocr lp] [--passes 20] [--threads 1]
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.data import FlatData, GraphData, load_ocr, load_scene
from ssvm_torch.data.graph_views import grid_example, ocr_graphs, scene_graphs
from ssvm_torch.models import ChainModel, GraphCRFModel, MultiLabelModel
from ssvm_torch.oracles import local_polytope
from ssvm_torch.oracles.local_polytope import solve_lp, local_polytope_batch
from ssvm_torch.oracles.roof_duality import roof_dual_map
from ssvm_torch.stores import make_store

RESULTS = Path(__file__).parent / "results"


def fit(model, train, lam, passes):
    """BCFW + gap sampling; (store, history, seconds)."""
    store = make_store(model, train, lam)
    t = time.perf_counter()
    hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=5)).run()
    return store, hist, time.perf_counter() - t


def held_out_split(n: int):
    """(fit, held-out) indices, sorted: a seeded random fifth (242 of scene's 1,211) held out, because scene's
    training file is sorted by label set."""
    perm = np.random.default_rng(0).permutation(n)
    return np.sort(perm[242:]), np.sort(perm[:242])


def select_and_refit(model, subset, lams, passes, label) -> tuple[dict, object]:
    """lambda by the held-out error of fits on the rest of train (``subset(indices)`` gives a training subset,
    ``subset(None)`` all of train), the best (ties: the largest lambda) refit on all of train: (record, store)."""
    n = subset(None).n
    fit_i, held_i = held_out_split(n)
    fit_data, held = subset(fit_i), subset(held_i)
    grid = []
    for lam in lams:
        store, hist, secs = fit(model, fit_data, lam, passes)
        held_error = model.metrics(store.w, held)["error"]
        grid.append({"lam": lam, "held_out_error": held_error, "gap": hist[-1]["gap"], "seconds": secs})
        print(f"scene {label} lam {lam:.0e}: held-out Hamming {held_error:.4f}, gap {hist[-1]['gap']:.2e}, "
              f"{secs:.1f} s", flush=True)
    best = min(grid, key=lambda r: (r["held_out_error"], -r["lam"]))
    store, hist, secs = fit(model, subset(None), best["lam"], passes)
    return {"grid": grid, "lam": best["lam"], "gap": hist[-1]["gap"], "passes": hist[-1]["passes"],
            "seconds": secs, "seconds_per_pass": secs / hist[-1]["passes"]}, store


def part_scene(args) -> dict:
    train, test = scene_graphs()
    out = {}
    for inference in ("lp", "enumerate", "exact"):
        model = GraphCRFModel.for_data(train, inference=inference)
        record, store = select_and_refit(model, lambda i: train if i is None else train.subset(i), args.lams,
                                         args.passes, inference)
        m = model.metrics(store.w, test)
        out[inference] = {**record, "test_error": m["error"], "test_fractional": m["fractional"]}
        print(f"scene {inference} refit at lam {record['lam']:.0e}: test Hamming {m['error']:.4f}, fractional test "
              f"vertices {m['fractional']:.4f}, gap {record['gap']:.2e}, {record['seconds_per_pass']:.2f} s per pass",
              flush=True)
    return out


def part_multilabel(args) -> dict:
    """models/flat.py's MultiLabelModel (the same graph, no 1/N, exact) under the same protocol: held-out fifth,
    its own lambda grid (``--multilabel-lams``), refit, test once."""
    Xtr, Ytr, Xte, Yte = load_scene()
    model = MultiLabelModel(Xtr.shape[1], Ytr.shape[1])

    def subset(i):
        return FlatData(Xtr, Ytr) if i is None else FlatData(Xtr[torch.as_tensor(i)], Ytr[torch.as_tensor(i)])
    record, store = select_and_refit(model, subset, args.multilabel_lams, args.passes, "multilabel")
    test_error = model.metrics(store.w, FlatData(Xte, Yte))["error"]
    print(f"scene multilabel refit at lam {record['lam']:.0e}: test Hamming {test_error:.4f}", flush=True)
    return {**record, "test_error": test_error}


def part_ocr(args) -> dict:
    train, test = ocr_graphs("small")
    out = {}
    model = GraphCRFModel.for_data(train)
    store, hist, secs = fit(model, train, args.ocr_lam, args.passes)
    m = model.metrics(store.w, test)
    steps = hist[-1]["steps"]
    out["graph_crf"] = {"lam": args.ocr_lam, "test_node_error": m["node_error"], "test_error": m["error"],
                        "test_fractional": m["fractional"], "gap": hist[-1]["gap"], "seconds": secs,
                        "us_per_step": 1e6 * secs / steps}
    ctr, cte = load_ocr("small")
    chain = ChainModel.for_data(ctr)
    cstore, chist, csecs = fit(chain, ctr, args.ocr_lam, args.passes)
    cm = chain.metrics(cstore.w, cte)
    out["chain_model"] = {"lam": args.ocr_lam, "test_node_error": cm.get("position_error", cm["error"]),
                          "test_error": cm["error"], "gap": chist[-1]["gap"], "seconds": csecs,
                          "us_per_step": 1e6 * csecs / chist[-1]["steps"]}
    for k, r in out.items():
        print(f"ocr {k} lam {r['lam']:.0e}: test error {r['test_error']:.4f} (letters {r['test_node_error']:.4f}), "
              f"gap {r['gap']:.2e}, {r['us_per_step']:.0f} us per block step", flush=True)
    return out


def part_lp(args) -> dict:
    """Milliseconds per LP (HiGHS through oracles/local_polytope.py's cached models; median of 3 runs over each
    case's graphs), and HiGHS' presolve on / off."""
    rng = np.random.default_rng(0)
    train, _ = scene_graphs()
    model = GraphCRFModel.for_data(train)
    w = torch.as_tensor(rng.normal(size=model.d))
    tn, te = (t.numpy() for t in model.scores(w, train, torch.arange(300)))
    scene = [(tn[6 * b:6 * b + 6], te[15 * b:15 * b + 15], train.graphs[b].edges) for b in range(300)]
    cases = {"scene (6 nodes, 15 edges, K 2) x 300": scene}
    for N, K, G in ((10, 3, 100), (6, 10, 10)):
        edges = np.array(list(itertools.combinations(range(N), 2)))
        cases[f"complete {N} nodes, K {K} x {G}"] = [(rng.normal(size=(N, K)), rng.normal(size=(len(edges), K, K)),
                                                     edges) for _ in range(G)]
    out = {}
    for name, problems in cases.items():
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            local_polytope_batch(problems)
            runs.append(time.perf_counter() - t)
        out[name] = {"ms_per_lp": 1e3 * float(np.median(runs)) / len(problems)}
        print(f"lp {name}: {out[name]['ms_per_lp']:.3f} ms per LP", flush=True)
    # HiGHS' presolve on / off (local_polytope.PRESOLVE) on scene's graphs one by one and on one 30 x 30 grid, K 4
    grid = grid_example(rng.normal(size=(30, 30, 4)), rng.integers(0, 4, size=(30, 30)))
    gdata = GraphData([grid], n_states=4)
    gmodel = GraphCRFModel.for_data(gdata)
    gtn, gte = (t.numpy() for t in gmodel.scores(torch.as_tensor(rng.normal(size=gmodel.d)), gdata, torch.tensor([0])))
    presolve = {}
    for setting in ("on", "off"):
        local_polytope.PRESOLVE = setting
        local_polytope.clear_model_cache()
        times = {"scene_one_by_one_s": [], "grid_30x30_K4_s": []}
        for _ in range(3):
            t = time.perf_counter()
            for tn_, te_, e in scene:
                solve_lp(tn_, te_, e)
            times["scene_one_by_one_s"].append(time.perf_counter() - t)
            t = time.perf_counter()
            solve_lp(gtn, gte, grid.edges)
            times["grid_30x30_K4_s"].append(time.perf_counter() - t)
        presolve[setting] = {k: float(np.median(v)) for k, v in times.items()}
        print(f"lp presolve {setting}: {presolve[setting]}", flush=True)
    local_polytope.PRESOLVE = "off"
    local_polytope.clear_model_cache()
    out["presolve"] = presolve
    out["binary"] = binary_lp_costs(rng, scene)
    return out


def binary_lp_costs(rng, scene) -> dict:
    """K = 2: ms per LP by roof duality's max flow (oracles/roof_duality.py, what local_polytope_batch runs) against
    the simplex (solve_lp) on scene's graphs and on 30 x 30 and 100 x 100 grids (median of 3), and the largest
    difference of their optimal values (the same LP)."""
    cases = {"scene (6 nodes, 15 edges) x 300": scene}
    for side in (30, 100):
        g = grid_example(rng.normal(size=(side, side, 1)), rng.integers(0, 2, size=(side, side)))
        cases[f"grid {side} x {side}"] = [(rng.normal(size=(side * side, 2)), rng.normal(size=(len(g.edges), 2, 2)),
                                               g.edges)]
    out = {}
    for name, problems in cases.items():
        row, values = {}, {}
        for solver, solve in (("max_flow", lambda p: roof_dual_map(*p)[:2]), ("simplex", simplex_marginals)):
            runs = []
            for _ in range(3):
                t = time.perf_counter()
                sols = [solve(p) for p in problems]
                runs.append(time.perf_counter() - t)
            row[f"{solver}_ms_per_lp"] = 1e3 * float(np.median(runs)) / len(problems)
            values[solver] = np.array([(p[0] * mn).sum() + (p[1] * me).sum() for p, (mn, me) in zip(problems, sols)])
        row["speedup"] = row["simplex_ms_per_lp"] / row["max_flow_ms_per_lp"]
        row["largest_value_difference"] = float(np.abs(values["max_flow"] - values["simplex"]).max())
        out[name] = row
        print(f"lp binary {name}: max flow {row['max_flow_ms_per_lp']:.3f} ms, simplex {row['simplex_ms_per_lp']:.3f} "
              f"ms per LP (x{row['speedup']:.1f}), values differ by {row['largest_value_difference']:.1e}", flush=True)
    return out


def simplex_marginals(problem):
    tn, te, edges = problem
    x = solve_lp(tn, te, edges)
    N = tn.shape[0]
    return x[:2 * N].reshape(N, 2), x[2 * N:].reshape(te.shape)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", default=["scene", "multilabel", "ocr", "lp"],
                   choices=["scene", "multilabel", "ocr", "lp"])
    p.add_argument("--passes", type=float, default=20)
    p.add_argument("--lams", type=float, nargs="+", default=[1e-2, 3e-3, 1e-3, 3e-4])
    p.add_argument("--multilabel-lams", type=float, nargs="+", default=[1.0, 3e-1, 1e-1, 3e-2, 1e-2, 3e-3])
    p.add_argument("--ocr-lam", type=float, default=1e-2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    path = RESULTS / "graph_crf.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for part in args.parts:
        results[part] = {"scene": part_scene, "multilabel": part_multilabel, "ocr": part_ocr, "lp": part_lp}[part](args)
        results[part]["settings"] = {"passes": args.passes, "threads": args.threads}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(path)


if __name__ == "__main__":
    main()
