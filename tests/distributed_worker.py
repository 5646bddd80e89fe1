"""Worker processes of tests/test_distributed.py (a module of its own so that spawned children can
import it): each joins a gloo group on localhost and runs mini-batch BCFW on its shard."""
from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist


def problem(spec):
    from ssvm_torch.tasks import load_task
    task = load_task(spec["dataset"], train_size=spec.get("train_size"),
                     **({"features": spec["features"]} if "features" in spec else {}))
    if spec.get("subset"):
        task = dataclasses.replace(task, train=task.train.subset(range(spec["subset"])))
    return task


def config(spec, **extra):
    from ssvm_torch import SolverConfig
    return SolverConfig(solver="bcfw", sampling=spec.get("sampling", "gap"), batch_size=spec["tau"],
                        passes=spec["passes"], gap_check=spec.get("gap_check", 1), seed=spec.get("seed", 0),
                        recompute_every=spec.get("recompute_every", 10), **extra)


def run(rank, world, port, spec, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    from ssvm_torch import Solver
    from ssvm_torch.distributed import DistributedError, init, rank_profiles, sharded_store
    init(torch.device("cpu"), timeout_s=spec.get("timeout_s", 60))
    task = problem(spec)
    store = sharded_store(task, spec["lam"], exchange=spec.get("exchange", "auto"))
    if spec.get("sparse_direction"):
        store.local.sparse_direction = True
    if spec.get("exchange") in ("rounds", "shared"):     # BCFW rounds (CoCoA+) and shared memory: their own loop
        from ssvm_torch.distributed.rounds import RoundsSolver
        solver = RoundsSolver(store, config(spec), round_steps=spec.get("round_steps"))
    else:
        solver = Solver(store, config(spec))
    if spec.get("resume_from"):
        solver.load_state_dict(torch.load(spec["resume_from"], weights_only=False))
    try:
        if spec.get("die_after_start") and rank == 1:
            solver.start()
            os._exit(0)                          # a rank that disappears without a word
        hist = solver.run() if not spec.get("stop_at") else _run_until(solver, spec["stop_at"])
        state = solver.state_dict()              # a collective: every rank takes part
        profiles = rank_profiles(store)  # likewise
    except DistributedError as e:
        if rank == 0:
            torch.save({"error": str(e)}, out)
        # leave without the interpreter's teardown: destroying a gloo group whose peer vanished can abort
        # ("terminate called without an active exception"), which would turn this expected end into a crash
        os._exit(0)
    if rank == 0:
        gaps = solver.sampler.gaps.copy() if spec.get("exchange") in ("rounds", "shared") else solver.block_gaps.copy()
        torch.save({"history": hist, "w": store.w.clone(), "ell": store.ell, "gaps": gaps, "state": state,
                    "bytes_per_step": store.bytes_per_step, "exchange": store.exchange, "profiles": profiles}, out)
    dist.barrier()
    dist.destroy_process_group()


def _run_until(solver, checks):
    """Stop after ``checks`` gap checks (a stop at a gap check, as a killed run leaves it)."""
    solver.start()
    while not solver.state.done and solver.state.checks < checks:
        solver.interval()
    return solver.state.history
