"""Block step rules: small objects the loop calls as ``rule.step(i, state)`` for block i.

They see the SSVM only through the store (:class:`~ssvm_torch.stores.base.BlockDual`), write the
block gap they computed into the sampler (which owns the gap estimates) and count into the loop's
:class:`~ssvm_torch.solvers.config.SolverState`.

* :class:`FWStep` -- BCFW, Alg. 1 of Osokin et al. 2016 (Alg. 3 of Lacoste-Julien et al. 2013):
  oracle, exact line search gamma = g_i / (lam ||w_i - w_s||^2) clipped to [0, 1], update.
* :class:`SSGStep` -- stochastic subgradient, w <- (1 - gamma) w + gamma psi_i(y*)/lam with
  gamma = 1/(k+1) (Shalev-Shwartz et al. 2011 in the form of Lacoste-Julien et al. 2013).
* :class:`SetStep` -- steps with a per-block working set of labelings: ``pairwise`` (BCPFW, Alg. 3:
  move mass gamma in [0, alpha(y_a)] from the away corner to the FW corner), ``away`` (BCAFW,
  Alg. 4: the FW step or an away step, whichever direction is steeper), ``best`` (the reference
  code's stepType 0: the best of the three by dual improvement), each with or without the gap-based
  cache of Alg. 5 (:mod:`.cache`).
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from ..errors import SSVMInputError, check
from ..stores.base import BlockDual, line_search, squared_norm
from .active_set import BlockSet, away_corner
from .cache import GapCache
from .config import SolverConfig, SolverState
from .samplers import Sampler


class StepRule:
    """A block step on ``dual``; ``step(i, state)`` takes one step on block i."""

    def __init__(self, dual: BlockDual, cfg: SolverConfig, sampler: Sampler):
        self.dual, self.cfg, self.sampler = dual, cfg, sampler

    def step(self, i: int, state: SolverState) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, s: dict) -> None:
        pass


class FWStep(StepRule):
    def step(self, i: int, st: SolverState) -> None:
        g, gamma = self.dual.fw_step(i)
        st.gamma_sum += gamma
        st.gamma_full += gamma >= 1.0
        st.gamma_n += 1
        self.sampler.update(i, g)
        st.oracle_calls += 1
        st.step_oracle_calls += 1


class MiniBatchStep(StepRule):
    """Mini-batch BCFW: ``step(batch, state)`` takes tau distinct blocks, decodes them in one batched
    oracle call and moves all of them along their joint FW direction dw = sum_i (w_s,i - w_i) with
    the exact line search of the quadratic dual, gamma = sum_i g_i / (lam ||dw||^2) clipped to [0, 1]
    (:class:`~ssvm_torch.stores.base.MiniBatchMoves`; the parallel analysis is Wang et al., ICML
    2016). tau = 1 takes BCFW's steps, tau = n batch FW's: a batch of every block of a store that
    holds them all runs as batch FW does (:meth:`full_step`: one gap pass and the dense corner point
    instead of tau block directions scattered into w)."""

    def step(self, batch: list[int], st: SolverState) -> None:
        d = self.dual
        if len(batch) == d.n and d.supports_block_steps and d.box() is None:
            self.full_step(batch, st)
        else:
            self.corners_step(batch, st)

    def corners_step(self, batch: list[int], st: SolverState) -> None:
        """The step on any tau distinct blocks from their batched corners."""
        d = self.dual
        corners = d.batch_corners(torch.as_tensor(batch, device=d.device))
        sq = corners.sqnorm if corners.dw is None else squared_norm(corners.dw)
        self._line_search(float(corners.gaps.sum()), sq,
                          lambda gamma: d.batch_move(corners, gamma), st)
        self._count(batch, to_host(corners.gaps), st)

    def full_step(self, batch: list[int], st: SolverState) -> None:
        """The step on all n blocks by batch FW's primitives (Alg. 2 of Lacoste-Julien et al. 2013):
        dw = w_s - w and sum_i g_i, the same line search (``tests/test_minibatch.py`` checks both
        paths against batch FW); the shadow follows w."""
        d = self.dual
        gp = d.gap_pass()
        w_s, ell_s = d.corner_point(gp)
        dw = w_s - d.w

        def move(gamma: float) -> None:
            d.move_all(gp, w_s, ell_s, gamma)
            if d.shadow is not None:
                d.shadow.add_(dw, alpha=gamma * d.shadow_coef)

        self._line_search(float(gp.block_gaps.sum()), squared_norm(dw), move, st)
        self._count(batch, to_host(gp.block_gaps)[np.asarray(batch, dtype=np.int64)], st)

    def _line_search(self, g: float, sq: float, move, st: SolverState) -> None:
        """gamma = g / (lam sq) clipped to [0, 1], applied by ``move(gamma)`` (no move when the
        direction is zero or not ascending)."""
        if sq > 0.0 and g > 0.0:
            gamma = g / (self.dual.lam * sq)
            if gamma >= 1.0:
                gamma = 1.0
                st.gamma_full += 1
            move(gamma)
            st.gamma_sum += gamma
        st.gamma_n += 1

    def _count(self, batch: list[int], gaps, st: SolverState) -> None:
        self.sampler.update_many(batch, gaps)
        st.oracle_calls += len(batch)
        st.step_oracle_calls += len(batch)


class SSGStep(StepRule):
    def step(self, i: int, st: SolverState) -> None:
        d = self.dual
        c = d.fw_corner(i)
        gamma = 1.0 / (st.steps + 1.0)
        d.w.mul_(1.0 - gamma)
        d.add_psi(i, c, gamma / d.lam)
        st.oracle_calls += 1
        st.step_oracle_calls += 1


class SetStep(StepRule):
    """FW corner from the cache or the oracle (Alg. 5), away corner from the active set, then a FW,
    pairwise (Alg. 3), away (Alg. 4) or best step. Owns the per-block working sets."""

    def __init__(self, dual: BlockDual, cfg: SolverConfig, sampler: Sampler, sets: list | None = None):
        super().__init__(dual, cfg, sampler)
        if sets is not None:                     # a warm start's decomposition (active_set.warm_sets)
            check(len(sets) == dual.n, "sets", f"one working set per block ({dual.n})", len(sets))
        elif cfg.step != "fw" and (dual.ell != 0.0 or bool(dual.w.any())):
            # the sets below say alpha_i = delta(y_i); on a moved store (a warm start) the away corners and the
            # pairwise moves would take mass the blocks do not hold, leaving the dual domain
            raise SSVMInputError(
                f"step: {cfg.step!r} keeps each block's point as a combination of labelings from alpha_i = "
                f"delta(y_i), but this store has already moved (w != 0 or ell = {dual.ell:.3g}: a warm start, e.g. "
                "a rescaled or already trained store) and no working sets were given (Solver's ``sets``: a warm "
                "start's, solvers/active_set.warm_sets); use step 'fw' (with or without the cache) or a fresh store")
        self.cache = GapCache(cfg) if cfg.cache else None
        self.sets = sets if sets is not None else [BlockSet(dual.gt_labeling(i), dual.key(dual.gt_labeling(i)), 0.0)
                                                   for i in range(dual.n)]

    def state_dict(self) -> dict:
        return {"sets": self.sets}

    def load_state_dict(self, s: dict) -> None:
        self.sets = s["sets"]

    def step(self, i: int, st: SolverState) -> None:
        d, cfg = self.dual, self.cfg
        bs = self.sets[i]
        gaps, corner, fw, hit = None, None, None, False
        if self.cache is not None:
            corner, fw, gaps = self.cache.lookup(d, i, bs, self.sampler.gaps[i], st, with_sqnorm=cfg.step == "best")
            hit = corner is not None
        if corner is None:
            corner = d.fw_corner(i)
            st.oracle_calls += 1
            st.step_oracle_calls += 1
            self.sampler.update(i, corner.gap)
            fw = bs.add(corner.labels, d.key(corner.labels), corner.loss, corner.gap)
            if gaps is not None and fw == len(gaps):
                gaps = np.append(gaps, corner.gap)
        if cfg.step != "fw" and (gaps is None or len(gaps) != len(bs)):
            gaps = d.corner_gaps(i, bs.matrix())
        st.gamma_n += 1
        if cfg.step == "best":
            self._best_step(i, bs, corner, fw, gaps, st)
        else:
            self._one_direction(i, bs, corner, fw, hit, gaps, st)
        self._trim(bs, fw, st)

    def _one_direction(self, i, bs, corner, fw, hit, gaps, st):
        """FW, pairwise (Alg. 3) and away (Alg. 4) steps: one direction, chosen before any norm, and the store's
        line search and move along it (``pairwise_step``: a store may build the direction once for both). The FW
        direction of an oracle corner uses the norm the oracle returned with it."""
        d, step = self.dual, self.cfg.step
        g_fw, kind, a = corner.gap, "fw", None
        if step != "fw":
            a, g_min = away_corner(gaps, bs.alpha, 1.0 / d.N)
            g_away, alpha_a = -g_min, bs.alpha[a]                # <-grad, x_i - v_a> >= 0
            if step == "pairwise":
                kind = "pairwise" if a != fw else None
            elif len(bs.active()) > 1 and alpha_a < 1.0 and g_away > g_fw:   # Alg. 4: the steeper direction
                kind = "away"
        if kind == "pairwise":
            gam = d.pairwise_step(i, bs.labels[fw], bs.labels[a], bs.loss[fw], bs.loss[a], g_fw + g_away, alpha_a)
        elif kind == "away":
            gam = d.pairwise_step(i, None, bs.labels[a], float(d.ell_i[i]), bs.loss[a], g_away,
                                  alpha_a / (1.0 - alpha_a))
        elif kind == "fw" and hit:
            gam = d.pairwise_step(i, corner.labels, None, corner.loss, float(d.ell_i[i]), g_fw, 1.0)
        elif kind == "fw":
            gam, gain = line_search(g_fw, corner.sqnorm, 1.0, d.lam)
            if gam > 0.0 and gain > 0.0:
                d.fw_move(i, corner, gam)
            else:
                gam = 0.0
        else:
            return
        if gam > 0.0:
            self._weights(bs, kind, gam, fw, a, st)
            st.gamma_sum += gam
            st.gamma_full += kind == "fw" and gam >= 1.0

    def _best_step(self, i, bs, corner, fw, gaps, st):
        """The reference code's stepType 0: of the FW, pairwise and away steps the one that improves the dual's
        quadratic model most (ties: FW, then pairwise)."""
        d, lam = self.dual, self.dual.lam
        g_fw = corner.gap
        cands = [(*line_search(g_fw, corner.sqnorm, 1.0, lam), "fw")]       # (gamma, gain, kind)
        a, g_min = away_corner(gaps, bs.alpha, 1.0 / d.N)
        g_away, alpha_a = -g_min, bs.alpha[a]
        if a != fw:
            sq = d.pair_sqnorm(i, bs.labels[fw], bs.labels[a])
            cands.append((*line_search(g_fw + g_away, sq, alpha_a, lam), "pairwise"))
        if len(bs.active()) > 1 and alpha_a < 1.0:
            sq = d.pair_sqnorm(i, None, bs.labels[a])
            cands.append((*line_search(g_away, sq, alpha_a / (1.0 - alpha_a), lam), "away"))
        gam, imp, kind = max(cands, key=lambda c: c[1])         # ties: first listed (FW) wins
        if gam > 0.0 and imp > 0.0:
            self._apply(i, bs, kind, gam, corner, fw, a, st)
            st.gamma_sum += gam
            st.gamma_full += kind == "fw" and gam >= 1.0

    def _apply(self, i, bs, kind, gam, corner, fw, a, st):
        d = self.dual
        if kind == "fw":
            d.fw_move(i, corner, gam)
        elif kind == "pairwise":
            d.pair_move(i, bs.labels[fw], bs.labels[a], bs.loss[fw], bs.loss[a], gam)
        else:
            d.pair_move(i, None, bs.labels[a], float(d.ell_i[i]), bs.loss[a], gam)
        self._weights(bs, kind, gam, fw, a, st)

    @staticmethod
    def _weights(bs, kind, gam, fw, a, st):
        """The working set's alpha after a step of ``kind`` with gamma (a drop step when it empties an entry):
        FW alpha <- (1 - gamma) alpha + gamma delta(y_fw); pairwise alpha(y_fw) += gamma, alpha(y_a) -= gamma;
        away alpha <- (1 + gamma) alpha - gamma delta(y_a)."""
        if kind == "fw":
            st.fw_steps += 1
            if gam >= 1.0:
                bs.alpha = [0.0] * len(bs)
                bs.alpha[fw] = 1.0
                st.drop_steps += 1
            else:
                bs.alpha = [(1.0 - gam) * x for x in bs.alpha]
                bs.alpha[fw] += gam
        elif kind == "pairwise":
            st.pairwise_steps += 1
            bs.alpha[fw] += gam
            if gam >= bs.alpha[a]:
                bs.alpha[a] = 0.0
                st.drop_steps += 1
            else:
                bs.alpha[a] -= gam
        else:
            alpha_a = bs.alpha[a]
            st.away_steps += 1
            bs.alpha = [(1.0 + gam) * x for x in bs.alpha]
            if gam >= alpha_a / (1.0 - alpha_a):
                bs.alpha[a] = 0.0
                st.drop_steps += 1
            else:
                bs.alpha[a] -= gam

    def _trim(self, bs, fw, st):
        """Without a cache the set is the active set: drop the zero-weight corners."""
        if self.cache is not None:
            self.cache.trim(bs, fw, st)
            return
        drop = {j for j, x in enumerate(bs.alpha) if x <= 0.0}
        if drop:
            bs.remove(drop)


def make_step_rule(dual: BlockDual, cfg: SolverConfig, sampler: Sampler, sets: list | None = None) -> StepRule | None:
    """The block step rule of ``cfg`` (None for batch FW, which has no block steps); ``sets``: the working sets a
    warm start continues from (pairwise / away steps and the cache)."""
    if cfg.solver == "fw":
        return None
    if cfg.solver == "ssg":
        return SSGStep(dual, cfg, sampler)
    if cfg.batch_size > 1 or not dual.supports_block_steps:
        return MiniBatchStep(dual, cfg, sampler)
    return SetStep(dual, cfg, sampler, sets) if cfg.uses_sets else FWStep(dual, cfg, sampler)
