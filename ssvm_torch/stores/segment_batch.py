"""Mini-batch BCFW moves of the semi-Markov store (:class:`~ssvm_torch.stores.segments.SegmentDual`, a mixin that
reads its state): the corners of a batch of blocks, the joint direction dw = -sum_b A_b D_b / (lam n) (dense, or
the sparse vector of its touched coordinates for d >= 2^20) and the move of every block of the batch with one
step size (the line search of :class:`~ssvm_torch.solvers.steps.MiniBatchStep`). On the CPU in float64 the
corners are the compiled block corners and the sparse direction one compiled walk over the batch's feature rows
(stores/segment_kernels.py); elsewhere the store's batched torch path."""
from __future__ import annotations

import numpy as np
import torch

from .base import BatchCorners


class SegmentBatchMoves:
    """The mini-batch half of :class:`~ssvm_torch.stores.segments.SegmentDual` (module docstring)."""

    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        """The corners of the distinct blocks ``idx`` (the compiled corner block by block, or one batched torch
        decode) and the joint direction dw = -sum_b A_b D_b / (lam n) from their D's."""
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        if self._host is not None:
            self._corner_delta = self._host_delta = None
            found = [self._host.corner(i, sqnorm=False) for i in idx.tolist()]
            loss = torch.tensor([c[1] for c in found], dtype=self.dtype)
            dot = torch.tensor([c[2] for c in found], dtype=self.dtype)
            rows = torch.cat([torch.arange(int(self.offsets[i]), int(self.offsets[i + 1])) for i in idx.tolist()])
            D = torch.from_numpy(np.concatenate([c[4] for c in found]))
            Dc = torch.from_numpy(np.stack([c[5] for c in found]))
            count = self.lengths[idx]
        else:
            k = self._corners(idx, sqnorm=False)
            loss, dot, valid = k["loss"], k["dot"], k["valid"]
            rows, D, Dc, count = k["pos"][valid], k["Dp"][valid], k["Dc"], valid.sum(1)
        gaps = (dot + loss) / self.N - self.ell_i[idx]
        loss = loss / self.N
        coef = -1.0 / (self.lam * self.N)                      # dw = sum_b (w_s,b - w_b) = -sum_b A_b D_b / (lam n)
        parts = {"counts": coef * Dc, "positions": {"count": count, "rows": rows, "stats": coef * D}}
        return BatchCorners(idx, loss, gaps, self.direction(parts) if with_direction else None,
                            float((loss - self.ell_i[idx]).sum()), moves=(rows, D, Dc), parts=parts)

    def direction(self, parts: dict) -> torch.Tensor:
        """dw = -sum_b A_b D_b / (lam n), dense, or (``sparse_direction``, d >= 2^20) a coalesced sparse vector of
        the touched coordinates: the emission rows of the batch's features and the counts (O(touched), not O(d))."""
        positions = parts["positions"]
        if not self.sparse_direction:
            dw = torch.zeros_like(self.w)
            self._scatter(dw, positions["rows"], positions["stats"], parts["counts"].sum(0), 1.0)
            return dw
        m = self.model
        if self._host is not None:                         # one compiled walk over the batch's feature rows
            feats, block = (torch.from_numpy(x) for x in self._host.sparse_rows(positions["rows"].numpy(),
                                                                                 positions["stats"].numpy()))
        else:
            local, index, value = self._entries(positions["rows"])
            feats, row = torch.unique(index, sorted=True, return_inverse=True)
            block = torch.zeros(len(feats), m.C, dtype=self.dtype, device=self.device)
            block.index_put_((row,), value[:, None] * positions["stats"].index_select(0, local), accumulate=True)
        C = torch.arange(m.C, device=self.device)
        ids = torch.cat([(feats[:, None] * m.C + C).reshape(-1), torch.arange(m.e, m.d, device=self.device)])
        return torch.sparse_coo_tensor(ids[None], torch.cat([block.reshape(-1), parts["counts"].sum(0)]), (m.d,),
                                       is_coalesced=True)

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        self._corner_delta = self._host_delta = None
        (rows, D, Dc), idx = corners.moves, corners.idx
        self.P.index_put_((rows,), gamma * D, accumulate=True)        # in place: the compiled step's views stay valid
        self.Gc.index_put_((idx,), gamma * Dc, accumulate=True)
        self.ell_i[idx] = self.ell_i[idx].lerp(corners.loss, gamma)
        self.w.add_(corners.dw, alpha=gamma)
        if self.shadow is not None:
            self.shadow.add_(corners.dw, alpha=gamma * self.shadow_coef)
        self._ell[0] += gamma * corners.dell
