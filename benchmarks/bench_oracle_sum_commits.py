"""The loss-augmented perceptron on the models whose oracle built phi densely, at this checkout against an earlier
commit, side by side in one run through the API users call (``train_perceptron(..., loss_augmented=True)``,
averaged): CoNLL-2000 as semi-Markov segmentations (d = 12.1M; its first 8 sentences, batch size 1), as a linear
chain at batch size 4 (d = 7.4M; 40 sentences: batch size 1 takes the compiled epochs), and UD English-EWT's
constituency trees (d = 13.6M; 40 sentences). StructuredModel.oracle computed H_i = L_i(y*) - <w, psi_i(y*)> from
two dense (B, d) phi; it now sums the decoded and gold labelings' part scores from the decoder's own scores
(``labeling_scores``). One thread; per side the median over rounds of each round's median.

Usage: python benchmarks/bench_oracle_sum_commits.py --baseline 6db80ee [--rounds 2] [--calls 1]
       [--out benchmarks/results/oracle_sum_commits.json]
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
    for name, n, batch in (("conll2000-segments", 8, 1), ("conll2000", 40, 4), ("ud-ewt-spans", 40, 1)):
        task = load_task(name)
        few = task.train.subset(torch.arange(n))
        cfg = PerceptronConfig(epochs=1, loss_augmented=True, batch_size=batch)
        out["cases"][f"loss-augmented epoch, {name} ({n} sentences, batch {batch}, d = {task.model.d})"] = median_ms(
            lambda: train_perceptron(task.model, few, cfg), calls)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/oracle_sum_commits.json", calls=1,
                       dtype="float64", rounds=2)
