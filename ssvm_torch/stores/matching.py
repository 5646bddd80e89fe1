"""The dense store of a matching SSVM (:class:`~ssvm_torch.models.matching.MatchingModel`) with its
relaxation for the dual extragradient: the bipartite matching polytope with NULL,
    Z_i = {z in R^{m x n}: z >= 0, sum_k z_jk <= 1 (each English word), sum_j z_jk <= 1 (each French word)},
whose vertices are the one-to-one partial alignments (the constraint matrix is totally unimodular),
so phi(x_i, z_i) for z_i in Z_i is a convex combination of labelings' features: a feasible dual block.
phi and the loss are affine in z (models/matching.py):
    phi(x, z) = 1/Z [sum_jk z_jk X_jk ; sum_j (1 - r_j) Ne_j ; sum_k (1 - c_k) Nf_k],
    L(z) = 1/Z (sum_jk z_jk (1 - 2 [a*_j = k]) + |a*|),
r, c the row and column sums. Marginals over matchings are #P-hard (the permanent), so the geometry is
Euclidean (Taskar et al. 2006, Sec. 4.2): the prox is the Euclidean projection onto Z_i, a
quadratic program solved for all examples at once (one sparse block-diagonal QP, Clarabel through
qpsolvers).
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import from_host, to_host
from ..errors import SSVMInputError
from .optional_moves import RelaxedPasses
from .dense import DenseDual


class MatchingDual(DenseDual, RelaxedPasses):
    """:class:`~ssvm_torch.stores.dense.DenseDual` + the Euclidean relaxation (z: one (E,) vector of
    every example's edges, row-major per example)."""

    geometry = "euclidean"

    def __init__(self, model, data, lam: float, device=None, dtype=torch.float64, n_objective: int | None = None):
        super().__init__(model, data, lam, device=device, dtype=dtype, n_objective=n_objective)
        D = self.data
        sizes = [tuple(X.shape[:2]) for X in D.X]
        self.Z = torch.tensor([m + n for m, n in sizes], dtype=dtype, device=self.device)
        counts = torch.tensor([m * n for m, n in sizes], device=self.device)
        self.edge_block = torch.repeat_interleave(torch.arange(self.n, device=self.device), counts)
        self.X_flat = torch.cat([X.reshape(-1, X.shape[2]) for X in D.X])
        gold, rows, cols, row_of, col_of = [], [], [], [], []
        r0 = 0
        for k, (m, n) in enumerate(sizes):
            g = torch.zeros(m, n, dtype=dtype, device=self.device)
            on = D.A[k] >= 0
            g[on.nonzero().reshape(-1), D.A[k][on]] = 1.0
            gold.append(g.reshape(-1))
            jj, kk = np.divmod(np.arange(m * n), n)
            row_of.append(r0 + jj)                    # constraint rows: the example's m row sums, then n column sums
            col_of.append(r0 + m + kk)
            rows.append(torch.as_tensor(jj))
            cols.append(torch.as_tensor(kk))
            r0 += m + n
        self.gold = torch.cat(gold)
        self.edge_row, self.edge_col = torch.cat(rows).to(self.device), torch.cat(cols).to(self.device)
        E = self.gold.shape[0]
        ar = np.arange(E)
        import scipy.sparse as sp
        self._G = sp.csc_matrix((np.ones(2 * E), (np.concatenate(row_of + col_of), np.concatenate([ar, ar]))),
                                shape=(r0, E))
        self._P = sp.identity(E, format="csc")
        # per-edge offsets of each example's NULL rows (Ne, Nf rows follow the edge's row / column)
        self.ne_flat = torch.cat(list(D.Ne))
        self.nf_flat = torch.cat(list(D.Nf))
        m_off = torch.tensor([0] + np.cumsum([m for m, _ in sizes]).tolist(), device=self.device)
        n_off = torch.tensor([0] + np.cumsum([n for _, n in sizes]).tolist(), device=self.device)
        self.edge_ne = m_off[self.edge_block] + self.edge_row
        self.edge_nf = n_off[self.edge_block] + self.edge_col
        self.n_gold = torch.stack([(a >= 0).sum() for a in D.A]).to(dtype)

    # -- the Euclidean relaxation (RelaxedPasses) ---------------------------------------------------
    def relaxed_scores(self, w: torch.Tensor) -> tuple:
        """theta_jk(w) = (<w_e, X_jk> - <w_ne, Ne_j> - <w_nf, Nf_k>) / Z (constants aside)."""
        m = self.model
        we, wne, wnf = w[:m.Fe], w[m.Fe:m.Fe + m.Fn], w[m.Fe + m.Fn:]
        s = self.X_flat @ we - (self.ne_flat @ wne)[self.edge_ne] - (self.nf_flat @ wnf)[self.edge_nf]
        return (s / self.Z[self.edge_block],)

    def relaxed_loss(self) -> tuple:
        return ((1.0 - 2.0 * self.gold) / self.Z[self.edge_block],)

    def prox_center(self) -> tuple:
        return (self.gold.clone(),)

    def project(self, a: torch.Tensor) -> torch.Tensor:
        """argmin_{z in Z} ||z - a||^2 for every example (one sparse QP)."""
        import qpsolvers

        z = qpsolvers.solve_qp(self._P, -to_host(a), G=self._G, h=np.ones(self._G.shape[0]),
                               lb=np.zeros(a.shape[0]), solver="clarabel", tol_feas=1e-10, tol_gap_abs=1e-10,
                               tol_gap_rel=1e-10)
        if z is None:
            raise SSVMInputError("matching projection: the QP solver found no solution")
        z = np.clip(z, 0.0, 1.0)
        return from_host(self._feasible(z), self.device).to(self.dtype)

    def _feasible(self, z: np.ndarray) -> np.ndarray:
        """Scale each row / column with a sum above 1 (solver tolerance) back onto the polytope, so the
        dual point is exactly feasible."""
        sums = self._G @ z
        over = np.maximum(sums, 1.0)
        scale = 1.0 / np.maximum(over[self._G.indices[0::2]], over[self._G.indices[1::2]])
        return z * scale

    def prox(self, base: tuple, step: tuple):
        z = self.project(base[0] + step[0])
        return (z,), (z,)

    def relaxed_divergence(self, z, state: tuple, base: tuple) -> tuple[float, float]:
        """(1/2 ||z - z_base||^2, a bound on its rounding error)."""
        return 0.5 * float(((z[0] - base[0]) ** 2).sum()), 1e-13 * float((z[0] ** 2 + base[0] ** 2).sum())

    def prox_scale(self) -> float:
        """max_i ||Phi_i||_F^2 >= ||Phi_i||_2^2, Phi_i the map z -> phi(x_i, z) (column jk:
        (X_jk, -Ne_j, -Nf_k) / Z)."""
        col = ((self.X_flat ** 2).sum(1) + (self.ne_flat ** 2).sum(1)[self.edge_ne]
               + (self.nf_flat ** 2).sum(1)[self.edge_nf]) / self.Z[self.edge_block] ** 2
        return float(torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(0, self.edge_block, col).max())

    def phi_relaxed(self, z: torch.Tensor) -> torch.Tensor:
        """phi(x_i, z_i) of every example: (n, d)."""
        m, n_ex = self.model, self.n
        blk = self.edge_block
        edge = torch.zeros(n_ex, m.Fe, dtype=self.dtype, device=self.device).index_add_(0, blk, z[:, None] * self.X_flat)
        r = torch.zeros(self.ne_flat.shape[0], dtype=self.dtype, device=self.device).index_add_(0, self.edge_ne, z)
        c = torch.zeros(self.nf_flat.shape[0], dtype=self.dtype, device=self.device).index_add_(0, self.edge_nf, z)
        ne_blk = torch.repeat_interleave(torch.arange(n_ex, device=self.device),
                                         torch.tensor([x.shape[0] for x in self.data.Ne], device=self.device))
        nf_blk = torch.repeat_interleave(torch.arange(n_ex, device=self.device),
                                         torch.tensor([x.shape[0] for x in self.data.Nf], device=self.device))
        ne = torch.zeros(n_ex, m.Fn, dtype=self.dtype, device=self.device).index_add_(
            0, ne_blk, (1.0 - r)[:, None] * self.ne_flat)
        nf = torch.zeros(n_ex, m.Fn, dtype=self.dtype, device=self.device).index_add_(
            0, nf_blk, (1.0 - c)[:, None] * self.nf_flat)
        return torch.cat([edge, ne, nf], 1) / self.Z[:, None]

    def loss_relaxed(self, z: torch.Tensor) -> torch.Tensor:
        """L_i(z_i): (n,)."""
        lin = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
            0, self.edge_block, z * (1.0 - 2.0 * self.gold))
        return (lin + self.n_gold) / self.Z

    def _blocks_of(self, z):
        return (self.phi_gt - self.phi_relaxed(z)) / (self.lam * self.N), self.loss_relaxed(z) / self.N

    def w_of_relaxed(self, z) -> tuple[torch.Tensor, float]:
        W, ell = self._blocks_of(z[0])
        return W.sum(0), float(ell.sum())

    def set_relaxed(self, z, gamma: float = 1.0) -> None:
        W, ell = self._blocks_of(z[0])
        self.W_blocks.mul_(1.0 - gamma).add_(W, alpha=gamma)
        self.ell_i.mul_(1.0 - gamma).add_(ell, alpha=gamma)
        self.recompute()
