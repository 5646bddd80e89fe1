"""Compiled block steps of the constituency store (:class:`~ssvm_torch.stores.spans.SpanDual`, CPU float64): the
loss-augmented best tree of one block and its FW terms, the move, and the exact gap pass over every block, on NumPy
views of the store's tensors (the torch path is in stores/spans.py; the conformance suite runs both).

Per block i (fenceposts s..s+n, the module docstring of models/constituency.py): the potentials U = X_i W (n+1, C),
each span's best label under the augmented score s(i, j, l) + c [l is not the gold label of (i, j)] (ties to the
lowest label, as torch's ``max``), the span package's max-plus CKY (:func:`ssvm_torch.spans.numba_cky.cky_best`)
on those maxima, and D = s(y*) - M_i with <D, theta_i>, ||A_i D||^2 = sum_c D_c^T G_i D_c + |D_counts|^2 and the
loss. A batch-1 step in torch is dozens of small tensor operations (their overhead, not the arithmetic, is its
cost); here it is one call.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..spans.numba_cky import cky_best


@nb.njit(cache=True, nogil=True)
def _potentials(i, fo, fptr, fidx, W):
    s, T, C = fo[i], fo[i + 1] - fo[i], W.shape[1]
    U = np.zeros((T, C))
    for k in range(T):
        for e in range(fptr[s + k], fptr[s + k + 1]):
            f = fidx[e]
            for c in range(C):
                U[k, c] += W[f, c]
    return U


@nb.njit(cache=True, nogil=True)
def _block_corner(i, fo, so, fptr, fidx, W, lenw, bucket_of, inside, gold_spans, observed, cost, augment, P, Gc,
                  spans, Dp, Dc):
    """The (loss-augmented with ``augment``) best tree of block i into ``spans`` (2n - 1, 3) ordered by (i, j),
    D = s(y*) - M_i into Dp (T, C) and Dc (G,); returns (the observed gold brackets it misses, <D, theta_i>, score of
    y* + loss - score of the gold tree: H_i for the augmented tree). ``observed`` codes the gold rows that the loss
    counts (partial brackets, ``SpanData.observed_codes``: 1 a labeled bracket, 2 one without its label, 0 not
    counted): + cost on every (span, label) but the observed gold ones (every label of an unlabeled one), so the
    augmented CKY score exceeds s(y) + loss by cost (2n - 1 - |O|), taken off."""
    s, T = fo[i], fo[i + 1] - fo[i]
    n = T - 1
    L = lenw.shape[1]
    U = _potentials(i, fo, fptr, fidx, W)
    gold = np.full((T, T), -1, dtype=np.int64)
    obs = np.full((T, T), -1, dtype=np.int64)
    n_obs = 0
    for r in range(so[i], so[i + 1]):
        gold[gold_spans[r, 0], gold_spans[r, 1]] = gold_spans[r, 2]
        if observed[r] != 0:
            obs[gold_spans[r, 0], gold_spans[r, 1]] = gold_spans[r, 2] if observed[r] == 1 else -2
            n_obs += 1
    pre = np.zeros((T, L))
    if inside:
        for k in range(1, T):
            for l in range(L):
                pre[k, l] = pre[k - 1, l] + U[k - 1, 2 * L + l]
    best = np.full((T, T), -np.inf)
    label = np.zeros((T, T), dtype=np.int64)
    gold_score = 0.0
    for a in range(n):
        for b in range(a + 1, n + 1):
            width = b - a
            bk = bucket_of[width]
            top, arg = -np.inf, 0
            for l in range(L):
                v = U[a, l] + U[b, L + l] + lenw[bk, l]
                if inside:
                    v += (pre[b, l] - pre[a, l]) / width
                if gold[a, b] == l:
                    gold_score += v
                if augment and obs[a, b] != l and obs[a, b] != -2:
                    v += cost
                if v > top:
                    top, arg = v, l
            best[a, b] = top
            label[a, b] = arg
    chart = np.zeros((T, T), dtype=np.bool_)
    score = cky_best(best, n, chart)
    if augment:
        score -= cost * (2 * n - 1 - n_obs)
    for k in range(T):
        for c in range(Dp.shape[1]):
            Dp[k, c] = -P[s + k, c]
    for g in range(Dc.shape[0]):
        Dc[g] = -Gc[i, g]
    r, hit = 0, 0
    for a in range(n):
        for b in range(a + 1, n + 1):
            if chart[a, b]:
                l = label[a, b]
                spans[r, 0], spans[r, 1], spans[r, 2] = a, b, l
                r += 1
                hit += obs[a, b] == l or obs[a, b] == -2
                Dp[a, l] += 1.0
                Dp[b, L + l] += 1.0
                if inside:
                    share = 1.0 / (b - a)
                    for k in range(a, b):
                        Dp[k, 2 * L + l] += share
                Dc[bucket_of[b - a] * L + l] += 1.0
    dot = 0.0
    for k in range(T):
        for c in range(Dp.shape[1]):
            dot += Dp[k, c] * U[k, c]
    for g in range(Dc.shape[0]):
        dot += Dc[g] * lenw[g // L, g % L]
    return n_obs - hit, dot, score - gold_score


@nb.njit(cache=True, nogil=True)
def nb_span_corner(i, fo, so, fptr, fidx, W, lenw, bucket_of, inside, gold_spans, observed, cost, P, Gc, G, goff,
                   spans, Dp, Dc):
    """One block's FW corner: (wrong spans, <D, theta_i>, ||A_i D||^2) with the tree in ``spans``, D in Dp, Dc."""
    wrong, dot, _ = _block_corner(i, fo, so, fptr, fidx, W, lenw, bucket_of, inside, gold_spans, observed, cost, True,
                                  P, Gc, spans, Dp, Dc)
    T = fo[i + 1] - fo[i]
    base = goff[i]
    sq = 0.0
    for c in range(Dp.shape[1]):
        for t in range(T):
            if Dp[t, c] != 0.0:
                acc = 0.0
                for u in range(T):
                    acc += G[base + t * T + u] * Dp[u, c]
                sq += Dp[t, c] * acc
    for g in range(Dc.shape[0]):
        sq += Dc[g] * Dc[g]
    return wrong, dot, sq


@nb.njit(cache=True, nogil=True)
def nb_span_move(i, fo, fptr, fidx, Dp, Dc, coef, gamma, W, lenw, P, Gc, shadow_W, shadow_lenw, shadow_coef):
    """w += coef A_i D (and the shadow by coef * shadow_coef when shadow_coef != 0); M_i += gamma D."""
    s, T = fo[i], fo[i + 1] - fo[i]
    C, L = W.shape[1], lenw.shape[1]
    for k in range(T):
        for e in range(fptr[s + k], fptr[s + k + 1]):
            f = fidx[e]
            for c in range(C):
                W[f, c] += coef * Dp[k, c]
                if shadow_coef != 0.0:
                    shadow_W[f, c] += coef * shadow_coef * Dp[k, c]
        for c in range(C):
            P[s + k, c] += gamma * Dp[k, c]
    for g in range(Dc.shape[0]):
        lenw[g // L, g % L] += coef * Dc[g]
        if shadow_coef != 0.0:
            shadow_lenw[g // L, g % L] += coef * shadow_coef * Dc[g]
        Gc[i, g] += gamma * Dc[g]


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_span_gap_pass(fo, so, fptr, fidx, W, lenw, bucket_of, inside, gold_spans, observed, costs, augment, P, Gc, labels,
                     wrong, dot, margin):
    """Every block's (loss-augmented with ``augment``) best tree into ``labels`` (stacked by ``so``), its wrong spans,
    <D, theta_i> and H_i (score + loss - gold score), blocks spread over numba's threads."""
    n = fo.shape[0] - 1
    C, G = W.shape[1], Gc.shape[1]
    for i in nb.prange(n):
        T = fo[i + 1] - fo[i]
        Dp = np.empty((T, C))
        Dc = np.empty(G)
        spans = labels[so[i]:so[i + 1]]
        w_, d_, m_ = _block_corner(i, fo, so, fptr, fidx, W, lenw, bucket_of, inside, gold_spans, observed, costs[i],
                                   augment, P, Gc, spans, Dp, Dc)
        wrong[i], dot[i], margin[i] = w_, d_, m_
