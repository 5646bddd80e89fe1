"""The k best structures of every row by Lawler's partition of the solution space (Lawler 1972, "A procedure
for computing the K best solutions to discrete optimization problems"; Murty 1968's ranking of assignments is
its first instance, Camerini et al. 1980 apply it to spanning trees), over any best-structure oracle that
honours -inf scores.

A structure is a set of parts, each a flat index into its row's score tensor X (an arc with its relation, a
labeled span); its score is the sum of its parts' scores. A subproblem is the structures that contain every
part of a set F (forced) and none of a set E (excluded); the oracle solves it on a copy of X with -inf at
every part that E excludes or that conflicts with a forced part (:func:`kbest`'s ``conflicts``: the other
heads of a word, the spans that cross a span). Given the best structure y of a subproblem (F, E) and its
parts p_1..p_r outside F, the subproblems

    (F + {p_1..p_{t-1}}, E + {p_t}),   t = 1..r,

partition the subproblem's structures other than y (Lawler's step), so popping the best of a priority queue of
solved subproblems ranks the structures exactly, each once, whatever the ties. Every rank costs one batched
oracle call over the children of every row's last pop (at most the parts of one structure per row), on the
scores' device; the bookkeeping (the queue, the masks) is on the host.
"""
from __future__ import annotations

import heapq
import os
from itertools import count
from typing import Callable, Sequence

import numpy as np
import torch

from ..chain.checks import tracing
from ..devices import from_host, to_host
from ..errors import check

#: a best score at or below this means the subproblem holds no structure of finite score (the oracles' NEG / 2)
INFEASIBLE = -1e29
#: the score elements one oracle call may hold (children x their row's score tensor and side inputs)
CHUNK_ELEMENTS = 1 << 24


def feasible(score: float) -> bool:
    return score > INFEASIBLE                       # False for NaN too


def kbest(X: torch.Tensor, k: int, decode: Callable, parts_of: Callable, conflicts: Callable, fills: Sequence,
          extra_elements: int = 0):
    """(fields, scores): the k best structures of every row of the scores X (B, *R), in non-increasing score
    order (ties in any order), and their scores (B, k) in X's dtype on X's device, -inf for the ranks past a
    row's number of structures of finite score.

    ``decode(Xc, rows)``: the best structures of the score tensors Xc (C, *R) of rows ``rows`` (C,) int64 as a
    tuple of tensors (C, ...) (the fields: the heads, or a chart) and their scores (C,); a row with no
    structure of finite score scores at most :data:`INFEASIBLE`. ``parts_of(fields, b)``: the parts (flat indices
    into X[b]) of one structure given as host arrays, the fields of one row. ``conflicts(p)``: the flat indices
    that a structure containing part p cannot contain (the same in every row). ``fills``: the value of each field
    at an empty rank. ``extra_elements``: per child, the elements of decode's side inputs (sibling scores), for
    the chunking."""
    B, R = X.shape[0], tuple(X.shape[1:])
    size = int(np.prod(R))
    flat = X.reshape(B, size)
    fields, scores = decode(X, torch.arange(B, device=X.device))
    host = [to_host(f) for f in fields]
    best = to_host(scores).astype(np.float64)
    out = [np.full((B, k) + f.shape[1:], fill, dtype=f.dtype) for f, fill in zip(host, fills)]
    out_scores = np.full((B, k), -np.inf)
    tick = count()
    queues: list[list] = [[] for _ in range(B)]
    for b in range(B):
        if feasible(best[b]):
            queues[b].append((-best[b], next(tick), tuple(f[b] for f in host), (), ()))
    per_chunk = max(1, CHUNK_ELEMENTS // max(1, size + extra_elements))
    for rank in range(k):
        popped = []
        for b in range(B):
            if queues[b]:
                neg, _, sol, forced, banned = heapq.heappop(queues[b])
                for o, f in zip(out, sol):
                    o[b, rank] = f
                out_scores[b, rank] = -neg
                popped.append((b, sol, forced, banned))
        if rank == k - 1 or not popped:
            break
        children = _children(popped, size, parts_of, conflicts)
        while True:
            chunk = [c for _, c in zip(range(per_chunk), children)]
            if not chunk:
                break
            rows = torch.as_tensor([c[0] for c in chunk], dtype=torch.int64, device=X.device)
            masks = from_host(np.stack([c[1] for c in chunk]), X.device)
            Xc = flat.index_select(0, rows).masked_fill(masks, float("-inf")).reshape((len(chunk),) + R)
            cf, cs = decode(Xc, rows)
            cf = [to_host(f) for f in cf]
            cs = to_host(cs).astype(np.float64)
            for i, (b, _, forced, banned) in enumerate(chunk):
                if feasible(cs[i]):
                    heapq.heappush(queues[b], (-cs[i], next(tick), tuple(f[i] for f in cf), forced, banned))
    return tuple(from_host(o, X.device) for o in out), from_host(out_scores, X.device, X.dtype)


def _children(popped, size: int, parts_of: Callable, conflicts: Callable):
    """Lawler's subproblems of every popped (row, structure, forced, excluded), lazily: (row, the mask of the
    parts the child may not use (size,) bool, its forced parts, its excluded parts)."""
    for b, sol, forced, banned in popped:
        taken = np.zeros(size, dtype=np.bool_)
        for p in forced:
            taken[conflicts(p)] = True
        if banned:
            taken[list(banned)] = True
        fixed = set(forced)
        prefix = list(forced)
        for p in parts_of(sol, b):
            p = int(p)
            if p in fixed:
                continue
            mask = taken.copy()
            mask[p] = True
            yield b, mask, tuple(prefix), banned + (p,)
            taken[conflicts(p)] = True
            prefix.append(p)


def check_room(nbytes: int, k: int) -> None:
    """Refuse (naming ``nbest``) a k whose results and tables, about ``nbytes``, exceed this machine's memory."""
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    check(have is None or nbytes <= have, "nbest", f"a k whose k best trees fit this machine's "
          f"{(have or 0) / 2 ** 30:.0f} GB of memory (k = {k} needs about {nbytes / 2 ** 30:.0f} GB for this batch)", k)


def check_nbest(nbest) -> int:
    """``nbest`` as an int >= 1, refused by name otherwise; n > 1 also refused under tracing (the ranking runs on
    the host between oracle calls: a compiled graph cannot hold it)."""
    check(isinstance(nbest, int) and not isinstance(nbest, bool) and nbest >= 1, "nbest", "an int >= 1", repr(nbest))
    check(nbest == 1 or not tracing(), "nbest", "1 under torch.compile / tracing (the k best trees are ranked on "
          "the host between oracle calls)", nbest)
    return nbest
