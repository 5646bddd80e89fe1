"""Sentence offsets of a split held as flat per-token tensors (the CoNLL chunker's and the UD parser's
splits, :mod:`ssvm_torch.deep.conll_text` and :mod:`ssvm_torch.deep.ud_text`)."""
from __future__ import annotations

import torch


class OffsetSentences:
    """A split whose sentence i holds the tokens ``offsets[i]:offsets[i + 1]`` (``offsets``: (n + 1,))."""

    offsets: torch.Tensor

    @property
    def n(self) -> int:
        """The number of sentences."""
        return len(self.offsets) - 1

    @property
    def lengths(self) -> torch.Tensor:
        """(n,) tokens per sentence."""
        return self.offsets[1:] - self.offsets[:-1]


__all__ = ["OffsetSentences"]
