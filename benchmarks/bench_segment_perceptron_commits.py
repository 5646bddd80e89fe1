"""The structured perceptron on semi-Markov segmentations at this checkout against an earlier commit, side by side in
one run through the API users call (``train_perceptron``, batch size 1, averaged, from w = 0): an epoch on
CoNLL-2000's 8,936 training sentences as chunk segmentations (``conll2000-segments``: segments of up to L words,
the outside label's of one, d = 12.1M; ``ssvm-train --dataset conll2000-segments --solver perceptron``'s task), and
one on its first 1,000 sentences. The generic loop took each step in torch operations around the compiled decoder;
a SemiMarkovModel epoch on CPU float64 is now one compiled call (ssvm_torch/stores/segment_perceptron.py). One
thread; per side the median over rounds of each round's median.

Usage: python benchmarks/bench_segment_perceptron_commits.py --baseline e4b8428 [--rounds 2] [--calls 1]
       [--out benchmarks/results/segment_perceptron_commits.json]
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
    task = load_task("conll2000-segments")
    few = task.train.subset(torch.arange(1000))
    out["cases"][f"epoch, conll2000-segments ({task.train.n} sentences)"] = median_ms(
        lambda: train_perceptron(task.model, task.train, PerceptronConfig(epochs=1)), calls)
    out["cases"][f"epoch, conll2000-segments ({few.n} sentences)"] = median_ms(
        lambda: train_perceptron(task.model, few, PerceptronConfig(epochs=1)), max(calls, 3))
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/segment_perceptron_commits.json",
                       calls=1, dtype="float64", rounds=2)
