"""What a block step and a gap pass of the linear semi-Markov SSVM cost on CoNLL-2000 (one CPU thread, float64),
against the chain SSVM on the same sentences and attributes (Sha & Pereira's template, BIO tags):

* ``step``: one BCFW block step (``fw_corner`` + ``fw_move``, the loss-augmented decode, the block gap and the
  move) of the compact semi-Markov store (:class:`ssvm_torch.stores.SegmentDual`), of the chain store's compiled
  path and of its torch path (:class:`ssvm_torch.stores.ChainDual`, ``kernels="numba"`` / ``"torch"``); medians
  over ``--steps`` blocks, the three stores alternated block by block, each at its own point after a warm-up pass
  over the same blocks;
* ``gap_pass``: one exact gap pass over the ``--train-size`` first sentences (medians of ``--repeats``).

Usage: python benchmarks/bench_segments_ssvm.py [--train-size 2000] [--steps 600]
       [--out benchmarks/results/segments_ssvm_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch.stores import make_store
from ssvm_torch.tasks import load_task


def stores(train_size: int):
    seg = load_task("conll2000-segments", train_size=train_size, features="sha-pereira")
    chain = load_task("conll2000", train_size=train_size, features="sha-pereira", tags="bio")
    lam = 1.0 / train_size
    out = {"semimarkov": make_store(seg.model, seg.train, lam),
           "chain_numba": make_store(chain.model, chain.train, lam, kernels="numba"),
           "chain_torch": make_store(chain.model, chain.train, lam, kernels="torch")}
    return out, {"semimarkov_d": seg.model.d, "chain_d": chain.model.d, "L": seg.model.L, "K": seg.model.K,
                 "chain_states": chain.model.K}


def step_times(all_stores: dict, blocks: list[int]) -> dict:
    def step(store, i):
        corner = store.fw_corner(i)
        gamma = min(max(corner.gap / (store.lam * corner.sqnorm), 0.0), 1.0) if corner.sqnorm > 0 else 0.0
        store.fw_move(i, corner, gamma)
    for store in all_stores.values():                   # warm-up: compiled kernels, caches, a moved point
        for i in blocks:
            step(store, i)
    times = {k: [] for k in all_stores}
    for i in blocks:
        for name, store in all_stores.items():
            t0 = time.perf_counter()
            step(store, i)
            times[name].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def pass_times(all_stores: dict, repeats: int) -> dict:
    times = {k: [] for k in all_stores}
    for store in all_stores.values():
        store.gap_pass()
    for _ in range(repeats):
        for name, store in all_stores.items():
            t0 = time.perf_counter()
            store.gap_pass()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/segments_ssvm_cpu.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    all_stores, shape = stores(args.train_size)
    blocks = list(range(min(args.steps, args.train_size)))
    step = step_times(all_stores, blocks)
    gap = pass_times(all_stores, args.repeats)
    result = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "dtype": "float64", "train_size": args.train_size, "steps": len(blocks), **shape,
              "step_ms": step, "gap_pass_s": gap,
              "step_ratio_vs_chain_numba": step["semimarkov"] / step["chain_numba"],
              "step_ratio_vs_chain_torch": step["semimarkov"] / step["chain_torch"]}
    for k, v in step.items():
        print(f"block step {k:12s} {v:8.3f} ms   gap pass {gap[k]:7.3f} s")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
