"""The compiled entropy of a chain CRF and its gradient (CPU float32/float64, float64 accumulation, log space):
the numba backend of :func:`ssvm_torch.chain.ops.information` without a second chain. Conventions in
:mod:`ssvm_torch.chain`; ``start``/``end``/``trans`` hold the constraint penalties (-inf = forbidden).

Per row, forward: the log messages a_i(k), the backward conditionals w_i(j | k) = exp(a_{i-1}(j) + trans[k, j]
- lse_j), the prefix entropies H_i(k) = sum_j w (H_{i-1}(j) - log w) (the value, as the torch recursion of
:mod:`ssvm_torch.chain.information`) and the expected prefix scores F_i(k) = E[s(y_0..y_i) | y_i = k]. The
gradient is dH/dtheta_f = -Cov_p(phi_f, s(y)) (H = log Z - E_p[s(y)], whose derivative is E_p[phi_f] -
E_p[phi_f] - Cov_p(phi_f, s)), and each feature's covariance is p(f) (E[s | f] - E[s]) with E[s | y_i = k] =
F_i(k) + G_i(k), G_i(k) = E[s(y_{i+1}..) | y_i = k] by the backward recursion: one forward and one backward pass,
nothing of size (B, T, K, K).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .numba_masked import masked_positions


@nb.njit(cache=True, nogil=True, inline="always")
def _lse_weights(z, K, out):
    """log sum exp of z[:K] (-inf when every entry is); out[j] = exp(z[j] - lse) (0 where z[j] = -inf)."""
    m = -np.inf
    for j in range(K):
        if z[j] > m:
            m = z[j]
    if m == -np.inf:
        for j in range(K):
            out[j] = 0.0
        return -np.inf
    total = 0.0
    for j in range(K):
        out[j] = np.exp(z[j] - m)
        total += out[j]
    for j in range(K):
        out[j] /= total
    return m + np.log(total)


@nb.njit(cache=True, nogil=True)
def _forward(E, b, pos, L, start, end, trans, a, F, z, w):
    """Forward pass of one row into a, F (L, K); returns (entropy, log Z), nan without an allowed path."""
    K = E.shape[2]
    H = np.zeros(K)
    Hn = np.empty(K)
    for k in range(K):
        a[0, k] = start[k] + E[b, pos[0], k]
        F[0, k] = a[0, k]
    for i in range(1, L):
        u = pos[i]
        for k in range(K):
            for j in range(K):
                z[j] = a[i - 1, j] + trans[k, j]
            lse = _lse_weights(z, K, w)
            h, f = 0.0, 0.0
            for j in range(K):
                if w[j] > 0.0:
                    h += w[j] * (H[j] - (z[j] - lse))
                    f += w[j] * (F[i - 1, j] + trans[k, j])
            Hn[k] = h
            a[i, k] = lse + E[b, u, k]
            F[i, k] = f + E[b, u, k]
        for k in range(K):
            H[k] = Hn[k]
    for k in range(K):
        z[k] = a[L - 1, k] + end[k]
    logz = _lse_weights(z, K, w)
    if logz == -np.inf:
        return np.nan, np.nan
    h = 0.0
    for k in range(K):
        if w[k] > 0.0:
            h += w[k] * (H[k] - (z[k] - logz))
    return h, logz


@nb.njit(cache=True, nogil=True)
def _backward(E, b, pos, L, start, end, trans, a, F, logz, g, gE, gse, gt, beta, G, z, v):
    """g times the entropy's gradient of one row added to gE (B, T, K), gse (2, K) (start, end) and gt (K, K)."""
    K = E.shape[2]
    Es = 0.0
    for k in range(K):
        beta[L - 1, k] = end[k]
        G[L - 1, k] = end[k]
        p = np.exp(a[L - 1, k] + end[k] - logz)
        if p > 0.0:
            Es += p * (F[L - 1, k] + end[k])
    for i in range(L - 2, -1, -1):
        u = pos[i + 1]
        for k in range(K):
            for m in range(K):
                z[m] = trans[m, k] + E[b, u, m] + beta[i + 1, m]
            beta[i, k] = _lse_weights(z, K, v)
            acc = 0.0
            for m in range(K):
                if v[m] > 0.0:
                    acc += v[m] * (trans[m, k] + E[b, u, m] + G[i + 1, m])
            G[i, k] = acc
    for i in range(L):
        for k in range(K):
            p = np.exp(a[i, k] + beta[i, k] - logz)
            if p > 0.0:
                d = -g * p * (F[i, k] + G[i, k] - Es)
                gE[b, pos[i], k] += d
                if i == 0:
                    gse[0, k] += d
                if i == L - 1:
                    gse[1, k] += d
        if i == 0:
            continue
        u = pos[i]
        for k in range(K):
            tail = E[b, u, k] + beta[i, k] - logz
            for j in range(K):
                p = np.exp(a[i - 1, j] + trans[k, j] + tail)
                if p > 0.0:
                    gt[k, j] += -g * p * (F[i - 1, j] + trans[k, j] + E[b, u, k] + G[i, k] - Es)


@nb.njit(cache=True, nogil=True, parallel=True)
def nb_entropy(E, mask, start, end, trans, g, want_grad, nchunk, H, gE, gstart, gend, gtrans):
    """H[b] = the entropy of row b's CRF (0 for an empty row, nan without an allowed path) and, with
    ``want_grad``, sum_b g_b dH_b added to gE (B, T, K), gstart, gend (K,) and gtrans (K, K) [next, prev]
    (``nchunk`` row chunks in parallel, each with its own parameter buffers)."""
    B, T, K = E.shape
    nchunk = max(1, min(nchunk, B))
    gse = np.zeros((nchunk, 2, K))
    gt = np.zeros((nchunk, K, K))
    for ch in nb.prange(nchunk):
        pos = np.empty(T, dtype=np.int64)
        a, F, beta, G = np.empty((T, K)), np.empty((T, K)), np.empty((T, K)), np.empty((T, K))
        z, w = np.empty(K), np.empty(K)
        for b in range(ch, B, nchunk):
            L = masked_positions(mask, b, pos)
            if L == 0:
                H[b] = 0.0
                continue
            h, logz = _forward(E, b, pos, L, start, end, trans, a, F, z, w)
            H[b] = h
            if want_grad and not np.isnan(h) and g[b] != 0.0:
                _backward(E, b, pos, L, start, end, trans, a, F, logz, g[b], gE, gse[ch], gt[ch], beta, G, z, w)
    for ch in range(nchunk):
        for k in range(K):
            gstart[k] += gse[ch, 0, k]
            gend[k] += gse[ch, 1, k]
            for j in range(K):
                gtrans[k, j] += gt[ch, k, j]
