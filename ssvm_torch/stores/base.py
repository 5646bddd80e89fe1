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

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import check


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


@dataclass
class BatchCorners:
    """FW corners of a mini-batch of distinct blocks at the current w, from one batched oracle call:
    the terms of the joint line search of mini-batch BCFW (:class:`~ssvm_torch.solvers.steps.MiniBatchStep`)."""

    idx: torch.Tensor           # (tau,) the blocks, on the store's device
    loss: torch.Tensor          # (tau,) L_i(y*_i) / n
    gaps: torch.Tensor          # (tau,) block gaps g_i at the current w, eq. (6) of Osokin et al. 2016
    dw: torch.Tensor | None     # (d,) the joint direction sum_i (w_s,i - w_i) (of v under box constraints);
                                # a sparse COO vector of its touched coordinates when d >= SPARSE_D
    dell: float                 # sum_i (ell_s,i - ell_i)
    moves: Any = None           # what the store's batch_move reuses (labelings, statistics)
    parts: dict | None = None   # dw block by block (direction()): tensors (tau, ...) with one row per
                                # block, and groups {"count": (tau,) rows per block, name: (sum of counts, ...)}
    sqnorm: float | None = None  # ||dw||^2 when dw is None (a store that never holds the whole
                                 # direction: ssvm_torch.distributed.column_shards)


@dataclass
class BlockMarginals:
    """A point of block i's marginal polytope (a chain's: label marginals ``mu`` (T_i, K), expected
    transition counts ``mt`` (K, K) [next, prev]); the dual point of a Gibbs distribution alpha_i."""

    mu: torch.Tensor
    mt: torch.Tensor


#: from this d on, a mini-batch direction is kept sparse (its touched coordinates), not as a d-vector
SPARSE_D = 1 << 20


def squared_norm(v: torch.Tensor) -> float:
    """||v||^2 of a dense or a (coalesced) sparse vector."""
    values = v.coalesce().values() if v.is_sparse else v
    return float(values @ values)


def line_search(g: float, sq: float, cap: float, lam: float) -> tuple[float, float]:
    """(gamma, gain) of the exact line search of the quadratic dual along a direction with directional gap g and
    squared norm sq: gamma = min(g / (lam sq), cap) (0 for a zero or non-ascending direction) and the model's gain
    gamma g - lam gamma^2 sq / 2 (Osokin et al. 2016, Alg. 3-4; a step is taken when both are positive)."""
    gamma = min(g / (lam * sq), cap) if sq > 0 and g > 0 else 0.0
    return gamma, gamma * g - 0.5 * lam * gamma * gamma * sq


def stack_labelings(labelings: list):
    """One block's labelings stacked along a new first dim (tensors or numpy arrays, as given); 1-D labelings of
    different lengths (a graph model's compact and full marginal vectors, models/graph_crf.py) padded with -1, as in
    the model's own batches."""
    if labelings[0].ndim != 1 or len({len(y) for y in labelings}) == 1:
        return torch.stack(labelings) if isinstance(labelings[0], torch.Tensor) else np.stack(labelings)
    if isinstance(labelings[0], torch.Tensor):
        return torch.nn.utils.rnn.pad_sequence(labelings, batch_first=True, padding_value=-1)
    width = max(len(y) for y in labelings)
    return np.stack([np.pad(y, (0, width - len(y)), constant_values=-1) for y in labelings])


def objective_n(n_blocks: int, n_objective: int | None) -> int:
    """The n of objective (1): the store's own number of blocks, or more when it holds one shard
    of a larger problem (ssvm_torch.distributed)."""
    if n_objective is None:
        return n_blocks
    check(isinstance(n_objective, int) and n_objective >= n_blocks, "n_objective",
          f"an int >= the store's {n_blocks} blocks", n_objective)
    return n_objective


class PointStore(ABC):
    """The dual variables of the n blocks and the primal point: w = sum_i w_i (clipped by box
    constraints, App. H), ell = sum_i ell_i, objective values, exact recomputation, state."""

    n: int                      # blocks held by this store
    N: int                      # the n of objective (1): n, unless the store holds a shard
    lam: float
    device: torch.device
    w: torch.Tensor
    ell_i: torch.Tensor
    # Optional shadow vector: every block move that adds dw to w also adds shadow_coef * dw to it
    # (sparse, on the move's support). The weighted averaging of the loop uses it (O(support)).
    shadow: torch.Tensor | None = None
    shadow_coef: float = 0.0
    # Declared capabilities (clients read these instead of probing for NotImplementedError):
    # the regularization path needs the PathRescaling methods; weighted averaging needs an
    # unconstrained dual point.
    supports_path: bool = True
    supports_averaging: bool = True
    # the cutting plane sets the point from a dual held outside the blocks (set_dual_point)
    supports_dual_point: bool = True
    # False for a store whose blocks live in several processes: only mini-batch steps apply
    supports_block_steps: bool = True
    supports_marginal_moves: bool = True   # False: its inherited EG / DEG moves miss statistics (edge chains)
    # True for a store that implements only FW steps (BCFW and mini-batch BCFW: no sets or cache)
    only_fw_block_steps: bool = False
    # False for a store whose mini-batch parts the distributed exchange cannot ship (ssvm_torch.distributed refuses it)
    shardable: bool = True
    shares_w: bool = False      # share_w and recompute(out=) run (distributed/shared_memory.py)
    # what the store is, in the words of an error (None: its class name)
    description: str | None = None
    # mini-batch directions as sparse vectors of their touched coordinates (large sparse models)
    sparse_direction: bool = False

    @property
    @abstractmethod
    def ell(self) -> float:
        """ell = sum_i ell_i."""

    @property
    def v(self) -> torch.Tensor:
        """v = A alpha = sum_i w_i. Equal to w unless box constraints clip w (App. H)."""
        return self.w

    def share_w(self, buffer: torch.Tensor) -> None:
        """Hold w in ``buffer`` (a tensor like w that the caller shares, e.g. across processes) from now on:
        moves add into it, the kernels read it (a store with views of w rebinds them). Needs ``shares_w``."""
        check(self.shares_w and buffer.shape == self.w.shape and buffer.dtype == self.w.dtype
              and buffer.device == self.w.device, "buffer", f"a tensor like w ({tuple(self.w.shape)}, {self.w.dtype}, "
              f"{self.w.device}) of a store with shares_w", f"{tuple(buffer.shape)}, {buffer.dtype}, {buffer.device}")
        self.w = buffer

    @abstractmethod
    def set_point(self, w: torch.Tensor, ell: float) -> None:
        """Overwrite (w, ell) without touching the blocks: used to evaluate another point such as
        the weighted average, whose Lagrange gap depends on (w, ell) only. Call recompute() or set
        the previous point back afterwards."""

    @abstractmethod
    def recompute(self) -> None:
        """Recompute w and ell exactly from the blocks (removes incremental drift)."""

    @abstractmethod
    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of block i (for tests and inspection; never used by the solvers): v = sum_i w_i."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Every tensor needed to restore the blocks exactly (checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        pass

    def box(self):
        """(index, lower, upper) of the box constraints on w (App. H), or None."""
        return None

    def set_dual_point(self, v: torch.Tensor, ell: float) -> None:
        """Make (v = A alpha, ell) the point of a dual alpha held outside the blocks (the cutting plane's
        working set): w = v, or clip(v) under box constraints. The blocks are not touched."""
        self.set_point(v, ell)

    def move_point(self, dw: torch.Tensor, dell: float, gamma: float) -> None:
        """w += gamma dw and ell += gamma dell without touching this store's blocks: the share of a
        distributed mini-batch step whose blocks live on other ranks (the shadow follows)."""
        self.w.add_(dw, alpha=gamma)
        if self.shadow is not None:
            self.shadow.add_(dw, alpha=gamma * self.shadow_coef)
        self.set_point(self.w, self.ell + gamma * dell)

    def primal(self, H: torch.Tensor) -> float:
        """lam/2 ||w||^2 + 1/n sum_i H_i(w): objective (1)."""
        return 0.5 * self.lam * float(self.w @ self.w) + float(H.sum()) / self.N

    def primal_at(self, w: torch.Tensor) -> float:
        """Objective (1) at another w (one gap pass there); the store's point is set back."""
        saved_w, saved_ell = self.w.clone(), self.ell
        try:
            self.set_point(w, saved_ell)
            return self.primal(self.gap_pass().H)
        finally:
            self.set_point(saved_w, saved_ell)

    def dual(self) -> float:
        """-lam/2 ||w||^2 + ell: the dual objective (3) at the current dual point."""
        return -0.5 * self.lam * float(self.w @ self.w) + self.ell


class BlockMoves(ABC):
    """The FW step of one block (BCFW, SSG): the oracle's corner and the move towards it."""

    @abstractmethod
    def fw_corner(self, i: int) -> Corner:
        """Loss-augmented decoding of block i at the current w and the terms of eq. (6)."""

    @abstractmethod
    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        """w_i <- (1-gamma) w_i + gamma w_s (and ell_i likewise); w and ell follow."""

    @abstractmethod
    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w <- w + coef * psi_i(y*) (primal-only update used by SSG)."""

    def fw_step(self, i: int) -> tuple[float, float]:
        """BCFW's block step (Alg. 1 of Osokin et al. 2016, Alg. 3 of Lacoste-Julien et al. 2013): the FW corner
        of block i, the exact line search gamma = g_i / (lam ||w_i - w_s||^2) clipped to [0, 1] and the move.
        Returns (g_i, gamma) (gamma 0.0: no move). A store may run it as one call; the result must be this one's,
        float for float."""
        c = self.fw_corner(i)
        g = c.gap
        if c.sqnorm > 0.0 and g > 0.0:
            gamma = min(g / (self.lam * c.sqnorm), 1.0)
            self.fw_move(i, c, gamma)
            return g, gamma
        return g, 0.0


class BatchPasses(ABC):
    """One batched oracle pass over all blocks: the exact duality gap, and batch FW's step."""

    @abstractmethod
    def gap_pass(self) -> GapPass:
        """Loss-augmented decoding of every block at the current w: H_i, L_i and the block gaps."""

    @abstractmethod
    def corner_point(self, gp: GapPass) -> tuple[torch.Tensor, float]:
        """(w_s, ell_s) = sum over blocks of the FW corners found by ``gp`` (batch FW)."""

    def block_labeling(self, gp: GapPass, i: int):
        """Block i's labeling in ``gp.labels`` (a point for ``corner_gaps`` / ``stack_labelings``)."""
        return gp.labels[i]

    def stack_labelings(self, labelings: list):
        """The ``GapPass.labels`` container of one labeling per block (the inverse of block_labeling)."""
        return torch.stack([torch.as_tensor(y, device=self.device) for y in labelings])

    @abstractmethod
    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        """Batch FW update of every block toward its corner with one step size."""


class MiniBatchMoves(ABC):
    """Mini-batch BCFW's primitives: the corners of tau blocks in one batched oracle call, and the
    move of all tau blocks towards them with one step size. Along that joint direction the dual (3)
    is the quadratic D(gamma) = D(0) + gamma sum_i g_i - gamma^2 lam/2 ||dw||^2, so the exact line
    search is gamma = sum_i g_i / (lam ||dw||^2) clipped to [0, 1] (tau = 1: BCFW's step; tau = n:
    batch FW's)."""

    @abstractmethod
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        """Loss-augmented decoding of the distinct blocks ``idx`` at the current w (one batched call).
        ``with_direction=False`` leaves ``dw`` None (the parts are still there): a rank of the gather
        exchange builds the joint direction from every rank's parts, not its own."""

    @abstractmethod
    def direction(self, parts: dict) -> torch.Tensor:
        """dw from the block-by-block ``parts`` of :class:`BatchCorners`, in batch order (a batch
        whose parts were computed by several processes gives the same bits as one process)."""

    #: whether :meth:`direction_share` and :meth:`joined_shares` exist (sparse chain directions)
    shares_direction: bool = False

    def direction_share(self, parts: dict, share: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Share r of p of dw's coordinates, ``share`` = (r, p), packed as (ids, values): what each
        rank of the distributed gather exchange builds and ships. The p shares' ids and values,
        each concatenated in order of r, give dw with the same bits (:meth:`joined_shares`)."""
        raise NotImplementedError(f"{type(self).__name__} builds no direction shares")

    def joined_shares(self, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """dw from the concatenated (ids, values) of every share (:meth:`direction_share`)."""
        raise NotImplementedError(f"{type(self).__name__} builds no direction shares")

    @abstractmethod
    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        """alpha_i <- (1 - gamma) alpha_i + gamma delta(y*_i) for every block of the batch: w += gamma dw,
        ell += gamma dell."""


class ActiveSetMoves(ABC):
    """Primitives of pairwise / away steps and caching (Osokin et al. 2016, Alg. 3-5). A point of
    block i is a labeling (structure-specific, hashable through ``key``) or None for the block's
    current dual point; a direction is v_P - v_Q."""

    @abstractmethod
    def gt_labeling(self, i: int):
        """The ground-truth labeling of block i (alpha_i = delta(y_i) at the start)."""

    @abstractmethod
    def key(self, labeling):
        """A hashable key of a labeling of this store's structure."""

    @abstractmethod
    def loss_of(self, i: int, labeling) -> float:
        """L_i(y) / n."""

    @abstractmethod
    def corner_gaps(self, i: int, labelings):
        """g_i(y) = lam <w_i - w_s(y), w> - ell_i + L_i(y)/n for each labeling (numpy array)."""

    @abstractmethod
    def pair_sqnorm(self, i: int, P, Q) -> float:
        """||w(P) - w(Q)||^2 between two points of block i."""

    @abstractmethod
    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q), with L/n losses of the two points (ell_i for None)."""

    def pairwise_step(self, i: int, P, Q, loss_P: float, loss_Q: float, g: float, cap: float) -> float:
        """A block step along v_P - v_Q with directional gap g (Alg. 3 / 4 of Osokin et al. 2016: P, Q the FW and
        away corners for a pairwise step, None and the away corner for an away step, the FW corner and None for a
        FW step): gamma = min(g / (lam ||w(P) - w(Q)||^2), cap), applied when it improves the dual's quadratic
        model (gamma g - lam gamma^2 ||.||^2 / 2 > 0). Returns gamma (0.0: no move). A store may fuse the norm and
        the move (one direction built, not two); the result must be this one's, float for float."""
        gamma, gain = line_search(g, self.pair_sqnorm(i, P, Q), cap, self.lam)
        if gamma > 0.0 and gain > 0.0:
            self.pair_move(i, P, Q, loss_P, loss_Q, gamma)
            return gamma
        return 0.0


class PathRescaling(ABC):
    """Primitives of the regularization path (Osokin et al. 2016, Section 4); a store that cannot
    provide them sets ``supports_path = False``."""

    @abstractmethod
    def rescale(self, lam_new: float, rho: float) -> None:
        """alpha_i <- rho alpha_i + (1 - rho) delta(y_i) for every block and lam <- lam_new.
        Since psi_i(y_i) = 0 and L_i(y_i) = 0: w_i <- rho (lam / lam_new) w_i, ell_i <- rho ell_i.
        With rho = lam_new / lam this keeps w (the induction step, Alg. 7, and the keep-primal
        warm start of grid search); with rho = 1 it keeps alpha (w scales by lam / lam_new)."""

    @abstractmethod
    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        """theta_i = max_y <w, phi(x_i, y)> - <w, phi(x_i, y_i)> = max_y -<w, psi_i(y)> >= 0 for
        every block (plain decoding, no loss): the theta_i of the path's initialization (Alg. 6)."""

    @abstractmethod
    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> for every block at the current point (no oracle call), so that
        H_i(w) / n = g_i - lam <w_i, w> + ell_i recovers the hinge terms from block gaps."""


class BlockDual(PointStore, BlockMoves, MiniBatchMoves, BatchPasses, ActiveSetMoves, PathRescaling):
    """A complete block store: the point, the block moves of every step rule, mini-batch moves, batched passes,
    active-set primitives and path rescaling. Clients depend on the part they use: the step rules
    on :class:`BlockMoves` / :class:`ActiveSetMoves`, gap checks and batch FW on
    :class:`BatchPasses`, the path on :class:`PathRescaling` (if ``supports_path``)."""
