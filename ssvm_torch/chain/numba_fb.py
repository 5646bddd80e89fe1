"""The numba forward-backward recursions of the chain package (CPU, float64 accumulation): the one
sum-product recursion that every compiled marginal / log-partition kernel runs -- the CRF loss and
marginals of the layer (:mod:`ssvm_torch.chain.numba_masked`), the ragged marginals of the
marginal-based dual solvers (:mod:`ssvm_torch.chain.ragged`) and the online-EG step
(:mod:`ssvm_torch.oracles.eg_kernels`). Conventions in :mod:`ssvm_torch.chain`:

    s(y) = start[y_0] + sum_s E[pos_s, y_s] + sum_{s>=1} trans[y_s, y_{s-1}] + end[y_{L-1}],

a row being the positions ``pos[0..L-1]`` of row ``b`` of a (B, T, K) array (a padded batch under a
mask, or ragged rows seen as one (1, M, K) array). ``start``/``end``/``trans`` already hold any
constraint penalties (-inf = forbidden).

* :func:`forward_row` / :func:`backward_row` -- the scaled recursion (Rabiner 1989, Sec. V.A): one
  K x K multiply-add per position and K exponentials instead of K^2 in log space; the backward pass
  adds g_b times the marginals (label marginals, first / last label marginals, expected transition
  counts) to caller-owned buffers, i.e. the gradient of g_b log Z_b, so nothing of size (B, T, K, K)
  exists.
* :func:`log_fb_row` -- the same quantities by the log-space recursion, for potentials whose
  scaling constants under- or overflow (spreads beyond float64's exponent range).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched

# A normalizer below this leaves the scaled recursion without full precision: a term it drops (an
# exponential that underflowed, < 1e-308) could be more than 1e-58 of the total only below it. The
# log-space recursion takes over there (the exact marginals of potentials with spreads beyond
# float64's exponent range, e.g. the dual extragradient's prox steps).
SCALED_MIN = 1e-250


@nb.njit(cache=True, nogil=True)
def exp_trans(trans, X):
    """X = exp(trans - m) with m the largest finite entry (0 if there is none); returns m."""
    K = trans.shape[0]
    m = -np.inf
    for a in range(K):
        for c in range(K):
            if trans[a, c] > m:
                m = trans[a, c]
    if m == -np.inf:
        m = 0.0
    for a in range(K):
        for c in range(K):
            X[a, c] = np.exp(trans[a, c] - m)
    return m


@nb.njit(cache=True, nogil=True)
def forward_row(E, b, pos, L, start, end, X, tm, A, P, c):
    """Scaled forward pass of one row: A[s] the normalized forward vector, P[s, k] =
    exp(E[s, k] - max_k E[s]) (with the start scores at s = 0), c[s] the normalizers, c[L] the
    end's. Returns log Z, or nan when a normalizer is below :data:`SCALED_MIN` or not finite (no
    allowed path, or a spread the scaling cannot hold: :func:`log_fb_row` then)."""
    K = E.shape[2]
    logz = 0.0
    for s in range(L):
        t = pos[s]
        m = -np.inf
        for k in range(K):
            v = E[b, t, k] + (start[k] if s == 0 else 0.0)
            if v > m:
                m = v
        if m == -np.inf:
            return np.nan
        tot = 0.0
        for k in range(K):
            p = np.exp(E[b, t, k] + (start[k] if s == 0 else 0.0) - m)
            P[s, k] = p
            if s == 0:
                A[0, k] = p
            else:
                acc = 0.0
                for j in range(K):
                    acc += X[k, j] * A[s - 1, j]
                A[s, k] = p * acc
            tot += A[s, k]
        if not (tot > SCALED_MIN and tot < np.inf):
            return np.nan
        for k in range(K):
            A[s, k] /= tot
        c[s] = tot
        logz += np.log(tot) + m + (tm if s > 0 else 0.0)
    m = -np.inf
    for k in range(K):
        if end[k] > m:
            m = end[k]
    tot = 0.0
    for k in range(K):
        tot += A[L - 1, k] * np.exp(end[k] - m)
    if not (tot > SCALED_MIN and tot < np.inf):
        return np.nan
    c[L] = tot
    return logz + np.log(tot) + m


# inlined into its callers (numba IR), with its scratch allocated here and the accumulators indexed
# by ``ch``: as a called function, or with scratch and accumulator views passed in, the K x K loop ran
# ~20% slower (LLVM cannot rule out aliasing between arguments)
@nb.njit(cache=True, nogil=True, inline="always")
def backward_row(b, pos, L, end, X, A, P, c, gb, gE, acc_se, acc_t, ch):
    """Scaled backward pass after :func:`forward_row`: adds gb p(y_s = k) to gE[b, pos[s], k],
    gb times the first / last label marginals to acc_se[ch, 0] / acc_se[ch, 1] and gb times the
    expected transition counts to acc_t[ch] [next, prev]."""
    K = X.shape[0]
    beta = np.empty(K)
    nxt = np.empty(K)
    me = -np.inf
    for k in range(K):
        if end[k] > me:
            me = end[k]
    for k in range(K):
        beta[k] = np.exp(end[k] - me) / c[L]
    for s in range(L - 1, -1, -1):
        for k in range(K):
            mk = A[s, k] * beta[k]
            gE[b, pos[s], k] += gb * mk
            if s == L - 1:
                acc_se[ch, 1, k] += gb * mk
            if s == 0:
                acc_se[ch, 0, k] += gb * mk
        if s == 0:
            break
        # xi[k, j] = A[s-1, j] X[k, j] P[s, k] beta_s[k] / c_s; beta_{s-1}[j] = sum_k X[k, j] P[s, k] beta_s[k] / c_s
        for k in range(K):
            nxt[k] = P[s, k] * beta[k] / c[s]
        for j in range(K):
            beta[j] = 0.0
        for k in range(K):
            nk = nxt[k]
            for j in range(K):
                w = X[k, j] * nk
                beta[j] += w
                acc_t[ch, k, j] += gb * A[s - 1, j] * w


@nb.njit(cache=True, nogil=True)
def log_sum_exp(v, K):
    """log sum_k exp v[k] of the first K entries (-inf when all are -inf), shifted by their largest."""
    m = -np.inf
    for k in range(K):
        if v[k] > m:
            m = v[k]
    if m == -np.inf:
        return m
    acc = 0.0
    for k in range(K):
        acc += np.exp(v[k] - m)
    return m + np.log(acc)


@nb.njit(cache=True, nogil=True)
def log_fb_row(E, b, pos, L, start, end, trans, gb, gE, acc_se, acc_t, ch, fa, fb, v):
    """:func:`forward_row` + :func:`backward_row` in log space (any finite or -inf scores): returns
    log Z and adds gb times the marginals to the same buffers (row ``ch`` of the accumulators); returns
    nan and adds nothing when no labeling has a finite score (no allowed path). ``fa``/``fb`` (>= L, K)
    and ``v`` (K,) are scratch."""
    K = E.shape[2]
    for k in range(K):
        fa[0, k] = E[b, pos[0], k] + start[k]
    for s in range(1, L):
        for k in range(K):
            for j in range(K):
                v[j] = fa[s - 1, j] + trans[k, j]
            fa[s, k] = E[b, pos[s], k] + log_sum_exp(v, K)
    for k in range(K):
        fb[L - 1, k] = end[k]
    for s in range(L - 2, -1, -1):
        for j in range(K):
            for k in range(K):
                v[k] = trans[k, j] + E[b, pos[s + 1], k] + fb[s + 1, k]
            fb[s, j] = log_sum_exp(v, K)
    for k in range(K):
        v[k] = fa[L - 1, k] + fb[L - 1, k]
    z = log_sum_exp(v, K)
    if not np.isfinite(z):
        return np.nan
    if gb == 0.0:
        return z
    for s in range(L):
        for k in range(K):
            mk = np.exp(fa[s, k] + fb[s, k] - z)
            gE[b, pos[s], k] += gb * mk
            if s == 0:
                acc_se[ch, 0, k] += gb * mk
            if s == L - 1:
                acc_se[ch, 1, k] += gb * mk
    for s in range(1, L):
        for k in range(K):
            for j in range(K):
                acc_t[ch, k, j] += gb * np.exp(fa[s - 1, j] + trans[k, j] + E[b, pos[s], k] + fb[s, k] - z)
    return z


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_ragged_marginals(U, offsets, first, last, trans, Mu, Mt, logZ):
    """Marginals of ragged chains (rows offsets[b]:offsets[b+1] of U (M, K)), scores per sequence:
    first/last (B, K), trans (B, K, K) [next, prev]. Writes the label marginals Mu (M, K), the
    expected transition counts Mt (B, K, K) and log Z (B,): the scaled recursion, the log-space one
    where its scaling fails."""
    B = offsets.shape[0] - 1
    K = U.shape[1]
    U3 = U.reshape((1, U.shape[0], K))
    Mu3 = Mu.reshape((1, Mu.shape[0], K))
    acc_se = np.zeros((B, 2, K))                      # first / last label marginals: not returned
    for b in nb.prange(B):
        s0, e0 = offsets[b], offsets[b + 1]
        L = e0 - s0
        pos = np.arange(s0, e0)
        for t in range(s0, e0):
            for k in range(K):
                Mu[t, k] = 0.0
        for k in range(K):
            for j in range(K):
                Mt[b, k, j] = 0.0
        X = np.empty((K, K))
        A, P, c = np.empty((L, K)), np.empty((L, K)), np.empty(L + 1)
        tm = exp_trans(trans[b], X)
        z = forward_row(U3, 0, pos, L, first[b], last[b], X, tm, A, P, c)
        if np.isnan(z):
            z = log_fb_row(U3, 0, pos, L, first[b], last[b], trans[b], 1.0, Mu3, acc_se, Mt, b, A, P, np.empty(K))
        else:
            backward_row(0, pos, L, last[b], X, A, P, c, 1.0, Mu3, acc_se, Mt, b)
        logZ[b] = z
