"""Soft-DTW value + gradient through the API users call (``from_similarity(-cost)``, ``align.log_partition``, the
backward to the costs) at this checkout against an earlier commit, side by side in one run: global paths at B 32 of
64 x 64 and 128 x 128 cells and B 8 of 256 x 256 (float64 and float32), local paths at B 32 of 128 x 128; the
compiled CPU kernels, one torch and one numba thread.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_alignment_commits.py --baseline 0123abc [--rounds 5] [--calls 15]
       [--out benchmarks/results/alignment_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, N, M, dtype, local)
CASES = [(32, 64, 64, "float64", False), (32, 128, 128, "float64", False), (32, 128, 128, "float32", False),
         (8, 256, 256, "float64", False), (32, 128, 128, "float64", True)]


def worker(calls: int) -> dict:
    """One side's medians (ms) of soft-DTW value + gradient per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.align import log_partition
    from ssvm_torch.nn import from_similarity
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, N, M, dtype, local in CASES:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(B, N, 8, generator=g, dtype=getattr(torch, dtype))
        y = torch.randn(B, M, 8, generator=g, dtype=getattr(torch, dtype))
        cost = ((x[:, :, None] - y[:, None]) ** 2).sum(-1)

        def call():
            c = cost.clone().requires_grad_(True)
            (-log_partition(from_similarity(-c), local=local)).sum().backward()

        out["cases"][f"B{B}_{N}x{M}_{dtype}{'_local' if local else ''}"] = median_ms(call, calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/alignment_commits.json", argv)


if __name__ == "__main__":
    main()
