"""Block samplers and chunked data loading for the Lightning loop.

The engine's samplers (uniform, per-pass permutation, gap sampling = Alg. 2 of Osokin et al. 2016)
stay the single source of block draws. :class:`LiveBlockSampler` is their ``torch.utils.data.Sampler``
face: iterating it draws from the solver's sampler *lazily*, one block at a time, so each draw sees
the block gap written by the step before it, exactly as in Alg. 2 (no chunked pre-drawing, whose
probabilities would be stale within a chunk).

A Lightning training step carries framework overhead that is large next to one block step
(benchmarks/bench_lightning.py measures it), so a step runs a *chunk* of block steps: :class:`BlockChunks` yields one
:class:`LiveChunk` per training step (``blocks_per_step`` blocks, default n = one pass; the last
chunk of an interval may be shorter) and an epoch is one interval between two exact gap checks
(``gap_check`` passes). A chunk is a lazy view: Lightning's one-batch prefetch creates the next
chunk object early, but no block is drawn until the training step iterates it.
"""
from __future__ import annotations

import itertools
from typing import Iterator

import torch.utils.data as tud

from ..solvers.loop import Solver


class LiveBlockSampler(tud.Sampler):
    """An endless stream of block indices drawn on demand from ``solver.sampler`` (live block gaps)."""

    def __init__(self, solver: Solver):
        self.solver = solver

    def __iter__(self) -> Iterator[int | list[int]]:
        while True:
            yield self.solver.draw()          # a block, or a mini-batch of distinct blocks


class LiveChunk:
    """``size`` block indices, pulled from a live draw stream only when iterated."""

    def __init__(self, draws: Iterator[int], size: int):
        self.draws, self.size = draws, size

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self.draws, self.size)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"LiveChunk(size={self.size})"


class FWIteration:
    """The training-step unit of batch Frank-Wolfe: one epoch = ``gap_check`` FW iterations."""

    def __repr__(self) -> str:
        return "FWIteration()"


class BlockChunks(tud.IterableDataset):
    """One interval of block steps (``gap_check`` passes) as a sequence of live chunks; its length
    is the number of training steps per epoch."""

    def __init__(self, solver: Solver, blocks_per_step: int | None = None):
        self.solver, self.blocks_per_step = solver, blocks_per_step

    @property
    def fw(self) -> bool:
        return self.solver.cfg.solver == "fw"

    def __iter__(self):
        if self.fw:
            yield FWIteration()
            return
        draws = iter(LiveBlockSampler(self.solver))
        for size in self.solver.chunk_sizes(self.blocks_per_step):
            yield LiveChunk(draws, size)

    def __len__(self) -> int:
        return 1 if self.fw else len(self.solver.chunk_sizes(self.blocks_per_step))


def block_loader(solver: Solver, blocks_per_step: int | None = None) -> tud.DataLoader:
    """The training DataLoader: no batching, no workers (the draws depend on the solver's live state)."""
    return tud.DataLoader(BlockChunks(solver, blocks_per_step), batch_size=None, num_workers=0,
                          collate_fn=lambda chunk: chunk)
