"""The optional interfaces of a block store, beside :class:`~ssvm_torch.stores.base.BlockDual`'s: what the
marginal-based solvers (EG, DEG) and the cutting plane's joint constraints need of the stores that offer them
(chains: :mod:`.chain_marginal`, :mod:`.chain`; segments: :mod:`.segment_joint`)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from .base import GapPass


class MarginalMoves(ABC):
    """What the marginal-based solvers (EG, Collins et al. 2008; the dual extragradient, Taskar et al.
    2006) need of a store whose blocks are points of a marginal polytope (chains). The part-wise
    log-potentials of block i at w are theta_i(w) + c_i, with theta_i(w) the scores <w, phi(x_i, .)>
    on the parts and c_i the loss on the parts; the dual's gradient w.r.t. alpha_i(y) is
    (L_i(y) + <w, phi(x_i, y)>)/n + const = <theta_i(w) + c_i, S(y)>/n + const."""

    supports_marginals: bool = True
    #: the names of the parts of ``gold_potentials`` (EG's checkpoint keys)
    eg_theta_names: tuple = ()

    @abstractmethod
    def gold_potentials(self, m: float) -> tuple:
        """Every block's log-potentials m S(y_i) in the parts of ``eg_steps``' theta: the Gibbs distribution
        with most of its mass on the ground truth (EG's start)."""

    @abstractmethod
    def set_gibbs(self, theta: tuple) -> None:
        """Every block moves to the marginals of the Gibbs distribution of its log-potentials ``theta``."""

    @abstractmethod
    def potentials(self, w: torch.Tensor | None = None) -> tuple:
        """(U (N, K), first (K,), last (K,), trans (K, K)): the part scores of w (default: the store's)."""

    @abstractmethod
    def loss_potentials(self) -> torch.Tensor:
        """c: (N, K) the loss of label k at each position (L_i(y) = sum_t c[t, y_t])."""

    @abstractmethod
    def set_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor, gamma: float = 1.0) -> None:
        """Every block moves to (1 - gamma) M_i + gamma (Mu_i, Mt_i); ell_i and w follow exactly."""

    @abstractmethod
    def w_of_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(w(z), ell(z)) of marginals z = (Mu, Mt) of every block, without touching the store."""

    @abstractmethod
    def eg_steps(self, blocks, theta: tuple, c: torch.Tensor, beta, tol: float, max_calls: int) -> tuple:
        """Online-EG steps (Collins et al. 2008, Fig. 2; eq. (10) in potentials) on ``blocks`` in order
        until ``max_calls`` marginal calls are spent: theta_i <- theta_i + beta_i (theta_i(w) + c_i),
        block i moves to the marginals of the new theta_i if the dual does not decrease by more than
        ``tol``, else beta_i is halved and the step retried (their Sec. 6) until beta_i < 1e-12.
        ``theta`` = (unary (N, K), first (n, K), last (n, K), trans (n, K, K)) log-potentials of every
        block and ``beta`` (a float64 numpy array (n,)) are updated in place; ``c`` the loss
        potentials. Returns (steps taken, marginal calls, steps accepted)."""


class RelaxedPasses(ABC):
    """What the dual extragradient (Taskar, Lacoste-Julien & Jordan 2006) needs of a store: a
    relaxation Z_i of block i's labelings (the chain's marginal polytope, the bipartite matching
    polytope) whose points are feasible dual blocks, with scores and losses linear on it,
    <w, phi(x_i, z_i)> = <theta_i(w), z_i> + const and L_i(z_i) = <c_i, z_i> + const, and the Bregman
    prox of its geometry. "Parts" are tuples of tensors over all blocks, added and scaled element-wise."""

    geometry: str = ""          # "entropic" (KL, Taskar et al. Sec. 4.1) or "euclidean" (Sec. 4.2)

    @abstractmethod
    def relaxed_scores(self, w: torch.Tensor) -> tuple:
        """theta(w): the parts of the scores of w on every block."""

    @abstractmethod
    def relaxed_loss(self) -> tuple:
        """c: the parts of the loss, in the shapes of relaxed_scores."""

    @abstractmethod
    def prox_center(self) -> tuple:
        """The prox state of the centre z_c of every block (the ground truth's neighbourhood)."""

    @abstractmethod
    def prox(self, base: tuple, step: tuple) -> tuple[Any, tuple]:
        """z = argmax_{z in Z} <step, z> - D(z, z_base) for every block, and z's prox state (so that a
        further prox can start from z): the Bregman projection of Taskar et al. eq. (17)."""

    @abstractmethod
    def relaxed_divergence(self, z, state: tuple, base: tuple) -> tuple[float, float]:
        """(D(z, z_base) summed over blocks, a bound on its rounding error): the Bregman divergence of the geometry between the point z
        (with its prox state ``state``) and the point whose prox state is ``base`` (KL between the two
        Gibbs distributions for the entropic geometry, 1/2 ||z - z_base||^2 for the Euclidean one);
        the dual extragradient's step test needs it (solvers/deg.py)."""

    @abstractmethod
    def prox_scale(self) -> float:
        """max_i R_i^2: ||psi_i(z) - psi_i(z')|| <= R_i ||z - z'|| in the geometry's norm (l1 for the
        entropic, l2 for the Euclidean), which sets the z step."""

    @abstractmethod
    def w_of_relaxed(self, z) -> tuple[torch.Tensor, float]:
        """(w(z), ell(z)) = (sum_i (phi(x_i, y_i) - phi(x_i, z_i)) / (lam n), sum_i L_i(z_i) / n)."""

    @abstractmethod
    def set_relaxed(self, z, gamma: float = 1.0) -> None:
        """Every block moves to (1 - gamma) (its point) + gamma (the dual point of z_i); w, ell follow."""


class JointConstraints(ABC):
    """Joint constraints kept as their labelings (the 1-slack cutting plane on models too large for
    dense d-vectors, solvers/working_set.py): a joint labeling y = (y_1..y_n) stands for the batch
    corner a(y) = sum_i psi_i(y_i) / (lam n) that ``corner_point`` would return densely."""

    @abstractmethod
    def joint_labels(self, gp: GapPass) -> torch.Tensor:
        """The compact form of ``corner_point(gp)``'s constraint: its labeling, as small integers."""

    @abstractmethod
    def joint_dots(self, w: torch.Tensor, labels: list) -> torch.Tensor:
        """lam <a(y_c), w> for each labeling y_c of ``labels``: (m,), one scoring of every position."""

    @abstractmethod
    def joint_point(self, weights, labels: list) -> torch.Tensor:
        """sum_c weights_c a(y_c) (host floats weights >= 0, sum <= 1: the QP's answer): one map from
        statistics to w."""
