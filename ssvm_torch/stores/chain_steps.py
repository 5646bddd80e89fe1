"""The compact chain store's block steps as single compiled calls on its numba path (a part of
:class:`~ssvm_torch.stores.chain.ChainDual`, as :mod:`.chain_torch` and :mod:`.chain_marginal` are): BCFW's step
(``BlockMoves.fw_step``: oracle, line search and move, the move along the direction the oracle built for its norm)
and the pairwise / away / FW step between two points of a block (``ActiveSetMoves.pairwise_step``: the direction
built once for its norm and its move). Each leaves the store bit for bit where the generic step does
(``tests/test_set_steps.py``); the torch path and marginal points take the generic steps."""
from __future__ import annotations

import numpy as np

from ..oracles.chain_step_kernels import nb_fw_step, nb_pairwise_step


class ChainCompiledSteps:
    """fw_step and pairwise_step of :class:`~ssvm_torch.stores.chain.ChainDual` (its host views ``_np``,
    ``_np_loss``, ``_np_ell``, ``_work`` and the argument lists ``_pair_views``)."""

    def fw_step(self, i: int) -> tuple[float, float]:
        """BlockMoves.fw_step in one compiled call (oracle, line search, move)."""
        if not self._numba:
            return super().fw_step(i)
        T = int(self._np[3][i + 1] - self._np[3][i])
        return nb_fw_step(i, self._tw[i], self.lam, self.N, *self._np_ell, *self._np_loss, *self._work,
                          np.empty(T, dtype=np.int64), self.model.pen_host, *self._shadow())

    def pairwise_step(self, i: int, P, Q, loss_P: float, loss_Q: float, g: float, cap: float) -> float:
        """ActiveSetMoves.pairwise_step in one compiled call (the direction built once, not for the norm and again
        for the move)."""
        if not (self._numba and (P is None or isinstance(P, np.ndarray)) and (Q is None or isinstance(Q, np.ndarray))):
            return super().pairwise_step(i, P, Q, loss_P, loss_Q, g, cap)
        none = self._no_labels
        gamma = nb_pairwise_step(i, P is None, none if P is None else P, Q is None, none if Q is None else Q, g, cap,
                                 self.lam, self.N, (self.lam * self.N) ** 2, *self._pair_views, *self._shadow())
        if gamma > 0.0:
            ell_i, ell = self._np_ell
            ell_i[i] += gamma * (loss_P - loss_Q)
            ell[0] += gamma * (loss_P - loss_Q)
        return gamma

    def _shadow(self) -> tuple:
        """The numba move kernels' shadow arguments: (on, coefficient, its W, first, last, trans views)."""
        if self.shadow is None:
            return False, 0.0, *self._np[7:11]
        if getattr(self, "_shadow_views", (None,))[0] is not self.shadow:    # split once per shadow vector
            self._shadow_views = (self.shadow, *(t.numpy() for t in self.model.split(self.shadow)))
        return True, float(self.shadow_coef), *self._shadow_views[1:]
