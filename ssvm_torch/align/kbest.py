"""The k best monotone alignment paths of each row (torch-struct's ``KMaxSemiring`` over its ``AlignmentCRF``):
the max recursion of align/ops.py keeping, in every cell, the k best partial paths that end there (score, the move
that entered the cell and the rank of the path it extended), then the k best complete paths read back.

A global path ends in the last cell, so its k best are that cell's list; a local path (Smith-Waterman) ends in any
cell or is the empty path (score 0), so they are the k best of every cell's list and the empty path. A local path
starts anywhere by a diagonal move from outside the grid ("fresh start", score 0 before it), the global one at
(0, 0) only. Distinct entries of a cell's list are distinct partial paths (a path is its cells and moves), so the k
paths are distinct.

Ties follow :func:`~ssvm_torch.align.ops.decode`: the lowest move first, a fresh start before a continued
diagonal path, the empty path before a local path of score 0, then the first cell in row-major order; so the first
of the k is the decoder's path. The kernel runs on the host in float64 (one copy each way from any device); a
row with fewer than k paths gets -1 paths and -inf scores at the ranks it lacks.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..devices import from_host, to_host
from ..errors import check
from .numba_ops import NEG, _score
from .ops import _check_reachable, check_scores


@nb.njit(cache=True, inline="always")
def _merge(top, bmove, brank, S, b, i, j, k, fresh):
    """Cell (i, j)'s k best partial paths, merged from the three sorted lists they extend (right from (i, j - 1),
    diagonal from (i - 1, j - 1), down from (i - 1, j)) and a fresh start (``fresh``: allowed here); on equal
    scores right before a fresh start before diagonal before down, then by rank (decode's ties). Candidates at or
    below NEG / 2 (a forbidden move, an empty rank) are dropped."""
    sr = _score(S, b, i, j, 0)
    sd = _score(S, b, i, j, 1)
    sn = _score(S, b, i, j, 2)
    pr = 0 if j > 0 else k
    pd = 0 if (i > 0 and j > 0) else k
    pn = 0 if i > 0 else k
    for r in range(k):
        best, src = NEG / 2, -1
        if pr < k and top[i, j - 1, pr] + sr > best:
            best, src = top[i, j - 1, pr] + sr, 0
        if fresh and sd > best:
            best, src = sd, 3
        if pd < k and top[i - 1, j - 1, pd] + sd > best:
            best, src = top[i - 1, j - 1, pd] + sd, 1
        if pn < k and top[i - 1, j, pn] + sn > best:
            best, src = top[i - 1, j, pn] + sn, 2
        if src < 0:
            return
        top[i, j, r] = best
        if src == 0:
            bmove[i, j, r], brank[i, j, r] = 0, pr
            pr += 1
        elif src == 3:
            bmove[i, j, r], brank[i, j, r] = 1, -1
            fresh = False
        elif src == 1:
            bmove[i, j, r], brank[i, j, r] = 1, pd
            pd += 1
        else:
            bmove[i, j, r], brank[i, j, r] = 2, pn
            pn += 1


@nb.njit(cache=True)
def _read_back(bmove, brank, i, j, r, out):
    """The path of cell (i, j)'s r-th entry into ``out`` (N, M): its moves, followed back to its start."""
    while True:
        mv, pr = bmove[i, j, r], brank[i, j, r]
        out[i, j] = mv
        if mv == 1 and pr < 0:
            return
        if mv != 0:
            i -= 1
        if mv != 2:
            j -= 1
        r = pr


@nb.njit(cache=True)
def kbest_paths(S, n, m, local, k, values, paths):
    """values (B, k) and paths (B, k, N, M) (prefilled -inf and -1) of the k best paths of every row (module
    docstring). Candidates scoring below NEG / 2 (through a forbidden move) are dropped."""
    B = S.shape[0]
    for b in range(B):
        nb_, mb = n[b], m[b]
        top = np.full((nb_, mb, k), NEG)
        bmove = np.full((nb_, mb, k), -1, np.int64)
        brank = np.full((nb_, mb, k), -1, np.int64)
        for i in range(nb_):
            for j in range(mb):
                _merge(top, bmove, brank, S, b, i, j, k, local or (i == 0 and j == 0))
        if not local:
            for r in range(k):
                if top[nb_ - 1, mb - 1, r] > NEG / 2:
                    values[b, r] = top[nb_ - 1, mb - 1, r]
                    _read_back(bmove, brank, nb_ - 1, mb - 1, r, paths[b, r])
            continue
        # local: the empty path, then every cell's entries in row-major order, stably by score
        total = 1 + nb_ * mb * k
        fs, fi = np.empty(total), np.empty(total, np.int64)
        fj, fr = np.empty(total, np.int64), np.empty(total, np.int64)
        fs[0], fi[0], fj[0], fr[0] = 0.0, -1, -1, -1
        c = 1
        for i in range(nb_):
            for j in range(mb):
                for r in range(k):
                    if top[i, j, r] > NEG / 2:
                        fs[c], fi[c], fj[c], fr[c] = top[i, j, r], i, j, r
                        c += 1
        order = np.argsort(-fs[:c], kind="mergesort")
        for q in range(min(k, c)):
            p = order[q]
            values[b, q] = fs[p]
            if fi[p] >= 0:
                _read_back(bmove, brank, fi[p], fj[p], fr[p], paths[b, q])


def kbest(scores: torch.Tensor, k: int, x_lengths=None, y_lengths=None, local: bool = False):
    """(paths (B, k, N, M) int64, scores (B, k)) of the k best paths of every row in non-increasing score order
    (module docstring), on the scores' device and in their precision; no gradient. The first is
    :func:`~ssvm_torch.align.ops.decode`'s path; a row without a finite path is refused by name."""
    check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, "nbest", "an int >= 1", repr(k))
    scores, n, m = check_scores(scores, x_lengths, y_lengths)
    S = to_host(scores.detach().to(torch.float64))
    B, N, M, _ = S.shape
    values = np.full((B, k), -np.inf)
    paths = np.full((B, k, N, M), -1, dtype=np.int64)
    kbest_paths(S, to_host(n).astype(np.int64), to_host(m).astype(np.int64), bool(local), int(k), values, paths)
    if B:
        _check_reachable(torch.from_numpy(np.where(np.isfinite(values[:, 0]), values[:, 0], 2 * NEG)))
    return from_host(paths, scores.device), from_host(values, scores.device, scores.dtype)
