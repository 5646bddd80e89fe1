"""The compiled path of the constituency store (:class:`~ssvm_torch.stores.spans.SpanDual` with ``kernels="numba"``:
CPU float64): its FW corner, block move, gap pass and max margins as the kernels of stores/span_kernels.py on NumPy
views of the store's tensors (zero-copy: a move writes the store's own w, P and Gc)."""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from .span_kernels import _potentials, nb_span_corner, nb_span_gap_pass, nb_span_move


class SpanHostSteps:
    """The compiled half of :class:`~ssvm_torch.stores.spans.SpanDual` (module docstring); reads the store's
    ``model``, ``data``, ``fo``, ``so``, ``costs``, ``G``, ``goff``, ``P``, ``Gc``, ``w`` and ``shadow``."""

    def _bind_host(self) -> None:
        lengths = torch.arange(int(self.lengths.max()) + 1, device=self.device)
        bucket_of = self.model.bucket(lengths.clamp(min=1))
        self._h = {"fo": to_host(self.fo), "so": to_host(self.so), "fptr": to_host(self.data.fptr),
                   "fidx": to_host(self.data.fidx), "gold": to_host(self.data.spans.long()),
                   "observed": to_host(self.data.observed_codes()),
                   "costs": to_host(self.costs), "G": to_host(self.G), "goff": to_host(self.goff),
                   "bucket_of": to_host(bucket_of)}

    def _host_views(self, w: torch.Tensor | None = None):
        W, lenw = self.model.split(self.w if w is None else w)
        return W.numpy(), lenw.numpy()

    def _host_corner(self, i: int):
        """(tree (2n - 1, 3), wrong spans, <D, theta_i>, ||A_i D||^2, Dp, Dc) of block i's loss-augmented corner."""
        h = self._h
        T = int(h["fo"][i + 1] - h["fo"][i])
        spans = np.empty((2 * T - 3, 3), dtype=np.int64)
        Dp, Dc = np.empty((T, self.model.C)), np.empty(self.Gc.shape[1])
        W, lenw = self._host_views()
        wrong, dot, sq = nb_span_corner(i, h["fo"], h["so"], h["fptr"], h["fidx"], W, lenw, h["bucket_of"],
                                        self.model.inside, h["gold"], h["observed"], float(h["costs"][i]), self.P.numpy(),
                                        self.Gc.numpy(), h["G"], h["goff"], spans, Dp, Dc)
        return torch.from_numpy(spans), int(wrong), float(dot), float(sq), torch.from_numpy(Dp), torch.from_numpy(Dc)

    def _host_potentials(self, i: int) -> torch.Tensor:
        """U_i = X_i W (T_i, C) of block i at the store's w, compiled (the working-set steps score a block's trees
        against it once per step)."""
        h = self._h
        return torch.from_numpy(_potentials(i, h["fo"], h["fptr"], h["fidx"], self._host_views()[0]))

    def _host_move(self, i: int, Dp: torch.Tensor, Dc: torch.Tensor, coef: float, gamma: float) -> None:
        """w += coef A_i D (the shadow too), M_i += gamma D."""
        W, lenw = self._host_views()
        if self.shadow is not None:
            sW, sl = self._host_views(self.shadow)
            sc = self.shadow_coef
        else:
            sW, sl, sc = W, lenw, 0.0
        h = self._h
        nb_span_move(i, h["fo"], h["fptr"], h["fidx"], np.ascontiguousarray(Dp.numpy()),
                     np.ascontiguousarray(Dc.numpy()), coef, gamma, W, lenw, self.P.numpy(), self.Gc.numpy(), sW, sl,
                     float(sc))

    def _host_pass(self, w: torch.Tensor | None, augment: bool):
        """(stacked trees, wrong spans (n,), <D_i, theta_i> (n,), H_i or the max margin (n,)) of every block."""
        h = self._h
        W, lenw = self._host_views(w)
        labels = np.empty(tuple(self.data.spans.shape), dtype=np.int64)
        wrong, dot, margin = np.empty(self.n, dtype=np.int64), np.empty(self.n), np.empty(self.n)
        nb_span_gap_pass(h["fo"], h["so"], h["fptr"], h["fidx"], np.ascontiguousarray(W), np.ascontiguousarray(lenw),
                         h["bucket_of"], self.model.inside, h["gold"], h["observed"], h["costs"], augment, self.P.numpy(),
                         self.Gc.numpy(), labels, wrong, dot, margin)
        return torch.from_numpy(labels), torch.from_numpy(wrong), torch.from_numpy(dot), torch.from_numpy(margin)
