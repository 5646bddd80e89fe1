"""Marginal moves of the compact chain store (:class:`~ssvm_torch.stores.optional_moves.MarginalMoves`): the
store already keeps block i as expected statistics (Mu_i, Mt_i) under alpha_i, so a Gibbs
distribution's marginals are a dual point as they are. A mixin of
:class:`~ssvm_torch.stores.chain.ChainDual` (it reads the store's state tensors)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn

from ..models.chain_index import unary_rows
from ..oracles.eg_kernels import nb_eg_steps
from ..chain import chain_marginals_ragged
from .base import BlockMarginals
from .optional_moves import MarginalMoves, RelaxedPasses


#: the dual extragradient's prox centre: the Gibbs distribution of START_MARGIN S(y_i), most of
#: alpha_i's mass on y_i (solvers/deg.py has the measurements behind 10; EG has its own start)
START_MARGIN = 10.0
#: relative rounding error allowed for a sum of about N K float64 terms (relaxed_divergence)
ROUNDING = 1e-13


class ChainMarginalMoves(MarginalMoves, RelaxedPasses):
    """The marginal half of :class:`~ssvm_torch.stores.chain.ChainDual`: per-block moves for EG and
    the entropic relaxation for the dual extragradient (z = (Mu, Mt); prox state = the log-potentials
    (U, first, last, trans) whose marginals z is)."""

    geometry = "entropic"
    #: the names of EG's per-block log-potentials (checkpoint keys), in the order of gold_potentials
    eg_theta_names = ("theta_u", "theta_first", "theta_last", "theta_trans")

    def gold_potentials(self, m: float) -> tuple:
        """Every block's log-potentials m S(y_i): the Gibbs distribution with most of its mass on y_i (EG's
        margin start, solvers/eg.py)."""
        K = self.model.K
        zeros = torch.zeros(self.n, K, dtype=self.dtype, device=self.device)
        return (m * Fn.one_hot(self.Y, K).to(self.dtype), zeros, zeros.clone(),
                torch.zeros(self.n, K, K, dtype=self.dtype, device=self.device))

    def set_gibbs(self, theta: tuple) -> None:
        """Every block moves to the marginals of the Gibbs distribution of its log-potentials ``theta``."""
        Mu, Mt, _ = self.gibbs_marginals(theta[0], self.lengths, *theta[1:])
        self.set_marginals(Mu, Mt)

    def potentials(self, w: torch.Tensor | None = None) -> tuple:
        return self._potentials() if w is None else self._potentials_of(w)

    def _seen(self, s: int = 0, e: int | None = None) -> torch.Tensor:
        """1.0 at the positions s:e (default all) whose loss counts (their label observed), 0.0 elsewhere (the latent
        SSVM's completions, ssvm_torch/latent.py): the loss labels YL are negative there."""
        return (self.YL[s:e] >= 0).to(self.dtype)

    def loss_potentials(self) -> torch.Tensor:
        """The loss as per-position potentials (N, K): tw_i for each wrong label of an observed position."""
        wrong = 1.0 - Fn.one_hot(self.Y, self.model.K).to(self.dtype)
        return wrong * (self.tw[self.seg] * self._seen())[:, None]

    def expected_loss(self, Mu: torch.Tensor) -> torch.Tensor:
        """ell_i = E_{alpha_i} L_i(y) / n of marginals (N, K): (n,), the observed positions only."""
        wrong = (1.0 - Mu.gather(1, self.Y[:, None])[:, 0]) * self._seen()
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
        """:func:`~ssvm_torch.chain.chain_marginals_ragged` of these log-potentials under
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
        seen = self._seen(s, e)
        wrong = float(seen.sum()) - float((mu.gather(1, self.Y[s:e, None])[:, 0] * seen).sum())
        return wrong * float(self.tw[i]) / self.N

    def set_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor, gamma: float = 1.0) -> None:
        self.Mu.mul_(1.0 - gamma).add_(Mu, alpha=gamma)      # in place: the numba views stay valid
        self.Mt.mul_(1.0 - gamma).add_(Mt, alpha=gamma)
        self.ell_i.copy_(self.expected_loss(self.Mu))
        self.recompute()

    def w_of_marginals(self, Mu: torch.Tensor, Mt: torch.Tensor) -> tuple[torch.Tensor, float]:
        return self.w_from_stats(Mu, Mt.sum(0)), float(self.expected_loss(Mu).sum())

    def eg_steps(self, blocks, theta: tuple, c: torch.Tensor, beta, tol: float, max_calls: int) -> tuple:
        if self._numba:
            return self._eg_steps_numba(np.ascontiguousarray(blocks, dtype=np.int64), theta, beta, tol, max_calls)
        steps = calls = accepted = 0
        while calls < max_calls and steps < len(blocks):
            i = int(blocks[steps])
            ok, beta[i], tries = self._eg_block_step_torch(i, theta, c, float(beta[i]), tol)
            steps, calls, accepted = steps + 1, calls + tries, accepted + int(ok)
        return steps, calls, accepted

    def _eg_steps_numba(self, blocks, theta, beta, tol, max_calls):
        """:func:`~ssvm_torch.oracles.eg_kernels.nb_eg_steps` on the store's numpy views."""
        if self._eg_work is None or self._eg_work[0] is not theta:       # the arguments, once per solver
            T, K = int(self.lengths.max()), self.model.K
            work = (np.empty((T, K)), np.empty((T, K)), np.empty(K), np.empty(K), np.empty((K, K)),
                    np.empty((K, K)), np.empty((T, K)), np.empty((T, K)), np.empty(T + 1), np.empty(K),
                    np.empty((T, K)), np.empty((K, K)), np.empty((T, K)), np.empty((K, K)))
            self._eg_work = (theta, (self._tw, *self._np_loss, *(t.numpy() for t in theta), self.model.pen_host, *work,
                                     self._np_ell[0]))
        steps, calls, accepted, d_ell = nb_eg_steps(blocks, max_calls, beta, tol, self.lam, self.N,
                                                    *self._eg_work[1])
        self._np_ell[1][0] += d_ell
        return steps, calls, accepted

    def _eg_block_step_torch(self, i, theta, c, beta, tol):
        """The same step from the store's torch primitives (any device; the kernel's reference)."""
        theta_u, theta_first, theta_last, theta_trans = theta
        s, e = self.block_rows(i)
        U, first, last, trans = self.block_potentials(i)
        gu, ell_i = U + c[s:e], float(self.ell_i[i])
        lengths = self.lengths[i:i + 1]
        M_u, M_t = self.Mu[s:e], self.Mt[i]
        tries = 0
        while True:
            b = beta
            tu = theta_u[s:e] + b * gu
            tf, tl, tt = theta_first[i] + b * first, theta_last[i] + b * last, theta_trans[i] + b * trans
            mu, mt, _ = self.gibbs_marginals(tu, lengths, tf, tl, tt)
            tries += 1
            point = self.block_point(i, mu, mt[0])
            ell_new = self.block_expected_loss(i, mu)
            # dual change of replacing M_i by the new point: d ell - lam <w, dw_i> - lam/2 |dw_i|^2, with
            # lam <w, dw_i> = -<dM, theta_i(w)> / n (stores/chain.py docstring)
            dM = mu - M_u
            lin = float((dM * U).sum() + dM[0] @ first + dM[-1] @ last + ((mt[0] - M_t) * trans).sum()) / self.N
            gain = (ell_new - ell_i) + lin - 0.5 * self.lam * self.pair_sqnorm(i, point, None)
            if gain >= -tol:
                break
            beta = b / 2                                     # Collins et al. Sec. 6: halve and retry
            if b < 1e-12:                                    # no step raises the dual: the block stays
                return False, beta, tries
        self.pair_move(i, point, None, ell_new, ell_i, 1.0)
        theta_u[s:e], theta_first[i], theta_last[i], theta_trans[i] = tu, tf, tl, tt
        return True, beta, tries

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
        """KL prox: the marginals of the log-potentials base + step (one marginal pass); the prox state
        is those log-potentials (U, first, last, trans) and the blocks' log Z."""
        pots = tuple(b + s for b, s in zip(base[:4], step))
        Mu, Mt, logZ = self.gibbs_marginals(pots[0], self.lengths, *pots[1:])
        return (Mu, Mt), (*pots, logZ)

    def relaxed_divergence(self, z, state: tuple, base: tuple) -> tuple[float, float]:
        """sum_i KL(p_i || q_i) of the Gibbs distributions of the log-potentials A = ``state``, B =
        ``base``: E_p[s_A(y) - s_B(y)] - log Z_A + log Z_B, the expectation read off p's marginals z
        (scores are linear in the parts; the tag constraints' penalty is in both and cancels), and a
        bound on its rounding error: log Z grows with the accumulated steps while the KL of two
        neighbouring iterates shrinks, so near convergence the difference is mostly rounding."""
        Mu, Mt = z
        inner = size = 0.0
        for mu, k in ((Mu, 0), (Mu[self.first_pos], 1), (Mu[self.last_pos], 2), (Mt, 3)):
            inner = inner + (mu * (state[k] - base[k])).sum()
            size = size + (mu * (state[k].abs() + base[k].abs())).sum()
        size = size + state[4].abs().sum() + base[4].abs().sum()
        return float(inner - state[4].sum() + base[4].sum()), ROUNDING * float(size)

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
