"""SSVM with explicitly enumerated outputs: block i has m_i candidate labelings given by their
psi_i(y) = phi(x_i, y_i) - phi(x_i, y) vectors (rows of ``psi[i]``) and losses L_i(y).

Small but complete: the oracle is exhaustive enumeration, the dual blocks are stored densely
(w_i as rows of an n x d matrix). Used as the brute-force reference for solvers and for toy
problems such as Appendix C of Osokin et al. 2016.
"""
from __future__ import annotations

import torch

from ..errors import check, check_finite, check_positive
from ..solvers.dual import BlockDual, Corner, GapPass


class ExplicitModel:
    """``psi[i]`` (m_i, d) rows psi_i(y); ``losses[i]`` (m_i,) L_i(y); ``gt[i]`` the index of the
    ground-truth output (default 0), which must have psi = 0 and loss = 0 (the dual starts at
    alpha_i = delta(y_i), i.e. w_i = 0)."""

    def __init__(self, psi: list, losses: list, gt: list | None = None, dtype=torch.float64):
        check(len(psi) == len(losses) and len(psi) >= 1, "losses", f"one loss vector per block ({len(psi)})",
              len(losses))
        d = torch.as_tensor(psi[0]).shape[1]
        m = max(torch.as_tensor(p).shape[0] for p in psi)
        n = len(psi)
        self.psi = torch.zeros(n, m, d, dtype=dtype)
        self.losses = torch.full((n, m), float("-inf"), dtype=dtype)
        for i, (p, l) in enumerate(zip(psi, losses)):
            p, l = torch.as_tensor(p, dtype=dtype), torch.as_tensor(l, dtype=dtype)
            check(p.dim() == 2 and p.shape[1] == d and p.shape[0] >= 1, f"psi[{i}]", f"a (m_i >= 1, {d}) matrix",
                  tuple(p.shape))
            check(l.shape == (p.shape[0],), f"losses[{i}]", f"shape ({p.shape[0]},)", tuple(l.shape))
            check_finite(p, f"psi[{i}]")
            check_finite(l, f"losses[{i}]")
            self.psi[i, :p.shape[0]] = p
            self.losses[i, :p.shape[0]] = l
        self.n, self.d = n, d
        self.gt = [0] * n if gt is None else [int(g) for g in gt]
        check(len(self.gt) == n, "gt", f"one ground-truth index per block ({n})", len(self.gt))
        for i, g in enumerate(self.gt):
            m_i = torch.as_tensor(psi[i]).shape[0]
            check(0 <= g < m_i, f"gt[{i}]", f"an index in [0, {m_i - 1}]", g)
            check(bool((self.psi[i, g] == 0).all()) and float(self.losses[i, g]) == 0.0, f"psi[{i}][{g}]",
                  "the ground truth to have psi = 0 and loss = 0", "nonzero")

    def dual(self, lam: float, device=None, dtype=torch.float64) -> "DenseDual":
        return DenseDual(self, lam, device, dtype)


class DenseDual(BlockDual):
    """Blocks stored densely: W_blocks[i] = w_i (n x d). Fine for small d; any device."""

    def __init__(self, model: ExplicitModel, lam: float, device=None, dtype=torch.float64):
        self.lam = check_positive(lam, "lam")
        self.n, self.d = model.n, model.d
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.gt = model.gt
        self.psi = model.psi.to(self.device, dtype)
        self.losses = model.losses.to(self.device, dtype)
        self.W_blocks = torch.zeros(self.n, self.d, dtype=dtype, device=self.device)
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=self.device)
        self.w = torch.zeros(self.d, dtype=dtype, device=self.device)
        self._ell = 0.0

    @property
    def ell(self) -> float:
        return self._ell

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.w.copy_(w)
        self._ell = float(ell)

    def _oracle(self, idx):
        vals = self.losses[idx] - self.psi[idx] @ self.w          # L_i(y) - <w, psi_i(y)>
        H, y = vals.max(dim=-1)
        return y, H

    def fw_corner(self, i: int) -> Corner:
        y, _ = self._oracle(i)
        w_s = self.psi[i, y] / (self.lam * self.n)
        diff = self.W_blocks[i] - w_s
        loss, dot = float(self.losses[i, y]) / self.n, float(diff @ self.w)
        return Corner(int(y), loss, dot, float(diff @ diff), self.lam * dot - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        w_s = self.psi[i, corner.labels] / (self.lam * self.n)
        new = (1 - gamma) * self.W_blocks[i] + gamma * w_s
        self._add(new - self.W_blocks[i])
        self.W_blocks[i] = new
        old = float(self.ell_i[i])
        self.ell_i[i] = (1 - gamma) * old + gamma * corner.loss
        self._ell += gamma * (corner.loss - old)

    def gt_labeling(self, i: int) -> int:
        return self.gt[i]

    @staticmethod
    def key(labeling) -> int:
        return int(labeling)

    def loss_of(self, i: int, labeling) -> float:
        return float(self.losses[i, int(labeling)]) / self.n

    def _point(self, i, P):
        return self.W_blocks[i] if P is None else self.psi[i, int(P)] / (self.lam * self.n)

    def corner_gaps(self, i: int, labelings):
        ys = torch.as_tensor([int(y) for y in labelings], device=self.device)
        w_s = self.psi[i, ys] / (self.lam * self.n)
        g = self.lam * ((self.W_blocks[i] - w_s) @ self.w) - self.ell_i[i] + self.losses[i, ys] / self.n
        return g.cpu().numpy()

    def pair_sqnorm(self, i: int, P, Q) -> float:
        diff = self._point(i, P) - self._point(i, Q)
        return float(diff @ diff)

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        step = gamma * (self._point(i, P) - self._point(i, Q))
        self.W_blocks[i] += step
        self._add(step)
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell += gamma * (loss_P - loss_Q)

    def _add(self, dw):
        self.w += dw
        if self.shadow is not None:
            self.shadow += self.shadow_coef * dw

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        self.w += coef * self.psi[i, corner.labels]

    def gap_pass(self) -> GapPass:
        idx = torch.arange(self.n, device=self.device)
        y, H = self._oracle(idx)
        loss = self.losses[idx, y] / self.n
        gaps = self.lam * (self.W_blocks @ self.w) - self.ell_i + H / self.n
        return GapPass(labels=y, loss=loss, H=H, block_gaps=gaps)

    def corner_point(self, gp: GapPass):
        idx = torch.arange(self.n, device=self.device)
        return self.psi[idx, gp.labels].sum(0) / (self.lam * self.n), float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s, ell_s, gamma: float) -> None:
        idx = torch.arange(self.n, device=self.device)
        self.W_blocks.mul_(1 - gamma).add_(self.psi[idx, gp.labels] / (self.lam * self.n), alpha=gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss, alpha=gamma)
        self.recompute()

    def recompute(self) -> None:
        self.w.copy_(self.W_blocks.sum(0))
        self._ell = float(self.ell_i.sum())

    def state_dict(self) -> dict:
        return {"W_blocks": self.W_blocks.clone(), "ell_i": self.ell_i.clone(), "w": self.w.clone(),
                "ell": self._ell, "lam": self.lam}

    def load_state_dict(self, state: dict) -> None:
        self.W_blocks.copy_(state["W_blocks"])
        self.ell_i.copy_(state["ell_i"])
        self.w.copy_(state["w"])
        self._ell = float(state["ell"])
