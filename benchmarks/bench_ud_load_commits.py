"""Loading the UD English-EWT parsing task at this checkout against an earlier commit, side by side in one run
through the API users call: ``load_task("ud-ewt")`` (the first-order SSVM parser's task: the three splits read,
coded and featurized with the McDonald template) into an empty feature cache, and ``code_columns`` of the three
splits alone (every word's five columns as integer codes). The columns were coded by ``np.unique`` over a
fixed-width string array of every word (a sort of 250k strings per column, done twice per load); they are coded
by one dictionary lookup per word now, in the same sorted order of the distinct strings (the same codes, so the
same feature ids). One thread; per side the median over rounds of each round's median.

Usage: python benchmarks/bench_ud_load_commits.py --baseline 9ba5073 [--rounds 3] [--calls 1]
       [--out benchmarks/results/ud_load_commits.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commits import cases_side_by_side, median_ms  # noqa: E402


def worker(calls: int) -> dict:
    import os
    import tempfile

    import torch
    torch.set_num_threads(1)
    import ssvm_torch
    from ssvm_torch.data.arc_features import code_columns
    from ssvm_torch.data.ud import load_ud_ewt
    from ssvm_torch.tasks import load_task
    out = {"module": ssvm_torch.__file__, "cases": {}}

    def load_cold():
        with tempfile.TemporaryDirectory() as cache:           # an empty feature cache: the work is done
            os.environ["SSVM_TORCH_CACHE"] = cache
            load_task("ud-ewt")

    out["cases"]["load_task('ud-ewt'), empty feature cache"] = median_ms(load_cold, calls)
    splits = [load_ud_ewt(s) for s in ("train", "dev", "test")]
    out["cases"]["code_columns of train, dev and test"] = median_ms(lambda: code_columns(splits), max(calls, 3))
    return out


if __name__ == "__main__":
    cases_side_by_side(Path(__file__), __doc__, worker, "benchmarks/results/ud_load_commits.json", calls=1,
                       dtype="float64", rounds=3)
