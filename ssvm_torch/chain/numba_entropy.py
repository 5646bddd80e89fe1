"""The compiled entropy of a chain CRF, the KL divergence of two chains (constrained or not), and their gradients
(CPU float32/float64, float64 accumulation, log space): the numba backend of :func:`ssvm_torch.chain.ops.information`.
Conventions in :mod:`ssvm_torch.chain`; ``start``/``end``/``trans`` hold the constraint penalties (-inf =
forbidden).

Per row, forward: the log messages a_i(k), the backward conditionals w_i(j | k) = exp(a_{i-1}(j) + trans[k, j]
- lse_j), the prefix entropies H_i(k) = sum_j w (H_{i-1}(j) - log w) (the value, as the torch recursion of
:mod:`ssvm_torch.chain.information`) and the expected prefix scores F_i(k) = E[s(y_0..y_i) | y_i = k]. The
gradient is dH/dtheta_f = -Cov_p(phi_f, s(y)) (H = log Z - E_p[s(y)], whose derivative is E_p[phi_f] -
E_p[phi_f] - Cov_p(phi_f, s)), and each feature's covariance is p(f) (E[s | f] - E[s]) with E[s | y_i = k] =
F_i(k) + G_i(k), G_i(k) = E[s(y_{i+1}..) | y_i = k] by the backward recursion: one forward and one backward pass,
nothing of size (B, T, K, K). The expected scores may be of another additive score r than p's own: with
r = s_p - s_q, E_p[r] - log Z_p + log Z_q = KL(p || q), whose gradient w.r.t. p is +Cov_p(phi, r) by the same
passes (w.r.t. q: mu_q - mu_p).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
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
def _forward(E, b, pos, L, start, end, trans, R, rstart, rend, rtrans, a, F, z, w):
    """Forward pass of one row into a and F (L, K), F the expected prefix sums of the additive score r (R, rstart,
    rend, rtrans: p's own scores for the entropy); returns (entropy, log Z, E_p[r]), nan without an allowed path."""
    K = E.shape[2]
    H = np.zeros(K)
    Hn = np.empty(K)
    for k in range(K):
        a[0, k] = start[k] + E[b, pos[0], k]
        F[0, k] = rstart[k] + R[b, pos[0], k]
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
                    f += w[j] * (F[i - 1, j] + rtrans[k, j])
            Hn[k] = h
            a[i, k] = lse + E[b, u, k]
            F[i, k] = f + R[b, u, k]
        for k in range(K):
            H[k] = Hn[k]
    for k in range(K):
        z[k] = a[L - 1, k] + end[k]
    logz = _lse_weights(z, K, w)
    if logz == -np.inf:
        return np.nan, np.nan, np.nan
    h, er = 0.0, 0.0
    for k in range(K):
        if w[k] > 0.0:
            h += w[k] * (H[k] - (z[k] - logz))
            er += w[k] * (F[L - 1, k] + rend[k])
    return h, logz, er


@nb.njit(cache=True, nogil=True)
def _backward(E, b, pos, L, start, end, trans, R, rstart, rend, rtrans, a, F, logz, g, gE, gse, gt, beta, G, z, v):
    """g Cov_p(phi, r) of one row added to gE (B, T, K), gse (2, K) (start, end) and gt (K, K): the gradient of
    E_p[r] - log Z_p + const for a fixed r, and with r = p's scores and g -> -g, of the entropy."""
    K = E.shape[2]
    Er = 0.0
    for k in range(K):
        beta[L - 1, k] = end[k]
        G[L - 1, k] = rend[k]
        p = np.exp(a[L - 1, k] + end[k] - logz)
        if p > 0.0:
            Er += p * (F[L - 1, k] + rend[k])
    for i in range(L - 2, -1, -1):
        u = pos[i + 1]
        for k in range(K):
            for m in range(K):
                z[m] = trans[m, k] + E[b, u, m] + beta[i + 1, m]
            beta[i, k] = _lse_weights(z, K, v)
            acc = 0.0
            for m in range(K):
                if v[m] > 0.0:
                    acc += v[m] * (rtrans[m, k] + R[b, u, m] + G[i + 1, m])
            G[i, k] = acc
    for i in range(L):
        for k in range(K):
            p = np.exp(a[i, k] + beta[i, k] - logz)
            if p > 0.0:
                d = g * p * (F[i, k] + G[i, k] - Er)
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
                    gt[k, j] += g * p * (F[i - 1, j] + rtrans[k, j] + R[b, u, k] + G[i, k] - Er)


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_information(E, mask, start, end, trans, R, rstart, rend, rtrans, kl, g, want_grad, nchunk, out, gE, gstart,
                   gend, gtrans):
    """Per row b (0 for an empty row, nan without an allowed path): ``kl`` False, out[b] = the entropy of its CRF
    (R, rstart, rend, rtrans are then p's own scores) and, with ``want_grad``, sum_b g_b dH_b = -g_b Cov(phi, s)
    added to the gradient buffers gE (B, T, K), gstart, gend (K,), gtrans (K, K) [next, prev]; ``kl`` True,
    out[b] = E_p[r] - log Z_p (KL(p || q) less log Z_q for r = s_p - s_q) and +g_b Cov(phi, r) added (``nchunk``
    row chunks in parallel, each with its own parameter buffers)."""
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
                out[b] = 0.0
                continue
            h, logz, er = _forward(E, b, pos, L, start, end, trans, R, rstart, rend, rtrans, a, F, z, w)
            out[b] = er - logz if kl else h
            if want_grad and not np.isnan(h) and g[b] != 0.0:
                _backward(E, b, pos, L, start, end, trans, R, rstart, rend, rtrans, a, F, logz,
                          g[b] if kl else -g[b], gE, gse[ch], gt[ch], beta, G, z, w)
    for ch in range(nchunk):
        for k in range(K):
            gstart[k] += gse[ch, 0, k]
            gend[k] += gse[ch, 1, k]
            for j in range(K):
                gtrans[k, j] += gt[ch, k, j]
