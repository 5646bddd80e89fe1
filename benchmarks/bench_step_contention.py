"""What one BCFW step of the shared exchange costs while other ranks step beside it, by where the ranks run and
whether they write one w or each its own (issue 74: on the 16-CPU machine a shared step cost 62.6 us at P = 2
and 77.6 at P = 8, where that machine's one process, never profiled, steps in ~55-60 us by its time to the gap;
docs/distributed.md, "Measured on 16 cores").

The store is the exchange's own (CoNLL-2000 with the command of bench_rounds_2core.py, the chain store's numba
kernels), brought to a realistic point by ``--warm-passes`` passes of BCFW in one process. Then, for each
configuration, P forked processes (one thread each) step on the round-robin shards of the blocks (rank r:
blocks r, r + P, ...; ``--sampling gap``, the default: drawn by the solver's gap sampler started from the
block gaps at the warm point and fed each step's gap, as a rank's solver does between two checks; ``frozen``:
drawn with probability proportional to those gaps; ``uniform``: each in turn in a random order) for
``--steps`` timed steps each after ``--warm-steps`` untimed ones, all starting at one barrier, every move also
added to a mirror of the rank's own as the exchange's ranks do (``--mirror both``: also without,
``SSVM_SHARED_MIRROR=rebuild``'s steps). Each configuration starts from the same w and the same block points
(the forks' writes to their blocks are their own copies; the shared w is restored between configurations).

* ``shared``: the ranks write one w in shared memory (the exchange): a step pays for the cache lines of w the
  other ranks wrote (fetched from their caches) on top of its own work.
* ``private``: each rank steps on a copy of w of its own: the same work and memory traffic (more of it: P
  copies), no line written by another rank. shared / private isolates the cost of sharing w; private / alone
  that of the ranks' sharing the machine (memory bandwidth, caches, hardware threads).
* Placements (``affinity.py``'s topology from sysfs): ``none`` (the operating system's), ``compact``
  (``SSVM_SHARED_PIN=compact``'s: a physical core each, one last-level-cache domain first), ``siblings`` (two
  ranks on the two hardware threads of each core; only where cores have two), ``spread`` (ranks dealt to the
  last-level-cache domains in turn; only where there are several).

Prints microseconds per step (median over the ranks, and the slowest) and its ratio to ``alone`` (one
process, the whole problem's blocks, pinned to the first CPU of the compact order); writes the JSON
(``--out``; default benchmarks/results/step_contention_<cpus>cpu.json).

Usage: python benchmarks/bench_step_contention.py [--procs 2 8] [--steps 20000] [--placements none compact]
       [--mirror both] [--sampling uniform] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ssvm_torch.atomic import atomic_write_bytes  # noqa: E402
from ssvm_torch.distributed.affinity import compact_order, cpu_topology  # noqa: E402
from ssvm_torch.solvers.samplers import GapSampler  # noqa: E402
from ssvm_torch.stores import make_store  # noqa: E402
from ssvm_torch.tasks import get_task, load_task  # noqa: E402

PLACEMENTS = ("none", "compact", "siblings", "spread")


def conll_store(warm_passes: int, seed: int):
    """The chain store of bench_rounds_2core.py's CoNLL-2000 command (lambda 0.03), after ``warm_passes``
    passes of BCFW with blocks in random order (one process)."""
    options = get_task("conll2000").options(features="sha-pereira", min_count=None, loss="normalized",
                                            constraints="none", tags="bio", trees=None, siblings=None)
    task = load_task("conll2000", **options)
    store = make_store(task.model, task.train, 0.03)
    rng = np.random.default_rng(seed)
    for _ in range(warm_passes):
        for i in rng.permutation(store.n):
            store.fw_step(int(i))
    return store


def placements(procs: int, allowed: list[int]) -> dict[str, list[int] | None]:
    """Each placement's CPU for ranks 0..procs-1 (None: unpinned) where this machine can give it."""
    topo = cpu_topology(allowed)
    out: dict[str, list[int] | None] = {"none": None}
    if procs > len(allowed):
        return out
    out["compact"] = compact_order(topo)[:procs]
    cores: dict[tuple[int, int], list[int]] = {}
    for t in topo:
        cores.setdefault((t.package, t.core), []).append(t.cpu)
    pairs = [sorted(c) for c in cores.values() if len(c) >= 2]
    if procs % 2 == 0 and len(pairs) >= procs // 2:
        out["siblings"] = [c for pair in sorted(pairs)[:procs // 2] for c in pair[:2]]
    domains: dict[int, list[int]] = {}
    for c in compact_order(topo):
        domains.setdefault(next(t.domain for t in topo if t.cpu == c), []).append(c)
    if len(domains) > 1:
        lists = list(domains.values())
        spread = [lists[r % len(lists)][r // len(lists)] for r in range(procs)
                  if r // len(lists) < len(lists[r % len(lists)])]
        if len(spread) == procs:
            out["spread"] = spread
    return out


def block_order(n: int, rank: int, procs: int, count: int, seed: int, gaps: np.ndarray | None) -> np.ndarray:
    """``count`` blocks of rank ``rank``'s round-robin shard: each block in turn in a random order (uniform), or
    drawn with probability proportional to its gap at the warm point (``gaps``: gap sampling's distribution,
    Osokin et al. 2016, Alg. 2, frozen at that point)."""
    blocks = np.arange(rank, n, procs)
    rng = np.random.default_rng(seed + rank)
    if gaps is None:
        return rng.permutation(np.tile(blocks, -(-count // len(blocks))))[:count]
    p = np.maximum(gaps[blocks], 0.0) + 1e-12
    return rng.choice(blocks, size=count, p=p / p.sum())


def run_steps(store, blocks: np.ndarray, count: int, sampler) -> None:
    """``count`` BCFW steps: on ``blocks`` in turn, or (``sampler``, a GapSampler over them) on the sampler's draws,
    each step's block gap fed back to it as the solver's gap sampling does (ssvm_torch/solvers/steps.py)."""
    if sampler is None:
        for i in blocks[:count]:
            store.fw_step(int(i))
        return
    for _ in range(count):
        j = sampler.next()
        g, _ = store.fw_step(int(blocks[j]))
        sampler.update(j, g)


def _rank(store, rank: int, procs: int, cpu, private: bool, mirror: bool, sampling: str, gaps, warm: int, steps: int,
          seed: int, barrier, results):
    """One forked rank: pinned to ``cpu`` (if any), its own w copy if ``private``, a mirror of its own if
    ``mirror``; warm-up steps, the barrier, then ``steps`` timed steps on its shard; puts (rank, seconds, steps,
    cpu) in ``results``."""
    try:
        if cpu is not None:
            os.sched_setaffinity(0, [cpu])
        if private:
            store.share_w(store.w.clone())
        store.shadow, store.shadow_coef = (torch.zeros_like(store.w), 1.0) if mirror else (None, 0.0)
        if sampling == "gap":                  # the solver's own sampler, from the warm point's gaps
            order = np.arange(rank, store.n, procs)
            sampler = GapSampler(len(order), seed + rank)
            sampler.set_all(gaps[order])                    # every block has its gap (as after a check's gap pass)
        else:
            order, sampler = block_order(store.n, rank, procs, warm + steps, seed,
                                         gaps if sampling == "frozen" else None), None
        run_steps(store, order, warm, sampler)
        barrier.wait()
        t0 = time.perf_counter()
        run_steps(store, order if sampler else order[warm:], steps, sampler)
        results.put((rank, time.perf_counter() - t0, steps, cpu))
    except BaseException as e:          # noqa: BLE001 - reported to the parent, which fails the configuration
        results.put((rank, None, repr(e), cpu))
        barrier.abort()


def measure(store, w0: torch.Tensor, procs: int, cpus, private: bool, mirror: bool, sampling: str, gaps, warm: int,
            steps: int, seed: int) -> dict:
    """One configuration: ``procs`` forked ranks, their microseconds per step."""
    store.w.copy_(w0)
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    kids = [ctx.Process(target=_rank, args=(store, r, procs, None if cpus is None else cpus[r], private, mirror,
                                            sampling, gaps, warm, steps, seed, barrier, results)) for r in range(procs)]
    for k in kids:
        k.start()
    got = sorted(results.get(timeout=600) for _ in kids)
    for k in kids:
        k.join()
    bad = [g for g in got if g[1] is None]
    if bad:
        raise SystemExit(f"P={procs} cpus={cpus}: a rank failed: {bad}")
    us = [1e6 * s / n for _, s, n, _ in got]
    return {"procs": procs, "cpus": cpus, "private": private, "us_per_step": us,
            "median_us": statistics.median(us), "max_us": max(us)}


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo; platform.processor() is empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[2])
    ap.add_argument("--placements", nargs="+", choices=PLACEMENTS, default=list(PLACEMENTS))
    ap.add_argument("--steps", type=int, default=20000, help="timed steps per rank")
    ap.add_argument("--warm-steps", type=int, default=2000, help="untimed steps per rank before the barrier")
    ap.add_argument("--warm-passes", type=int, default=10, help="BCFW passes before any configuration")
    ap.add_argument("--sampling", choices=["gap", "frozen", "uniform"], default="gap",
                    help="each rank's blocks: gap sampling (the solver's sampler from the warm point's gaps, fed each "
                         "step's gap), frozen (by the warm point's gaps) or uniform (each in turn, random order)")
    ap.add_argument("--mirror", choices=["on", "off", "both"], default="on",
                    help="each move also into a mirror of the rank's own (the exchange's), not, or both side by side")
    ap.add_argument("--reps", type=int, default=1, help="every configuration this many times, alternated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    allowed = sorted(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    store = conll_store(args.warm_passes, args.seed)
    store.share_w(store.w.clone().share_memory_())
    w0 = store.w.clone()
    gaps = store.gap_pass().block_gaps.numpy().copy() if args.sampling != "uniform" else None
    print(f"CoNLL-2000 store: n {store.n}, d {store.w.numel()}, {args.warm_passes} warm passes "
          f"({time.perf_counter() - t0:.1f} s); {len(allowed)} CPUs", flush=True)
    first = compact_order(cpu_topology(allowed))[0]
    mirrors = {"on": [True], "off": [False], "both": [True, False]}[args.mirror]
    configs = []
    for mirror in mirrors:
        tag = "" if len(mirrors) == 1 else (" mirror" if mirror else " no-mirror")
        configs.append((f"alone{tag}", 1, [first], False, mirror))
        for p in args.procs:
            where = placements(p, allowed)
            for name in args.placements:
                if name in where:
                    configs += [(f"P={p} {name} shared{tag}", p, where[name], False, mirror),
                                (f"P={p} {name} private{tag}", p, where[name], True, mirror)]
    runs: dict[str, list[dict]] = {name: [] for name, *_ in configs}
    for _ in range(args.reps):
        for name, p, cpus, private, mirror in configs:
            runs[name].append(measure(store, w0, p, cpus, private, mirror, args.sampling, gaps, args.warm_steps,
                                      args.steps, args.seed))
            print(f"  {name:36s} {runs[name][-1]['median_us']:7.1f} us/step (slowest rank "
                  f"{runs[name][-1]['max_us']:.1f})", flush=True)
    alone = statistics.median(r["median_us"] for r in runs[configs[0][0]])
    summary = {name: {"median_us": statistics.median(r["median_us"] for r in rs),
                      "max_us": statistics.median(r["max_us"] for r in rs),
                      "vs_alone": statistics.median(r["median_us"] for r in rs) / alone} for name, rs in runs.items()}
    print(f"\n{'configuration':36s}  us/step  slowest  x {configs[0][0]}")
    for name, s in summary.items():
        print(f"{name:36s} {s['median_us']:8.1f} {s['max_us']:8.1f} {s['vs_alone']:8.2f}")
    result = {"machine": {"cpus": len(allowed), "processor": cpu_model(), "node": platform.node(),
                          "topology": [t._asdict() for t in cpu_topology(allowed)]},
              "dataset": "conll2000 (sha-pereira, bio, normalized loss, lambda 0.03)",
              "warm_passes": args.warm_passes, "sampling": args.sampling, "mirror": args.mirror, "steps": args.steps,
              "warm_steps": args.warm_steps, "reps": args.reps, "summary": summary, "runs": runs}
    out = args.out or ROOT / "benchmarks" / "results" / f"step_contention_{len(allowed)}cpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
