"""SSVM with explicitly enumerated outputs: block i has m_i candidate labelings given by their
psi_i(y) = phi(x_i, y_i) - phi(x_i, y) vectors (rows of ``psi[i]``) and losses L_i(y).

Small but complete: the oracle is exhaustive enumeration, the dual blocks are stored densely
(:class:`~ssvm_torch.models.dense.DenseDual`). Used as the brute-force reference for solvers and for toy
problems such as Appendix C of Osokin et al. 2016.
"""
from __future__ import annotations

import torch

from ..errors import check, check_finite
from .dense import DenseDual


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
        self.psi_table = torch.zeros(n, m, d, dtype=dtype)
        self.losses = torch.full((n, m), float("-inf"), dtype=dtype)
        for i, (p, l) in enumerate(zip(psi, losses)):
            p, l = torch.as_tensor(p, dtype=dtype), torch.as_tensor(l, dtype=dtype)
            check(p.dim() == 2 and p.shape[1] == d and p.shape[0] >= 1, f"psi[{i}]", f"a (m_i >= 1, {d}) matrix",
                  tuple(p.shape))
            check(l.shape == (p.shape[0],), f"losses[{i}]", f"shape ({p.shape[0]},)", tuple(l.shape))
            check_finite(p, f"psi[{i}]")
            check_finite(l, f"losses[{i}]")
            self.psi_table[i, :p.shape[0]] = p
            self.losses[i, :p.shape[0]] = l
        self.n, self.d = n, d
        self.gt_index = [0] * n if gt is None else [int(g) for g in gt]
        check(len(self.gt_index) == n, "gt", f"one ground-truth index per block ({n})", len(self.gt_index))
        for i, g in enumerate(self.gt_index):
            m_i = torch.as_tensor(psi[i]).shape[0]
            check(0 <= g < m_i, f"gt[{i}]", f"an index in [0, {m_i - 1}]", g)
            check(bool((self.psi_table[i, g] == 0).all()) and float(self.losses[i, g]) == 0.0, f"psi[{i}][{g}]",
                  "the ground truth to have psi = 0 and loss = 0", "nonzero")

    # -- the DenseDual model interface -------------------------------------------------------
    def oracle(self, w, idx):
        vals = self.losses[idx] - self.psi_table[idx] @ w.to(self.psi_table)          # L_i(y) - <w, psi_i(y)>
        H, y = vals.max(dim=-1)
        return y, H

    def decode(self, w, idx):
        """argmax_y <w, phi(x_i, y)> = argmax_y -<w, psi_i(y)> over the block's outputs."""
        vals = -(self.psi_table[idx] @ w.to(self.psi_table))
        return vals.masked_fill(torch.isinf(self.losses[idx]), float("-inf")).argmax(dim=-1)

    def psi(self, idx, labels):
        return self.psi_table[idx, labels]

    def loss(self, idx, labels):
        return self.losses[idx, labels]

    def gt(self, i):
        return self.gt_index[i]

    @staticmethod
    def key(labeling):
        return int(labeling)

    def dual(self, lam: float, device=None, dtype=torch.float64) -> DenseDual:
        return DenseDual(self, lam, device, dtype)
