"""Compiled CPU kernels of the semi-Markov recursions (Sarawagi & Cohen 2004) on the segment package's
convention (:mod:`ssvm_torch.segments`): the best segmentation (max-plus with back pointers) and log Z with the
segment, first, last and transition marginals (forward-backward), one row per thread.

The forward-backward runs in real space with scaling (:func:`marginals_row_scaled`, as the chain's
``numba_fb.forward_row``, Rabiner 1989 Sec. V.A): each segment score is exponentiated once, shifted by its start
position's largest score, every forward / backward vector is normalized by its largest entry, and a segment's
terms are brought to a common scale by one exponential per (start, length) pair, not per label: about a
quarter of the log-space recursion's exponentials. A row whose normalizer falls below ``SCALED_MIN`` (score
spreads beyond float64's exponent range, or no allowed segmentation) is redone in log space
(:func:`marginals_row_log`).

Forward (as :mod:`ssvm_torch.segments.torch_semimarkov`): enter[0, k] = first[k], alpha[e, k] = (+)_l
enter[e-l-1, k] + S[e-l-1, l, k], enter[e, k] = (+)_k' alpha[e, k'] + trans[k, k']. Backward: out[n, k] = last[k],
out[e, k] = (+)_k'' trans[k'', k] + back[e, k''] for a segment of label k ending before position e, back[s, k] =
(+)_l S[s, l, k] + out[s+l+1, k] for a segment of label k starting at s. The marginal of segment (s, l, k) is
exp(enter[s, k] + S[s, l, k] + out[s+l+1, k] - log Z): the gradient of log Z, written without autograd. Charts
are float64 whatever the scores' dtype; -inf scores (forbidden segments, transitions) give exact zeros.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..trees.numba_eisner import lae

NEG_INF = -np.inf
#: a normalizer below this may have lost terms to underflow: the row is redone in log space (as numba_fb.SCALED_MIN)
SCALED_MIN = 1e-250


@nb.njit(cache=True, nogil=True)
def _forward(S, first, trans, n, enter, alpha):
    """enter (n, K), alpha (n+1, K) of one row in the log semiring (alpha[0] unused)."""
    L, K = S.shape[1], S.shape[2]
    for k in range(K):
        enter[0, k] = first[k]
    for e in range(1, n + 1):
        m = min(L, e)
        for k in range(K):
            top = NEG_INF
            for l in range(m):
                v = enter[e - l - 1, k] + S[e - l - 1, l, k]
                if v > top:
                    top = v
            acc = 0.0
            if top != NEG_INF:
                for l in range(m):
                    acc += np.exp(enter[e - l - 1, k] + S[e - l - 1, l, k] - top)
                alpha[e, k] = top + np.log(acc)
            else:
                alpha[e, k] = NEG_INF
        if e < n:
            for k in range(K):
                top = NEG_INF
                for j in range(K):
                    v = alpha[e, j] + trans[k, j]
                    if v > top:
                        top = v
                acc = 0.0
                if top != NEG_INF:
                    for j in range(K):
                        acc += np.exp(alpha[e, j] + trans[k, j] - top)
                    enter[e, k] = top + np.log(acc)
                else:
                    enter[e, k] = NEG_INF


@nb.njit(cache=True, nogil=True)
def _shifted(x, out):
    """out = exp(x - max finite x) (0 where -inf); returns the shift (0 when every entry is -inf)."""
    m = NEG_INF
    for i in range(x.size):
        if x.flat[i] > m:
            m = x.flat[i]
    if m == NEG_INF:
        m = 0.0
    for i in range(x.size):
        out.flat[i] = np.exp(x.flat[i] - m)
    return m


@nb.njit(cache=True, nogil=True)
def _normalize(v):
    """v / max(v) in place; returns max(v) (0 for a zero vector, left as is)."""
    z = 0.0
    for k in range(v.size):
        if v[k] > z:
            z = v[k]
    if z > 0.0:
        for k in range(v.size):
            v[k] /= z
    return z


@nb.njit(cache=True, nogil=True)
def _through(Q, v, out, transposed):
    """out = Q v (Q^T v when ``transposed``: the backward pass) normalized by its largest entry, which it returns:
    one transition step of the scaled recursion."""
    K = v.size
    for a in range(K):
        acc = 0.0
        if transposed:
            for b in range(K):
                acc += Q[b, a] * v[b]
        else:
            for b in range(K):
                acc += Q[a, b] * v[b]
        out[a] = acc
    return _normalize(out)


@nb.njit(cache=True, nogil=True)
def _zero_scale(z, reach):
    """The log scale of a vector normalized by z: log z, or -inf for a zero vector that no allowed path reaches
    (an exact zero: every term has a -inf factor, as a constrained row's positions where no segment may end);
    nan where the vector underflowed (a zero or tiny normalizer while some allowed path reaches it)."""
    if z >= SCALED_MIN:
        return np.log(z)
    if z == 0.0:
        for k in range(reach.size):
            if reach[k]:
                return np.nan
        return NEG_INF
    return np.nan


@nb.njit(cache=True, nogil=True)
def _reach_through(trans, v, out, transposed):
    """out[a] = any_b v[b] with an allowed transition between a and b (``trans[a, b]``, or ``trans[b, a]`` when
    ``transposed``): :func:`_through` on the reach charts."""
    K = v.size
    for a in range(K):
        for b in range(K):
            out[a] |= v[b] and (trans[b, a] if transposed else trans[a, b]) != NEG_INF


@nb.njit(cache=True, nogil=True)
def _weights(x, h, w):
    """w[l] = exp(x[l] - max x[:h]) for l < h (all 0 when every x is -inf)."""
    r = NEG_INF
    for l in range(h):
        r = max(r, x[l])
    for l in range(h):
        w[l] = 0.0 if r == NEG_INF else np.exp(x[l] - r)
    return r


@nb.njit(cache=True, nogil=True)
def marginals_row_scaled(S, first, last, trans, n, M, MF, ML, MT):
    """:func:`marginals_row_log` in real space with scaling (module docstring); nan (and nothing written) when a
    normalizer underflows (:func:`_zero_scale`). Which entries any allowed path reaches is followed beside the
    values, so that a vector that is exactly zero because nothing may reach it (a constrained row) gets the scale
    -inf instead of sending the row to the log-space recursion."""
    L, K = S.shape[1], S.shape[2]
    P = np.empty((n, L, K))                  # exp(S[t] - m[t])
    m = np.empty(n)
    for t in range(n):
        m[t] = _shifted(S[t], P[t])
    Q = np.empty((K, K))
    mq = _shifted(trans, Q)
    F, G = np.empty(K), np.empty(K)
    mf, ml = _shifted(first, F), _shifted(last, G)
    A = np.zeros((n + 1, K))                 # alpha[e] = A[e] exp(c[e]): segmentations of 0..e-1
    c = np.zeros(n + 1)
    N = np.zeros((n, K))                     # enter[s] = N[s] exp(d[s])
    d = np.zeros(n)
    reach_a = np.zeros((n + 1, K), dtype=np.bool_)
    reach_n = np.zeros((n, K), dtype=np.bool_)
    N[0] = F
    d[0] = mf
    for k in range(K):
        reach_n[0, k] = first[k] != NEG_INF
    w, x = np.empty(L), np.empty(L)
    for e in range(1, n + 1):
        h = min(L, e)
        for l in range(h):
            x[l] = d[e - l - 1] + m[e - l - 1]
        r = _weights(x, h, w)
        for l in range(h):
            s = e - l - 1
            for k in range(K):
                A[e, k] += N[s, k] * P[s, l, k] * w[l]
                reach_a[e, k] |= reach_n[s, k] and S[s, l, k] != NEG_INF
        scale = _zero_scale(_normalize(A[e]), reach_a[e])
        if np.isnan(scale):
            return np.nan
        c[e] = r + scale
        if e < n:
            _reach_through(trans, reach_a[e], reach_n[e], False)
            scale = _zero_scale(_through(Q, A[e], N[e], False), reach_n[e])
            if np.isnan(scale):
                return np.nan
            d[e] = c[e] + mq + scale
    tot = 0.0
    for k in range(K):
        tot += A[n, k] * G[k]
    if not tot >= SCALED_MIN:
        return np.nan
    logz = c[n] + ml + np.log(tot)
    O = np.zeros((n + 1, K))                 # out[e] = O[e] exp(g[e]): completions after a segment ending at e
    g = np.zeros(n + 1)
    R = np.zeros((n, K))                     # back[s] = R[s] exp(b[s]): completions from a segment starting at s
    bs = np.zeros(n)
    reach_o = np.zeros((n + 1, K), dtype=np.bool_)
    reach_r = np.zeros((n, K), dtype=np.bool_)
    O[n] = G
    g[n] = ml
    for k in range(K):
        reach_o[n, k] = last[k] != NEG_INF
    for s in range(n - 1, -1, -1):
        h = min(L, n - s)
        for l in range(h):
            x[l] = g[s + l + 1]
        r = _weights(x, h, w)
        for l in range(h):
            for k in range(K):
                R[s, k] += P[s, l, k] * O[s + l + 1, k] * w[l]
                reach_r[s, k] |= reach_o[s + l + 1, k] and S[s, l, k] != NEG_INF
        scale = _zero_scale(_normalize(R[s]), reach_r[s])
        if np.isnan(scale):
            return np.nan
        bs[s] = m[s] + r + scale
        if s >= 1:
            _reach_through(trans, reach_r[s], reach_o[s], True)
            scale = _zero_scale(_through(Q, R[s], O[s], True), reach_o[s])
            if np.isnan(scale):
                return np.nan
            g[s] = mq + bs[s] + scale
    for s in range(n):                       # every normalizer held: the marginals, one exponential per (s, l)
        for l in range(min(L, n - s)):
            f = np.exp(d[s] + m[s] + g[s + l + 1] - logz)
            for k in range(K):
                M[s, l, k] += N[s, k] * P[s, l, k] * O[s + l + 1, k] * f
        if s >= 1:
            f = np.exp(c[s] + mq + bs[s] - logz)
            for k in range(K):
                for j in range(K):
                    MT[k, j] += A[s, j] * Q[k, j] * R[s, k] * f
    f0, fn = np.exp(mf + bs[0] - logz), np.exp(c[n] + ml - logz)
    for k in range(K):
        MF[k] += F[k] * R[0, k] * f0
        ML[k] += A[n, k] * G[k] * fn
    return logz


@nb.njit(cache=True, nogil=True)
def marginals_row(S, first, last, trans, n, M, MF, ML, MT):
    """log Z of one row and its marginals added into M, MF, ML, MT: the scaled recursion, or the log-space one
    where the scaled one's normalizers fall below SCALED_MIN."""
    if n == 0:
        return 0.0
    logz = marginals_row_scaled(S, first, last, trans, n, M, MF, ML, MT)
    if np.isnan(logz):
        logz = marginals_row_log(S, first, last, trans, n, M, MF, ML, MT)
    return logz


@nb.njit(cache=True, nogil=True)
def marginals_row_log(S, first, last, trans, n, M, MF, ML, MT):
    """log Z of one row (0 when n = 0, -inf when no segmentation is allowed) and, added into M (T, L, K), MF (K,),
    ML (K,), MT (K, K), its marginals (left zero when log Z is -inf)."""
    L, K = S.shape[1], S.shape[2]
    if n == 0:
        return 0.0
    enter = np.empty((n, K))
    alpha = np.empty((n + 1, K))
    _forward(S, first, trans, n, enter, alpha)
    logz = NEG_INF
    for k in range(K):
        logz = lae(logz, alpha[n, k] + last[k])
    if logz == NEG_INF:
        return logz
    out = np.full((n + 1, K), NEG_INF)
    back = np.full((n, K), NEG_INF)
    for k in range(K):
        out[n, k] = last[k]
        ML[k] += np.exp(alpha[n, k] + last[k] - logz)
    for s in range(n - 1, -1, -1):
        for k in range(K):
            acc = NEG_INF
            for l in range(min(L, n - s)):
                acc = lae(acc, S[s, l, k] + out[s + l + 1, k])
            back[s, k] = acc
            base = enter[s, k] - logz
            if base != NEG_INF:
                for l in range(min(L, n - s)):
                    M[s, l, k] += np.exp(base + S[s, l, k] + out[s + l + 1, k])
        if s >= 1:
            for j in range(K):
                acc = NEG_INF
                for k in range(K):
                    acc = lae(acc, trans[k, j] + back[s, k])
                out[s, j] = acc
                if alpha[s, j] != NEG_INF:
                    for k in range(K):
                        MT[k, j] += np.exp(alpha[s, j] + trans[k, j] + back[s, k] - logz)
    for k in range(K):
        MF[k] += np.exp(first[k] + back[0, k] - logz)
    return logz


@nb.njit(cache=True, nogil=True)
def best_row(S, first, last, trans, n, segments):
    """The best segmentation of one row into ``segments`` (T,) (label at each segment's first position, -1
    elsewhere) and its score (-inf when none is allowed, 0 when n = 0)."""
    L, K = S.shape[1], S.shape[2]
    for t in range(segments.shape[0]):
        segments[t] = -1
    if n == 0:
        return 0.0
    enter = np.empty((n, K))
    alpha = np.empty((n + 1, K))
    lens = np.zeros((n + 1, K), dtype=np.int64)
    prevs = np.zeros((n, K), dtype=np.int64)
    for k in range(K):
        enter[0, k] = first[k]
    for e in range(1, n + 1):
        for k in range(K):
            top, arg = NEG_INF, 0
            for l in range(min(L, e)):
                v = enter[e - l - 1, k] + S[e - l - 1, l, k]
                if v > top:
                    top, arg = v, l
            alpha[e, k], lens[e, k] = top, arg
        if e < n:
            for k in range(K):
                top, arg = NEG_INF, 0
                for j in range(K):
                    v = alpha[e, j] + trans[k, j]
                    if v > top:
                        top, arg = v, j
                enter[e, k], prevs[e, k] = top, arg
    score, k = NEG_INF, 0
    for j in range(K):
        v = alpha[n, j] + last[j]
        if v > score:
            score, k = v, j
    if score == NEG_INF:
        return score
    pos = n
    while pos > 0:
        start = pos - lens[pos, k] - 1
        segments[start] = k
        k = prevs[start, k] if start > 0 else k
        pos = start
    return score


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def _best_rows(S, first, last, trans, lengths, segments, scores):
    for b in nb.prange(S.shape[0]):
        scores[b] = best_row(S[b], first, last, trans, lengths[b], segments[b])


@nb.njit(cache=True, nogil=True)
def _best_rows_serial(S, first, last, trans, lengths, segments, scores):
    for b in range(S.shape[0]):
        scores[b] = best_row(S[b], first, last, trans, lengths[b], segments[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def _marginal_rows(S, first, last, trans, lengths, logz, M, MF, ML, MT):
    for b in nb.prange(S.shape[0]):
        logz[b] = marginals_row(S[b], first, last, trans, lengths[b], M[b], MF[b], ML[b], MT[b])


def best_batch(S, first, last, trans, lengths):
    """(segments (B, T) int64, scores (B,) in S's dtype) of every row of a padded batch (numpy arrays)."""
    B, T, L, K = S.shape
    segments = np.empty((B, T), dtype=np.int64)
    scores = np.empty(B, dtype=np.float64)
    f64 = [np.ascontiguousarray(x, dtype=np.float64) for x in (S, first, last, trans)]
    # one row (a BCFW block step) runs in the calling thread: a parallel launch hands the row to the thread
    # pool, which costs more than the row itself and waits for a core when the machine is busy
    rows = _best_rows if B > 1 else _best_rows_serial
    rows(*f64, np.ascontiguousarray(lengths, dtype=np.int64), segments, scores)
    return segments, scores.astype(S.dtype)


def marginals_batch(S, first, last, trans, lengths):
    """(log Z (B,), segment marginals (B, T, L, K), first (B, K), last (B, K), transition marginals (B, K, K)
    [next, prev]), each in S's dtype, of every row of a padded batch (numpy arrays)."""
    B, T, L, K = S.shape
    logz = np.empty(B)
    M = np.zeros((B, T, L, K))
    MF, ML, MT = np.zeros((B, K)), np.zeros((B, K)), np.zeros((B, K, K))
    f64 = [np.ascontiguousarray(x, dtype=np.float64) for x in (S, first, last, trans)]
    _marginal_rows(*f64, np.ascontiguousarray(lengths, dtype=np.int64), logz, M, MF, ML, MT)
    return tuple(x.astype(S.dtype) for x in (logz, M, MF, ML, MT))
