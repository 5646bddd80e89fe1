"""Structured SVMs trained by several processes (torch.distributed, launched by torchrun or Lightning's DDP):
one module per exchange and the glue they share.

* :mod:`.block_shards` -- lock-step mini-batch BCFW on round-robin block shards (Wang et al., ICML 2016):
  the ``allreduce`` and ``gather`` exchanges of each step's direction;
* :mod:`.column_shards` / :mod:`.column_shards_edges` -- lock-step mini-batch BCFW for chain models with
  w sharded by feature columns (``columns``, the default for chains);
* :mod:`.rounds` -- BCFW rounds on each rank's own shard, one all-reduce per round (CoCoA+, ``rounds``);
* :mod:`.shared_memory` -- asynchronous BCFW of one machine's ranks on one w in shared memory (``shared``);
* :mod:`.affinity` -- the shared exchange's ranks pinned to cores of their own (``SSVM_SHARED_PIN``);
* :mod:`.rank_store` -- what every sharded store shares (the point, the accounting, refusals by name);
* :mod:`.collectives` -- the collectives with their accounting, and DistributedError on a dead rank;
* :mod:`.launch` -- the process group, rank 0's errors on every rank, the factory of each rank's store.

docs/distributed.md has the equations, the measurements and the launch commands.
"""
from ..errors import DistributedError
from .block_shards import EXCHANGES, ShardedDual
from .collectives import shard_of, world
from .launch import (TREES_RUN, barrier, check_exchange, columns_apply, describe, finish, init, launched_by_torchrun,
                     on_rank0, profile_lines, rank_profiles, resolve_exchange, shared_apply, sharded_store)
from .rank_store import RankStore
from .rounds import RoundsDual, RoundsSolver, rounds_store
from .shared_memory import SharedDual, shared_store

__all__ = ["TREES_RUN", "barrier", "check_exchange", "EXCHANGES", "DistributedError", "RankStore", "RoundsDual", "RoundsSolver", "ShardedDual", "SharedDual",
           "columns_apply", "describe", "finish", "init", "launched_by_torchrun", "on_rank0", "profile_lines", "rank_profiles", "resolve_exchange", "rounds_store",
           "shard_of", "shared_apply", "sharded_store", "shared_store", "world"]
