"""Compact integral labelings of GraphCRFModel against an earlier commit, side by side through the API users call:
BCFW with gap sampling, pairwise steps and the cache (the latent SSVM's inner configuration) on OCR-small's 626
words as letter chains with two hidden states per letter (K = 52, the k-means completion of
ssvm_torch.latent_graph.substate_data), ``--passes`` passes, float64, one torch thread.

Each side runs in its own process on its own checkout (commits.alternated_rounds); a side reports its wall
seconds, its peak resident memory (``ru_maxrss``), the corners its active sets hold and the bytes of their
labelings, and the final duality gap (equal on both sides: the same run).

Usage: python benchmarks/bench_graph_labelings.py --baseline c023f0e [--rounds 2] [--passes 10]
       [--out benchmarks/results/graph_labelings_commits.json]
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import side_by_side_rounds, write_side_by_side  # noqa: E402


def worker(passes: float) -> dict:
    import resource
    import time

    import numpy as np
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch import Solver, SolverConfig, make_store
    from ssvm_torch.data.graph_views import ocr_graphs
    from ssvm_torch.latent_graph import substate_data, substate_labels
    from ssvm_torch.models import GraphCRFModel
    train, _ = ocr_graphs("small")
    data = substate_data(train, 2, seed=0)
    model = GraphCRFModel.for_data(data, state_labels=substate_labels(train.n_states, 2))
    t0 = time.perf_counter()
    solver = Solver(make_store(model, data, 1.0 / data.n), SolverConfig(solver="bcfw", sampling="gap", step="pairwise",
                                                                        cache=True, passes=passes, gap_check=10,
                                                                        seed=0))
    history = solver.run()
    seconds = time.perf_counter() - t0
    sets = solver.sets or []                          # the pairwise steps' active sets
    corners = sum(len(bs.labels) for bs in sets)
    nbytes = sum(np.asarray(y).nbytes for bs in sets for y in bs.labels)
    return {"module": ssvm_torch.__file__, "seconds": seconds, "gap": float(history[-1]["gap"]),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "corners": corners,
            "labeling_mb": nbytes / 2 ** 20}


def main(argv=None) -> None:
    got = side_by_side_rounds(Path(__file__), __doc__, worker, "benchmarks/results/graph_labelings_commits.json", argv,
                              rounds=2, knob=("--passes", float, 10))
    if got is None:
        return
    args, revs, rounds = got
    table = {key: {side: statistics.median(r[key] for r in rounds[side]) for side in rounds}
             for key in ("seconds", "peak_rss_mb", "corners", "labeling_mb", "gap")}
    for key, row in table.items():
        print(f"{key}: current {row['current']:.4g}, baseline {row['baseline']:.4g}", flush=True)
    write_side_by_side(args.out, revs, args.rounds, 1, table, rounds, dtype="float64", threads=1,
                       case=f"OCR-small, K = 52, {args.passes:g} passes of BCFW (gap sampling, pairwise, cache)")


if __name__ == "__main__":
    main()
