"""Batched decoding kernels: pure functions of tensors (the "how to argmax")."""
from .viterbi import viterbi, viterbi_ragged

__all__ = ["viterbi", "viterbi_ragged"]
