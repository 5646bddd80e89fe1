"""The exact MAP of loopy graphs (``GraphCRFModel(inference="exact")``: the LP, then branch and bound where it is
fractional) at this checkout against an earlier commit, through the API users call, side by side in one run: the
oracle of one 4-connected n x n grid with K = 3 states, 3 node features and 2 edge features drawn from seed 0, at
weights N(0, 1) scaled so that the edge tables weigh s against the unaries (s = 1.5 and 2, where the LP is
fractional), one thread.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_exact_map_commits.py --baseline ac54edb [--rounds 5] [--calls 7]
       [--out benchmarks/results/exact_map_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

CASES = [(8, 1.5), (8, 2.0), (12, 1.5), (12, 2.0)]       # each grid's LP fractional at these weights


def worker(calls: int) -> dict:
    """One side's medians (ms) of the exact oracle per case, in this process."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.data.examples import GraphData, GraphExample
    from ssvm_torch.models.graph_crf import GraphCRFModel
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for n, s in CASES:
        rng = np.random.default_rng([n, int(10 * s)])
        idx = np.arange(n * n).reshape(n, n)
        edges = np.array([(idx[r, c], idx[r, c + 1]) for r in range(n) for c in range(n - 1)]
                         + [(idx[r, c], idx[r + 1, c]) for r in range(n - 1) for c in range(n)])
        data = GraphData([GraphExample(rng.standard_normal((n * n, 3)), edges, rng.standard_normal((len(edges), 2)),
                                       rng.integers(0, 3, n * n))], n_states=3)
        model = GraphCRFModel.for_data(data, inference="exact")
        w = torch.as_tensor(rng.standard_normal(model.d))
        w[model.d_unary:] *= s * n * n                     # the 1/N of phi: edge tables of weight s per edge
        w[:model.d_unary] *= n * n
        i = torch.tensor([0])
        out["cases"][f"{n}x{n} s={s}"] = median_ms(lambda: model.oracle(w, data, i), calls)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/exact_map_commits.json", calls=7,
                       dtype="float64")
