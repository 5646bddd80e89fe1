"""GraphCRFModel's LP oracle at this checkout against an earlier commit, through the API users call, side by side in
one run: BCFW block steps on scene's complete label graphs (one LP per step) and on OCR words as letter chains
(max-sum per step), the same with pairwise steps and the cache (labeling keys on every step), through the store
``make_store`` picks (the compiled host structure on CPU float64 since
stores/host_graph_crf.py; the torch model before), a batched oracle pass over them (the
baseline's LPs over disjoint unions, one cached LP per structure now) and single oracle calls on a 10 x 10 grid
with K = 3 (one LP of 1,920 variables) and on a 30 x 30 grid with K = 2 (one LP of 8,760 variables), float64, one
torch thread.

Method: commits.cases_side_by_side (each side in its own worker process on its own checkout, the sides alternated
over rounds; the figure per side is the median over rounds of each round's median of ``--calls`` timed calls).

Usage: python benchmarks/bench_graph_crf_commits.py --baseline 92ab1ec [--rounds 5] [--calls 5]
       [--out benchmarks/results/graph_crf_commits.json]
       (the host structure against the torch store: --baseline 920d687
        --out benchmarks/results/graph_crf_host_commits.json)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402


def worker(calls: int) -> dict:
    """One side's medians (ms) per case, in this process."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch import Solver, SolverConfig, make_store
    from ssvm_torch.data import GraphData
    from ssvm_torch.data.graph_views import grid_example, ocr_graphs, scene_graphs
    from ssvm_torch.models import GraphCRFModel
    out = {"module": ssvm_torch.__file__, "cases": {}}
    train, _ = scene_graphs()
    scene = train.subset(np.random.default_rng(0).permutation(train.n)[:200])
    model = GraphCRFModel.for_data(scene)
    w = torch.as_tensor(np.random.default_rng(1).normal(size=model.d) * 0.1)

    def bcfw_pass():
        Solver(make_store(model, scene, 3e-3), SolverConfig(solver="bcfw", sampling="perm", passes=1,
                                                           gap_check=10, seed=0)).run()
    out["cases"]["scene_200_graphs_one_bcfw_pass"] = median_ms(bcfw_pass, calls)
    words, _ = ocr_graphs("small")
    words = words.subset(np.arange(200))
    chain_model = GraphCRFModel.for_data(words)

    def chain_pass():
        Solver(make_store(chain_model, words, 1e-2), SolverConfig(solver="bcfw", sampling="perm", passes=1,
                                                                  gap_check=10, seed=0)).run()
    out["cases"]["ocr_200_word_chains_one_bcfw_pass"] = median_ms(chain_pass, calls)

    def cached_pairwise(m, data, lam):                 # the latent SSVM's inner configuration: keys on every step
        return lambda: Solver(make_store(m, data, lam), SolverConfig(solver="bcfw", sampling="perm", passes=2,
                                                                     step="pairwise", cache=True, gap_check=10,
                                                                     seed=0)).run()
    out["cases"]["ocr_200_word_chains_two_pairwise_cached_passes"] = median_ms(
        cached_pairwise(chain_model, words, 1e-2), calls)
    out["cases"]["scene_200_graphs_two_pairwise_cached_passes"] = median_ms(cached_pairwise(model, scene, 3e-3), calls)
    out["cases"]["scene_200_graphs_batched_oracle"] = median_ms(
        lambda: model.oracle(w, scene, torch.arange(scene.n)), calls)
    rng = np.random.default_rng(2)
    grid = GraphData([grid_example(rng.normal(size=(10, 10, 4)), rng.integers(0, 3, size=(10, 10)))], n_states=3)
    gmodel = GraphCRFModel.for_data(grid)
    gw = torch.as_tensor(rng.normal(size=gmodel.d))
    out["cases"]["grid_10x10_K3_oracle"] = median_ms(lambda: gmodel.oracle(gw, grid, torch.tensor([0])), calls)
    binary = GraphData([grid_example(rng.normal(size=(30, 30, 4)), rng.integers(0, 2, size=(30, 30)))], n_states=2)
    bmodel = GraphCRFModel.for_data(binary)
    bw = torch.as_tensor(rng.normal(size=bmodel.d))
    out["cases"]["grid_30x30_K2_oracle"] = median_ms(lambda: bmodel.oracle(bw, binary, torch.tensor([0])), calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/graph_crf_commits.json", argv, calls=5,
                       dtype="float64")


if __name__ == "__main__":
    main()
