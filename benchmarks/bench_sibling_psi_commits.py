"""The second-order dependency model's psi at this checkout against an earlier commit, side by side in one run
through the API users call: an epoch of the averaged perceptron (``train_perceptron``) on the first 300 training
sentences of UD English-EWT with the McDonald-Pereira sibling template (every update adds psi twice, to w and the
lagged sum: ``add_psi``), and ``phi`` of 8 sentences' gold trees (the generic stores' and the tests' dense form).
The part ids were looked up one part at a time (``sibling_part_ids``: scalar torch ops per item); they are looked
up for every part of a batch at once now (``sibling_ids``). One thread; per side the median over rounds of each
round's median.

Usage: python benchmarks/bench_sibling_psi_commits.py --baseline 0a33928 [--rounds 3] [--calls 2]
       [--out benchmarks/results/sibling_psi_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402


def worker(calls: int) -> dict:
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
    from ssvm_torch.tasks import load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}
    task = load_task("ud-ewt", train_size=300, trees="second-order")
    model, data = task.model, task.train
    out["cases"]["perceptron epoch, ud-ewt second-order, 300 sentences"] = median_ms(
        lambda: train_perceptron(model, data, PerceptronConfig(epochs=1)), calls)
    small = load_task("ud-ewt", train_size=40, features="basic", trees="second-order")
    idx = torch.arange(8)
    gold = small.model.gt_batch(small.train, idx)
    out["cases"]["phi of 8 gold trees (d = %d)" % small.model.d] = median_ms(
        lambda: small.model.phi(small.train, idx, gold), max(calls, 5))
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/sibling_psi_commits.json", calls=2,
                       dtype="float64", rounds=3)
