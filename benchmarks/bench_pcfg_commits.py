"""The PCFG's log Z + backward and best tree at this checkout against an earlier commit, side by side in one run
(``benchmarks/commits.py``): each side in its own worker process over the same float32 grammars as
``bench_pcfg.py`` (log-softmax normalized, Kim et al. 2019's NT 30 / T 60 and a small NT 10 / T 20), one thread,
medians over ``--calls`` calls per round and over ``--rounds`` alternated rounds.

Usage: python benchmarks/bench_pcfg_commits.py --baseline REV [--rounds 5] [--calls 5]
       [--out benchmarks/results/pcfg_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

# (B, n, NT, T)
CASES = [(8, 20, 30, 60), (4, 40, 30, 60), (16, 30, 10, 20)]


def worker(calls: int) -> dict:
    """One side's medians (ms) of log Z + backward and of the best tree per case, in this process."""
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.spans import pcfg_decode, pcfg_log_partition
    out = {"module": ssvm_torch.__file__, "cases": {}}
    for B, n, NT, T in CASES:
        g = torch.Generator().manual_seed(0)
        S = NT + T
        terms = torch.randn(B, n, T, generator=g).log_softmax(-1)
        rules = torch.randn(B, NT, S * S, generator=g).log_softmax(-1).view(B, NT, S, S)
        roots = torch.randn(B, NT, generator=g).log_softmax(-1)

        def logz():
            x, r = terms.clone().requires_grad_(True), rules.clone().requires_grad_(True)
            pcfg_log_partition(x, r, roots).sum().backward()

        name = f"B {B} n {n} NT {NT} T {T}"
        out["cases"][f"{name}: log Z + backward"] = median_ms(logz, calls)
        out["cases"][f"{name}: best tree"] = median_ms(lambda: pcfg_decode(terms, rules, roots), calls)
    return out


def main(argv=None):
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/pcfg_commits.json", argv, calls=5)


if __name__ == "__main__":
    main()
