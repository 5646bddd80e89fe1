"""Gap-based caching of FW corners (Osokin et al. 2016, Alg. 5).

Every block keeps a working set of labelings (:class:`~ssvm_torch.solvers.active_set.BlockSet`):
its active set (alpha > 0) plus zero-weight entries up to ``max_cache``. Before calling the oracle,
the step evaluates the block gap of every cached corner; the best one replaces the oracle iff
    g_hat >= max(F g_i, nu / n g)
with g_i the block's last oracle gap (the sampler's estimate) and g the last exact global gap, so
no hit happens before the first gap check. Cache hits are not oracle calls and do not refresh g_i.
"""
from __future__ import annotations

import math

from ..stores.base import ActiveSetMoves, Corner
from .active_set import BlockSet, first_best
from .config import SolverConfig, SolverState


class GapCache:
    def __init__(self, cfg: SolverConfig):
        self.F, self.nu, self.max_cache, self.step = cfg.cache_F, cfg.cache_nu, cfg.max_cache, cfg.step

    def lookup(self, store: ActiveSetMoves, i: int, bs: BlockSet, g_i: float, st: SolverState,
               with_sqnorm: bool = True):
        """(corner, its index in ``bs``, the gaps of every entry): the best cached corner if it
        passes the test of Alg. 5, else (None, None, gaps). Without ``with_sqnorm`` the corner's
        ``sqnorm`` (||w_i - w_s||^2, the FW direction's) is NaN, not computed: a pairwise step moves
        along v_fw - v_away and never uses it."""
        gaps = store.corner_gaps(i, bs.matrix())
        j = first_best(gaps, 1.0 / store.N)
        g_hat = float(gaps[j])
        # F = 0 or nu = 0 switches a criterion off (F * inf would be NaN for unvisited blocks)
        local = self.F * g_i if self.F > 0 else 0.0
        glob = self.nu * st.last_gap / store.n if self.nu > 0 else 0.0
        if g_hat >= max(local, glob) and g_hat > 0.0:
            st.cache_hits += 1
            y = bs.labels[j]
            sq = store.pair_sqnorm(i, y, None) if with_sqnorm else math.nan
            return Corner(y, bs.loss[j], 0.0, sq, g_hat), j, gaps
        return None, None, gaps

    def trim(self, bs: BlockSet, fw: int, st: SolverState) -> None:
        """Evict the lowest-scoring zero-weight entries beyond ``max_cache``; FW steps need no active
        set, so they may evict any entry but the current corner, while pairwise / away steps let the
        cache grow by 20% rather than drop an active corner."""
        limit = max(st.cache_limit, self.max_cache)
        if not bs.evict(limit, protect={fw}):
            if self.step == "fw":
                order = sorted((bs.score[j], j) for j in range(len(bs)) if j != fw)
                bs.remove({j for _, j in order[:len(bs) - limit]})
            else:
                st.cache_limit = int(math.ceil(1.2 * limit))
