"""Labelings of stores whose blocks are ragged rows of one stacked tensor (chains, dependency trees): block
i's labeling is ``labels[offsets[i]:offsets[i + 1]]`` of a gap pass."""
from __future__ import annotations

import torch

from ..devices import to_host
from .base import GapPass


class RaggedLabelings:
    """:meth:`BlockDual.block_labeling` / :meth:`BlockDual.stack_labelings` for ragged blocks; the store
    provides ``offsets`` (n + 1,), ``device`` and ``_numba`` (its labelings live on the host as NumPy
    arrays, for the numba kernels)."""

    def block_labeling(self, gp: GapPass, i: int):
        """Block i's labeling: its slice of the stacked labels, a copy (NumPy with numba kernels)."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        y = gp.labels[s:e]
        return to_host(y).copy() if self._numba else y.clone()

    def stack_labelings(self, labelings: list) -> torch.Tensor:
        """One labeling per block stacked in block order: the ``GapPass.labels`` of :meth:`block_labeling`."""
        return torch.cat([torch.as_tensor(y, device=self.device) for y in labelings])
