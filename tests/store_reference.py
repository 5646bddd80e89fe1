"""The check several graph tests share: the compiled dense store (stores/host_graph_crf.py through
stores/dense_compiled.py) runs a seeded solver exactly as the torch store does."""
import torch

from ssvm_torch import Solver, SolverConfig
from ssvm_torch.stores import CompiledDenseDual, make_store

PAIRWISE_CACHED = SolverConfig(passes=6, gap_check=2, seed=4, step="pairwise", cache=True)


def assert_compiled_store_is_the_torch_store(model, data, lam: float = 0.2, config: SolverConfig = PAIRWISE_CACHED,
                                             block_gaps: bool = True) -> None:
    """Both stores of ``model`` on ``data``: the numba one compiled, every record's gap and primal and the final w
    (and the block gaps of a gap pass) equal to 1e-10."""
    a, b = (make_store(model, data, lam, kernels=k) for k in ("numba", "torch"))
    assert isinstance(a, CompiledDenseDual) and not isinstance(b, CompiledDenseDual)
    for ra, rb in zip(Solver(a, config).run(), Solver(b, config).run()):
        assert abs(ra["gap"] - rb["gap"]) <= 1e-10 and abs(ra["primal"] - rb["primal"]) <= 1e-10
    torch.testing.assert_close(a.w, b.w, rtol=0, atol=1e-10)
    if block_gaps:
        torch.testing.assert_close(a.gap_pass().block_gaps, b.gap_pass().block_gaps, rtol=0, atol=1e-10)
