"""The chain store's block steps as single compiled calls (:class:`~ssvm_torch.stores.chain_steps.ChainCompiledSteps`):
BCFW's step (oracle, line search, move) and the pairwise / away / FW step between two points of a block. They
compose the kernels of :mod:`.chain_kernels` and are not fastmath themselves: the step's scalar arithmetic is
the generic Python step's (``BlockMoves.fw_step``, ``ActiveSetMoves.pairwise_step``), float for float."""
from __future__ import annotations

import numba as nb

from .chain_kernels import nb_build_delta, nb_delta_move, nb_delta_sqnorm, nb_fw_corner


@nb.njit(cache=True, nogil=True)
def nb_fw_step(i, lw, lam, N, ell_i, ell, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt, U, delta,
               newd, bp, Du, Dt, ys, pen, sh_on, sh_c, SW, Sfirst, Slast, Strans):
    """BCFW's block step in one call (``BlockMoves.fw_step``): :func:`nb_fw_corner`, the exact line search clipped to
    [0, 1] and the move along the direction the oracle left in Du, Dt. Not fastmath: the corner's terms and gamma are
    the generic step's arithmetic, float for float. Returns (g_i, gamma) (gamma 0.0: no move)."""
    loss, dot, sq = nb_fw_corner(i, lw, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt, U, delta,
                                 newd, bp, Du, Dt, ys, pen)
    inv_lamn = 1.0 / (lam * N)
    loss = loss / N
    sqnorm = sq * inv_lamn * inv_lamn
    e = ell_i[i]
    g = dot / N - e + loss
    if sqnorm > 0.0 and g > 0.0:
        gamma = min(g / (lam * sqnorm), 1.0)
        nb_delta_move(i, -gamma / (lam * N), gamma, Du, Dt, fptr, fidx, fval, off, W, first, last, trans, Mu, Mt,
                      sh_on, sh_c, SW, Sfirst, Slast, Strans)
        ell_i[i] += gamma * (loss - e)
        ell[0] += gamma * (loss - e)
        return g, gamma
    return g, 0.0


@nb.njit(cache=True, nogil=True)
def nb_pairwise_step(i, p_cur, P, q_cur, Q, g, cap, lam, N, lamN2, Du, Dt, fptr, fidx, fval, off, G, goff, W, first,
                     last, trans, Mu, Mt, sh_on, sh_c, SW, Sfirst, Slast, Strans):
    """The line search and move of a step on block i from Q towards P (``BlockDual.pairwise_step``: pairwise, away
    and FW directions; each point a labeling or, ``*_cur``, the block's current point) with one direction
    D = S(P) - S(Q) for both its norm and its move; ``lamN2`` = (lam N)^2. Not fastmath: gamma's arithmetic is the
    generic step's, float for float. Returns gamma (0.0: no move)."""
    nb_build_delta(i, p_cur, P, q_cur, Q, off, Mu, Mt, Du, Dt)
    sq = nb_delta_sqnorm(i, Du, Dt, off, G, goff) / lamN2
    gamma = min(g / (lam * sq), cap) if sq > 0 and g > 0 else 0.0
    if gamma > 0.0 and gamma * g - 0.5 * lam * gamma * gamma * sq > 0.0:
        nb_delta_move(i, -gamma / (lam * N), gamma, Du, Dt, fptr, fidx, fval, off, W, first, last, trans, Mu, Mt,
                      sh_on, sh_c, SW, Sfirst, Slast, Strans)
        return gamma
    return 0.0
