"""OCR words as images for networks: every letter a 1 x 16 x 8 image (the 128 binary pixels of
Taskar et al. 2003, row-major), words as padded batches for the chain layers of ssvm_torch.nn."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data.ocr import load_ocr
from ..data.types import ChainData
from ..errors import check


@dataclass
class Words:
    """``chain``: the words as :class:`ChainData` (pixels as features); ``images`` (N, 1, 16, 8)
    float32 of all letters; ``pos`` (n, T_max) letter rows of each word, -1 padded."""

    chain: ChainData
    images: torch.Tensor
    pos: torch.Tensor

    @classmethod
    def of(cls, chain: ChainData) -> "Words":
        lengths = chain.lengths
        T = int(lengths.max())
        steps = torch.arange(T)
        pos = torch.where(steps[None, :] < lengths[:, None], chain.offsets[:-1, None] + steps[None, :], -1)
        images = chain.X.to(torch.float32).reshape(-1, 1, 16, 8)
        return cls(chain, images, pos)

    @property
    def n(self) -> int:
        return self.chain.n

    def batch(self, idx: torch.Tensor):
        """(letter rows (B, T) with -1 padding, lengths (B,), ground truth (B, T) -1 padded)."""
        pos = self.pos[idx]
        T = int((pos >= 0).sum(1).max())
        pos = pos[:, :T]
        valid = pos >= 0
        gt = torch.where(valid, self.chain.Y[pos.clamp(min=0)], -1)
        return pos, valid.sum(1), gt


def pad_rows(values: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """values (N, ...) of letters gathered into the padded word layout of ``pos`` (B, T): (B, T, ...),
    zeros at padding."""
    out = values[pos.clamp(min=0)]
    mask = (pos >= 0).reshape(*pos.shape, *([1] * (values.dim() - 1)))
    return out * mask.to(out.dtype)


def load_ocr_words(split: str = "large", train_size: int | None = None) -> tuple[Words, Words]:
    """OCR (train, test) words; ``train_size`` keeps the first that many training words."""
    train, test = load_ocr(split)
    if train_size is not None:
        check(isinstance(train_size, int) and 1 <= train_size <= train.n, "train_size",
              f"an int in [1, {train.n}]", train_size)
        train = train.subset(torch.arange(train_size))
    return Words.of(train), Words.of(test)
