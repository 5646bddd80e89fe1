"""The structured perceptron on linear chains at this checkout against an earlier commit, side by side in one run
through the API users call (``train_perceptron``, batch size 1, averaged): an epoch on CoNLL-2000's 8,936
training sentences (sparse token features, 23 tags; and with ``ssvm-train``'s featurization: rich-edges, BIOES
tags and constraints, an edge-feature chain of d = 48.6M), an epoch on OCR-small's 626 words, an epoch on UD
English-EWT's 12,544 training sentences (first-order projective trees, McDonald's features, d = 2.8M), and a
loss-augmented epoch on CoNLL-2000's first 40 sentences (the generic loop's oracle builds phi densely, d = 7.4M:
about half a second per step). The generic loop spent its steps in small torch operations; a ChainModel epoch
or edge-feature chain epoch, or a first-order tree one, on CPU float64 is now one compiled call
(ssvm_torch/oracles/chain_perceptron.py, tree_perceptron.py). One thread; per side the median
over rounds of each round's median.

Usage: python benchmarks/bench_perceptron_commits.py --baseline 9ba5073 [--rounds 2] [--calls 1]
       [--out benchmarks/results/perceptron_commits.json]
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
    from ssvm_torch.tasks import CONLL_RECOMMENDED, load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}
    conll = load_task("conll2000")
    edges = load_task("conll2000", **CONLL_RECOMMENDED)
    ocr = load_task("ocr-small")
    ud = load_task("ud-ewt")
    out["cases"][f"epoch, conll2000 ({conll.train.n} sentences)"] = median_ms(
        lambda: train_perceptron(conll.model, conll.train, PerceptronConfig(epochs=1)), calls)
    out["cases"][f"epoch, conll2000 rich-edges ({edges.train.n} sentences, d = {edges.model.d})"] = median_ms(
        lambda: train_perceptron(edges.model, edges.train, PerceptronConfig(epochs=1)), calls)
    out["cases"][f"epoch, ocr-small ({ocr.train.n} words)"] = median_ms(
        lambda: train_perceptron(ocr.model, ocr.train, PerceptronConfig(epochs=1)), max(calls, 3))
    out["cases"][f"epoch, ud-ewt first-order trees ({ud.train.n} sentences)"] = median_ms(
        lambda: train_perceptron(ud.model, ud.train, PerceptronConfig(epochs=1)), calls)
    few = conll.train.subset(torch.arange(40))
    out["cases"]["loss-augmented epoch, conll2000 (40 sentences)"] = median_ms(
        lambda: train_perceptron(conll.model, few, PerceptronConfig(epochs=1, loss_augmented=True)), calls)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/perceptron_commits.json", calls=1,
                       dtype="float64", rounds=2)
