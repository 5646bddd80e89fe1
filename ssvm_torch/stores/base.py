"""The seam between solvers and structures: the block store.

A solver sees an SSVM only through a :class:`BlockDual`: the dual variables of the n blocks
(examples), stored however the structure likes (dense ``w_i`` rows, or a compact sufficient-
statistics form), together with the primal point ``w = sum_i w_i`` and ``ell = sum_i ell_i``.

Notation of Lacoste-Julien et al. 2013 / Osokin et al. 2016, objective (1):
    min_w  lam/2 ||w||^2 + 1/n sum_i H_i(w),   H_i(w) = max_y L_i(y) - <w, psi_i(y)>.
For block i and its loss-augmented decoding y* at w, the FW corner is
    w_s = psi_i(y*) / (lam n),  ell_s = L_i(y*) / n,
the block gap is  g_i = lam <w_i - w_s, w> - ell_i + ell_s   (eq. (6) of Osokin et al. 2016)
and the exact line search of BCFW is  gamma = g_i / (lam ||w_i - w_s||^2)  clipped to [0, 1].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Corner:
    """FW corner of one block at the current w: labeling ``labels``, ``loss`` = L_i(y*)/n,
    ``dot`` = <w_i - w_s, w>, ``sqnorm`` = ||w_i - w_s||^2 and the block gap
    ``gap`` = lam * dot - ell_i + loss (eq. (6) of Osokin et al. 2016)."""

    labels: Any
    loss: float
    dot: float
    sqnorm: float
    gap: float


@dataclass
class GapPass:
    """Result of one batched oracle pass over all blocks at the current w."""

    labels: Any                 # the loss-augmented labelings (structure-specific container)
    loss: torch.Tensor          # (n,) L_i(y*_i) / n
    H: torch.Tensor             # (n,) H_i(w) (structured hinge loss of block i)
    block_gaps: torch.Tensor    # (n,) g_i, eq. (6) of Osokin et al. 2016


class BlockDual:
    """Interface (and shared formulas) for per-block dual storage. Subclasses implement the
    structure-specific methods; everything here is structure-agnostic."""

    n: int
    lam: float
    w: torch.Tensor
    ell_i: torch.Tensor
    # Optional shadow vector: every block move that adds dw to w also adds shadow_coef * dw to it
    # (sparse, on the move's support). The engine uses it for O(support) weighted averaging.
    shadow: torch.Tensor | None = None
    shadow_coef: float = 0.0
    # Declared capabilities (clients read these instead of probing for NotImplementedError):
    # the regularization path needs rescale / max_margins / block_wdots; weighted averaging needs
    # an unconstrained dual point.
    supports_path: bool = True
    supports_averaging: bool = True

    # -- structure-specific ------------------------------------------------------------------
    def fw_corner(self, i: int) -> Corner:
        raise NotImplementedError

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        """w_i <- (1-gamma) w_i + gamma w_s (and ell_i likewise); w and ell follow."""
        raise NotImplementedError

    def gap_pass(self) -> GapPass:
        raise NotImplementedError

    def corner_point(self, gp: GapPass) -> tuple[torch.Tensor, float]:
        """(w_s, ell_s) = sum over blocks of the FW corners found by ``gp`` (batch FW)."""
        raise NotImplementedError

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        """Batch FW update of every block toward its corner with one step size."""
        raise NotImplementedError

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w <- w + coef * psi_i(y*) (primal-only update used by SSG)."""
        raise NotImplementedError

    def recompute(self) -> None:
        """Recompute w and ell exactly from the blocks (removes incremental drift)."""
        raise NotImplementedError

    # -- active-set primitives (pairwise / away steps and caching, Osokin et al. 2016 Alg. 3-5) --
    # A point of block i is a labeling (structure-specific, hashable through ``key``) or None for
    # the block's current dual point; a direction is v_P - v_Q.
    def gt_labeling(self, i: int):
        raise NotImplementedError

    def key(self, labeling):
        raise NotImplementedError

    def loss_of(self, i: int, labeling) -> float:
        """L_i(y) / n."""
        raise NotImplementedError

    def corner_gaps(self, i: int, labelings):
        """g_i(y) = lam <w_i - w_s(y), w> - ell_i + L_i(y)/n for each labeling (numpy array)."""
        raise NotImplementedError

    def pair_sqnorm(self, i: int, P, Q) -> float:
        """||w(P) - w(Q)||^2 between two points of block i."""
        raise NotImplementedError

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q), with L/n losses of the two points (ell_i for None)."""
        raise NotImplementedError

    # -- regularization path primitives (Osokin et al. 2016, Section 4) ------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        """alpha_i <- rho alpha_i + (1 - rho) delta(y_i) for every block and lam <- lam_new.
        Since psi_i(y_i) = 0 and L_i(y_i) = 0: w_i <- rho (lam / lam_new) w_i, ell_i <- rho ell_i.
        With rho = lam_new / lam this keeps w (the induction step, Alg. 7, and the keep-primal
        warm start of grid search); with rho = 1 it keeps alpha (w scales by lam / lam_new)."""
        raise NotImplementedError(f"{type(self).__name__} does not support the regularization path")

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """theta_i = max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> = max_y -<w, psi_i(y)> >= 0 for
        every block (plain decoding, no loss): the theta_i of the path's initialization (Alg. 6)."""
        raise NotImplementedError(f"{type(self).__name__} does not support the regularization path")

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> for every block at the current point (no oracle call), so that
        H_i(w) / n = g_i - lam <w_i, w> + ell_i recovers the hinge terms from block gaps."""
        raise NotImplementedError(f"{type(self).__name__} does not support the regularization path")

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of block i (for tests and inspection; never used by the solvers): v = sum_i w_i."""
        raise NotImplementedError

    @property
    def v(self) -> torch.Tensor:
        """v = A alpha = sum_i w_i. Equal to w unless box constraints clip w (App. H)."""
        return self.w

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    @property
    def ell(self) -> float:
        raise NotImplementedError

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        """Overwrite (w, ell) without touching the blocks: used to evaluate another point such as
        the weighted average, whose Lagrange gap depends on (w, ell) only. Call recompute() or set
        the previous point back afterwards."""
        raise NotImplementedError

    # -- shared formulas ---------------------------------------------------------------------
    def primal(self, H: torch.Tensor) -> float:
        """lam/2 ||w||^2 + 1/n sum_i H_i(w): objective (1)."""
        return 0.5 * self.lam * float(self.w @ self.w) + float(H.sum()) / self.n

    def dual(self) -> float:
        """-lam/2 ||w||^2 + ell: the dual objective (3) at the current dual point."""
        return -0.5 * self.lam * float(self.w @ self.w) + self.ell
