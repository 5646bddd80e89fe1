"""Partially observed alignment paths (global paths: dynamic time warping, Needleman-Wunsch): a gold path of which
only some cells are known, e.g. anchor pairs, with the rest left to the model.

A partial path is a (B, N, M) integer tensor in :mod:`ssvm_torch.align.paths`' form whose cells may also hold
``UNOBSERVED`` (-2: on the path or not, by any move) or ``VISITED`` (3: on the path, by a move not given); -1 is a
cell known to be off the path and 0, 1, 2 a cell known to be on it, entered by that move. C, the paths that agree
with it, is the set of paths whose moves are all allowed by :func:`allowed_moves`: a cell off the path forbids
its three moves, a cell entered by a given move the other two, and a visited cell (i, j) every cell a monotone
path through (i, j) cannot visit (the strictly lower-left and upper-right quadrants, i' > i and j' < j or i' < i
and j' > j) and the two diagonal moves that would step over it, into (i, j + 1) and (i + 1, j). So C is the set of
paths of the scores set to -inf on the forbidden moves, and the same recursions give log Z_C and C's best path
(checked against enumeration of every path in tests/test_alignment_partial.py). Local paths (Smith-Waterman)
start and end anywhere, which no restriction of the move scores can make pass through a cell: partial paths are
for global ones.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from .paths import inside_cells

UNOBSERVED = -2
VISITED = 3


def is_partial(path) -> bool:
    """True when ``path`` holds an unobserved cell or a visited cell without its move (one host synchronisation)."""
    return torch.is_tensor(path) and not path.is_floating_point() and bool(((path == UNOBSERVED) |
                                                                              (path == VISITED)).any())


def check_partial_path(path, x_lengths: torch.Tensor, y_lengths: torch.Tensor, shape, local: bool,
                       field: str = "path") -> torch.Tensor:
    """``path`` as an int64 tensor on the lengths' device, refused by name unless it is a (B, N, M) integer tensor
    of values in {-2, -1, 0, 1, 2, 3} whose cells on the path (0..3) lie inside their row's lengths, for a global
    layer (module docstring). Whether some path agrees with it is the losses' check (their C must not be empty)."""
    B, N, M = shape
    check(not local, field, "a complete path for a local layer (partial paths, with -2 unobserved or 3 visited "
          "cells, are for global ones: module docstring of ssvm_torch.align.partial)", "a partial path")
    check(torch.is_tensor(path) and not path.is_floating_point() and tuple(path.shape) == (B, N, M), field,
          f"an integer tensor (B, N, M) = ({B}, {N}, {M}) of -2 (unobserved), -1 (off the path), 0 / 1 / 2 (on it, "
          "entered right / diagonally / down) or 3 (on it, any move)",
          f"{getattr(path, 'dtype', type(path).__name__)} {tuple(getattr(path, 'shape', ()))}")
    dev = x_lengths.device
    path = path.to(dev, torch.int64)
    inside = inside_cells(x_lengths, y_lengths, N, M)
    bad = (path < UNOBSERVED) | (path > VISITED) | ((path >= 0) & ~inside)
    if bool(bad.any()):
        b, i, j = (int(v) for v in bad.nonzero()[0])
        raise SSVMInputError(f"{field}: expected -2 (unobserved), -1 (off the path), 0 / 1 / 2 (on it, by that move) "
                             f"or 3 (on it, any move), cells on the path inside the row's lengths; got "
                             f"{int(path[b, i, j])} at row {b}, cell ({i}, {j})")
    return path


def allowed_moves(path: torch.Tensor) -> torch.Tensor:
    """(B, N, M, 3) bool: the moves that paths agreeing with the partial ``path`` may take (module docstring), on
    the path's device, without a host synchronisation (prefix sums over the visited cells)."""
    on = path >= 0
    count = on.to(torch.int32)
    # visited cells strictly above (i < i') / below (i > i') each cell's row, per column
    above = count.cumsum(1) - count
    below = count.flip(1).cumsum(1).flip(1) - count
    # ... and strictly right of / left of its column: one upper-right or lower-left of (i', j') forbids it
    upper_right = (above.flip(2).cumsum(2).flip(2) - above) > 0
    lower_left = (below.cumsum(2) - below) > 0
    cell = ~((path == -1) | upper_right | lower_left)
    # the diagonal moves that step over a visited cell (i, j): into (i, j + 1) and into (i + 1, j)
    over = torch.zeros_like(on)
    over[:, :, 1:] |= on[:, :, :-1]
    over[:, 1:, :] |= on[:, :-1, :]
    given = (path >= 0) & (path <= 2)
    return torch.stack([cell & (~given | (path == 0)), cell & ~over & (~given | (path == 1)),
                        cell & (~given | (path == 2))], -1)


def observed_cells(path: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(observed (B, N, M) bool, on (B, N, M) bool): the cells whose status the partial path gives, and those of
    them on the path; Delta_O(P) = sum over observed cells of [c in P] xor [c on] is the loss the hinge and
    softmax-margin count (the observed part of the full Delta)."""
    return path != UNOBSERVED, path >= 0
