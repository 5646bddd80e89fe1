"""Dual extragradient (Taskar, Lacoste-Julien & Jordan, JMLR 2006, Fig. 3: Nesterov's dual
extrapolation with Bregman projections) on the saddle-point form of the SSVM,

    min_{w in W} max_{z in Z}  L(w, z) = lam/2 ||w||^2 + 1/n sum_i (L_i(z_i) - <w, psi_i(z_i)>),

z_i a point of block i's relaxation (:class:`~ssvm_torch.stores.optional_moves.RelaxedPasses`: the chain's
marginal polytope with the entropic geometry, the bipartite matching polytope with the Euclidean
one), W = {||w|| <= R}, R = sqrt(2 P(0) / lam) (P(w*) <= P(0) bounds ||w*||, so the ball changes
nothing at the optimum). For fixed w the inner max is the primal (1); for fixed z the unconstrained
min is the SSVM dual (3) at the dual point z, w(z) = sum_i psi_i(z_i) / (lam n). The gradient in z_i
is (c_i + theta_i(w)) / n (loss and score parts, constants aside).

Steps: Euclidean on w with eta_w = W_STEP / lam, the z prox with the coefficient beta = eta_z / n =
step_size * lam n / max_i R_i^2 on the parts (``step_size`` defaults to DEFAULT_STEP), both times the
adaptive multiple eta_t. With the prox centre (0, z_c) (z_c near the ground truth: ``prox_center``),
the accepted multiples' sum C = sum eta_t and S_w = sum eta_t u_w^t, iteration t is
    v_w = Pi_W(eta_w s_w),               v_z = prox(z_c, beta (C c + theta(S_w)))              (prediction)
    u_w = Pi_W(v_w - eta eta_w lam (v_w - w(v_z))),  u_z = prox(v_z, eta beta (c + theta(v_w)))  (correction)
    s_w -= eta lam (u_w - w(u_z)),  S_w += eta u_w,  C += eta
the memory-efficient form: the z-part of Nesterov's dual vector s is C c + theta(S_w) (theta is linear
in w), so the state is w-sized plus the averaged z, kept in the store as its blocks.

The step is adaptive, a backtracking on a local Lipschitz estimate (the Lipschitz constant L of
F is not known, and the safe 1/L of the theorem, step_size = 1, is hundreds of times too short on OCR): a try at eta is
accepted iff its term of the dual extrapolation bound is <= 0 (:meth:`DEGSolver.step_error`, which
needs the prediction v' at the new s, so a refused try costs its 2 prox passes, counted); a refused
try is redone at eta / 2, an accepted one lets the next iteration try 1.2 eta. The averages weigh
iteration t by eta_t, so the bound sum_t eta_t <F(u_t), u_t - x> <= D(x, x_0) holds and gives the
certificate.

Defaults, measured on OCR-small, 30 passes, gap check every 10, uniform sampling, seed 0 (records'
primal at about 10 / 20 / 30 passes, lam = 0.01 | lam = 1/n; P(0) = 1):
* the former fixed step (START_MARGIN 5, step 10, W_STEP 0.5): 5.70 at 10 passes | 35.1 at 10;
* fixed step, centre margin 10, step 100: 1.39 / 1.05 / 0.95 | 4.07 / 2.21 / 1.54; step 300 diverged
  at lam = 0.01 (10.1 at 20 passes);
* adaptive, margin 10, first step 500, W_STEP 0.15 (the defaults): 1.028 / 0.945 / 0.916 |
  0.953 / 0.761 / 0.726; first steps 300-2000 and W_STEP 0.1-0.5 gave 0.98-1.43 at the first record
  and 0.90-0.97 at 30 (lam = 0.01); margin 9 gave 0.962 / 0.867 / 0.845 | 1.380 / 0.721 / 0.626,
  margin 8 and 11-14 were worse at the first record; GROW 1.5 or 2 with first steps 50-300 and
  W_STEP 0.1-0.2 gave 0.947-1.386 (lam = 0.01) and 0.975-4.03 (1/n) at the first record, no setting
  below 1 at both (a first step that scales as 1 / (lam n), 80 at lam = 0.01 for 500 at 1/n: 1.015
  and 0.975 with GROW 1.5). Margins 9.25 / 9.4 / 9.5 / 9.6 / 9.75 (first step 500, GROW 1.2) gave
  1.005 / 1.010 / 0.973 / 0.982 / 0.998 | 1.130 / 1.001 / 0.962 / 1.060 / 0.976 at the first
  record: below 1 at both only at 9.5 and 9.75, a knife edge rather than a default (GROW 1.0 or 1.1
  at margins 9.5-10.5: 0.979-1.083 | 0.986-1.655). Traced per iteration (lam = 0.01, defaults) the current iterate u_w
  oscillates between primal 1.25 and 2.99 over the first 15 iterations, w(z_bar) between 0.89 and
  4.15, and the dual min L(w, z_bar) is 0.004 after 40 passes (P* ~ 0.165). The first records sit
  near P(0) because w(z) near the centre is an ascent direction from w = 0 (P(a w(z_c)) > 1 for
  every a tried, margins 8-14) and u_w moves towards it until z leaves the centre; later the
  bound's O(1/t) is slow against BCFW (primal 0.285 at 30 passes, lam = 0.01: DEG ignores the
  strong convexity in w that BCFW's steps use).

The method's guarantee is about the averaged iterate (w_bar, z_bar): its saddle-point gap
    P(w_bar) - min_{w in W} L(w, z_bar)  >=  P(w_bar) - P*
bounds the suboptimality of w_bar, and P(w) - min_{w in W} L(w, z_bar) bounds that of any primal point
w. The records' ``dual`` is min_{w in W} L(w, z_bar) (= D(z_bar) when ||w(z_bar)|| <= R), ``primal``
is the objective at the model point (the w model.pt holds): the best of w_bar, w(z_bar) and the
earlier checks' points, w = 0 at the start (:meth:`DEGSolver.check`), so that the model is never
worse than P(0) - the first records above sit near P(0) (1.028 at lam = 0.01 with the defaults).
``gap`` = primal - dual; ``primal_avg`` is P(w_bar), ``primal_z`` / ``gap_z`` the primal and the FW
duality gap at w(z_bar), ``primal_last`` the primal at the current iterate u_w. Each
try is 2 prox passes (2 effective passes: a marginal pass on chains, a projection of every example on
matchings); ``backtracks`` counts the refused tries.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..errors import check
from ..stores.optional_moves import RelaxedPasses
from .outer import OuterSolver

DEFAULT_STEP = 500.0        # the first try's z-step multiple (then adapted, see DEGSolver.iterate)
W_STEP = 0.15               # eta_w lam at eta = 1: the correction moves w 15% of the way to w(v_z)
GROW = 1.2                  # after an accepted iteration the next one first tries a GROW x longer step
SHRINK = 0.5                # a refused try is redone with a SHRINK x shorter step
MIN_ETA = 1e-8              # below this multiple of the first step a try is taken whatever the test says


class Point(NamedTuple):
    """A point (w, z) of the saddle problem with z's prox state and w(z) (solvers/deg.py)."""
    w: torch.Tensor
    z: object
    state: tuple
    w_z: torch.Tensor


class DEGSolver(OuterSolver):
    identity = OuterSolver.identity + ("step_size",)
    needs = (RelaxedPasses, "a relaxation and its prox (chains, matchings)")
    returns_best_check = False          # every record already carries the best point (check)

    def iterate_point(self):
        return self.best_w                  # the records' metrics are the model point's

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True, interrupt=None):
        super().__init__(dual, config, evaluate, progress, monitor_start, interrupt)
        d = dual
        step = config.step_size if config.step_size > 0 else DEFAULT_STEP
        self.eta_w, self.beta = W_STEP / d.lam, step * d.lam * d.N / d.prox_scale()   # the geometries' scales
        primal_0 = d.primal_at(torch.zeros_like(d.w))                               # P(0): the mean max loss
        self.radius = math.sqrt(2 * primal_0 / d.lam)
        self.c, self.center = d.relaxed_loss(), d.prox_center()
        self.s_w = torch.zeros_like(d.w)
        self.S_w = torch.zeros_like(d.w)                        # sum_t eta_t u_w^t
        self.w_bar = torch.zeros_like(d.w)
        self.w_last = torch.zeros_like(d.w)                     # the current iterate u_w
        self.t = 0
        self.eta = 1.0                                          # the next try's step multiple
        self.coef = 0.0                                         # sum_t eta_t of the accepted iterations
        self.backtracks = 0                                     # refused tries
        self.v: Point | None = None                             # the prediction at (s_w, coef, S_w)
        self.best_w = torch.zeros_like(d.w)                     # the model point: the best primal so far,
        self.best_primal, self.best_passes = primal_0, 0.0      # from w = 0 at the start (see check)

    def project(self, w: torch.Tensor) -> torch.Tensor:
        norm = float(w.norm())
        return w if norm <= self.radius else w * (self.radius / norm)

    def step(self, coef: float, S: torch.Tensor) -> tuple:
        """beta (coef c + theta(S)): a z step in parts."""
        return tuple(self.beta * (coef * c + th) for c, th in zip(self.c, self.dual.relaxed_scores(S)))

    def predict(self, s_w: torch.Tensor, coef: float, S_w: torch.Tensor) -> Point:
        """v = (Pi_W(eta_w s_w), prox(z_c, beta (coef c + theta(S_w)))): the maximiser of Nesterov's
        dual-averaging model at the dual vector s (one prox pass)."""
        d = self.dual
        v_z, state = d.prox(self.center, self.step(coef, S_w))
        return Point(self.project(self.eta_w * s_w), v_z, state, d.w_of_relaxed(v_z)[0])

    def divergence(self, a: Point, b: Point) -> tuple[float, float]:
        """D(a, b) = ||a_w - b_w||^2 / (2 eta_w) + D_z(a_z, b_z) / (beta n): the joint Bregman
        divergence whose prox steps of multiple eta are the solver's w and z steps; and the bound on
        its rounding error that the store reports for D_z."""
        dz, err = self.dual.relaxed_divergence(a.z, a.state, b.state)
        scale = self.beta * self.dual.N
        return float((a.w - b.w).pow(2).sum()) / (2 * self.eta_w) + dz / scale, err / scale

    def step_error(self, eta: float, v: Point, u: Point, v_next: Point) -> tuple[float, float]:
        """(e, tol): e = eta <F(u) - F(v), u - v'> - D(v', u) - D(u, v), the term of iteration t in
        the dual extrapolation bound sum_t eta_t <F(u_t), u_t - x> <= D(x, x_0) + sum_t e_t (the
        three-point inequality of the correction prox with x = v', plus the be-the-leader bound of
        the predictions, which are dual-averaging maximisers: sum_t eta_t <F(u_t), v_{t+1} - x> <=
        D(x, x_0) - sum_t D(v_{t+1}, v_t)). e <= tol (the rounding error of the terms) is the test of
        the adaptive step; eta <= 1/L (L the Lipschitz constant of F in the joint norm) guarantees
        it. With L(w, z) = lam/2 ||w||^2 - lam <w, w(z)> + ell(z), F = (lam (w - w(z)), -grad_z L)
        and the z part of the product is lam <u_w - v_w, w(u_z) - w(v'_z)>, so only w-sized vectors
        enter."""
        lam, dw = self.dual.lam, u.w - v.w
        lin = lam * (float(torch.dot(dw - (u.w_z - v.w_z), u.w - v_next.w)) + float(torch.dot(dw, u.w_z - v_next.w_z)))
        (d1, err1), (d2, err2) = self.divergence(v_next, u), self.divergence(u, v)
        return eta * lin - d1 - d2, err1 + err2 + 1e-12 * (abs(eta * lin) + d1 + d2)

    def iterate(self) -> None:
        """One iteration of Fig. 3 with the adaptive step: the correction u from the prediction v at
        the step multiple eta, the next prediction v' at s - eta F(u); if the bound's term
        (:meth:`step_error`) is positive the try is refused and redone at SHRINK eta (each try costs
        its 2 prox passes), an accepted one lets the next iteration try GROW eta. The averages weigh
        iteration t by eta_t, as the bound does."""
        d, lam = self.dual, self.dual.lam
        if self.v is None:        # set-up (the centre's marginals, like P(0) for R: not counted) or a resume
            self.v = self.predict(self.s_w, self.coef, self.S_w)
        v, eta = self.v, self.eta
        while True:
            u_w = self.project(v.w - eta * self.eta_w * lam * (v.w - v.w_z))
            u_z, u_state = d.prox(v.state, self.step(eta, eta * v.w))
            u = Point(u_w, u_z, u_state, d.w_of_relaxed(u_z)[0])
            s_w = self.s_w - eta * lam * (u.w - u.w_z)
            coef, S_w = self.coef + eta, self.S_w + eta * u.w
            v_next = self.predict(s_w, coef, S_w)
            self.state.oracle_calls += 2 * d.n
            err, tol = self.step_error(eta, v, u, v_next)
            if err <= tol or eta < MIN_ETA:
                break
            eta *= SHRINK
            self.backtracks += 1
        self.s_w, self.coef, self.S_w, self.v = s_w, coef, S_w, v_next
        self.t += 1
        self.eta = eta * GROW if eta == self.eta else eta
        self.w_bar.add_(u.w - self.w_bar, alpha=eta / coef)
        self.w_last.copy_(u.w)
        d.set_relaxed(u.z, gamma=eta / coef)                  # z_bar: the eta-weighted mean of the u_z

    def model_point(self):
        """(w, ell(z_bar)): the records' primal point (the best of the candidates so far, see
        :meth:`check`) and the loss of the averaged z."""
        return self.best_w, self.dual.ell

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

    def keep_best(self, primal: float, w: torch.Tensor) -> None:
        if primal < self.best_primal:
            self.best_primal, self.best_passes = primal, self.passes
            self.best_w.copy_(w)

    def check(self) -> dict:
        """The record of an exact check. The model point (``primal``, ``model.pt``'s w, the test error)
        is the best primal point the run has certified: the averaged iterate w_bar of the theorem,
        w(z_bar), or an earlier check's point (w = 0 at the start), whichever has the lowest
        objective (1). The method is not monotone (the averaged w moves towards w(z) of z near the
        prox centre first, an ascent direction from w = 0 on OCR: module docstring), and the gap stays
        a certificate for any primal point, so the model is never worse than one the run had;
        ``primal_avg`` (w_bar), ``primal_z`` and ``primal_last`` keep the raw trajectory and
        ``model_passes`` says when the model point was found."""
        d, lam = self.dual, self.dual.lam
        gp_z = self.exact_gap_pass()                               # at w(z_bar): its primal and FW gap
        primal_z, gap_z = d.primal(gp_z.H), float(gp_z.block_gaps.sum())
        inner = self.ball_dual(d.w, d.ell, lam, self.radius)
        primal_avg = d.primal_at(self.w_bar)
        self.keep_best(primal_avg, self.w_bar)
        self.keep_best(primal_z, d.w)
        primal = self.best_primal
        rec = self.record(gp_z, primal_z=primal_z, gap_z=gap_z, primal_last=d.primal_at(self.w_last),
                          primal_avg=primal_avg, model_passes=self.best_passes,
                          iterations=self.t, step_w=self.eta * self.eta_w, step_z=self.eta * self.beta,
                          backtracks=self.backtracks, geometry=d.geometry)
        rec.update(primal=primal, dual=inner, gap=primal - inner)
        return rec

    def extra_state(self) -> dict:
        return {"s_w": self.s_w.clone(), "S_w": self.S_w.clone(), "w_bar": self.w_bar.clone(),
                "w_last": self.w_last.clone(), "t": self.t, "eta": self.eta, "coef": self.coef,
                "backtracks": self.backtracks, "best_w": self.best_w.clone(), "best_primal": self.best_primal,
                "best_passes": self.best_passes}

    def load_extra_state(self, s: dict) -> None:
        keys = ("s_w", "S_w", "w_bar", "w_last", "t", "eta", "coef", "backtracks", "best_w", "best_primal",
                "best_passes")
        missing = sorted(set(keys) - set(s))
        check(not missing, "state", f"a DEG state of the adaptive step and the model point ({', '.join(keys)})",
              f"missing {missing}")
        for key in ("s_w", "S_w", "w_bar", "w_last", "best_w"):
            dst = getattr(self, key)
            check(tuple(s[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(s[key].shape))
            dst.copy_(s[key])
        self.t, self.eta, self.coef = int(s["t"]), float(s["eta"]), float(s["coef"])
        self.backtracks = int(s["backtracks"])
        self.best_primal, self.best_passes = float(s["best_primal"]), float(s["best_passes"])
        self.v = None                                         # recomputed from (s_w, coef, S_w)

