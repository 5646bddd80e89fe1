"""Numba kernel of one online-EG step on one block of the compact chain store (CPU, float64):
Collins, Globerson, Koo, Carreras & Bartlett, JMLR 2008, Fig. 2 (online EG) with the per-example
step halving of their Sec. 6, on the sufficient statistics documented in :mod:`ssvm_torch.stores.chain`.

One step does what the chain store's torch path of :meth:`~ssvm_torch.stores.optional_moves.MarginalMoves.eg_steps`
does with torch primitives (the reference it is tested against): the block's part scores theta_i(w), the
log-potential update theta_i + beta (theta_i(w) + c_i) (eq. (10)), the Gibbs marginals of the new
potentials, the exact dual change of moving block i there (a Gram form), and the move when the dual
does not decrease (else beta is halved and the step retried). The marginals are the chain package's
forward-backward (:mod:`ssvm_torch.chain.numba_fb`): the scaled recursion in probability space
(Rabiner's scaling: one exp per part instead of a logsumexp per transition), the log-space one when a
scaling constant under- or overflows (extreme potentials under tag constraints).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..chain.numba_fb import backward_row, exp_trans, forward_row, log_fb_row
from .chain_kernels import nb_block_unary, nb_delta_move, nb_delta_sqnorm


@nb.njit(cache=True, nogil=True)
def block_marginals(P, T, tf, tl, tt, pen, X, fa, fb, fc, v, mu, mt, pos, se, te, acc_se):
    """Marginals of one chain with log-potentials P (T, K) (first/last tf/tl (K,), transitions tt
    (K, K) [next, prev], ``pen`` the (K+2, K) constraint scores or empty) by the chain package's
    recursions (:mod:`ssvm_torch.chain.numba_fb`: the scaled one, the log-space one where its
    scaling fails): writes mu (T, K) and mt (K, K). ``pos`` = 0..T-1; the rest is scratch."""
    K = P.shape[1]
    has_pen = pen.shape[0] > 0
    for k in range(K):
        se[0, k] = tf[k] + (pen[K, k] if has_pen else 0.0)
        se[1, k] = tl[k] + (pen[K + 1, k] if has_pen else 0.0)
        acc_se[0, 0, k] = 0.0
        acc_se[0, 1, k] = 0.0
        for j in range(K):
            te[k, j] = tt[k, j] + (pen[k, j] if has_pen else 0.0)
            mt[k, j] = 0.0
    for t in range(T):
        for k in range(K):
            mu[t, k] = 0.0
    P3 = P.reshape((1, P.shape[0], K))
    mu3 = mu.reshape((1, mu.shape[0], K))
    mt3 = mt.reshape((1, K, K))
    tm = exp_trans(te, X)
    if np.isnan(forward_row(P3, 0, pos, T, se[0], se[1], X, tm, fa, fb, fc)):
        log_fb_row(P3, 0, pos, T, se[0], se[1], te, 1.0, mu3, acc_se, mt3, 0, fa, fb, v)
    else:
        backward_row(0, pos, T, se[1], X, fa, fb, fc, 1.0, mu3, acc_se, mt3, 0)


@nb.njit(cache=True, nogil=True)
def nb_eg_step(i, beta, tol, lam, N, tw_i, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt,
               th_u, th_f, th_l, th_t, pen, U, P, tf, tl, tt, E, fa, fb, fc, v, mu, mt, Du, Dt, ell_i, fb_work):
    """One online-EG step on block i starting from step coefficient ``beta`` (= eta / n). Returns
    (accepted, beta, tries, d_ell): the step taken (the dual changed by >= -tol) or refused after
    beta fell below 1e-12, the beta that was used (halved once per refused try), the number of
    marginal calls, and the change of ell = sum_i ell_i. On acceptance w, Mu, Mt, ell_i[i] and
    block i's log-potentials (th_u rows, th_f, th_l, th_t) move; nothing moves otherwise. ``Y`` enters the
    loss only: a negative label is unobserved and costs nothing (the latent SSVM, ssvm_torch/latent.py)."""
    s = off[i]
    T = off[i + 1] - s
    K = W.shape[0]
    pos, se, te, acc_se = fb_work
    nb_block_unary(i, fptr, fidx, fval, off, W, U)                   # theta_i(w): the part scores
    ell_old = ell_i[i]
    c_w = 1.0 / (lam * N)
    tries = 0
    accepted = False
    ell_new = ell_old
    while True:
        b = beta
        for t in range(T):
            y = Y[s + t]
            for k in range(K):
                P[t, k] = th_u[s + t, k] + b * (U[t, k] + (tw_i if k != y and y >= 0 else 0.0))
        for k in range(K):
            tf[k] = th_f[i, k] + b * first[k]
            tl[k] = th_l[i, k] + b * last[k]
            for j in range(K):
                tt[k, j] = th_t[i, k, j] + b * trans[k, j]
        block_marginals(P, T, tf, tl, tt, pen, E, fa, fb, fc, v, mu, mt, pos, se, te, acc_se)
        tries += 1
        right = 0.0
        seen = 0                                         # the observed positions: the loss counts those
        lin = 0.0
        for t in range(T):
            if Y[s + t] >= 0:
                right += mu[t, Y[s + t]]
                seen += 1
            for k in range(K):
                d = mu[t, k] - Mu[s + t, k]
                Du[t, k] = d
                lin += d * U[t, k]
        for k in range(K):
            lin += Du[0, k] * first[k] + Du[T - 1, k] * last[k]
            for j in range(K):
                d = mt[k, j] - Mt[i, k, j]
                Dt[k, j] = d
                lin += d * trans[k, j]
        ell_new = (seen - right) * tw_i / N
        sq = nb_delta_sqnorm(i, Du, Dt, off, G, goff) * c_w * c_w
        # dual change: d ell - lam <w, dw_i> - lam/2 |dw_i|^2 with lam <w, dw_i> = -<dM, theta_i(w)> / n
        gain = (ell_new - ell_old) + lin / N - 0.5 * lam * sq
        if gain >= -tol:
            accepted = True
            break
        beta = b / 2.0                                   # Collins et al. Sec. 6: halve and retry
        if b < 1e-12:                                    # no step raises the dual: the block stays
            break
    if not accepted:
        return False, beta, tries, 0.0
    nb_delta_move(i, -c_w, 1.0, Du, Dt, fptr, fidx, fval, off, W, first, last, trans, Mu, Mt,
                  False, 0.0, W, first, last, trans)
    for t in range(T):
        for k in range(K):
            th_u[s + t, k] = P[t, k]
    for k in range(K):
        th_f[i, k] = tf[k]
        th_l[i, k] = tl[k]
        for j in range(K):
            th_t[i, k, j] = tt[k, j]
    ell_i[i] = ell_new
    return True, beta, tries, ell_new - ell_old


@nb.njit(cache=True, nogil=True)
def nb_eg_steps(blocks, max_calls, beta, tol, lam, N, tw, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans,
                Mu, Mt, th_u, th_f, th_l, th_t, pen, U, P, tf, tl, tt, E, fa, fb, fc, v, mu, mt, Du, Dt, ell_i):
    """:func:`nb_eg_step` on ``blocks`` in order, each from its own beta[i] (updated in place), until
    ``max_calls`` marginal calls are spent. Returns (steps taken, marginal calls, steps accepted,
    the change of ell)."""
    K = W.shape[0]
    fb_work = (np.arange(P.shape[0]), np.empty((2, K)), np.empty((K, K)), np.empty((1, 2, K)))
    calls = 0
    steps = 0
    accepted = 0
    d_ell = 0.0
    while calls < max_calls and steps < blocks.shape[0]:
        i = blocks[steps]
        ok, b, tries, de = nb_eg_step(i, beta[i], tol, lam, N, tw[i], fptr, fidx, fval, off, Y, G, goff, W,
                                      first, last, trans, Mu, Mt, th_u, th_f, th_l, th_t, pen, U, P, tf, tl, tt,
                                      E, fa, fb, fc, v, mu, mt, Du, Dt, ell_i, fb_work)
        beta[i] = b
        calls += tries
        steps += 1
        if ok:
            accepted += 1
            d_ell += de
    return steps, calls, accepted, d_ell
