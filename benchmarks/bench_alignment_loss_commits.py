"""MonotonicAlignment's three training losses + backward against gold paths, through the API users call
(``MonotonicAlignment(loss)(from_similarity(sim), gold)``, the backward to the similarity) at this checkout against
an earlier commit, side by side in one run: global paths at B 32 of 64 x 64 (float32 and float64) and 128 x 128
(float32), local paths at B 32 of 128 x 128 (float32); the compiled CPU kernels, one torch and one numba thread.
The gold of each row is the best path of its scores plus noise; each call checks it (``check_path``) and scores it.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_alignment_loss_commits.py --baseline 0123abc [--rounds 5] [--calls 15]
       [--out benchmarks/results/alignment_loss_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, N, M, dtype, local)
CASES = [(32, 64, 64, "float32", False), (32, 64, 64, "float64", False), (32, 128, 128, "float32", False),
         (32, 128, 128, "float32", True)]
LOSSES = ("crf", "hinge", "softmax_margin")


def worker(calls: int) -> dict:
    """One side's medians (ms) of each loss + backward per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.align import decode
    from ssvm_torch.nn import MonotonicAlignment, from_similarity
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, N, M, dtype, local in CASES:
        g = torch.Generator().manual_seed(0)
        sim = torch.randn(B, N, M, generator=g, dtype=getattr(torch, dtype))
        gold = decode(from_similarity(sim + torch.randn(sim.shape, generator=g, dtype=sim.dtype)), local=local)
        for loss in LOSSES:
            layer = MonotonicAlignment(loss, local=local)

            def call():
                s = sim.clone().requires_grad_(True)
                layer(from_similarity(s), gold, reduction="sum").backward()

            out["cases"][f"{loss}_B{B}_{N}x{M}_{dtype}{'_local' if local else ''}"] = median_ms(call, calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/alignment_loss_commits.json", argv)


if __name__ == "__main__":
    main()
