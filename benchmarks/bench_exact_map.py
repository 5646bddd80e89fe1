"""The exact MAP of loopy pairwise graphs (oracles/local_polytope.py's ``solve_graph(..., exact=True)``: the LP, then
branch and bound over it where the LP is fractional) against enumeration, against HiGHS' own MIP solver on the same
integer program, and its cost against the LP relaxation's; one CPU thread.

* ``small``: random frustrated graphs of 3-7 nodes (each pair an edge with probability 0.7), K = 2, 3, 4, weak
  unaries (0.3 N(0, 1)) and repulsive edges (N(0, 1) - 2 on equal states), where the LP is often fractional. For
  each graph: the enumerated optimum, branch and bound's labeling, and HiGHS' MIP (the local polytope with integer
  node columns, ``mip_rel_gap`` 0) with presolve on and off; counts of labelings below the optimum (by 1e-9).
* ``grids``: 4-connected n x n grids, K = 3, unaries N(0, 1), edge tables s N(0, 1) for s = 0.5, 1, 1.5: the LP's
  time, branch and bound's time, whether the LP was fractional and the two values (median over seeds).

Writes benchmarks/results/exact_map.json.
Usage: python benchmarks/bench_exact_map.py [--graphs 200] [--grid-sizes 8 12 16] [--seeds 5]
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.models.graph_crf import enumerate_map
from ssvm_torch.oracles.local_polytope import local_polytope_constraints, solve_graph


def value(tn, te, edges, y) -> float:
    return float(tn[np.arange(len(y)), y].sum() + te[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum())


def highs_mip(tn, te, edges, presolve: str) -> np.ndarray:
    """HiGHS' MIP on the local polytope with integer node columns (a fresh model, default tolerances)."""
    import highspy
    N, K = tn.shape
    A, b = local_polytope_constraints(N, edges, K)
    A = A.tocsc()
    h = highspy.Highs()
    for name, v in (("output_flag", False), ("mip_rel_gap", 0.0), ("presolve", presolve), ("threads", 1)):
        h.setOptionValue(name, v)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.concatenate([tn.ravel(), te.ravel()])
    lp.col_lower_, lp.col_upper_ = np.zeros(A.shape[1]), np.full(A.shape[1], highspy.kHighsInf)
    lp.row_lower_, lp.row_upper_ = b, b
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.integrality_ = [highspy.HighsVarType.kInteger] * (N * K) + [highspy.HighsVarType.kContinuous] * (A.shape[1]
                                                                                                      - N * K)
    h.passModel(lp)
    h.run()
    return np.asarray(h.getSolution().col_value)[:N * K].reshape(N, K).argmax(1)


def part_small(n_graphs: int) -> dict:
    out = {}
    for K in (2, 3, 4):
        rng = np.random.default_rng(K)
        below = {"branch_and_bound": 0, "highs_mip_presolve_on": 0, "highs_mip_presolve_off": 0}
        seconds = {k: 0.0 for k in below}
        fractional = 0
        for _ in range(n_graphs):
            N = int(rng.integers(3, 8))
            pairs = np.array(list(itertools.combinations(range(N), 2)))
            edges = pairs[rng.random(len(pairs)) < 0.7]
            edges = edges if len(edges) else pairs[:1]
            tn, te = 0.3 * rng.standard_normal((N, K)), rng.standard_normal((len(edges), K, K)) - 2.0 * np.eye(K)
            best = value(tn, te, edges, enumerate_map(tn, te, edges)[0].argmax(1))
            fractional += not solve_graph(tn, te, edges, False)[2]
            for name, solve in (("branch_and_bound", lambda: solve_graph(tn, te, edges, False, True)[0].argmax(1)),
                                ("highs_mip_presolve_on", lambda: highs_mip(tn, te, edges, "on")),
                                ("highs_mip_presolve_off", lambda: highs_mip(tn, te, edges, "off"))):
                t0 = time.perf_counter()
                y = solve()
                seconds[name] += time.perf_counter() - t0
                below[name] += value(tn, te, edges, y) < best - 1e-9
        out[f"K={K}"] = {"graphs": n_graphs, "lp_fractional": fractional, "below_the_optimum": below,
                         "ms_per_graph": {k: 1e3 * v / n_graphs for k, v in seconds.items()}}
        print(f"K={K}: {fractional} of {n_graphs} LPs fractional; below the optimum {below}; ms per graph "
              f"{ {k: round(v, 2) for k, v in out[f'K={K}']['ms_per_graph'].items()} }", flush=True)
    return out


def part_grids(sizes, seeds: int) -> dict:
    out = {}
    for n in sizes:
        idx = np.arange(n * n).reshape(n, n)
        edges = np.array([(idx[r, c], idx[r, c + 1]) for r in range(n) for c in range(n - 1)]
                         + [(idx[r, c], idx[r + 1, c]) for r in range(n - 1) for c in range(n)])
        for s in (0.5, 1.0, 1.5):
            rows = []
            for seed in range(seeds):
                rng = np.random.default_rng([n, int(10 * s), seed])
                tn, te = rng.standard_normal((n * n, 3)), s * rng.standard_normal((len(edges), 3, 3))
                t0 = time.perf_counter()
                mu_n, mu_e, integral = solve_graph(tn, te, edges, False)
                t_lp = time.perf_counter() - t0
                t0 = time.perf_counter()
                y = solve_graph(tn, te, edges, False, True)[0].argmax(1)      # the LP first, then branch and bound
                t_exact = time.perf_counter() - t0
                rows.append((t_lp, t_exact, integral, float((mu_n * tn).sum() + (mu_e * te).sum()),
                             value(tn, te, edges, y)))
            key = f"{n}x{n} s={s}"
            out[key] = {"lp_ms_median": 1e3 * float(np.median([r[0] for r in rows])),
                        "exact_ms_median": 1e3 * float(np.median([r[1] for r in rows])),
                        "lp_integral": int(sum(r[2] for r in rows)), "seeds": seeds,
                        "lp_minus_exact_value": [r[3] - r[4] for r in rows]}
            print(f"{key}: LP {out[key]['lp_ms_median']:.1f} ms, exact {out[key]['exact_ms_median']:.1f} ms, "
                  f"LP integral on {out[key]['lp_integral']} of {seeds}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", type=int, default=200)
    ap.add_argument("--grid-sizes", type=int, nargs="+", default=[8, 12, 16])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/exact_map.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from importlib.metadata import version
    result = {"machine": platform.machine(), "highspy": version("highspy"),
              "small": part_small(args.graphs), "grids": part_grids(args.grid_sizes, args.seeds)}
    atomic_write_bytes(Path(args.out), (json.dumps(result, indent=1) + "\n").encode())
    print("wrote", args.out)


if __name__ == "__main__":
    main()
