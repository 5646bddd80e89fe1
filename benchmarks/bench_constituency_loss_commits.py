"""ConstituencyTree's three training losses + backward against gold trees, through the API users call
(``ConstituencyTree(loss)(span_scores, charts)``, the backward to the span scores) at this checkout against an
earlier commit, side by side in one run: B 32 sentences of 40 words unlabeled and with 8 labels, B 16 of 80 words
unlabeled (float32); the compiled CPU kernels, one torch and one numba thread. The gold of each row is the best tree
of its scores plus noise; each call checks it (``check_charts``) and scores it.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_constituency_loss_commits.py --baseline 0123abc [--rounds 5] [--calls 15]
       [--out benchmarks/results/constituency_loss_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, n, labels or None)
CASES = [(32, 40, None), (32, 40, 8), (16, 80, None)]
LOSSES = ("crf", "hinge", "softmax_margin")


def worker(calls: int) -> dict:
    """One side's medians (ms) of each loss + backward per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import ConstituencyTree
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, n, L in CASES:
        g = torch.Generator().manual_seed(0)
        S = torch.randn(B, n + 1, n + 1, generator=g)
        lab = None if L is None else torch.randn(B, n + 1, n + 1, L, generator=g)
        noisy = None if lab is None else lab + torch.randn(lab.shape, generator=g)
        charts = ConstituencyTree().decode(S + torch.randn(S.shape, generator=g), label_scores=noisy)
        for loss in LOSSES:
            layer = ConstituencyTree(loss)

            def call():
                s = S.clone().requires_grad_(True)
                layer(s, charts, label_scores=lab, reduction="sum").backward()

            out["cases"][f"{loss}_B{B}_n{n}{'' if L is None else f'_L{L}'}"] = median_ms(call, calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/constituency_loss_commits.json", argv)


if __name__ == "__main__":
    main()
