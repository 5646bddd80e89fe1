"""Online exponentiated gradient on the factored dual (Collins, Globerson, Koo, Carreras & Bartlett,
JMLR 2008, Fig. 2 "online EG"), chains only.

Block i's dual alpha_i is a Gibbs distribution over labelings, alpha_i(y) ~ exp <theta_i, S(y)>, kept
as its part-wise log-potentials theta_i (a (T_i, K) unary part, (K,) first / last parts and a
(K, K) transition part). The gradient of dual (3) w.r.t. alpha_i(y) is
    (L_i(y) - <w, psi_i(y)>) / n = <theta_i(w) + c_i, S(y)> / n + const
(:class:`~ssvm_torch.stores.base.MarginalMoves`), so the EG update alpha_i(y) <- alpha_i(y) exp(eta
grad) / Z is, in potentials, eq. (10) of Collins et al.:
    theta_i <- theta_i + beta_i (theta_i(w) + c_i),     beta_i = eta / n,
and the new dual point of the block is the marginals of theta_i (the chain marginal oracle,
:mod:`ssvm_torch.oracles.marginals`), written into the store like any other block move. The
block's dual change is exact and cheap (a Gram form), so a step that would lower the dual is
refused and beta_i halved (the per-example rule of Collins et al., Sec. 6); every tried step is one
marginal call. Blocks start at theta_i = START_MARGIN S(y_i) (stores/chain_marginal.py; most of
alpha_i's mass on y_i): the paper's uniform start (theta_i = 0) puts w = sum_i E_unif psi_i / (lam n) far from the optimum at
the regularizations of the FW papers (OCR-small, lam = 0.01: primal 2717 at the start; gap 5.2 after
20 passes against 0.66 from START_MARGIN = 5), while a start at delta(y_i) itself (START_MARGIN = 20)
leaves EG's multiplicative updates almost no mass to move (gap 1.000 after 10 passes).

The initial beta is ``step_size`` (default DEFAULT_STEP = 10: on OCR-small no step was refused at
10, while 100 refuses ~10% of them and ends worse per pass) times the safe value lam n / max_i R_i^2
of Collins et al.'s convergence theorem (the dual is R_i^2 / (lam n^2)-smooth in alpha_i w.r.t. the l1 norm), with
R_i^2 >= max_y ||psi_i(y)||^2 bounded from the Gram matrices (the store's ``prox_scale``).
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from ..stores.base import MarginalMoves
from .outer import OuterSolver


DEFAULT_STEP = 10.0


class EGSolver(OuterSolver):
    identity = OuterSolver.identity + ("step_size",)

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True, interrupt=None):
        if not isinstance(dual, MarginalMoves):
            raise SSVMInputError(f"solver: 'eg' needs a store with marginal moves (chains); "
                                 f"{type(dual).__name__} has none")
        super().__init__(dual, config, evaluate, progress, monitor_start, interrupt)
        d = dual
        K = d.model.K
        self.theta_u = d.prox_center()[0].clone()
        self.theta_first = torch.zeros(d.n, K, dtype=d.dtype, device=d.device)
        self.theta_last = torch.zeros_like(self.theta_first)
        self.theta_trans = torch.zeros(d.n, K, K, dtype=d.dtype, device=d.device)
        self.c = d.loss_potentials()
        beta0 = (config.step_size if config.step_size > 0 else DEFAULT_STEP) * d.lam * d.N / d.prox_scale()
        self.beta = torch.full((d.n,), beta0, dtype=torch.float64)
        self.refused = 0
        Mu, Mt, _ = d.gibbs_marginals(self.theta_u, d.lengths, self.theta_first, self.theta_last, self.theta_trans)
        d.set_marginals(Mu, Mt)                      # alpha_i ~ delta(y_i): w ~ 0, where the FW family starts

    def iterate(self) -> None:
        """One pass-worth of online EG steps is cut by the frame; here one block step."""
        i = self.sampler.next()
        self.step(i)

    def step(self, i: int) -> None:
        d, st = self.dual, self.state
        s, e = d.block_rows(i)
        U, first, last, trans = d.block_potentials(i)
        gu, ell_i = U + self.c[s:e], float(d.ell_i[i])
        lengths = d.lengths[i:i + 1]
        M_u, M_t = d.Mu[s:e], d.Mt[i]
        while True:
            b = float(self.beta[i])
            tu = self.theta_u[s:e] + b * gu
            tf, tl = self.theta_first[i] + b * first, self.theta_last[i] + b * last
            tt = self.theta_trans[i] + b * trans
            mu, mt, _ = d.gibbs_marginals(tu, lengths, tf, tl, tt)
            st.oracle_calls += 1
            point = d.block_point(i, mu, mt[0])
            ell_new = d.block_expected_loss(i, mu)
            # dual change of replacing M_i by the new point: d ell - lam <w, dw_i> - lam/2 |dw_i|^2, with
            # lam <w, dw_i> = -<dM, theta_i(w)> / n (stores/chain.py docstring)
            dM = mu - M_u
            lin = float((dM * U).sum() + dM[0] @ first + dM[-1] @ last + ((mt[0] - M_t) * trans).sum()) / d.N
            sq = d.pair_sqnorm(i, point, None)
            gain = (ell_new - ell_i) + lin - 0.5 * d.lam * sq
            if gain >= -1e-15 * max(1.0, abs(d.dual())):
                break
            self.beta[i] = b / 2                             # Collins et al. Sec. 6: halve and retry
            self.refused += 1
            if b < 1e-12:                                    # no step raises the dual: the block stays
                gain = None
                break
        if gain is not None:
            d.pair_move(i, point, None, ell_new, ell_i, 1.0)
            self.theta_u[s:e], self.theta_first[i], self.theta_last[i], self.theta_trans[i] = tu, tf, tl, tt
        st.passes_since_recompute += 1 / d.n
        if st.passes_since_recompute >= self.cfg.recompute_every:
            d.recompute()
            st.passes_since_recompute = 0.0

    def check(self) -> dict:
        gp = self.exact_gap_pass()
        return self.record(gp, step_size_mean=float(self.beta.mean()), refused_steps=self.refused)

    def extra_state(self) -> dict:
        return {"theta_u": self.theta_u.clone(), "theta_first": self.theta_first.clone(),
                "theta_last": self.theta_last.clone(), "theta_trans": self.theta_trans.clone(),
                "beta": self.beta.clone(), "refused": self.refused}

    def load_extra_state(self, s: dict) -> None:
        for key in ("theta_u", "theta_first", "theta_last", "theta_trans", "beta"):
            dst = getattr(self, key)
            check(tuple(s[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(s[key].shape))
            dst.copy_(s[key])
        self.refused = int(s["refused"])
