"""The loss-augmented structured perceptron on trees and segmentations at this checkout against an earlier commit,
side by side in one run through the API users call (``train_perceptron(..., PerceptronConfig(loss_augmented=True))``,
batch size 1, averaged, from w = 0): an epoch on UD English-EWT's 12,544 training sentences as first-order
projective trees (McDonald's features, d = 2.8M; Eisner), as non-projective trees (Chu-Liu-Edmonds) and as
second-order trees (McDonald & Pereira 2006's sibling features with first-child parts, d = 3.1M), on its 12,256
phrase-structure trees (``ud-ewt-spans``, d = 13.6M) and on CoNLL-2000's 8,936 sentences as chunk segmentations
(``conll2000-segments``, d = 12.1M): the tasks of ``ssvm-train --solver perceptron --loss-augmented``. The generic
loop took each step through the model's oracle (torch operations around the compiled decoders); these epochs on
CPU float64 are now one compiled call each (ssvm_torch/oracles/tree_perceptron.py, span_perceptron.py,
stores/sibling_perceptron.py, segment_perceptron.py). One thread; per side the median over rounds of each round's
median.

Usage: python benchmarks/bench_perceptron_augmented_commits.py --baseline 0981073 [--rounds 2] [--calls 1]
       [--out benchmarks/results/perceptron_augmented_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_perceptron_structures_commits import epoch_cases  # noqa: E402
from commits import cases_side_by_side  # noqa: E402

#: (label, task, options)
TASKS = (("ud-ewt first-order projective trees", "ud-ewt", {"trees": "projective"}),
         ("ud-ewt first-order non-projective trees", "ud-ewt", {"trees": "non-projective"}),
         ("ud-ewt second-order trees", "ud-ewt", {"trees": "second-order"}),
         ("ud-ewt-spans constituency trees", "ud-ewt-spans", {}),
         ("conll2000-segments", "conll2000-segments", {}))


def worker(calls: int) -> dict:
    return epoch_cases(TASKS, calls, loss_augmented=True, first=None)


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/perceptron_augmented_commits.json",
                       calls=1, dtype="float64", rounds=2)
