"""The compiled block step of :class:`~ssvm_torch.stores.segments.SegmentDual` (CPU float64): the kernels of
:mod:`ssvm_torch.stores.segment_kernels` called on zero-copy NumPy views of the store's tensors, so that a step
moves the store's own w, M_i and counts. Figures are returned unscaled (not divided by n or lam n): the store
applies the scalings of its module docstring, as on its torch path."""
from __future__ import annotations

import numba
import numpy as np
import torch

from ..devices import to_host
from .ragged import host_labels
from .segment_kernels import (nb_segment_add_labelings, nb_segment_corner, nb_segment_delta, nb_segment_gap_pass,
                              nb_segment_joint_scores, nb_segment_labelings_gaps, nb_segment_move,
                              nb_segment_sparse_rows)


class HostSegmentSteps:
    """Views of a semi-Markov store's state and the scratch of its compiled kernels (one block at a time)."""

    def __init__(self, store):
        m = self.model = store.model
        T = int(store.lengths.max()) if store.n else 0
        self.csr = tuple(to_host(t) for t in store.csr)
        self.offsets, self.Y = to_host(store.offsets), to_host(store.data.Y.to(torch.int64))
        self.obs = to_host(store.observed)                 # the positions the loss counts (partial annotation)
        self.W, self.wc = m.split(store.w)[0].numpy(), store.w[m.e:].numpy()
        self.P, self.Gc, self.G, self.goff = store.P.numpy(), store.Gc.numpy(), store.G.numpy(), to_host(store.goff)
        self.P_gt, self.G_gt, self.c = store.P_gt.numpy(), store.G_gt.numpy(), to_host(store.c)
        self.U, self.S, self.D = np.empty((T, m.C)), np.empty((T, m.L, m.K)), np.empty((T, m.C))
        self.Dc = np.empty(m.G)
        self.outside = -1 if m.outside is None else m.outside
        self._mark = None                                  # (F,) -1s: the sparse direction's feature marks

    def length(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])

    def corner(self, i: int, sqnorm: bool = True):
        """(labels (T_i,), L_i(y*), <D, theta_i>, ||A_i D||^2, D, Dc) of block i's loss-augmented corner; ``sqnorm``
        False skips the Gram part of the norm (mini-batches: their line search reads the joint direction's)."""
        m, T = self.model, self.length(i)
        ys = np.empty(T, dtype=np.int64)
        loss, dot, sq = nb_segment_corner(i, float(self.c[i]), self.outside, *self.csr, self.offsets, self.Y, self.obs,
                                          self.W, self.wc, self.P, self.Gc, self.G, self.goff, m.K, m.L, self.U, self.S,
                                          ys, self.D, self.Dc, sqnorm)
        return torch.from_numpy(ys), loss, dot, sq, self.D[:T].copy(), self.Dc.copy()

    def pair(self, i: int, P, Q):
        """(D, Dc, ||A_i D||^2) of D = s(P) - s(Q), P / Q a segmentation or None (block i's point M_i)."""
        none = np.empty(0, np.int64)
        sq = nb_segment_delta(i, none if P is None else host_labels(P), P is None,
                              none if Q is None else host_labels(Q), Q is None, self.offsets, self.P, self.Gc, self.G,
                              self.goff, self.model.K, self.D, self.Dc)
        return self.D[:self.length(i)].copy(), self.Dc.copy(), sq

    def labelings_gaps(self, i: int, labelings) -> np.ndarray:
        """<s(y_j) - M_i, theta_i> + L_i(y_j) of each segmentation y_j of block i."""
        out = np.empty(len(labelings))
        nb_segment_labelings_gaps(i, float(self.c[i]), host_labels(labelings), *self.csr, self.offsets, self.Y,
                                  self.obs, self.W, self.wc, self.P, self.Gc, self.model.K, self.U, self.D, self.Dc, out)
        return out

    def move(self, i: int, D, Dc, coef: float, gamma: float, shadow=None, shadow_coef: float = 0.0) -> None:
        """M_i += gamma D, w += coef A_i D, the shadow vector (weighted averaging) by shadow_coef coef A_i D."""
        m = self.model
        sw, swc = ((m.split(shadow)[0].numpy(), shadow[m.e:].numpy()) if shadow is not None
                   else (self.W[:0], self.wc[:0]))
        nb_segment_move(i, coef, gamma, *self.csr, self.offsets, D, Dc, self.W, self.wc, self.P, self.Gc,
                        shadow is not None, sw, swc, float(shadow_coef))

    def gap_pass(self):
        """(labels (N,), L_i(y*), <s(y*) - M_i, theta_i>, <s(y_i) - M_i, theta_i>) of every block, in parallel
        threads."""
        m, n = self.model, self.offsets.shape[0] - 1
        labels = np.empty(self.Y.shape[0], dtype=np.int64)
        loss, dot, gold_dot = np.empty(n), np.empty(n), np.empty(n)
        nb_segment_gap_pass(self.c, self.outside, *self.csr, self.offsets, self.Y, self.obs, self.W, self.wc, self.P,
                            self.Gc,
                            self.P_gt, self.G_gt, self.G, self.goff, m.K, m.L, self.U.shape[0],
                            min(n, 4 * numba.get_num_threads()), labels, loss, dot, gold_dot)
        return labels, loss, dot, gold_dot

    def joint_scores(self, labelings: np.ndarray, w: torch.Tensor) -> np.ndarray:
        """sum_i <s(y_j,i), theta_i(w)> of each joint segmentation y_j (rows of ``labelings`` (m, N)) at the weights
        ``w`` (CPU float64): blocks in parallel threads, each block's score alone, summed in block order (the same
        bits on any thread count)."""
        m, n = self.model, self.offsets.shape[0] - 1
        out = np.empty((labelings.shape[0], n))
        nb_segment_joint_scores(labelings, *self.csr, self.offsets, np.ascontiguousarray(m.split(w)[0].numpy()),
                                np.ascontiguousarray(w[m.e:].numpy()), m.K, self.U.shape[0],
                                min(n, 4 * numba.get_num_threads()), out)
        return out.sum(1)

    def add_labelings(self, labelings: np.ndarray, weights: np.ndarray, P: np.ndarray, Gc: np.ndarray) -> None:
        """P += sum_j weights_j s(y_j) of the positions, Gc += of the counts (arrays shaped as the store's)."""
        nb_segment_add_labelings(labelings, np.ascontiguousarray(weights, np.float64), self.offsets, self.model.K, P, Gc)

    def sparse_rows(self, rows: np.ndarray, stats: np.ndarray):
        """(sorted distinct features (u,), rows (u, 3K)) of X_rows^T stats: a sparse mini-batch direction's
        emission part (stores/segment_batch.py)."""
        if self._mark is None:
            self._mark = np.full(self.model.F, -1, dtype=np.int64)
        return nb_segment_sparse_rows(np.ascontiguousarray(rows, np.int64), *self.csr, np.ascontiguousarray(stats),
                                      self._mark)
