"""The structured perceptron on second-order dependency trees, constituency trees and semi-Markov segmentations at
this checkout against an earlier commit, side by side in one run through the API users call (``train_perceptron``,
batch size 1, averaged, from w = 0): an epoch on UD English-EWT's 12,544 training sentences as second-order trees
(McDonald & Pereira 2006's sibling features with first-child parts, d = 3.1M), on its 12,256 phrase-structure trees
(Hall et al. 2014's surface features with inside means, d = 13.6M) and on CoNLL-2000's 8,936 sentences as chunk
segmentations (d = 12.1M), the tasks of ``ssvm-train --solver perceptron`` with ``--trees second-order``,
``--dataset ud-ewt-spans`` and ``--dataset conll2000-segments``; and each on its first 1,000 sentences (where each
call's O(d) setup weighs more). The generic loop took each step in torch operations around the compiled decoders;
these models' epochs on CPU float64 are now one compiled call each (ssvm_torch/stores/sibling_perceptron.py,
oracles/span_perceptron.py, stores/segment_perceptron.py). One thread; per side the median over rounds of each
round's median.

Usage: python benchmarks/bench_perceptron_structures_commits.py --baseline bfec523 [--rounds 2] [--calls 1]
       [--out benchmarks/results/perceptron_structures_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402

#: (label, task, options)
TASKS = (("ud-ewt second-order trees", "ud-ewt", {"trees": "second-order"}),
         ("ud-ewt-spans constituency trees", "ud-ewt-spans", {}),
         ("conll2000-segments", "conll2000-segments", {}))


def epoch_cases(tasks, calls: int, loss_augmented: bool = False, first: int | None = 1000) -> dict:
    """A worker's {"module", "cases"}: per (label, task, options) of ``tasks`` the median ms of a one-epoch
    ``train_perceptron`` run from w = 0 on its training set and, with ``first``, on its first ``first`` sentences
    (where each call's O(d) setup weighs more); one thread."""
    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
    from ssvm_torch.tasks import load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}
    kind = "loss-augmented epoch" if loss_augmented else "epoch"
    for label, name, options in tasks:
        task = load_task(name, **options)
        sets = [(task.train, calls)] + ([(task.train.subset(torch.arange(first)), max(calls, 3))] if first else [])
        for data, reps in sets:
            out["cases"][f"{kind}, {label} ({data.n} sentences, d = {task.model.d})"] = median_ms(
                lambda: train_perceptron(task.model, data, PerceptronConfig(epochs=1, loss_augmented=loss_augmented)),
                reps)
    return out


def worker(calls: int) -> dict:
    return epoch_cases(TASKS, calls)


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/perceptron_structures_commits.json",
                       calls=1, dtype="float64", rounds=2)
