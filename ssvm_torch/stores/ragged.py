"""Labelings of stores whose blocks are ragged rows of one stacked tensor (chains, dependency trees): block
i's labeling is ``labels[offsets[i]:offsets[i + 1]]`` of a gap pass."""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from .base import GapPass


def host_labels(labelings) -> np.ndarray:
    """Labelings as the compiled kernels' contiguous int64 array, read in place from NumPy arrays or CPU tensors:
    one (T,), stacked (m, T), or a list of (T,) (the compiled steps run on the CPU)."""
    if torch.is_tensor(labelings):
        return np.ascontiguousarray(labelings.numpy(), np.int64)
    if isinstance(labelings, np.ndarray):
        return np.ascontiguousarray(labelings, np.int64)
    return np.ascontiguousarray(np.stack([torch.as_tensor(y).numpy() for y in labelings]), np.int64)


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
