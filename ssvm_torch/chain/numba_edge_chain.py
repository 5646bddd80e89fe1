"""Numba kernels of the linear chain over position-dependent edge potentials (:mod:`ssvm_torch.chain.edge_chain`):

    s(z) = sum_{n=0}^{L-2} phi[n, z_{n+1}, z_n]      (phi (B, N-1, K, K), torch-struct's LinearChainCRF layout)

for row b of length L = lengths[b] (z_0 is free: a row of length 1 has K labelings of score 0). One row per numba
thread (``prange``), float64 accumulation whatever the input dtype.

* :func:`nb_edge_forward_backward` -- log Z and the edge marginals mu[n, a, b] = P(z_{n+1} = a, z_n = b) by the
  scaled recursion (Rabiner 1989, Sec. V.A) from each position's K x K potentials exponentiated once, shifted by
  their largest finite entry (by the caller, in torch: numba's scalar exp, without SVML, dominated the kernel when
  it made them); the backward pass turns that buffer into the marginals in place, so nothing else is (N, K, K).
  A row whose normalizer falls below :data:`SCALED_MIN` or is not finite (potentials whose spread leaves float64's
  exponent range, or no labeling of finite score) is redone in log space (:func:`_log_row`); a row without a finite
  labeling gets log Z = -inf and zero marginals, for the caller to name.
* :func:`nb_edge_viterbi` -- the best labeling (max-sum, ties to the smallest label) and its score;
  :func:`nb_edge_nbest` the n best.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .numba_fb import SCALED_MIN, log_sum_exp
from .numba_nbest import merge_best


@nb.njit(cache=True, nogil=True)
def _scaled_row(P, shift, L, want, A, c):
    """log Z of one row by the scaled recursion from P (L-1, K, K) = exp(phi - shift) (each position's potentials
    shifted by their largest finite entry); with ``want`` P becomes the marginals in place. A (L, K) and c (L,) are
    scratch. Returns nan where the scaling fails (the caller redoes the row in log space)."""
    K = P.shape[2]
    for k in range(K):
        A[0, k] = 1.0 / K
    logz = np.log(K)
    for n in range(L - 1):
        tot = 0.0
        for a in range(K):
            acc = 0.0
            for b in range(K):
                acc += P[n, a, b] * A[n, b]
            A[n + 1, a] = acc
            tot += acc
        if not (tot >= SCALED_MIN) or not np.isfinite(tot):
            return np.nan
        for a in range(K):
            A[n + 1, a] /= tot
        c[n + 1] = tot
        logz += shift[n] + np.log(tot)
    if not want or L < 2:
        return logz
    beta = np.ones(K)
    nxt = np.empty(K)
    for n in range(L - 2, -1, -1):
        inv = 1.0 / c[n + 1]
        for b in range(K):
            nxt[b] = 0.0
        for a in range(K):
            ba = beta[a] * inv
            for b in range(K):
                p = P[n, a, b] * ba
                nxt[b] += p
                P[n, a, b] = p * A[n, b]
        for b in range(K):
            beta[b] = nxt[b]
    return logz


@nb.njit(cache=True, nogil=True)
def _log_row(phi, L, M, want, fa, v):
    """The same in log space (any finite or -inf potentials): returns log Z, -inf (marginals left 0) when no
    labeling has a finite score. fa (L, K) and v (K,) are scratch."""
    K = phi.shape[2]
    for k in range(K):
        fa[0, k] = 0.0
    for n in range(L - 1):
        for a in range(K):
            for b in range(K):
                v[b] = fa[n, b] + phi[n, a, b]
            fa[n + 1, a] = log_sum_exp(v, K)
    z = log_sum_exp(fa[L - 1], K)
    if not want or not np.isfinite(z):
        return z
    fb = np.zeros(K)
    nb_ = np.empty(K)
    for n in range(L - 2, -1, -1):
        for b in range(K):
            for a in range(K):
                v[a] = phi[n, a, b] + fb[a]
            nb_[b] = log_sum_exp(v, K)
        for a in range(K):
            for b in range(K):
                M[n, a, b] = np.exp(fa[n, b] + phi[n, a, b] + fb[a] - z)
        for b in range(K):
            fb[b] = nb_[b]
    return z


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_edge_forward_backward(phi, P, shift, lengths, logz, want):
    """log Z (B,) into ``logz`` of the potentials phi (B, N-1, K, K), from P = exp(phi - shift) (shift (B, N-1):
    each position's largest finite potential, 0 if none; made by the caller in one vectorized pass); with ``want``
    P becomes the edge marginals (zero beyond each row's L-1 edges)."""
    B, N1, K, _ = phi.shape
    for r in nb.prange(B):
        L = lengths[r]
        if L <= 0:
            logz[r] = 0.0
        else:
            A, c = np.empty((L, K)), np.empty(L)
            z = _scaled_row(P[r], shift[r], L, want, A, c)
            if np.isnan(z):
                if want:
                    P[r] = 0.0
                z = _log_row(phi[r], L, P[r], want, A, np.empty(K))
            logz[r] = z
        if want:
            for n in range(max(L - 1, 0), N1):
                P[r, n] = 0.0


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_edge_viterbi(phi, lengths, tags, scores):
    """The best labeling of every row into ``tags`` (B, N) (-1 beyond its length) and its score into ``scores``;
    ties go to the smallest label. A row without a finite labeling gets -inf."""
    B, _, K, _ = phi.shape
    for r in nb.prange(B):
        L = lengths[r]
        tags[r] = -1
        if L <= 0:
            scores[r] = 0.0
            continue
        d = np.zeros(K)
        nd = np.empty(K)
        bp = np.zeros((max(L - 1, 1), K), dtype=np.int64)
        for n in range(L - 1):
            for a in range(K):
                best, arg = -np.inf, 0
                for b in range(K):
                    s = d[b] + phi[r, n, a, b]
                    if s > best:
                        best, arg = s, b
                nd[a] = best
                bp[n, a] = arg
            for a in range(K):
                d[a] = nd[a]
        best, arg = -np.inf, 0
        for a in range(K):
            if d[a] > best:
                best, arg = d[a], a
        scores[r] = best
        tags[r, L - 1] = arg
        for n in range(L - 2, -1, -1):
            arg = bp[n, arg]
            tags[r, n] = arg


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_edge_nbest(phi, lengths, n, out, scores):
    """The n best labelings of every row: out (B, n, N) their labels (the caller fills it with -1), scores (B, n)
    in non-increasing order (the caller fills it with -inf; a row with fewer than n labelings of finite score gets
    fewer; an empty row one, of score 0). The n-best recursion of :mod:`ssvm_torch.chain.numba_nbest` (an n-step
    merge of the K sorted lists of each position and label, ties to the lower label) with the move into position s
    read from phi[s-1] and z_0 free."""
    B, _, K, _ = phi.shape
    zero = np.zeros(K)
    for r in nb.prange(B):
        L = lengths[r]
        if L <= 0:
            scores[r, 0] = 0.0
            continue
        D = np.full((L, K, n), -np.inf)
        SP = np.zeros((L, K, n), dtype=np.int64)
        SR = np.zeros((L, K, n), dtype=np.int64)
        ptr = np.empty(K, dtype=np.int64)
        for k in range(K):
            D[0, k, 0] = 0.0
        # the loops of numba_nbest.nb_nbest, not a helper both call: through one, the chain layer's n-best ran
        # slower (measured side by side when this kernel was written)
        for s in range(1, L):
            for k in range(K):
                ptr[:] = 0
                for q in range(n):
                    best, bj = merge_best(D, s - 1, n, phi[r, s - 1, k], ptr, K)
                    if bj < 0:
                        break
                    D[s, k, q] = best
                    SP[s, k, q] = bj
                    SR[s, k, q] = ptr[bj]
                    ptr[bj] += 1
        ptr[:] = 0
        for q in range(n):
            best, bk = merge_best(D, L - 1, n, zero, ptr, K)
            if bk < 0:
                break
            scores[r, q] = best
            k, rank = bk, ptr[bk]
            ptr[bk] += 1
            for s in range(L - 1, -1, -1):
                out[r, q, s] = k
                if s > 0:
                    k, rank = SP[s, k, rank], SR[s, k, rank]
