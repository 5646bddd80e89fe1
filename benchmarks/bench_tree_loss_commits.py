"""DependencyTree's three training losses + backward, with relation scores (the biaffine parser's head) and without
(relations 0: arc scores alone), through the API users call (``DependencyTree(loss=...)(arc_scores, heads,
label_scores=..., labels=...)``, the backward to every score tensor) at this checkout against an earlier commit,
side by side in one run: B 32 sentences of 40 words with UD's 37 relations or none, projective and not (float32);
the compiled CPU kernels, one torch and one numba thread.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_tree_loss_commits.py --baseline 0123abc [--rounds 5] [--calls 15]
       [--out benchmarks/results/tree_loss_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, n, relations, projective)
CASES = [(32, 40, 37, True), (32, 40, 37, False), (32, 40, 0, True), (32, 40, 0, False)]
LOSSES = ("crf", "hinge", "softmax_margin")


def worker(calls: int) -> dict:
    """One side's medians (ms) of each loss + backward per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import DependencyTree
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, n, L, projective in CASES:
        g = torch.Generator().manual_seed(0)
        S = torch.randn(B, n + 1, n + 1, generator=g)
        lab = torch.randn(B, n + 1, n + 1, L, generator=g) if L else None
        heads = DependencyTree(projective=projective).decode(S + torch.randn(S.shape, generator=g)).clamp(min=0)
        labels = torch.randint(0, L, (B, n + 1), generator=g) if L else None
        for loss in LOSSES:
            layer = DependencyTree(projective=projective, loss=loss)

            def call():
                s = S.clone().requires_grad_(True)
                la = None if lab is None else lab.clone().requires_grad_(True)
                layer(s, heads, label_scores=la, labels=labels, reduction="sum").backward()

            kind = "projective" if projective else "nonprojective"
            out["cases"][f"{loss}_B{B}_n{n}_L{L}_{kind}"] = median_ms(call, calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/tree_loss_commits.json", argv)


if __name__ == "__main__":
    main()
