"""Marginal moves of the compact chain store (:class:`~ssvm_torch.stores.base.MarginalMoves`): the
store already keeps block i as expected statistics (Mu_i, Mt_i) under alpha_i, so a Gibbs
distribution's marginals are a dual point as they are. A mixin of
:class:`~ssvm_torch.stores.chain.ChainDual` (it reads the store's state tensors)."""
from __future__ import annotations

import torch
import torch.nn.functional as Fn

from ..models.chain import unary_rows
from ..oracles.marginals import chain_marginals_ragged
from .base import BlockMarginals, MarginalMoves, RelaxedPasses


#: the prox centre (EG's start, DEG's centre): the Gibbs distribution of START_MARGIN S(y_i), most of
#: alpha_i's mass on y_i (solvers/eg.py says why neither uniform nor delta(y_i))
START_MARGIN = 5.0


class ChainMarginalMoves(MarginalMoves, RelaxedPasses):
    """The marginal half of :class:`~ssvm_torch.stores.chain.ChainDual`: per-block moves for EG and
    the entropic relaxation for the dual extragradient (z = (Mu, Mt); prox state = the log-potentials
    (U, first, last, trans) whose marginals z is)."""

    geometry = "entropic"

    def potentials(self, w: torch.Tensor | None = None) -> tuple:
        return self._potentials() if w is None else self._potentials_of(w)

    def loss_potentials(self) -> torch.Tensor:
        wrong = 1.0 - Fn.one_hot(self.Y, self.model.K).to(self.dtype)
        return wrong * self.tw[self.seg][:, None]

    def expected_loss(self, Mu: torch.Tensor) -> torch.Tensor:
        """ell_i = E_{alpha_i} L_i(y) / n of marginals (N, K): (n,)."""
        wrong = 1.0 - Mu.gather(1, self.Y[:, None])[:, 0]
        per = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(0, self.seg, wrong)
        return per * self.tw / self.N

    def block_rows(self, i: int) -> tuple[int, int]:
        """The positions s:e of block i in the store's (N, K) tensors."""
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def block_potentials(self, i: int) -> tuple:
        """(U_i (T_i, K), first, last, trans) at the store's w: block i's part scores only."""
        s, e = self.block_rows(i)
        W, first, last, trans = self.model.split(self.w)
        return unary_rows(W, (self.fptr, self.fidx, self.fval), torch.arange(s, e, device=self.device)), first, last, trans

    def gibbs_marginals(self, U, lengths, first, last, trans):
        """:func:`~ssvm_torch.oracles.marginals.chain_marginals_ragged` of these log-potentials under
        the model's tag constraints (forbidden moves get probability 0): (Mu, Mt, log Z)."""
        pen = self.model.penalty(U.dtype, U.device)
        if pen is not None:
            first, last, trans = first + pen[0], last + pen[1], trans + pen[2]
        return chain_marginals_ragged(U, lengths, first, last, trans)

    def block_point(self, i: int, mu: torch.Tensor, mt: torch.Tensor) -> BlockMarginals:
        """A point of block i's marginal polytope, for :meth:`pair_sqnorm` / :meth:`pair_move`."""
        return BlockMarginals(mu.to(self.device, self.dtype), mt.to(self.device, self.dtype))

    def block_expected_loss(self, i: int, mu: torch.Tensor) -> float:
        s, e = self.block_rows(i)
        wrong = (e - s) - float(mu.gather(1, self.Y[s:e, None]).sum())
        return wrong * float(self.tw[i]) / self.N

    def set_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor, gamma: float = 1.0) -> None:
        self.Mu.mul_(1.0 - gamma).add_(Mu, alpha=gamma)      # in place: the numba views stay valid
        self.Mt.mul_(1.0 - gamma).add_(Mt, alpha=gamma)
        self.ell_i.copy_(self.expected_loss(self.Mu))
        self.recompute()

    def w_of_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor) -> tuple[torch.Tensor, float]:
        return self.w_from_stats(Mu, Mt.sum(0)), float(self.expected_loss(Mu).sum())

    # -- the entropic relaxation (RelaxedPasses) ------------------------------------------------
    def relaxed_scores(self, w: torch.Tensor) -> tuple:
        return self.potentials(w)

    def relaxed_loss(self) -> tuple:
        K = self.model.K
        z = torch.zeros(K, dtype=self.dtype, device=self.device)
        return self.loss_potentials(), z, z, torch.zeros(K, K, dtype=self.dtype, device=self.device)

    def prox_center(self) -> tuple:
        K = self.model.K
        z = torch.zeros(K, dtype=self.dtype, device=self.device)
        return START_MARGIN * Fn.one_hot(self.Y, K).to(self.dtype), z, z, torch.zeros(K, K, dtype=self.dtype,
                                                                                         device=self.device)

    def prox(self, base: tuple, step: tuple):
        """KL prox: the marginals of the log-potentials base + step (one marginal pass)."""
        pots = tuple(b + s for b, s in zip(base, step))
        Mu, Mt, _ = self.gibbs_marginals(pots[0], self.lengths, *pots[1:])
        return (Mu, Mt), pots

    def prox_scale(self) -> float:
        """max_i R_i^2 with R_i^2 = 2 tr(G_i) + 4 T_i >= ||psi_i(y)||^2 for every y: each wrong position
        moves ||x_t||^2 out of one label's row into another's (2 ||x_t||^2), the transition counts and
        the first / last indicators change by at most 4 T_i in squared norm."""
        T = self.lengths
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), T)
        t = torch.arange(int(T.sum()), device=self.device) - self.offsets[:-1][rows]
        diag = self.G[self.goff[:-1][rows] + t * T[rows] + t]              # G_i[t, t] = ||x_t||^2
        tr = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(0, rows, diag)
        return float((2 * tr + 4 * T.to(self.dtype)).max())

    def w_of_relaxed(self, z) -> tuple[torch.Tensor, float]:
        return self.w_of_marginals(*z)

    def set_relaxed(self, z, gamma: float = 1.0) -> None:
        self.set_marginals(*z, gamma=gamma)
