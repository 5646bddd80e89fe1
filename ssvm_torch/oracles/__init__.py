"""Batched decoding kernels: pure functions of score tensors (the "how to argmax")."""
from .viterbi import decode, viterbi, viterbi_ragged

__all__ = ["decode", "viterbi", "viterbi_ragged"]
