"""Dual extragradient (Taskar, Lacoste-Julien & Jordan, JMLR 2006, Fig. 3: Nesterov's dual
extrapolation with Bregman projections) on the saddle-point form of the SSVM, chains only:

    min_{w in W} max_{z in Z}  L(w, z) = lam/2 ||w||^2 + 1/n sum_i (<c_i, z_i> + <w, F_i z_i>),

z_i the marginals of block i (the chain's marginal polytope), F_i z_i = E_{z_i} phi(x_i, y) -
phi(x_i, y_i), c_i the loss on the parts, W = {||w|| <= R}, R = sqrt(2 P(0) / lam) (P(w*) <= P(0)
bounds ||w*||, so the ball changes nothing at the optimum). For fixed w the inner max is the primal
(1); for fixed z the unconstrained min is the SSVM dual (3) at the dual point z with w(z) =
-1/(lam n) sum_i F_i z_i.

Geometry: Euclidean on w (step eta_w = W_STEP / lam), entropic (KL) on each z_i (step eta_z, entering
as the coefficient beta = eta_z / n = step_size * lam n / max_i R_i^2 on the parts' potentials, the
scale of the EG step of :mod:`.eg`; ``step_size`` defaults to DEFAULT_STEP). The prox centre is
(0, z_c) with z_c the Gibbs distribution of START_MARGIN S(y_i) (mass on y_i, as EG starts; a
uniform centre puts w(z) far from the optimum, see :mod:`.eg`). Iteration t is
    v_w = Pi_W(eta_w s_w),                 v_z = marginals(z_c + beta (t c + theta(S_w)))  (prediction)
    u_w = Pi_W(v_w - eta_w lam (v_w - w(v_z))),
    u_z = marginals(z_c + beta ((t + 1) c + theta(S_w + v_w)))                          (correction)
    s_w -= lam (u_w - w(u_z)),  S_w += u_w
the memory-efficient form: the z-part of the dual vector s is determined by t and S_w = sum of the
u_w, so the state is w-sized plus the averaged marginals (kept in the store). The method's
guarantee is about the averaged iterate (w_bar, z_bar): its saddle-point gap
    P(w_bar) - min_{w in W} L(w, z_bar)  >=  P(w_bar) - P*
is what the records' ``gap`` holds, ``primal`` is P(w_bar) (the w model.pt holds) and ``dual`` is
min_{w in W} L(w, z_bar) (= D(z_bar) when ||w(z_bar)|| <= R). ``primal_z`` / ``gap_z`` are the primal
and the FW duality gap at w(z_bar). Each iteration is 2 marginal passes (2 effective passes).
"""
from __future__ import annotations

import math

import torch

from ..errors import SSVMInputError, check
from ..oracles.marginals import chain_marginals_ragged
from ..stores.base import MarginalMoves
from .outer import OuterSolver

START_MARGIN = 5.0          # the prox centre of z_i: the Gibbs distribution of START_MARGIN S(y_i) (solvers/eg.py)
DEFAULT_STEP = 10.0         # OCR-small, lam = 0.01, 200 passes: gap 0.44 at 10, 2.1 at 100, 3.8 at 1000
W_STEP = 0.5                # eta_w lam: the correction moves w halfway to w(v_z); >= 1 overshoots (diverged at 10)


class DEGSolver(OuterSolver):
    identity = OuterSolver.identity + ("step_size",)

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True):
        if not isinstance(dual, MarginalMoves):
            raise SSVMInputError(f"solver: 'deg' needs a store with marginal moves (chains); "
                                 f"{type(dual).__name__} has none")
        super().__init__(dual, config, evaluate, progress, monitor_start)
        d = dual
        step = config.step_size if config.step_size > 0 else DEFAULT_STEP
        R2 = max_psi_sqnorm(d)
        self.eta_w, self.beta = W_STEP / d.lam, step * d.lam * d.N / R2
        self.radius = math.sqrt(2 * float((d.tw * d.lengths.to(d.dtype)).sum()) / d.N / d.lam)
        self.c = d.loss_potentials()
        self.center = START_MARGIN * torch.nn.functional.one_hot(d.Y, d.model.K).to(d.dtype)    # prox centre of z
        self.s_w = torch.zeros_like(d.w)
        self.S_w = torch.zeros_like(d.w)
        self.w_bar = torch.zeros_like(d.w)
        self.t = 0

    def project(self, w: torch.Tensor) -> torch.Tensor:
        norm = float(w.norm())
        return w if norm <= self.radius else w * (self.radius / norm)

    def marginals(self, coef: float, S: torch.Tensor):
        """Marginals of the potentials beta (coef c + theta(S)) of every block (one marginal pass)."""
        d = self.dual
        U, first, last, trans = d.potentials(S)
        b = self.beta
        out = chain_marginals_ragged(self.center + b * (U + coef * self.c), d.lengths, b * first, b * last, b * trans)
        self.state.oracle_calls += d.n
        return out[0], out[1]

    def iterate(self) -> None:
        d, lam = self.dual, self.dual.lam
        v_w = self.project(self.eta_w * self.s_w)
        v_mu, v_mt = self.marginals(self.t, self.S_w)
        w_vz, _ = d.w_of_marginals(v_mu, v_mt)
        u_w = self.project(v_w - self.eta_w * lam * (v_w - w_vz))
        u_mu, u_mt = self.marginals(self.t + 1, self.S_w + v_w)
        w_uz, _ = d.w_of_marginals(u_mu, u_mt)
        self.s_w.add_(u_w - w_uz, alpha=-lam)
        self.S_w.add_(u_w)
        self.t += 1
        self.w_bar.add_(u_w - self.w_bar, alpha=1.0 / self.t)
        d.set_marginals(u_mu, u_mt, gamma=1.0 / self.t)          # z_bar: the running mean of the u_z

    def model_point(self):
        return self.w_bar, self.dual.ell

    def check(self) -> dict:
        d, lam = self.dual, self.dual.lam
        gp_z = self.exact_gap_pass()                               # at w(z_bar): its primal and FW gap
        primal_z, gap_z = d.primal(gp_z.H), float(gp_z.block_gaps.sum())
        norm_z = float(d.w.norm())
        if norm_z <= self.radius:
            inner = d.dual()
        else:                               # min over the ball of lam/2 |w|^2 - lam <w, w(z)> + ell
            inner = 0.5 * lam * self.radius ** 2 - lam * self.radius * norm_z + d.ell
        saved_w, saved_ell = d.w.clone(), d.ell
        try:
            d.set_point(self.w_bar, saved_ell)
            primal = d.primal(d.gap_pass().H)
        finally:
            d.set_point(saved_w, saved_ell)
        rec = self.record(gp_z, primal_z=primal_z, gap_z=gap_z, iterations=self.t, step_w=self.eta_w,
                          step_z=self.beta)
        rec.update(primal=primal, dual=inner, gap=primal - inner)
        return rec

    def extra_state(self) -> dict:
        return {"s_w": self.s_w.clone(), "S_w": self.S_w.clone(), "w_bar": self.w_bar.clone(), "t": self.t}

    def load_extra_state(self, s: dict) -> None:
        for key in ("s_w", "S_w", "w_bar"):
            dst = getattr(self, key)
            check(tuple(s[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(s[key].shape))
            dst.copy_(s[key])
        self.t = int(s["t"])


def max_psi_sqnorm(d) -> float:
    """max_i R_i^2 with R_i^2 = 2 tr(G_i) + 4 T_i >= ||psi_i(y)||^2 for every y: each wrong position
    moves ||x_t||^2 out of one label's row into another's (2 ||x_t||^2), the transition counts and the
    first / last indicators change by at most 4 T_i in squared norm."""
    T = d.lengths
    rows = torch.repeat_interleave(torch.arange(d.n, device=d.device), T)
    t = torch.arange(int(T.sum()), device=d.device) - d.offsets[:-1][rows]
    diag = d.G[d.goff[:-1][rows] + t * T[rows] + t]              # G_i[t, t] = ||x_t||^2
    tr = torch.zeros(d.n, dtype=d.dtype, device=d.device).index_add_(0, rows, diag)
    return float((2 * tr + 4 * T.to(d.dtype)).max())
