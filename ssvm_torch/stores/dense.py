"""Dense per-block dual storage for structures with a small joint feature space.

Any :class:`~ssvm_torch.models.base.StructuredModel` gets every solver of the loop through
:class:`DenseDual`, which stores w_i as the rows of an n x d matrix (fine for d up to ~1e4 and n up
to ~1e4). The store sees the model only through that interface (oracle, phi, loss, gt, key,
predict); labelings are batched along dim 0. psi_i(y) = phi(x_i, y_i) - phi(x_i, y) uses the
ground-truth features phi(x_i, y_i), computed once here.
"""
from __future__ import annotations

import torch

from ..devices import resolve_device, to_host
from ..errors import check_positive
from .base import BatchCorners, BlockDual, Corner, GapPass, objective_n, stack_labelings
from .state import copy_checked, state_ell


class DenseDual(BlockDual):
    """Block i's w_i as row i of an (n, d) matrix; ``data`` is moved to ``device``/``dtype`` once."""

    def __init__(self, model, data, lam: float, device=None, dtype=torch.float64, n_objective: int | None = None):
        model.check_data(data)
        self.model = model
        self.lam = check_positive(lam, "lam")
        self.device = resolve_device(device)
        self.dtype = dtype
        self.data = data.to(self.device, dtype)
        self.n, self.d = data.n, model.d
        self.N = objective_n(data.n, n_objective)
        self.W_blocks = torch.zeros(self.n, self.d, dtype=dtype, device=self.device)
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=self.device)
        self.w = torch.zeros(self.d, dtype=dtype, device=self.device)
        self._ell = 0.0
        self._all = torch.arange(self.n, device=self.device)
        self.phi_gt = self._gt_features()

    def _gt_features(self) -> torch.Tensor:
        """(n, d) phi(x_i, y_i) of every block, by the torch model."""
        return self.model.phi(self.data, self._all, self.model.gt_batch(self.data, self._all)).to(self.dtype)

    @property
    def ell(self) -> float:
        return self._ell

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.w.copy_(w)
        self._ell = float(ell)

    def _idx(self, i):
        return torch.as_tensor([i], device=self.device)

    def _psi(self, idx, labels):
        return self.phi_gt[idx] - self.model.phi(self.data, idx, labels).to(self.dtype)

    def _oracle(self, idx):
        return self.model.oracle(self.w, self.data, idx, phi_gt=self.phi_gt[idx])

    def _loss(self, idx, labels):
        return self.model.loss(self.data, idx, labels).to(self.dtype)

    def _w_s(self, idx, labels):
        return self._psi(idx, labels) / (self.lam * self.N)

    def fw_corner(self, i: int) -> Corner:
        idx = self._idx(i)
        y, _ = self._oracle(idx)
        diff = self.W_blocks[i] - self._w_s(idx, y)[0]
        loss, dot = float(self._loss(idx, y)[0]) / self.N, float(diff @ self.w)
        return Corner(y[0], loss, dot, float(diff @ diff), self.lam * dot - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        w_s = self._w_s(self._idx(i), self._batch([corner.labels]))[0]
        new = (1 - gamma) * self.W_blocks[i] + gamma * w_s
        self._add(new - self.W_blocks[i])
        self.W_blocks[i] = new
        old = float(self.ell_i[i])
        self.ell_i[i] = (1 - gamma) * old + gamma * corner.loss
        self._ell += gamma * (corner.loss - old)

    def _add(self, dw):
        self.w += dw
        if self.shadow is not None:
            self.shadow += self.shadow_coef * dw

    def _batch(self, labelings):
        return stack_labelings([torch.as_tensor(y, device=self.device) for y in labelings])

    # -- active-set primitives ----------------------------------------------------------------
    def gt_labeling(self, i: int):
        return self.model.gt(self.data, i)

    def key(self, labeling):
        return self.model.key(labeling)

    def loss_of(self, i: int, labeling) -> float:
        return float(self._loss(self._idx(i), self._batch([labeling]))[0]) / self.N

    def _point(self, i, P):
        return self.W_blocks[i] if P is None else self._w_s(self._idx(i), self._batch([P]))[0]

    def corner_gaps(self, i: int, labelings):
        ys = self._batch(list(labelings))
        idx = self._idx(i).expand(ys.shape[0])
        w_s = self._w_s(idx, ys)
        g = self.lam * ((self.W_blocks[i] - w_s) @ self.w) - self.ell_i[i] + self._loss(idx, ys) / self.N
        return to_host(g)

    def pair_sqnorm(self, i: int, P, Q) -> float:
        diff = self._point(i, P) - self._point(i, Q)
        return float(diff @ diff)

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        step = gamma * (self._point(i, P) - self._point(i, Q))
        self.W_blocks[i] += step
        self._add(step)
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        self.w += coef * self._psi(self._idx(i), self._batch([corner.labels]))[0]

    # -- mini-batch BCFW ------------------------------------------------------------------------
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        y, _ = self._oracle(idx)
        w_s = self._w_s(idx, y)
        diff = self.W_blocks[idx] - w_s
        loss, ell_b = self._loss(idx, y) / self.N, self.ell_i[idx]
        gaps = self.lam * (diff @ self.w) - ell_b + loss
        parts = {"rows": -diff}
        return BatchCorners(idx, loss, gaps, self.direction(parts) if with_direction else None,
                            float((loss - ell_b).sum()), moves=w_s,
                            parts=parts)

    def direction(self, parts: dict) -> torch.Tensor:
        return parts["rows"].sum(0)

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        idx = corners.idx
        self.W_blocks[idx] = self.W_blocks[idx].lerp(corners.moves, gamma)
        self.ell_i[idx] = self.ell_i[idx].lerp(corners.loss, gamma)
        self._add(gamma * corners.dw)
        self._ell += gamma * corners.dell

    # -- batched ------------------------------------------------------------------------------
    def gap_pass(self) -> GapPass:
        y, H = self._oracle(self._all)
        loss = self._loss(self._all, y) / self.N
        gaps = self.lam * (self.W_blocks @ self.w) - self.ell_i + H.to(self.dtype) / self.N
        return GapPass(labels=y, loss=loss, H=H, block_gaps=gaps)

    def corner_point(self, gp: GapPass):
        return self._w_s(self._all, gp.labels).sum(0), float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s, ell_s, gamma: float) -> None:
        self.W_blocks.mul_(1 - gamma).add_(self._w_s(self._all, gp.labels), alpha=gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss, alpha=gamma)
        self.recompute()

    def block_w(self, i: int) -> torch.Tensor:
        return self.W_blocks[i].clone()

    def recompute(self) -> None:
        self.w.copy_(self.W_blocks.sum(0))
        self._ell = float(self.ell_i.sum())

    # -- regularization path ------------------------------------------------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        lam_new = check_positive(lam_new, "lam_new")
        self.W_blocks.mul_(rho * self.lam / lam_new)
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self.recompute()

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        w = w.to(self.device, self.dtype)
        labels = self.model.predict(w, self.data, self._all)
        return -(self._psi(self._all, labels) @ w)

    def block_wdots(self) -> torch.Tensor:
        return self.lam * (self.W_blocks @ self.w)

    def state_dict(self) -> dict:
        return {"W_blocks": self.W_blocks.clone(), "ell_i": self.ell_i.clone(), "w": self.w.clone(),
                "ell": self._ell, "lam": self.lam}

    def load_state_dict(self, state: dict) -> None:
        copy_checked(self, state, ("W_blocks", "ell_i", "w"))
        self._ell = state_ell(state)
