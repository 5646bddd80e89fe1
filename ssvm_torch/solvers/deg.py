"""Dual extragradient (Taskar, Lacoste-Julien & Jordan, JMLR 2006, Fig. 3: Nesterov's dual
extrapolation with Bregman projections) on the saddle-point form of the SSVM,

    min_{w in W} max_{z in Z}  L(w, z) = lam/2 ||w||^2 + 1/n sum_i (L_i(z_i) - <w, psi_i(z_i)>),

z_i a point of block i's relaxation (:class:`~ssvm_torch.stores.base.RelaxedPasses`: the chain's
marginal polytope with the entropic geometry, the bipartite matching polytope with the Euclidean
one), W = {||w|| <= R}, R = sqrt(2 P(0) / lam) (P(w*) <= P(0) bounds ||w*||, so the ball changes
nothing at the optimum). For fixed w the inner max is the primal (1); for fixed z the unconstrained
min is the SSVM dual (3) at the dual point z, w(z) = sum_i psi_i(z_i) / (lam n). The gradient in z_i
is (c_i + theta_i(w)) / n (loss and score parts, constants aside).

Steps: Euclidean on w with eta_w = W_STEP / lam; the z prox with the coefficient beta = eta_z / n =
step_size * lam n / max_i R_i^2 on the parts (``step_size`` defaults to DEFAULT_STEP). With the prox
centre (0, z_c) (z_c near the ground truth: ``prox_center``) and t the iterations done, iteration t is
    v_w = Pi_W(eta_w s_w),               v_z = prox(z_c, beta (t c + theta(S_w)))        (prediction)
    u_w = Pi_W(v_w - eta_w lam (v_w - w(v_z))),  u_z = prox(v_z, beta (c + theta(v_w)))  (correction)
    s_w -= lam (u_w - w(u_z)),  S_w += u_w
the memory-efficient form: the z-part of Nesterov's dual vector s is t c + theta(S_w) (theta is linear
in w), so the state is w-sized plus the averaged z, kept in the store as its blocks. The method's
guarantee is about the averaged iterate (w_bar, z_bar): its saddle-point gap
    P(w_bar) - min_{w in W} L(w, z_bar)  >=  P(w_bar) - P*
is what the records' ``gap`` holds, ``primal`` is P(w_bar) (the w model.pt holds) and ``dual`` is
min_{w in W} L(w, z_bar) (= D(z_bar) when ||w(z_bar)|| <= R). ``primal_z`` / ``gap_z`` are the primal
and the FW duality gap at w(z_bar), ``primal_last`` the primal at the current iterate u_w. Each
iteration is 2 prox passes (2 effective passes: a marginal pass on chains, a projection of every
example on matchings).
"""
from __future__ import annotations

import math

import torch

from ..errors import SSVMInputError, check
from ..stores.base import RelaxedPasses
from .outer import OuterSolver

DEFAULT_STEP = 10.0         # OCR-small, lam = 0.01, 200 passes: gap 0.44 at 10, 2.1 at 100, 3.8 at 1000
W_STEP = 0.5                # eta_w lam: the correction moves w halfway to w(v_z); >= 1 overshoots (diverged at 10)


class DEGSolver(OuterSolver):
    identity = OuterSolver.identity + ("step_size",)

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True, interrupt=None):
        if not isinstance(dual, RelaxedPasses):
            raise SSVMInputError(f"solver: 'deg' needs a store with a relaxation and its prox (chains, matchings); "
                                 f"{type(dual).__name__} has none")
        super().__init__(dual, config, evaluate, progress, monitor_start, interrupt)
        d = dual
        step = config.step_size if config.step_size > 0 else DEFAULT_STEP
        self.eta_w, self.beta = W_STEP / d.lam, step * d.lam * d.N / d.prox_scale()
        self.radius = math.sqrt(2 * d.primal_at(torch.zeros_like(d.w)) / d.lam)     # P(0): the mean max loss
        self.c, self.center = d.relaxed_loss(), d.prox_center()
        self.s_w = torch.zeros_like(d.w)
        self.S_w = torch.zeros_like(d.w)
        self.w_bar = torch.zeros_like(d.w)
        self.w_last = torch.zeros_like(d.w)                     # the current iterate u_w
        self.t = 0

    def project(self, w: torch.Tensor) -> torch.Tensor:
        norm = float(w.norm())
        return w if norm <= self.radius else w * (self.radius / norm)

    def step(self, coef: float, S: torch.Tensor) -> tuple:
        """beta (coef c + theta(S)): a z step in parts."""
        return tuple(self.beta * (coef * c + th) for c, th in zip(self.c, self.dual.relaxed_scores(S)))

    def iterate(self) -> None:
        d, lam = self.dual, self.dual.lam
        v_w = self.project(self.eta_w * self.s_w)
        v_z, v_state = d.prox(self.center, self.step(self.t, self.S_w))
        w_vz, _ = d.w_of_relaxed(v_z)
        u_w = self.project(v_w - self.eta_w * lam * (v_w - w_vz))
        u_z, _ = d.prox(v_state, self.step(1.0, v_w))
        w_uz, _ = d.w_of_relaxed(u_z)
        self.state.oracle_calls += 2 * d.n
        self.s_w.add_(u_w - w_uz, alpha=-lam)
        self.S_w.add_(u_w)
        self.t += 1
        self.w_bar.add_(u_w - self.w_bar, alpha=1.0 / self.t)
        self.w_last.copy_(u_w)
        d.set_relaxed(u_z, gamma=1.0 / self.t)                   # z_bar: the running mean of the u_z

    def model_point(self):
        """(w_bar, ell(z_bar)): the primal point of the records and the loss of the averaged z."""
        return self.w_bar, self.dual.ell

    def model_extras(self) -> dict:
        """w(z_bar) and R: the records' dual, min_{||w|| <= R} L(w, z_bar) (:meth:`ball_dual`), is
        then recomputable from ``model.pt`` alone."""
        return {"w_dual": self.dual.w.clone(), "radius": self.radius}

    @staticmethod
    def ball_dual(w_dual: torch.Tensor, ell: float, lam: float, radius: float) -> float:
        """min over ||w|| <= R of L(w, z) = lam/2 ||w||^2 - lam <w, w(z)> + ell(z): D(z) = ell - lam/2
        ||w(z)||^2 inside the ball, else at w = R w(z) / ||w(z)||."""
        norm = float(w_dual.norm())
        if norm <= radius:
            return ell - 0.5 * lam * norm ** 2
        return 0.5 * lam * radius ** 2 - lam * radius * norm + ell

    def check(self) -> dict:
        d, lam = self.dual, self.dual.lam
        gp_z = self.exact_gap_pass()                               # at w(z_bar): its primal and FW gap
        primal_z, gap_z = d.primal(gp_z.H), float(gp_z.block_gaps.sum())
        inner = self.ball_dual(d.w, d.ell, lam, self.radius)
        primal = d.primal_at(self.w_bar)
        rec = self.record(gp_z, primal_z=primal_z, gap_z=gap_z, primal_last=d.primal_at(self.w_last),
                          iterations=self.t, step_w=self.eta_w,
                          step_z=self.beta, geometry=d.geometry)
        rec.update(primal=primal, dual=inner, gap=primal - inner)
        return rec

    def extra_state(self) -> dict:
        return {"s_w": self.s_w.clone(), "S_w": self.S_w.clone(), "w_bar": self.w_bar.clone(),
                "w_last": self.w_last.clone(), "t": self.t}

    def load_extra_state(self, s: dict) -> None:
        for key in ("s_w", "S_w", "w_bar", "w_last"):
            dst = getattr(self, key)
            check(tuple(s[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(s[key].shape))
            dst.copy_(s[key])
        self.t = int(s["t"])

