"""Online exponentiated gradient on the factored dual (Collins, Globerson, Koo, Carreras & Bartlett,
JMLR 2008, Fig. 2 "online EG"), chains only.

Block i's dual alpha_i is a Gibbs distribution over labelings, alpha_i(y) ~ exp <theta_i, S(y)>, kept
as its part-wise log-potentials theta_i (a (T_i, K) unary part, (K,) first / last parts and a
(K, K) transition part). The gradient of dual (3) w.r.t. alpha_i(y) is
    (L_i(y) - <w, psi_i(y)>) / n = <theta_i(w) + c_i, S(y)> / n + const
(:class:`~ssvm_torch.stores.optional_moves.MarginalMoves`), so the EG update alpha_i(y) <- alpha_i(y) exp(eta
grad) / Z is, in potentials, eq. (10) of Collins et al.:
    theta_i <- theta_i + beta_i (theta_i(w) + c_i),     beta_i = eta / n,
and the new dual point of the block is the marginals of theta_i (the chain marginal oracle,
:mod:`ssvm_torch.chain.ragged`), written into the store like any other block move. The
block's dual change is exact and cheap (a Gram form), so a step that would lower the dual is
refused and beta_i halved (the per-example rule of Collins et al., Sec. 6); every tried step is one
marginal call. On the CPU the whole step is one numba kernel
(:func:`~ssvm_torch.oracles.eg_kernels.nb_eg_step`); the torch path (any device) is its tested reference.

Start and step, measured on OCR-small at lam = 0.01, 30 passes (primal at 30; BCFW 0.285, P* ~ 0.165):

* ``eg_start="uniform"`` (theta_i = 0, Collins et al.'s uniform alpha_i): w = sum_i E_unif psi_i / (lam n)
  is far from the optimum at the regularizations of the FW papers (primal 2717 at the start, 2.77 at
  30 passes with step 10, 3.44 with step 100);
* theta_i = m S(y_i): most of alpha_i's mass on y_i. m = 5 (the former default, then shared with the
  dual extragradient's prox centre) leaves 14% of each position's mass on wrong labels: primal
  276 at the start, 0.708 at 30 passes (step 10); m = 10 starts at primal 2.76 with 0.1% of the mass
  wrong, and EG's multiplicative updates then need large steps to move it: 1.02 at step 10, 0.80 at
  300, 0.522 at 1000, 0.512 at 3000, 0.561 at 10000 (gap sampling); m = 13 and 16 end at 0.60-0.72.
  With uniform sampling, seeds 0-3, step 1000: m = 10 0.561 / 0.537 / 0.585 / 0.530 (mean 0.553),
  **m = 9 0.498 / 0.560 / 0.532 / 0.518 (mean 0.527)**, m = 8 0.534-0.651, m = 7 0.660-0.694; step 3000
  with m = 9: 0.507-0.580; gap sampling, seeds 0-2: m = 9 0.494 / 0.508 / 0.521, m = 10 0.532 /
  0.526 / 0.510. Per-example
  R_i instead of max_i R_i in the safe step, and growing beta_i after accepted steps (x1.05, x1.2,
  x1.5), made it worse (more refused tries, each a counted marginal call).

A fixed m does not carry to other problems: w(z_m) = sum_i psi_i(z_m) / (lam n) grows as 1/(lam n)
and with the feature scale. At lam = 1/n the start's primal is 34.3 with m = 9 on OCR-small, 374 on
OCR-large and 2,079 on CoNLL-2000; CoNLL-2000 after 6 passes: 8.48 from m = 9, 0.716 from 13, 1.29
from 16; OCR-large after 30: 1.80 from 9, 1.56 from 12; OCR-small (30 passes): 0.94-1.10 for m = 9-13.
The dual of the start, D(z_m), rises with m to a maximum near 0 (11 on OCR-small at 0.01, 13 at 1/n,
~18 on CoNLL) while the best EG runs start 2-5 below it, where D(z_m) is still within 1% of P(0) of
the FW start's 0 (OCR-small 0.01: D(z_9) = -0.0078, D(z_8) = -0.071; CoNLL: D(z_13) = -0.0034,
D(z_12) = -0.025). So the start is m = :func:`start_margin`: the smallest integer m whose dual is >=
-START_DUAL_DROP P(0), walked from EG_START_MARGIN = 9 (one marginal pass per m, set-up like DEG's
centre, not counted; the records keep ``start_margin`` and ``start_passes``).

The default initial beta is DEFAULT_STEP = 1000 times the safe value lam n / max_i R_i^2 of Collins
et al.'s convergence theorem (the dual is R_i^2 / (lam n^2)-smooth in alpha_i w.r.t. the l1 norm),
with R_i^2 >= max_y ||psi_i(y)||^2 bounded from the Gram matrices (the store's ``prox_scale``); the
halving rule keeps the steps that would lower the dual out.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import check
from ..stores.optional_moves import MarginalMoves
from .outer import OuterSolver


DEFAULT_STEP = 1000.0
EG_START_MARGIN = 9.0       # where the start search begins (DEG's prox centre: stores/chain_marginal.py)
START_DUAL_DROP = 0.01      # the start's dual may lie this fraction of P(0) below the FW family's start (dual 0)
MAX_START_MARGIN = 40.0     # the walk's upper end: m = 40 leaves ~e^-40 of a position's mass on wrong labels


def start_margin(dual) -> tuple[float, int]:
    """The margin m of EG's start theta_i = m S(y_i): the smallest integer m, searched from
    EG_START_MARGIN in steps of 1, whose dual (3) is >= -START_DUAL_DROP P(0), and the number of
    marginal passes the search took. EG's multiplicative steps need mass on the wrong labelings to
    move (a small m), while w(z_m) = sum_i psi_i(z_m) / (lam n) must stay near the FW family's start
    w = 0 (a large m); how much wrong mass is too much depends on lam n and the feature scale, so a
    fixed m cannot serve every problem (solvers/eg.py's module docstring has the figures). The dual
    grows with m up to its maximum, so the walk stops at the first m on the other side of the floor.
    It moves the store to the points it evaluates; the caller then sets the start it chose."""
    d = dual
    floor = -START_DUAL_DROP * d.primal_at(torch.zeros_like(d.w))
    passes = 0

    def above(m):
        nonlocal passes
        d.set_gibbs(d.gold_potentials(m))
        passes += 1
        return d.dual() >= floor

    m = EG_START_MARGIN
    if above(m):
        while m > 1 and above(m - 1):
            m -= 1
    else:
        while m < MAX_START_MARGIN:
            m += 1
            if above(m):
                break
    return m, passes


class EGSolver(OuterSolver):
    identity = OuterSolver.identity + ("step_size", "eg_start")
    needs = (MarginalMoves, "marginal moves (chains, dependency trees)")

    def __init__(self, dual, config, evaluate=None, progress=None, monitor_start=True, interrupt=None):
        super().__init__(dual, config, evaluate, progress, monitor_start, interrupt)
        d = dual
        self.start_margin, self.start_passes = start_margin(d) if config.eg_start == "margin" else (0.0, 0)
        self.theta = d.gold_potentials(self.start_margin)      # the blocks' log-potentials, named d.eg_theta_names
        self.c = d.loss_potentials()
        beta0 = (config.step_size if config.step_size > 0 else DEFAULT_STEP) * d.lam * d.N / d.prox_scale()
        self.beta = torch.full((d.n,), beta0, dtype=torch.float64)
        self.beta_np = self.beta.numpy()                 # the view the steps update in place
        self.refused = 0
        self.pending: list[int] = []                     # blocks drawn for steps not yet taken
        self.chunk = max(1, math.ceil(d.n / 10))
        d.set_gibbs(self.theta)           # margin start: alpha_i ~ delta(y_i), w ~ 0 where the FW family starts
        self.tol = self._tolerance()

    def _tolerance(self) -> float:
        """The dual decrease a step may make and still be taken (rounding), refreshed at every check."""
        return 1e-15 * max(1.0, abs(self.dual.dual()))

    def iterate(self) -> None:
        """Up to a tenth of a pass of online EG steps (marginal calls, refused tries included), cut at
        the interval's end: the blocks are drawn ahead (EG leaves the sampler's gaps alone between
        checks, so the draws do not depend on the steps); those a chunk leaves unused come first in
        the next one, so every drawn block gets its step in order."""
        budget = max(1, min(self.chunk, math.ceil(self.interval_end - self.state.oracle_calls)))
        fresh = [self.sampler.next() for _ in range(max(0, budget - len(self.pending)))]
        blocks = self.pending + fresh
        steps = self.steps_on(blocks, budget)
        self.pending = blocks[steps:]
        self.state.steps += steps - 1                    # the frame counts one per iterate()

    def step(self, i: int) -> None:
        """One EG step on block i (all its tries)."""
        self.steps_on([i], 1)

    def steps_on(self, blocks: list[int], max_calls: int) -> int:
        """EG steps on ``blocks`` in order until ``max_calls`` marginal calls are spent; returns the
        number of steps taken."""
        d, st = self.dual, self.state
        steps, calls, accepted = d.eg_steps(np.asarray(blocks, dtype=np.int64), self.theta, self.c, self.beta_np,
                                            self.tol, max_calls)
        self.refused += calls - accepted                 # tries that would have lowered the dual
        st.oracle_calls += calls
        st.passes_since_recompute += steps / d.n
        if st.passes_since_recompute >= self.cfg.recompute_every:
            d.recompute()
            st.passes_since_recompute = 0.0
        return steps

    def check(self) -> dict:
        self.tol = self._tolerance()
        gp = self.exact_gap_pass()
        return self.record(gp, step_size_mean=float(self.beta.mean()), refused_steps=self.refused,
                           start_margin=self.start_margin, start_passes=self.start_passes)

    def extra_state(self) -> dict:
        return {**{name: t.clone() for name, t in zip(self.dual.eg_theta_names, self.theta)},
                "beta": self.beta.clone(), "refused": self.refused, "pending": list(self.pending)}

    def load_extra_state(self, s: dict) -> None:
        for key, dst in [*zip(self.dual.eg_theta_names, self.theta), ("beta", self.beta)]:
            check(tuple(s[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(s[key].shape))
            dst.copy_(s[key])
        self.refused = int(s["refused"])
        self.pending = [int(i) for i in s.get("pending", [])]
        self.tol = self._tolerance()
