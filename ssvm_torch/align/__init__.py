"""Monotone alignments of two sequences (dynamic time warping, Needleman-Wunsch, Smith-Waterman): paths and their
check (:mod:`.paths`), the wavefront dynamic programs for log Z, the best path and the marginals (:mod:`.ops`).
The layer is :class:`ssvm_torch.nn.MonotonicAlignment`."""
from .ops import decode, log_partition, marginals, max_score
from .paths import DIAGONAL, DOWN, RIGHT, check_path, pairs_from_path, path_from_pairs

__all__ = ["DIAGONAL", "DOWN", "RIGHT", "check_path", "decode", "log_partition", "marginals", "max_score",
           "pairs_from_path", "path_from_pairs"]
