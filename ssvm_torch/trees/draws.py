"""The categorical draws every sampler of the tree and span CRFs makes (heads, split points, sibling terms, relations,
span labels), and the chunking that bounds the batched torch samplers' memory however many samples are asked for.
"""
from __future__ import annotations

import torch

#: the most elements the torch samplers' working tensors hold at once (:func:`in_chunks`): 2^25, 256 MiB of int64
CHUNK_ELEMENTS = 1 << 25


def draw_categorical(logits: torch.Tensor, n: int, generator=None) -> torch.Tensor:
    """(B, n, ...) int64: n independent draws from each categorical softmax(logits) over the last dimension of
    logits (B, ..., K), by the inverse CDF: the probabilities and their cumulative sums made once for the n draws,
    then one float64 uniform t in (0, total] per draw, the index the first whose cumulative sum reaches t (never a
    zero-probability one). Cheaper than Gumbel-max when n draws share one table; every categorical draw of the tree
    and span samplers (heads, splits, relations, span labels) goes through it."""
    cdf = torch.softmax(logits.to(torch.float64), -1).cumsum(-1)
    shape = (logits.shape[0], n) + tuple(logits.shape[1:-1])
    u = torch.rand(shape, dtype=torch.float64, device=logits.device, generator=generator)
    t = (1.0 - u) * cdf[:, None, ..., -1]
    return (cdf[:, None] < t[..., None]).sum(-1)


def in_chunks(draw, n: int, per_sample: int) -> torch.Tensor:
    """draw(k) for k samples at a time, concatenated along dimension 1: at most :data:`CHUNK_ELEMENTS` //
    ``per_sample`` samples per call (at least one), so that the batched torch samplers' working tensors (a sample's
    share of them ``per_sample`` elements) stay bounded however many samples are asked for."""
    k = max(1, CHUNK_ELEMENTS // max(per_sample, 1))
    if n <= k:
        return draw(n)
    return torch.cat([draw(min(k, n - s)) for s in range(0, n, k)], 1)


__all__ = ["CHUNK_ELEMENTS", "draw_categorical", "in_chunks"]
