"""The launcher glue of a torchrun run: joining and leaving the process group, rank 0's input errors
raised on every rank, config.json's description of the partition, and the factory of each rank's store
for the chosen exchange (block shards, column shards, rounds; ``auto`` by the measured rule)."""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from ..errors import SSVMInputError, check
from .block_shards import EXCHANGES, ShardedDual
from .collectives import collective, shard_of, world
from .rank_store import RankStore


def launched_by_torchrun() -> bool:
    """Whether this process was started by torchrun (or any launcher setting WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: torch.device, timeout_s: float = 300.0) -> tuple[int, int]:
    """Join the process group torchrun describes (env:// rendezvous): gloo for CPU state, NCCL for
    CUDA (each rank on cuda:LOCAL_RANK). Returns (rank, world size)."""
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)))
    return dist.get_rank(), dist.get_world_size()


def finish() -> None:
    """Leave the process group (end of a torchrun run)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Every rank waits here for the others (the end of an interrupted run: rank 0 writes the results first,
    then every rank exits, so the launcher, which ends all ranks once one exits with a failure code, never
    cuts rank 0's writes)."""
    if dist.is_available() and dist.is_initialized():
        collective(dist.barrier)


def on_rank0(fn):
    """``fn()`` on rank 0 (e.g. claiming the run directory); its input error is raised on every rank,
    so no rank waits at a collective that rank 0 will never reach. Returns fn's result on rank 0,
    None elsewhere."""
    rank, size = world()
    result, message = None, [""]
    if rank == 0:
        try:
            result = fn()
        except SSVMInputError as e:
            message = [str(e)]
    if size > 1:
        collective(dist.broadcast_object_list, message, src=0)
    if message[0]:
        raise SSVMInputError(message[0])
    return result


def describe(store: "RankStore") -> dict:
    """The partition and the exchange of a sharded run, for config.json."""
    partition = ("columns: every rank holds every block's statistics and keeps a share of w's feature columns "
                 "(about 1/world_size of the stored feature entries each); it decodes a contiguous range of each "
                 "batch's blocks (about 1/world_size of their positions)"
                 if store.exchange == "columns" else
                 "round-robin: rank r holds blocks i with i mod world_size = r (local block i // world_size)"
                 + ("; each rank runs BCFW rounds on its shard as a problem of its own (CoCoA+, sigma'_k = n / n_k), "
                    "one all-reduce per round" if store.exchange == "rounds" else "")
                 + ("; the ranks of one machine step asynchronously on one w in shared memory, made exact from "
                    "each rank's mirror at every gap check" if store.exchange == "shared" else ""))
    return {"world_size": store.size, "backend": dist.get_backend() if dist.is_initialized() else None,
            "partition": partition, "exchange": store.exchange}


def rank_profiles(store: RankStore) -> list[dict] | None:
    """Every rank's share of the run (:meth:`RankStore.profile`), gathered to rank 0, None on the other ranks. A
    collective: every rank calls it once, after the solver returned."""
    mine = store.profile()
    every = [mine] if store.size == 1 else [None] * store.size
    if store.size > 1:
        collective(dist.all_gather_object, every, mine)
    return every if store.rank == 0 else None


def profile_lines(profiles: list[dict]) -> list[str]:
    """One line per rank of :func:`rank_profiles`: its steps and where its seconds went."""
    def line(p: dict) -> str:
        own = (f"{p['steps']} steps, {p['steps_s']:.2f} s steps, {p['gap_s']:.2f} s gap passes, "
               f"{p['sync_s']:.2f} s summing the mirrors" if "steps_s" in p else f"{p['shard_s']:.2f} s own decoding")
        return (f"rank {p['rank']} ({p['blocks']} blocks): {own}, {p['joint_s']:.2f} s combining, "
                f"{p['comm_s']:.2f} s in collectives, {p['wait_s']:.2f} s at barriers")
    return [line(p) for p in profiles]


def sharded_store(task, lam: float, device=None, dtype=torch.float64, kernels: str = "auto",
                  exchange: str = "auto") -> RankStore:
    """This rank's store of ``task`` (a :class:`~ssvm_torch.tasks.Problem`) for ``exchange``:
    ``columns`` the coordinate-sharded chain store of :mod:`ssvm_torch.distributed.column_shards` on the whole
    training set (``auto`` picks it where :func:`columns_apply`); ``gather`` / ``allreduce`` (``auto``:
    gather for d >= 2^20) a :class:`ShardedDual` of this rank's round-robin shard in a store built
    with the global n."""
    from ..stores import make_store
    check(exchange in EXCHANGES, "exchange", f"one of {list(EXCHANGES)}", repr(exchange))
    rank, size = world()
    if exchange == "rounds":
        from .rounds import rounds_store
        return rounds_store(task, lam, device=device, dtype=dtype, kernels=kernels)
    if exchange == "shared":
        from .shared_memory import shared_store
        return shared_store(task, lam, device=device, dtype=dtype, kernels=kernels)
    if exchange == "columns":
        from ..models.chain import ChainModel
        from ..tasks import TASKS
        if not isinstance(task.model, ChainModel):
            chains = [name for name, t in TASKS.items() if t.sequences]
            raise SSVMInputError(f"exchange: 'columns' shards the feature columns of linear-chain models (datasets "
                                 f"{', '.join(chains)}); {task.name} is not one: use --exchange gather or allreduce")
    if exchange == "columns" or (exchange == "auto" and columns_apply(task, device, dtype, kernels)):
        from .column_shards import ColumnShardedChain
        from .column_shards_edges import ColumnShardedEdgeChain
        from ..stores.chain_edges import EdgeChainDual
        local = make_store(task.model, task.train, lam, device=device, dtype=dtype, kernels=kernels,
                           nonnegative=task.nonnegative)
        return (ColumnShardedEdgeChain if type(local) is EdgeChainDual else ColumnShardedChain)(local)
    shard = shard_of(task.n_train, size, rank)
    local = make_store(task.model, task.train.subset(shard), lam, device=device, dtype=dtype, kernels=kernels,
                       nonnegative=task.nonnegative, n_objective=task.n_train)
    return ShardedDual(local, task.n_train, exchange=exchange)


def shared_apply(task, device=None, dtype=torch.float64, kernels: str = "auto", config=None) -> bool:
    """Whether ``exchange='auto'`` picks the shared exchange on several ranks (measured:
    docs/distributed.md, "The shared exchange"): every rank on one machine, a chain model without
    edge-observation features or a dependency model (no box constraints) with numba kernels (CPU,
    float64), and BCFW with batch size 1 (FW steps, no cache, no averaging), which is all it runs."""
    from ..devices import resolve_device
    from ..models.chain import ChainModel
    from ..models.chain_edges import EdgeChainModel
    from ..models.dependency import DependencyModel
    size = world()[1]
    model = task.model
    return (size > 1 and int(os.environ.get("LOCAL_WORLD_SIZE", size)) == size
            and (isinstance(model, ChainModel) and not isinstance(model, EdgeChainModel)
                 or isinstance(model, DependencyModel))
            and resolve_device(device).type == "cpu" and dtype == torch.float64 and kernels in ("auto", "numba")
            and not (task.nonnegative is not None and len(task.nonnegative))
            and config is not None and config.solver == "bcfw" and config.step == "fw" and config.batch_size == 1
            and not config.cache and not config.averaging)


def resolve_exchange(exchange: str, task, device=None, dtype=torch.float64, kernels: str = "auto",
                     config=None) -> str:
    """The exchange a run uses: ``exchange`` unless ``auto``, which stands for ``shared`` where
    :func:`shared_apply`, else ``columns`` where :func:`columns_apply` (one process: with ``config``,
    mini-batches only), else ``auto`` (the block shards' rule of :class:`ShardedDual`; one process: the
    one-process store)."""
    if exchange != "auto":
        return exchange
    if shared_apply(task, device, dtype, kernels, config):
        return "shared"
    size = world()[1]
    return "columns" if columns_apply(task, device, dtype, kernels, config if size == 1 else None) else "auto"


def columns_apply(task, device=None, dtype=torch.float64, kernels: str = "auto", config=None) -> bool:
    """Whether ``exchange='auto'`` picks the coordinate-sharded store (measured: docs/distributed.md):
    a chain model (edge-observation features included, no box constraints) with numba kernels (CPU,
    float64); with a solver ``config`` (one process), also mini-batch BCFW (batch size > 1, FW
    steps, no cache, no averaging), which is all that store runs."""
    from ..devices import resolve_device
    from ..models.chain import ChainModel
    model = task.model
    fits = (isinstance(model, ChainModel)
            and resolve_device(device).type == "cpu" and dtype == torch.float64 and kernels in ("auto", "numba")
            and not (task.nonnegative is not None and len(task.nonnegative)))
    if config is not None:
        fits = fits and (config.solver == "bcfw" and config.step == "fw" and config.batch_size > 1
                         and not config.cache and not config.averaging)
    return fits


#: what runs a dependency-tree task (the advice of every exchange refusal for one)
TREES_RUN = ("one process (no --exchange), or under torchrun with --exchange shared (the ranks of one machine) or "
             "rounds, with BCFW batch size 1, FW steps, no --cache and no --averaging")


def check_exchange(given: str, exchange: str, task, device=None, dtype=torch.float64, kernels: str = "auto",
                   config=None, size: int = 1) -> None:
    """Refuse in one line, before any store is built, an exchange that cannot run ``task`` with the solver
    ``config`` on ``size`` processes (``given``: the option as typed, ``exchange``: what
    :func:`resolve_exchange` made of it), the advice naming what does run it:

    * a dependency-tree task in one process: ``gather`` and ``allreduce`` change nothing (a chain task's one
      process takes them as the generic store's mini-batch path);
    * a dependency-tree task: no ``columns`` (chain models' feature columns) and, under torchrun, no block
      shards (gather / allreduce: the tree store's directions have parts they do not ship) -- :data:`TREES_RUN`;
    * ``shared`` and ``rounds``: every rank runs BCFW with batch size 1, FW steps, no cache, no averaging;
      ``shared`` also the compiled kernels on float64 CPU state."""
    from ..devices import resolve_device
    from ..models.dependency import DependencyModel
    trees = isinstance(task.model, DependencyModel)
    if trees and size == 1 and given in ("gather", "allreduce"):
        raise SSVMInputError(f"exchange: {given!r} ships the ranks' block changes under torchrun; {task.name} in one "
                             "process runs the tree store, which no exchange changes: drop --exchange (a chain task's "
                             "one process takes it as the generic store's mini-batch path)")
    if trees and exchange == "columns":
        raise SSVMInputError(f"exchange: 'columns' shards the feature columns of linear-chain models; {task.name} is a "
                             f"dependency-tree task: run it in {TREES_RUN}")
    if trees and size > 1 and exchange in ("auto", "gather", "allreduce"):
        why = (f"{given!r} resolves to the block shards here" if given == "auto" else
               f"{given!r} ships block shards' changes")
        raise SSVMInputError(f"exchange: {why}, which cannot carry a dependency-tree store's directions; run "
                             f"{task.name} in {TREES_RUN}")
    if exchange in ("shared", "rounds") and config is not None:
        bad = ([f"--solver {config.solver}"] if config.solver != "bcfw" else []) \
            + ([f"--batch-size {config.batch_size}"] if config.batch_size != 1 else []) \
            + ([f"--step {config.step}"] if config.step != "fw" else []) \
            + (["--cache"] if config.cache else []) + (["--averaging"] if config.averaging else [])
        if bad:
            raise SSVMInputError(f"exchange: {exchange!r} runs BCFW with batch size 1, FW steps, no cache and no "
                                 f"averaging on every rank; this run has {', '.join(bad)}: drop "
                                 f"{'it' if len(bad) == 1 else 'them'}, or run in one process")
    if exchange == "shared":
        bad = ([f"--dtype {str(dtype).removeprefix('torch.')}"] if dtype != torch.float64 else []) \
            + ([f"--kernels {kernels}"] if kernels not in ("auto", "numba") else []) \
            + ([f"--device {device}"] if resolve_device(device).type != "cpu" else [])
        if bad:
            raise SSVMInputError(f"exchange: 'shared' steps the compiled CPU kernels on float64 state in shared memory; "
                                 f"this run has {', '.join(bad)}: drop {'it' if len(bad) == 1 else 'them'}, or use "
                                 "--exchange rounds")
