"""Marginal moves of the dependency-tree store (:class:`~ssvm_torch.stores.optional_moves.MarginalMoves`: online EG,
Collins et al. 2008, whose experiments were on dependency parsing) and its entropic relaxation
(:class:`~ssvm_torch.stores.optional_moves.RelaxedPasses`: the dual extragradient, Taskar et al. 2006). The store keeps
block i as arc marginals M_i already, so the marginals of a Gibbs distribution over trees are a dual point as
they are. Log-potentials are one value per arc of every block (the store's flat arc order, (A,)); their
marginals come from :mod:`ssvm_torch.trees` (inside-outside for projective trees, the matrix-tree theorem for
non-projective ones). A mixin of :class:`~ssvm_torch.stores.tree.TreeDual`."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..trees import ops
from .optional_moves import MarginalMoves, RelaxedPasses

#: the dual extragradient's prox centre: the Gibbs distribution of START_MARGIN S(y_i) (as for chains)
START_MARGIN = 10.0
#: relative rounding error allowed for a sum of about A float64 terms (relaxed_divergence)
ROUNDING = 1e-13
#: sentences per batched marginal call
CHUNK = 256


@dataclass
class ArcMarginals:
    """A point of block i's arborescence polytope: its arcs' marginals (n_i^2,) in the store's arc order."""

    mu: torch.Tensor


class TreeMarginalMoves(MarginalMoves, RelaxedPasses):
    """The marginal half of :class:`~ssvm_torch.stores.tree.TreeDual` (module docstring)."""

    geometry = "entropic"
    eg_theta_names = ("theta_arcs",)

    # -- flat (A,) <-> padded (B, N, N) -----------------------------------------------------------------------
    def _flat_index(self, idx: torch.Tensor):
        """(row, m, h, global arc) of every arc of the blocks ``idx``: the padded position of each flat arc."""
        lengths = self.lengths[idx]
        n_arcs = lengths * lengths
        row = torch.repeat_interleave(torch.arange(idx.shape[0], device=self.device), n_arcs)
        k = torch.arange(int(n_arcs.sum()), device=self.device) - (torch.cumsum(n_arcs, 0) - n_arcs)[row]
        n = lengths[row]
        m = k // n + 1
        r = k - (m - 1) * n
        return row, m, torch.where(r < m, r, r + 1), self.arc_off[idx][row] + k

    def gibbs(self, theta: torch.Tensor, idx: torch.Tensor | None = None):
        """(marginals (A_idx,), log Z per block) of the Gibbs distributions of the per-arc log-potentials
        ``theta`` (A,) over the blocks ``idx`` (default all), in batches of CHUNK sentences. A block whose gold
        tree is outside the decoder's space has that tree in its space too (models/dependency.py): its
        distribution mixes the decoder's trees and the gold tree, exp s(gold) / Z of the mass on the latter."""
        idx = torch.arange(self.n, device=self.device) if idx is None else idx
        mu, logz = [], []
        gold_arcs = self._gold_arcs()
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths)
        for lo in range(0, idx.shape[0], CHUNK):
            part = idx[lo:lo + CHUNK]
            row, m, h, arcs = self._flat_index(part)
            N = int(self.lengths[part].max()) + 1
            S = torch.full((part.shape[0], N, N), float("-inf"), dtype=self.dtype, device=self.device)
            S[row, m, h] = theta[arcs]
            kernels = "torch" if self.kernels == "torch" else "auto"
            M = ops.marginals(S, self.lengths[part], self.model.projective, self.model.multiroot, kernels)
            lz = ops.log_partition(S, self.lengths[part], self.model.projective, self.model.multiroot, kernels)
            flat = M[row, m, h]
            outside = ~self.gold_ok[part]
            if bool(outside.any()):
                gold_score = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
                    0, rows, theta[gold_arcs])[part]
                total = torch.logaddexp(lz, gold_score)
                p_gold = torch.where(outside, torch.exp(gold_score - total), torch.zeros_like(total))
                G = torch.zeros_like(self.M)
                G[gold_arcs] = 1.0
                flat = (1.0 - p_gold[row]) * flat + p_gold[row] * G[arcs]
                lz = torch.where(outside, total, lz)
            logz.append(lz)
            mu.append(flat)
        return torch.cat(mu), torch.cat(logz)

    def _observed_words(self) -> torch.Tensor:
        """(W,) bool: the words whose head the loss reads (every word unless the data are partial)."""
        return self.lgold >= 0

    def expected_loss(self, M: torch.Tensor) -> torch.Tensor:
        """ell_i = E_{alpha_i} L_i(y) / n of arc marginals M (A,): c_i (n_i - the gold arcs' mass) / n, over the
        observed words with partial annotation."""
        on_gold = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        counted = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths)
        seen = self._observed_words()
        on_gold.index_add_(0, rows[seen], M[self._gold_arcs()[seen]])
        counted.index_add_(0, rows[seen], torch.ones(int(seen.sum()), dtype=self.dtype, device=self.device))
        return self.costs * (counted - on_gold) / self.N

    # -- MarginalMoves (online EG) ----------------------------------------------------------------------------
    def gold_potentials(self, m: float) -> tuple:
        theta = torch.zeros_like(self.M)
        theta[self._gold_arcs()] = m
        return (theta,)

    def set_gibbs(self, theta: tuple) -> None:
        mu, _ = self.gibbs(theta[0])
        self.set_marginals(mu)

    def potentials(self, w: torch.Tensor | None = None) -> tuple:
        return (self.all_arc_scores(self.w if w is None else w),)

    def loss_potentials(self) -> torch.Tensor:
        """c (A,): the loss of each arc, c_i for an arc that is not the gold one of its word (0 on every arc of
        an unobserved word)."""
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths * self.lengths)
        c = self.costs[rows].clone()
        c[self._gold_arcs()] = 0.0
        return c.masked_fill_(~self._observed_words()[self.data.arc_words()], 0.0)

    def set_marginals(self, M: torch.Tensor, gamma: float = 1.0) -> None:
        self.M.mul_(1.0 - gamma).add_(M, alpha=gamma)               # in place: the numba views stay valid
        self.ell_i.copy_(self.expected_loss(self.M))
        self._pending = None
        self.recompute()

    def w_of_marginals(self, M: torch.Tensor) -> tuple[torch.Tensor, float]:
        return self.w_of_points(M), float(self.expected_loss(M).sum())

    def eg_steps(self, blocks, theta: tuple, c: torch.Tensor, beta, tol: float, max_calls: int) -> tuple:
        """Online-EG steps (Collins et al. 2008, Fig. 2; eq. (10) in potentials) on ``blocks`` in order:
        theta_i += beta_i (theta_i(w) + c_i), accepted when the dual does not drop by more than ``tol``, else
        beta_i halved and retried (their Sec. 6) until beta_i < 1e-12; each try is one marginal call."""
        (th,) = theta
        steps = calls = accepted = 0
        while calls < max_calls and steps < len(blocks):
            i = int(blocks[steps])
            n, base = int(self.lengths[i]), int(self.arc_off[i])
            arcs = slice(base, base + n * n)
            scores = self._block_scores(i)
            ell_i = float(self.ell_i[i])
            grad = scores + c[arcs]
            b = float(beta[i])
            ok = False
            while True:
                trial = th[arcs] + b * grad
                mu = self._block_gibbs(i, trial)
                calls += 1
                point = ArcMarginals(mu)
                seen = self._observed_words()[int(self.offsets[i]):int(self.offsets[i]) + n]
                ell_new = float(self.costs[i]) * (float(seen.sum()) - float(mu[self._block_gold(i)[seen]].sum())) / self.N
                dM = mu - self.M[arcs]
                gain = (ell_new - ell_i) + float(dM @ scores) / self.N - 0.5 * self.lam * self.pair_sqnorm(i, point, None)
                if gain >= -tol:
                    ok = True
                    break
                beta[i] = b / 2
                if b < 1e-12:
                    break
                b = b / 2
            if ok:
                self.pair_move(i, point, None, ell_new, ell_i, 1.0)
                th[arcs] = trial
            steps, accepted = steps + 1, accepted + int(ok)
        return steps, calls, accepted

    def _block_scores(self, i: int) -> torch.Tensor:
        return torch.from_numpy(self._np_theta(i).copy()) if self._numba else self._t_theta(i)

    def _block_gold(self, i: int) -> torch.Tensor:
        n, s = int(self.lengths[i]), int(self.offsets[i])
        m = torch.arange(1, n + 1, device=self.device)
        h = self.gold[s:s + n]
        return (m - 1) * n + torch.where(h < m, h, h - 1)

    def _block_gibbs(self, i: int, theta_i: torch.Tensor) -> torch.Tensor:
        """The marginals (n_i^2,) of block i's Gibbs distribution of the log-potentials ``theta_i`` (its gold tree
        mixed in where it is outside the decoder's space, as in :meth:`gibbs`)."""
        idx = torch.tensor([i], device=self.device)
        row, m, h, _ = self._flat_index(idx)
        n = int(self.lengths[i])
        S = torch.full((1, n + 1, n + 1), float("-inf"), dtype=self.dtype, device=self.device)
        S[row, m, h] = theta_i
        kernels = "torch" if self.kernels == "torch" else "auto"
        M = ops.marginals(S, self.lengths[idx], self.model.projective, self.model.multiroot, kernels)[row, m, h]
        if bool(self.gold_ok[i]):
            return M
        gold = self._block_gold(i)
        lz = ops.log_partition(S, self.lengths[idx], self.model.projective, self.model.multiroot, kernels)[0]
        gold_score = theta_i[gold].sum()
        p_gold = torch.exp(gold_score - torch.logaddexp(lz, gold_score))
        G = torch.zeros_like(M)
        G[gold] = 1.0
        return (1.0 - p_gold) * M + p_gold * G

    # -- RelaxedPasses (the dual extragradient, entropic geometry) ------------------------------------------
    def relaxed_scores(self, w: torch.Tensor) -> tuple:
        return self.potentials(w)

    def relaxed_loss(self) -> tuple:
        return (self.loss_potentials(),)

    def prox_center(self) -> tuple:
        return self.gold_potentials(START_MARGIN)

    def prox(self, base: tuple, step: tuple):
        """KL prox: the marginals of the log-potentials base + step; the prox state is those log-potentials
        and the blocks' log Z."""
        pots = base[0] + step[0]
        mu, logz = self.gibbs(pots)
        return mu, (pots, logz)

    def relaxed_divergence(self, z, state: tuple, base: tuple) -> tuple[float, float]:
        """sum_i KL(p_i || q_i) of the Gibbs distributions of the log-potentials A = ``state``, B = ``base``:
        E_p[s_A(y) - s_B(y)] - log Z_A + log Z_B, the expectation read off p's arc marginals z, and a bound on
        its rounding error (stores/chain_marginal.py has why)."""
        inner = float((z * (state[0] - base[0])).sum())
        size = float((z * (state[0].abs() + base[0].abs())).sum() + state[1].abs().sum() + base[1].abs().sum())
        return inner - float(state[1].sum()) + float(base[1].sum()), ROUNDING * size

    def prox_scale(self) -> float:
        """max_i R_i^2 with R_i^2 = sum over the words m of |f(gold_m -> m)|^2 + max_h |f(h -> m)|^2 (|f_a|^2 = the
        arc's feature count): ||psi_i(y)||^2 for a y whose arcs share no feature across words, the chain's
        bound's counterpart (stores/chain_marginal.py). Words' arcs do share features (POS items), so this is
        an optimistic scale; the step-halving rule of EG and the adaptive step of DEG refuse the steps that
        would lower the dual (a worst-case bound, (sum_m |f_gold| + max_h |f|)^2, is some n times smaller in
        step and left EG at primal 154 after 4 passes on 200 EWT sentences)."""
        counts = (self.ptr[1:] - self.ptr[:-1]).to(self.dtype)
        R = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        rows = torch.repeat_interleave(torch.arange(self.n, device=self.device), self.lengths)
        R.index_add_(0, rows, counts[self._gold_arcs()])
        # the largest arc of every word: over its n_i arcs (one row of the block's arc matrix)
        word_rows = torch.repeat_interleave(torch.arange(int(self.gold.shape[0]), device=self.device),
                                            self.lengths[rows])
        best = torch.zeros(int(self.gold.shape[0]), dtype=self.dtype, device=self.device)
        best.scatter_reduce_(0, word_rows, counts, reduce="amax")
        R.index_add_(0, rows, best)
        return float(R.max())

    def w_of_relaxed(self, z) -> tuple[torch.Tensor, float]:
        return self.w_of_marginals(z)

    def set_relaxed(self, z, gamma: float = 1.0) -> None:
        self.set_marginals(z, gamma=gamma)


__all__ = ["ArcMarginals", "TreeMarginalMoves"]
