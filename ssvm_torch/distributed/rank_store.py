"""What every sharded store of a torchrun run shares (:class:`RankStore`): the point of the store it
wraps, the collectives' accounting, and a refusal by name of every method that needs every block's
state in one process. The stores: :class:`ssvm_torch.distributed.ShardedDual` (block shards) and
:class:`ssvm_torch.distributed.column_shards.ColumnShardedChain` (feature-column shards)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..errors import SSVMInputError
from ..stores.base import BlockDual
from .collectives import collective


def _single(what: str):
    """A store method that needs every block on one process: it refuses, naming ``what``."""
    def refuse(self, *args, **kwargs):
        raise SSVMInputError(f"{what}: the sharded store runs mini-batch BCFW (solver 'bcfw', step 'fw', no cache; "
                             "any --batch-size) and exact gap passes; run other solvers in one process")
    return refuse


def _forwarded(inner: str, name: str, doc: str | None = None) -> property:
    """A read-only property returning ``self.<inner>.<name>``."""
    return property(lambda self: getattr(getattr(self, inner), name), doc=doc)


class RankStore(BlockDual):
    """What every sharded store of a torchrun run shares: the point (w, ell) of the ``local`` store
    it wraps, presented as the store of all n blocks; the collectives' accounting; and a refusal by
    name of every method that needs every block's state in one process (only mini-batch BCFW steps
    and exact gap passes run)."""

    supports_path = False
    supports_block_steps = False

    # -- the replicated point ------------------------------------------------------------------
    w, ell, ell_i = (_forwarded("local", name) for name in ("w", "ell", "ell_i"))

    @property
    def v(self) -> torch.Tensor:
        return self.local.v

    @property
    def shadow(self):
        return self.local.shadow

    @shadow.setter
    def shadow(self, value):
        self.local.shadow = value

    @property
    def shadow_coef(self) -> float:
        return self.local.shadow_coef

    @shadow_coef.setter
    def shadow_coef(self, value):
        self.local.shadow_coef = value

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.local.set_point(w, ell)

    def dual(self) -> float:
        return self.local.dual()

    @property
    def bytes_per_step(self) -> float:
        return self.coll.bytes_sent / max(self.steps_exchanged, 1)

    bytes_sent = _forwarded("coll", "bytes_sent", "Bytes this rank contributed to collectives.")
    comm_s = _forwarded("coll", "comm_s", "Seconds spent in collectives (waiting for the other ranks included).")

    wait_s = 0.0                             # seconds waiting at barriers (the shared exchange's checks)

    def round_draws(self, draws, planned: int | None, draw):
        """This rank's draws of a round of ``planned`` steps per rank: ``draws`` as given (the shared-memory
        exchange shares a round's steps between its ranks)."""
        return draws

    def barrier(self) -> None:
        """Every rank waits for the others (the seconds go to ``wait_s``)."""
        t0 = time.perf_counter()
        collective(dist.barrier)
        self.wait_s += time.perf_counter() - t0

    def profile(self) -> dict:
        """This rank's share of the run, for ranks.json (:func:`~ssvm_torch.distributed.launch.rank_profiles`):
        seconds of its own decoding (``shard_s``), of building the joint direction or combining the ranks'
        changes (``joint_s``), in collectives and barriers (``comm_s``, ``wait_s``: waits for the slowest rank
        included); the bytes it sent and the exchanges (steps or rounds) it took part in."""
        return {"rank": self.rank, "blocks": self.local.n, "shard_s": self.shard_s, "joint_s": self.joint_s,
                "comm_s": self.comm_s, "wait_s": self.wait_s, "bytes_sent": self.bytes_sent,
                "exchanges": self.steps_exchanged}

    def check_world_size(self, state: dict) -> None:
        """Refuse a checkpoint written by another number of ranks (a resume needs the same partition)."""
        if state.get("world_size") != self.size:
            raise SSVMInputError(f"checkpoint: written by {state.get('world_size', 1)} rank(s), this run has "
                                 f"{self.size}; resume with the same number of processes")

    def block_w(self, i: int) -> torch.Tensor:
        raise SSVMInputError("block_w: a sharded store holds only its own blocks (ask the rank that owns block i)")

    # -- what needs every block on one process: each such method refuses by name
    fw_corner, fw_move = _single("fw_corner"), _single("fw_move")
    add_psi = _single("ssg")
    corner_point = move_all = _single("batch FW")
    gt_labeling = key = loss_of = corner_gaps = pair_sqnorm = pair_move = _single("active sets")
    rescale = max_margins = block_wdots = _single("the regularization path")
