"""DependencyTree(projective=False).sample at this checkout against an earlier commit, through the API users call,
side by side in one run: B 32 single-root sentences of n words (full length), float32 random arc scores (and the
same x 20: about 160 nats apart), k samples per sentence, one torch and one numba thread, the compiled sampler.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_tree_sampling_commits.py --baseline 122c063 [--rounds 5] [--calls 15]
       [--out benchmarks/results/tree_sampling_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

CASES = [(32, n, k, scale) for n in (20, 40) for k in (1, 16) for scale in (1, 20)]


def worker(calls: int) -> dict:
    """One side's medians (ms) of the non-projective samples per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import DependencyTree
    layer = DependencyTree(projective=False)
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, n, k, scale in CASES:
        S = torch.randn(B, n + 1, n + 1, generator=torch.Generator().manual_seed(0)) * scale
        lengths = torch.full((B,), n)
        out["cases"][f"B{B}_n{n}_k{k}_x{scale}"] = median_ms(lambda: layer.sample(S, lengths=lengths, n=k), calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/tree_sampling_commits.json", argv)


if __name__ == "__main__":
    main()
