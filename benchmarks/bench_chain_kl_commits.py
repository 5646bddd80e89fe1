"""LinearChain.kl + backward of two constrained chains at this checkout against an earlier commit, through the API
users call, side by side in one run: a teacher p and a student q, both under the BIO constraints (K 9: four chunk
types; K 45: BIOES over eleven), float32 emissions of B rows of T positions (full masks), the gradient of the summed
KL w.r.t. both emissions and both layers' parameters, one torch and one numba thread.

Each side runs in its own worker process importing its checkout's package (``commits.py``: a temporary git
worktree of the earlier commit), the sides alternated over rounds after one warm-up run each; a worker times every
call ``--calls`` times after one untimed call. The figure per side is the median over rounds of each round's median.

Usage: python benchmarks/bench_chain_kl_commits.py --baseline 8966863~1 [--rounds 5] [--calls 15]
       [--out benchmarks/results/chain_kl_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, T, scheme, chunk types): K = 2 * types + 1 (BIO) or 4 * types + 1 (BIOES)
CASES = [(64, 50, "BIO", 4), (16, 100, "BIO", 4), (8, 50, "BIOES", 11)]


def worker(calls: int) -> dict:
    """One side's medians (ms) of KL + backward per case, in this process."""
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.nn import LinearChain, allowed_transitions
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, T, scheme, types in CASES:
        inner = ["B", "I"] if scheme == "BIO" else ["B", "I", "E", "S"]
        tags = ["O"] + [f"{p}-T{c}" for c in range(types) for p in inner]
        K = len(tags)
        torch.manual_seed(0)
        p, q = (LinearChain(K, batch_first=True, loss="crf", constraints=allowed_transitions(scheme, tags))
                for _ in range(2))
        g = torch.Generator().manual_seed(1)
        E = torch.randn(B, T, K, generator=g).requires_grad_()
        Q = torch.randn(B, T, K, generator=g).requires_grad_()

        def call():
            p.zero_grad(set_to_none=True)
            q.zero_grad(set_to_none=True)
            E.grad = Q.grad = None
            p.kl(E, Q, other=q).sum().backward()

        out["cases"][f"B{B}_T{T}_K{K}_{scheme}"] = median_ms(call, calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/chain_kl_commits.json", argv)


if __name__ == "__main__":
    main()
