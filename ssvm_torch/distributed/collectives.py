"""The collectives of a sharded run (ssvm_torch/distributed/), with their accounting: every
all-reduce and all-gather goes through :class:`Collectives`, which counts the bytes this rank sends
and the seconds spent in them (waiting for the slowest rank included), and turns a failed collective
into :class:`DistributedError`. Above the plain collectives: ragged all-gathers, the coalesced sum
of the ranks' sparse directions, the gather of every block's direction parts in batch order, and
the gather of per-block rows into the global order of the round-robin partition."""
from __future__ import annotations

import re
import time
from typing import Callable

import torch
import torch.distributed as dist

from ..errors import DistributedError, check


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_of(n: int, world_size: int, rank: int) -> torch.Tensor:
    """The blocks of rank ``rank``: i = rank, rank + P, rank + 2P, ... (round-robin, so every shard
    gets long and short examples alike)."""
    check(isinstance(world_size, int) and world_size >= 1, "world_size", "an int >= 1", world_size)
    check(world_size <= n, "world_size", f"at most n = {n} ranks (one block each at least)", world_size)
    return torch.arange(rank, n, world_size)


def collective(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a collective; a failed one (a dead or silent rank) raises DistributedError."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as e:            # gloo / NCCL report a dead peer or a timeout as RuntimeError
        raise DistributedError(f"distributed: a collective failed ({backend_reason(e)}); another rank "
                               "died or stopped responding, so this rank stops too") from None


def backend_reason(error: BaseException) -> str:
    """The backend's reason for a failed collective in a few words: its first sentence, without the
    source location gloo puts in front ("[.../pair.cc:537] Read error ...: Connection reset by peer")."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    text = text.split(". ")[0].rstrip(".")
    return text if len(text) <= 200 else text[:200].rsplit(" ", 1)[0] + " ..."


def any_rank(flag, device) -> Callable[[], int]:
    """A callable that is truthy on every rank once ``flag()`` is on any (one all-reduce of one int, MAX; a
    flag may return an int code, and every rank gets the largest): ranks that stop on a signal stop at the
    same step. Every rank must call it at the same points of the run (the solver polls it after every pass,
    which every rank reaches in lock-step)."""
    def agreed() -> int:
        t = torch.tensor([int(flag())], dtype=torch.int32, device=device)
        collective(dist.all_reduce, t, op=dist.ReduceOp.MAX)
        return int(t.item())
    return agreed


class Collectives:
    """The collectives of one rank of ``size`` on ``device``. ``narrow_ints``: integer tensors travel
    as int32 (true where every integer a run ships is below 2^31: coordinates of d < 2^31, feature
    ids, positions, counts)."""

    def __init__(self, rank: int, size: int, device: torch.device, narrow_ints: bool):
        self.rank, self.size, self.device, self.narrow_ints = rank, size, device, narrow_ints
        self.bytes_sent = 0                   # what this rank contributed to collectives
        self.comm_s = 0.0                     # seconds spent in collectives (waiting for the others included)
        self._acc = self._mask = None         # merge buffers of the sparse sum (allocated on first use)

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the ranks, in place."""
        self.bytes_sent += t.numel() * t.element_size()
        t0 = time.perf_counter()
        collective(dist.all_reduce, t)
        self.comm_s += time.perf_counter() - t0
        return t

    def all_to_all(self, out: torch.Tensor, t: torch.Tensor, out_splits: list | None = None,
                   in_splits: list | None = None) -> torch.Tensor:
        """``out`` = the rows (dim 0) every rank sends this one: part q of ``t`` goes to rank q, part q
        of ``out`` comes from rank q (equal parts, or the given row counts)."""
        self.bytes_sent += t.numel() * t.element_size() * (self.size - 1) // self.size
        t0 = time.perf_counter()
        collective(dist.all_to_all_single, out, t, out_splits, in_splits)
        self.comm_s += time.perf_counter() - t0
        return out

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``t``. Integer tensors travel as int32 where every integer the exchange ships
        (coordinates, feature ids, positions, counts) is below d < 2^31: half the bytes of int64.
        On gloo as one broadcast per rank: gloo's all-gather moves ~0.3 GB/s between two local
        processes, its broadcasts ~3 GB/s (benchmarks/bench_distributed.py, ``comm``)."""
        wide = t.dtype == torch.int64 and self.narrow_ints
        t = (t.to(torch.int32) if wide else t).contiguous()
        out = [t if q == self.rank else torch.empty_like(t) for q in range(self.size)]
        self.bytes_sent += t.numel() * t.element_size()
        t0 = time.perf_counter()
        if dist.get_backend() == "gloo":
            for q in range(self.size):
                collective(dist.broadcast, out[q], src=q)
        else:
            collective(dist.all_gather, out, t)
        self.comm_s += time.perf_counter() - t0
        return [o.to(torch.int64) for o in out] if wide else out

    def merge(self, index: torch.Tensor, values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The sum of the ranks' sparse directions as one coalesced sparse vector, without a sort: the
        values are accumulated in a reused dense buffer and the union of the touched coordinates is
        read off a reused mask (both zeroed again on exactly those coordinates). ``like``: a tensor of
        the result's shape and dtype (w)."""
        if self._acc is None:
            self._acc = torch.zeros(like.shape, dtype=like.dtype, device=self.device)
            self._mask = torch.zeros(like.shape, dtype=torch.bool, device=self.device)
        self._acc.index_add_(0, index, values)
        self._mask[index] = True
        union = self._mask.nonzero().reshape(-1)                          # sorted
        merged = self._acc[union]
        self._acc[union] = 0.0
        self._mask[union] = False
        return torch.sparse_coo_tensor(union[None], merged, self._acc.shape, is_coalesced=True)

    def all_gather_ragged(self, t: torch.Tensor) -> torch.Tensor:
        """The ranks' 1-D tensors of different lengths, concatenated in rank order."""
        sizes = self.all_gather(torch.tensor([t.numel()], dtype=torch.int64, device=self.device))
        most = int(max(int(x) for x in sizes))
        pad = torch.zeros(most, dtype=t.dtype, device=self.device)
        pad[:t.numel()] = t
        return torch.cat([part[:int(x)] for part, x in zip(self.all_gather(pad), sizes)])

    def gather_parts(self, batch: list[int], parts: dict | None, part_shapes: dict) -> dict:
        """Every block's direction parts (BatchCorners.parts) on every rank, in batch order: one
        all-gather of the per-block row counts of every group, then one per part tensor (padded to
        the largest rank's share)."""
        owner = torch.as_tensor(batch, dtype=torch.int64, device=self.device) % self.size
        seen = torch.nn.functional.one_hot(owner, self.size).cumsum(0)     # blocks of each rank so far
        place = seen.gather(1, owner[:, None]).reshape(-1) - 1              # a block's place in its owner's list
        most = int(seen[-1].max())
        if parts is None:                      # no block of this batch here: zero-row parts of the right shapes
            parts = {k: ({g: torch.zeros((0,) + sh, dtype=dt, device=self.device) for g, (sh, dt) in v.items()}
                         if isinstance(v, dict) else torch.zeros((0,) + v[0], dtype=v[1], device=self.device))
                     for k, v in part_shapes.items()}
        groups = [k for k, v in parts.items() if isinstance(v, dict)]
        count = torch.zeros(len(groups), most, dtype=torch.int64, device=self.device)
        for g, key in enumerate(groups):
            count[g, :parts[key]["count"].numel()] = parts[key]["count"]
        counts = torch.stack(self.all_gather(count))                     # (ranks, groups, most)
        where = torch.stack([owner, place], 1)                              # (tau, 2): owner rank, place there

        def gathered(t, rows):                 # (ranks * rows, ...) of every rank's rows, padded
            pad = torch.zeros((rows,) + tuple(t.shape[1:]), dtype=t.dtype, device=self.device)
            pad[:t.shape[0]] = t
            return torch.cat(self.all_gather(pad))

        out = {}
        for key, value in parts.items():
            if not isinstance(value, dict):
                out[key] = gathered(value, most)[where[:, 0] * most + where[:, 1]]
                continue
            sizes = counts[:, groups.index(key)]                                # (ranks, most)
            rows = int(sizes.sum(1).max())
            length = sizes[where[:, 0], where[:, 1]]
            first = where[:, 0] * rows + (torch.cumsum(sizes, 1) - sizes)[where[:, 0], where[:, 1]]
            offset = torch.cumsum(length, 0) - length
            index = torch.repeat_interleave(first - offset, length) + torch.arange(int(length.sum()),
                                                                                  device=self.device)
            out[key] = {"count": length}
            for name, t in value.items():
                if name != "count":
                    out[key][name] = gathered(t, rows)[index]
        return out

    def gather_blocks(self, values: torch.Tensor, n: int) -> torch.Tensor:
        """Per-block rows (n_local, k) of every shard, all-gathered into the global order (n, k)."""
        per = -(-n // self.size)
        pad = torch.zeros(per, values.shape[1], dtype=values.dtype, device=self.device)
        pad[:values.shape[0]] = values
        out = torch.empty(n, values.shape[1], dtype=values.dtype, device=self.device)
        for r, part in enumerate(self.all_gather(pad)):
            ids = shard_of(n, self.size, r).to(self.device)
            out[ids] = part[:ids.numel()]
        return out
