"""Monotone alignments of two sequences (dynamic time warping, Needleman-Wunsch, Smith-Waterman): paths and their
check (:mod:`.paths`), the dynamic programs for log Z, the best path, the marginals, the entropy, KL divergence
and cross-entropy, and exact samples (:mod:`.ops`; compiled kernels in :mod:`.numba_ops`), the k best paths
(:mod:`.kbest`), partially observed paths (:mod:`.partial`). The layer is :class:`ssvm_torch.nn.MonotonicAlignment`."""
from .kbest import kbest
from .ops import cross_entropy, decode, entropy, kl, log_partition, marginals, max_score, sample
from .paths import DIAGONAL, DOWN, RIGHT, check_path, pairs_from_path, path_from_pairs

__all__ = ["DIAGONAL", "DOWN", "RIGHT", "check_path", "cross_entropy", "decode", "entropy", "kbest", "kl",
           "log_partition", "marginals", "max_score", "pairs_from_path", "path_from_pairs", "sample"]
