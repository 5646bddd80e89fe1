"""Monotone alignments of two sequences (dynamic time warping, Needleman-Wunsch, Smith-Waterman): paths and their
check (:mod:`.paths`), the dynamic programs for log Z, the best path, the marginals, the entropy and exact samples
(:mod:`.ops`; compiled kernels in :mod:`.numba_ops`), the k best paths (:mod:`.kbest`). The layer is
:class:`ssvm_torch.nn.MonotonicAlignment`."""
from .kbest import kbest
from .ops import decode, entropy, log_partition, marginals, max_score, sample
from .paths import DIAGONAL, DOWN, RIGHT, check_path, pairs_from_path, path_from_pairs

__all__ = ["DIAGONAL", "DOWN", "RIGHT", "check_path", "decode", "entropy", "kbest", "log_partition", "marginals",
           "max_score", "pairs_from_path", "path_from_pairs", "sample"]
