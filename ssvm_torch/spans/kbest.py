"""The k best binary trees of every row (unlabeled or labeled spans): on the CPU by the compiled lazy k-best CKY
(:mod:`ssvm_torch.spans.numba_kbest`), elsewhere by Lawler's partition (:mod:`ssvm_torch.trees.lawler`) over
the CKY oracle.

A part is a span (i, j), a flat index into the span scores. Forcing it excludes the spans that cross it: a binary
tree over n words is a maximal set of non-crossing spans, so every span that crosses none of a tree's spans is one
of them, and the trees without a span crossing (i, j) are exactly the trees holding it. The one-word spans and
the sentence are in every tree and are not parts. O(k n) CKY calls per row, batched by rank. With labels the k
best trees of the spans' best label scores are ranked first and their labels expanded after
(:mod:`ssvm_torch.trees.labelings`: labels are independent given the spans).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..devices import from_host, to_host
from ..trees.checks import host_batch, parallel_rows, use_numba
from ..trees.labelings import kbest_labeled
from ..trees.lawler import check_room, kbest
from . import ops
from .numba_kbest import kbest_batch, kbest_batch_parallel


def span_kbest(S: torch.Tensor, lengths: torch.Tensor, k: int, kernels: str = "auto"):
    """(charts (B, k, N+1, N+1), scores (B, k)): the k best trees of every row of the checked span scores S
    (B, N+1, N+1) or labeled (B, N+1, N+1, L), in non-increasing score order; charts as :func:`ops.best`'s (bool,
    or int64 labels with -1 off the tree), all False / -1 with score -inf for the ranks past a row's number of
    trees of finite score. An empty row's one tree (no spans) scores 0; a row without a tree of finite score is
    refused by name. No gradient."""
    S = S.detach()
    labeled = S.dim() == 4
    U = S.amax(3) if labeled else S
    B, M, _ = U.shape
    check_room(B * k * M * M * (1 + 16 * labeled) + B * k * 2 * M * 32 * (min(S.shape[-1], k) if labeled else 0), k)
    words = to_host(lengths)
    ii, jj = np.meshgrid(np.arange(M), np.arange(M), indexing="ij")

    def decode(Uc, rows):
        charts, scores = ops.best(Uc, lengths[rows], kernels, refuse=False)
        return (charts,), scores

    def parts_of(sol, b):
        i, j = np.nonzero(sol[0])
        keep = (j - i >= 2) & ~((i == 0) & (j == int(words[b])))
        return i[keep] * M + j[keep]

    @functools.lru_cache(maxsize=None)               # a span recurs in many subproblems of a row and across rows
    def conflicts(p):
        i, j = divmod(p, M)
        return np.flatnonzero(((ii < i) & (i < jj) & (jj < j)) | ((i < ii) & (ii < j) & (j < jj)))

    if use_numba(U, kernels, "span scores"):
        Sh, Lh = host_batch(U, lengths)
        charts, scores = np.zeros((B, k, M, M), dtype=np.bool_), np.empty((B, k))
        (kbest_batch_parallel if parallel_rows(B) else kbest_batch)(Sh, Lh, k, charts, scores)
        charts, scores = from_host(charts, U.device), from_host(scores, U.device).to(U.dtype)
    else:
        (charts,), scores = kbest(U, k, decode, parts_of, conflicts, fills=(False,))
    ops.fail_no_tree(scores[:, 0], lengths, "best-tree score")    # refused as by the best tree
    return (charts, scores) if not labeled else _labeled(S, U, charts, scores, k)


def _labeled(S, U, charts, scores, k):
    """The k best labeled trees from the k best trees of the spans' best label scores U (module docstring): each
    tree's spans as slots (2n - 1 of them, in chart order), their labels' scores relative to the best."""
    B, M, _, L = S.shape
    flat = charts.flatten(2)                                                  # (B, k, M * M)
    count = flat.sum(2)                                                       # 2 n - 1 spans per tree, 0 past them
    m = int(count.max())
    if m == 0:                          # only empty rows: their one tree has no span to label
        return torch.full((B, k, M, M), -1, dtype=torch.int64, device=S.device), scores
    b, r, cell = flat.nonzero(as_tuple=True)                                  # ordered by (b, r, cell)
    start = (torch.cumsum(count.flatten(), 0) - count.flatten()).reshape(B, k)
    cells = torch.zeros(B, k, m, dtype=torch.int64, device=S.device)
    cells[b, r, torch.arange(b.shape[0], device=S.device) - start[b, r]] = cell   # each tree's spans, in chart order
    slot = torch.arange(m, device=S.device) < count[..., None]                # (B, k, m)
    rows = torch.arange(B, device=S.device)[:, None, None]
    chosen = S.reshape(B, M * M, L)[rows, cells]                              # (B, k, m, L)
    neutral = torch.full_like(chosen[0, 0, 0], float("-inf"))
    neutral[0] = 0.0
    options = torch.where(slot[..., None], chosen - U.reshape(B, M * M)[rows, cells][..., None], neutral)
    pick, labels, scores = kbest_labeled(scores, options, k)
    ranks = torch.arange(k, device=S.device)[None, :, None]
    take = pick.clamp(min=0)[:, :, None]
    out = torch.full((B, k, M * M), -1, dtype=torch.int64, device=S.device)
    keep = slot.gather(1, take.expand(B, k, m)) & (pick[:, :, None] >= 0)
    where = cells.gather(1, take.expand(B, k, m))
    out[rows.expand(B, k, m)[keep], ranks.expand(B, k, m)[keep], where[keep]] = labels[keep]
    return out.reshape(B, k, M, M), scores
