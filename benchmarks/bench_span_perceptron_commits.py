"""The structured perceptron on labeled binary constituency trees at this checkout against an earlier commit, side by
side in one run through the API users call (``train_perceptron``, batch size 1, averaged, from w = 0): an epoch on
UD English-EWT's constituency trees (``ud-ewt-spans``: its training sentences, Hall et al. 2014's surface features
with inside means, d = 13.6M; ``ssvm-train --dataset ud-ewt-spans --solver perceptron``'s task), and one on its first
1,000 sentences. The generic loop took each step in torch operations around the compiled CKY; a ConstituencyModel
epoch on CPU float64 is now one compiled call (ssvm_torch/oracles/span_perceptron.py). One thread; per side the
median over rounds of each round's median.

Usage: python benchmarks/bench_span_perceptron_commits.py --baseline e07abe8 [--rounds 2] [--calls 1]
       [--out benchmarks/results/span_perceptron_commits.json]
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
    task = load_task("ud-ewt-spans")
    few = task.train.subset(torch.arange(1000))
    out["cases"][f"epoch, ud-ewt-spans ({task.train.n} sentences)"] = median_ms(
        lambda: train_perceptron(task.model, task.train, PerceptronConfig(epochs=1)), calls)
    out["cases"][f"epoch, ud-ewt-spans ({few.n} sentences)"] = median_ms(
        lambda: train_perceptron(task.model, few, PerceptronConfig(epochs=1)), max(calls, 3))
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/span_perceptron_commits.json",
                       calls=1, dtype="float64", rounds=2)
