"""Reading chunk tags into segmentations at this checkout against an earlier commit, side by side in one run through
the API users call: ``segments_from_tags`` and ``partial_from_tags`` on CoNLL-2000's 8,936 training sentences
(211,727 BIO tags; the partial reading with every tenth tag unknown), and ``load_task("conll2000-segments")`` (the
semi-Markov task of ``ssvm-train --dataset conll2000-segments``, featurized designs from the cache). The reader
wrote its (label, begins, ends) tables one torch element at a time; it now fills NumPy arrays and converts them
once (ssvm_torch/segments/convert.py). One thread; per side the median over rounds of each round's median.

Usage: python benchmarks/bench_segments_convert_commits.py --baseline 3c58a8a [--rounds 3] [--calls 3]
       [--out benchmarks/results/segments_convert_commits.json]
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
    from ssvm_torch.data.conll import load_conll2000
    from ssvm_torch.data.segments import chunk_types
    from ssvm_torch.segments import partial_from_tags, segments_from_tags
    from ssvm_torch.tasks import load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}
    train, _ = load_conll2000()
    tags, labels = train.meta["tags"], chunk_types(train)
    hidden = [[None if (b + t) % 10 == 0 else tag for t, tag in enumerate(s)] for b, s in enumerate(tags)]
    n = sum(len(s) for s in tags)
    out["cases"][f"segments_from_tags, conll2000 train ({len(tags)} sentences, {n} tags)"] = median_ms(
        lambda: segments_from_tags(tags, labels), calls)
    out["cases"]["partial_from_tags, conll2000 train (every tenth tag unknown)"] = median_ms(
        lambda: partial_from_tags(hidden, labels), calls)
    out["cases"]["load_task('conll2000-segments')"] = median_ms(lambda: load_task("conll2000-segments"), calls)
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/segments_convert_commits.json",
                       calls=3, dtype="float64", rounds=3)
