"""The batch reductions the structured layers share (:class:`~ssvm_torch.nn.LinearChain`,
:class:`~ssvm_torch.nn.DependencyTree`), named as torch's losses name them plus ``token_mean``."""
from __future__ import annotations

import torch

from ..errors import check_choice

REDUCTIONS = ("none", "sum", "mean", "token_mean")


def reduce_rows(per_row: torch.Tensor, reduction: str, tokens: torch.Tensor) -> torch.Tensor:
    """``per_row`` (B,) as ``reduction`` says: itself (``none``), its sum, its mean over rows, or its sum
    over the number of tokens (``token_mean``: ``tokens`` counts them, e.g. a mask or the lengths; at
    least 1 so an empty batch gives 0). An empty batch's mean is 0 too (torch's mean of nothing is NaN, which
    would reach the weights silently)."""
    check_choice(reduction, "reduction", REDUCTIONS)
    if reduction == "none":
        return per_row
    if reduction == "sum":
        return per_row.sum()
    if reduction == "mean":
        return per_row.mean() if per_row.numel() else per_row.sum()
    return per_row.sum() / tokens.sum().clamp(min=1)
