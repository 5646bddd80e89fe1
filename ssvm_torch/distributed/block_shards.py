"""Data-parallel mini-batch BCFW on torch.distributed (Wang, Sadhanala, Dai, Neiswanger, Sra & Xing,
"Parallel and Distributed Block-Coordinate Frank-Wolfe Algorithms", ICML 2016).

The n examples are split round-robin over the P ranks (rank r holds the blocks i with i mod P = r,
as local block i // P): each rank keeps the examples and the compact block state of its shard in an
ordinary store built with ``n_objective = n`` (so w_s = psi / (lam n) and L / n keep the global n),
while w, ell, lam and the block sampler are replicated. :class:`ShardedDual` is that shard seen as
one store of all n blocks, so the solver loop and its mini-batch step rule
(:class:`~ssvm_torch.solvers.steps.MiniBatchStep`) run unchanged on every rank:

* **one step**: every rank draws the same tau blocks (the replicated sampler sees the same seed and
  the same block gaps, so the trajectory does not depend on P), decodes the ones it owns in one
  batched oracle call, and one all-reduce of [the tau block gaps, dell] plus the exchange of the
  local directions dw_r gives every rank the joint direction dw = sum_r dw_r and the same exact line
  search; each rank then moves its own blocks and the replicated w by gamma dw;
* **the direction exchange**: ``allreduce`` sums the ranks' d-vectors dw_r (OCR: d = 4,082; a
  sparse one as the union of their touched coordinates; equal to one process up to the order of
  floating-point additions); ``gather`` all-gathers each block's compact change -- its emission
  entries (feature index, value), first / last rows and transition counts, ``BatchCorners.parts`` --
  and every rank scatters them in batch order exactly as one process does, so the run is
  bit-identical to the single-process one (it matters: with binary features a rounding difference
  can flip a tie in a Viterbi argmax and change the trajectory); for a sparse model such as
  CoNLL-2000 (d = 7.4M) each rank scatters only its share of the feature columns and the shares are
  all-gathered as (columns, values) (``BlockDual.direction_share``). ``auto`` picks gather for
  d >= 2^20. The collectives and their accounting (``bytes_per_step``: what one rank sends; integers
  travel as int32) are :class:`~ssvm_torch.distributed.collectives.Collectives`;
* **the exact gap**: each rank runs the gap pass of its shard; the block gaps, H_i and losses are
  all-gathered into the global order, so every rank holds the same history record and the same
  sampler state;
* **recomputation** of w and ell from the blocks is an all-reduce of the shards' partial sums.

Checkpoints hold the replicated solver state and every rank's shard state (gathered to each rank),
so rank 0 writes one file in the project's run format and a resume on the same P reproduces the
uninterrupted run. A rank that dies makes the others fail at their next collective after the
process group's timeout (``init(timeout_s=...)``) with :class:`DistributedError`.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..errors import SSVMInputError, check
from ..stores.base import SPARSE_D, BatchCorners, BlockDual, GapPass
from ..stores.box import BoxedDual
from .collectives import Collectives, collective, shard_of, world
from .rank_store import RankStore

EXCHANGES = ("auto", "allreduce", "gather", "columns", "rounds", "shared")


class ShardedDual(RankStore):
    """One rank's shard of the blocks, presented as the store of all n blocks (module docstring).
    ``local`` is the shard's own store (built with ``n_objective = n``); it serves mini-batch BCFW
    (any batch size) and exact gap passes; the other step rules need every block on one process."""

    def __init__(self, local: BlockDual, n: int, exchange: str = "auto"):
        rank, size = world()
        check(exchange in EXCHANGES, "exchange", f"one of {list(EXCHANGES)}", repr(exchange))
        if isinstance(local, BoxedDual):
            raise SSVMInputError("box constraints (segmentation-synth, pose-synth): not supported by the sharded store "
                                 "(the clip of w needs the unclipped v of all shards); run them in one process")
        if not local.shardable:
            raise SSVMInputError(f"{local.description or type(local).__name__}: not supported by the exchanges "
                                 "gather and allreduce (its mini-batch directions have parts they do not ship); use "
                                 "--exchange columns (or auto), or one process")
        check(local.N == n, "n_objective", f"the local store built with n_objective = n = {n}", local.N)
        check(local.n == len(shard_of(n, size, rank)), "shard", f"{len(shard_of(n, size, rank))} blocks "
              f"(rank {rank} of {size})", local.n)
        self.local, self.rank, self.size = local, rank, size
        self.n = self.N = n
        self.lam, self.device = local.lam, local.device
        d = local.w.numel()
        check(exchange != "columns", "exchange", "'columns' through sharded_store (ssvm_torch.distributed.column_shards)", exchange)
        self.gather = exchange == "gather" or (exchange == "auto" and d >= SPARSE_D)
        self.exchange = "gather" if self.gather else "allreduce"
        probe = local.batch_corners(torch.zeros(1, dtype=torch.int64, device=self.device)).parts   # changes nothing
        self.part_shapes = {k: ({g: (tuple(u.shape[1:]), u.dtype) for g, u in t.items()} if isinstance(t, dict)
                                else (tuple(t.shape[1:]), t.dtype)) for k, t in probe.items()}
        self.coll = Collectives(rank, size, self.device, narrow_ints=d < 2 ** 31 and n < 2 ** 31)
        self.shard_s = 0.0                    # seconds of this rank's own decoding (steps and gap passes)
        self.joint_s = 0.0                    # seconds building the joint direction from what was exchanged
        self.steps_exchanged = 0

    # -- mini-batch BCFW -------------------------------------------------------------------------
    def batch_corners(self, idx, with_direction: bool = True) -> BatchCorners:
        """The τ blocks' corners and the joint direction (always built: the step needs it on every rank)."""
        batch = torch.as_tensor(idx).reshape(-1).tolist()
        tau = len(batch)
        mine = [b for b, i in enumerate(batch) if i % self.size == self.rank]
        small = torch.zeros(2 * tau + 1, dtype=self.local.w.dtype, device=self.device)   # gaps, losses, dell
        corners = None
        if mine:
            local_idx = torch.tensor([batch[b] // self.size for b in mine], device=self.device)
            t0 = time.perf_counter()
            corners = self.local.batch_corners(local_idx, with_direction=not (self.gather and self.size > 1))
            self.shard_s += time.perf_counter() - t0
            at = torch.tensor(mine, device=self.device)
            small[at] = corners.gaps.to(small.dtype)
            small[tau + at] = corners.loss.to(small.dtype)
            small[-1] = corners.dell
            dw = None if corners.dw is None else corners.dw.clone()
        else:
            dw = torch.zeros_like(self.local.w)
            if self.local.sparse_direction:
                dw = dw.to_sparse()
        self.coll.all_reduce(small)                                  # each entry has one owner: the sum is a gather
        if self.size == 1:
            pass                                                 # one rank: its direction is the joint one
        elif self.gather:
            parts = self.coll.gather_parts(batch, corners.parts if corners is not None else None, self.part_shapes)
            t0 = time.perf_counter()
            if self.local.shares_direction:                      # each rank scatters its share of the coordinates
                ids, values = self.local.direction_share(parts, (self.rank, self.size))
                self.joint_s += time.perf_counter() - t0
                ids, values = self.coll.all_gather_ragged(ids), self.coll.all_gather_ragged(values)
                t0 = time.perf_counter()
                dw = self.local.joined_shares(ids, values)
            else:
                dw = self.local.direction(parts)                 # every rank scatters all tau blocks
            self.joint_s += time.perf_counter() - t0
        elif dw.is_sparse:                                       # touched coordinates from every rank, summed
            dw = dw.coalesce()
            index, values = self.coll.all_gather_ragged(dw.indices()[0]), self.coll.all_gather_ragged(dw.values())
            t0 = time.perf_counter()
            dw = self.coll.merge(index, values, self.local.w)
            self.joint_s += time.perf_counter() - t0
        else:
            dw = self.coll.all_reduce(dw)
        self.steps_exchanged += 1
        return BatchCorners(torch.as_tensor(idx), small[tau:2 * tau], small[:tau], dw, float(small[-1]),
                            moves=corners)

    def direction(self, parts: dict) -> torch.Tensor:
        return self.local.direction(parts)

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        """This rank's blocks move towards their corners; the replicated w and ell by the joint step."""
        mine = corners.moves
        if mine is None:
            self.local.move_point(corners.dw, corners.dell, gamma)
            return
        self.local.batch_move(BatchCorners(mine.idx, mine.loss, mine.gaps, corners.dw, corners.dell, mine.moves),
                              gamma)

    # -- exact gap pass and recomputation -------------------------------------------------------
    def gap_pass(self) -> GapPass:
        """The exact gap pass of every shard, gathered: block gaps, H_i and L_i / n of all n blocks."""
        t0 = time.perf_counter()
        gp = self.local.gap_pass()
        self.shard_s += time.perf_counter() - t0
        g = gp.block_gaps
        out = self.coll.gather_blocks(torch.stack([g, gp.H.to(g), gp.loss.to(g)], 1), self.n)
        cols = out.T.contiguous()               # contiguous columns: their sums reduce as in one process
        return GapPass(labels=None, loss=cols[2], H=cols[1], block_gaps=cols[0])

    def recompute(self) -> None:
        """w and ell exactly from the blocks: each shard's partial sums, all-reduced."""
        self.local.recompute()
        w = self.coll.all_reduce(self.local.w.clone())
        ell = self.coll.all_reduce(torch.tensor([self.local.ell], dtype=torch.float64, device=self.device))
        self.local.set_point(w, float(ell[0]))

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Every rank's shard state (gathered to all ranks) plus the replicated point."""
        shards = [None] * self.size
        collective(dist.all_gather_object, shards, self.local.state_dict())
        return {"world_size": self.size, "shards": shards}

    def load_state_dict(self, state: dict) -> None:
        if state.get("exchange") == "columns":
            raise SSVMInputError(f"checkpoint: written with exchange 'columns', this run has {self.exchange!r}; "
                                 "resume with the same exchange")
        self.check_world_size(state)
        self.local.load_state_dict(state["shards"][self.rank])
