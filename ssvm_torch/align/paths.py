"""Monotone alignment paths between two sequences: their tensor form, its check, and conversion from and to lists
of aligned pairs (ssvm_torch/align/ops.py has the dynamic programs over them).

A path of a (n, m) grid visits cells (i, j) (position i of x with position j of y) and enters each by one of three
moves: ``RIGHT`` = 0 from (i, j - 1), ``DIAGONAL`` = 1 from (i - 1, j - 1), ``DOWN`` = 2 from (i - 1, j) (torch-struct's
``AlignmentCRF`` op order). A global path (Needleman-Wunsch, dynamic time warping) runs from (0, 0), entered
diagonally from outside the grid, to (n - 1, m - 1); a local one (Smith-Waterman) starts at any cell, entered
diagonally from outside, ends at any cell, and may be empty. Batches of paths are (B, N, M) int64 tensors holding
the move that enters each visited cell and -1 elsewhere.
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host_all
from ..errors import SSVMInputError, check
from .numba_ops import path_faults

RIGHT, DIAGONAL, DOWN = 0, 1, 2
#: the cell a move comes from, as (di, dj) offsets
FROM = ((0, -1), (-1, -1), (-1, 0))


def check_path(path, x_lengths: torch.Tensor, y_lengths: torch.Tensor, shape, local: bool,
               field: str = "path", compiled: bool | None = None) -> torch.Tensor:
    """``path`` as an int64 tensor on the lengths' device, refused by name unless every row is one monotone path of
    its (n_b, m_b) grid (module docstring): every visited cell's move comes from a visited cell, except the path's
    first cell, entered diagonally from outside the grid ((0, 0) for a global path); one first cell, one last cell
    ((n_b - 1, m_b - 1) for a global path), no cell left by two moves. One host synchronisation. ``compiled``
    (None: on CPU tensors) follows each path back in a compiled kernel (numba_ops.path_faults: O(N M) once, no
    temporaries); else torch operations on the path's device, the same rules."""
    B, N, M = shape
    check(torch.is_tensor(path) and not path.is_floating_point() and tuple(path.shape) == (B, N, M), field,
          f"an integer tensor (B, N, M) = ({B}, {N}, {M}) of moves (0 right, 1 diagonal, 2 down, -1 off the path)",
          f"{getattr(path, 'dtype', type(path).__name__)} {tuple(getattr(path, 'shape', ()))}")
    dev = x_lengths.device
    path = path.to(dev, torch.int64)
    if compiled if compiled is not None else dev.type == "cpu":
        faults = np.empty(B, dtype=np.int64)
        path_faults(*to_host_all(path, x_lengths.to(torch.int64), y_lengths.to(torch.int64)), local, faults)
        if faults.any():
            _refuse(field, local)
        return path
    on = path >= 0
    inside = inside_cells(x_lengths, y_lengths, N, M)
    bad_value = ((path < -1) | (path > 2)).any() | (on & ~inside).any()
    # each cell's neighbours by slicing (no gather, no scatter), in int8 (moves -1..2 once the values are checked):
    # whether the cell a move comes from is visited, and whether the cells after it are entered from it
    moves = path.clamp(-1, 2).to(torch.int8)
    right, diagonal = moves == RIGHT, moves == DIAGONAL
    pred_on = torch.where(right, _shifted(on, 0, 1), torch.where(diagonal, _shifted(on, 1, 1), _shifted(on, 1, 0)))
    first = on & ~pred_on                                # entered from outside the path
    bad_first = (first & ~diagonal).any()
    succ = (_shifted(right, 0, -1).to(torch.int8) + _shifted(diagonal, -1, -1).to(torch.int8)
            + _shifted(moves == DOWN, -1, 0).to(torch.int8)) * on
    last = on & (succ == 0)
    n_first, n_last = first.sum((1, 2)), last.sum((1, 2))
    empty = ~on.any(2).any(1)
    if local:
        shape_ok = (empty | ((n_first == 1) & (n_last == 1))).all()
    else:
        start = on[:, 0, 0] & first[:, 0, 0]
        end = on[torch.arange(B, device=dev), x_lengths - 1, y_lengths - 1]
        shape_ok = ((n_first == 1) & (n_last == 1) & start & end).all()
    if bool(bad_value | bad_first | (succ > 1).any() | ~shape_ok):       # the one host synchronisation
        _refuse(field, local)
    return path


def _refuse(field: str, local: bool):
    kind = "a local path (or none)" if local else "one path from (0, 0) to (n - 1, m - 1)"
    raise SSVMInputError(f"{field}: expected {kind} per row, moves in {{0, 1, 2}} on the path and -1 elsewhere, "
                         "each visited cell entered from a visited cell (the first diagonally from outside the "
                         "grid) and left to at most one, every visited cell inside the row's lengths")


def inside_cells(x_lengths: torch.Tensor, y_lengths: torch.Tensor, N: int, M: int) -> torch.Tensor:
    """(B, N, M) bool: the cells (i, j) of every row's grid, i < n_b and j < m_b."""
    i = torch.arange(N, device=x_lengths.device)[None, :, None]
    j = torch.arange(M, device=x_lengths.device)[None, None, :]
    return (i < x_lengths[:, None, None]) & (j < y_lengths[:, None, None])


def _shifted(t: torch.Tensor, di: int, dj: int, fill=False) -> torch.Tensor:
    """t (B, N, M) read at (i - di, j - dj) for every cell (i, j), ``fill`` where that is off the grid: di, dj = 1
    reads the cell above / to the left, -1 the cell below / to the right."""
    out = torch.full_like(t, fill)
    N, M = t.shape[1], t.shape[2]
    src_i, dst_i = (slice(0, N - di), slice(di, N)) if di >= 0 else (slice(-di, N), slice(0, N + di))
    src_j, dst_j = (slice(0, M - dj), slice(dj, M)) if dj >= 0 else (slice(-dj, M), slice(0, M + dj))
    out[:, dst_i, dst_j] = t[:, src_i, src_j]
    return out


def path_from_pairs(pairs, N: int | None = None, M: int | None = None) -> torch.Tensor:
    """A batch of paths (B, N, M) from lists of aligned pairs [(i, j), ...] in path order (each consecutive pair one
    move right, diagonal or down); N, M default to the largest grid the pairs need. Refused by name when two
    consecutive pairs are not one move apart."""
    check(isinstance(pairs, (list, tuple)), "pairs", "a list (one per row) of lists of (i, j) pairs",
          type(pairs).__name__)
    rows = [np.asarray(p, dtype=np.int64).reshape(-1, 2) for p in pairs]
    N = N if N is not None else max([int(r[:, 0].max()) + 1 for r in rows if len(r)] + [1])
    M = M if M is not None else max([int(r[:, 1].max()) + 1 for r in rows if len(r)] + [1])
    out = torch.full((len(rows), N, M), -1, dtype=torch.int64)
    for b, r in enumerate(rows):
        if not len(r):
            continue
        check(int(r.min()) >= 0 and int(r[:, 0].max()) < N and int(r[:, 1].max()) < M, f"pairs[{b}]",
              f"cells inside the ({N}, {M}) grid", f"range {r.min(0).tolist()} .. {r.max(0).tolist()}")
        step = np.diff(r, axis=0)
        moves = np.full(len(r), DIAGONAL)
        for k, (di, dj) in enumerate(step):
            check((int(di), int(dj)) in FROM_STEP, f"pairs[{b}][{k + 1}]",
                  "one move from the pair before it: (0, 1), (1, 1) or (1, 0)", (int(di), int(dj)))
            moves[k + 1] = FROM_STEP[(int(di), int(dj))]
        out[b, r[:, 0], r[:, 1]] = torch.as_tensor(moves)
    return out


#: the move that a step (di, dj) between consecutive pairs is
FROM_STEP = {(0, 1): RIGHT, (1, 1): DIAGONAL, (1, 0): DOWN}


def pairs_from_path(path: torch.Tensor) -> list:
    """The aligned pairs of each row of a batch of paths (B, N, M), in path order (lists of (i, j) tuples)."""
    out = []
    for p in path.detach().cpu():
        cells = torch.nonzero(p >= 0).tolist()
        out.append(sorted((int(i), int(j)) for i, j in cells))       # monotone: sorted order is path order
    return out
