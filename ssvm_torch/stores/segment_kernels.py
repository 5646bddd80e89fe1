"""Compiled BCFW block step of the semi-Markov store (:class:`~ssvm_torch.stores.segments.SegmentDual`, CPU
float64): the FW corner of one block (potentials, loss-augmented segment scores, the best segmentation, the
statistics' difference D, the block gap's terms), the pairwise / away differences and the gaps towards stored
corners (the active-set steps and the cache), and the move along D, each one call on numpy views of the
store's tensors (as the chain store's ``nb_fw_corner`` / ``nb_delta_move``, oracles/chain_kernels.py). The torch
path of the store computes the same quantities (tests/test_semimarkov_ssvm.py runs both)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..segments.numba_semimarkov import best_row

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def segment_potentials(s, T, fptr, fidx, fval, W, U):
    """U[:T] = [x_t, 1] W of the positions s..s+T-1 (the emission potentials of every label part)."""
    C = W.shape[1]
    for t in range(T):
        for c in range(C):
            U[t, c] = 0.0
        for a in range(fptr[s + t], fptr[s + t + 1]):
            f, v = fidx[a], fval[a]
            for c in range(C):
                U[t, c] += v * W[f, c]


@nb.njit(cache=True, nogil=True)
def _zero(T, D, Dc):
    """D[:T] = 0, Dc = 0: the scratch a difference of statistics is accumulated into."""
    for g in range(Dc.shape[0]):
        Dc[g] = 0.0
    for t in range(T):
        for c in range(D.shape[1]):
            D[t, c] = 0.0


@nb.njit(cache=True, nogil=True)
def add_segment_statistics(ys, T, K, sign, D, Dc):
    """D (T, 3K) += sign s(ys) of the positions (token / begin / end indicators of each label) and Dc (G,) +=
    sign times its counts (first, last, transitions [next, prev], lengths), models/semimarkov.py's layout."""
    label, start, prev = -1, 0, -1
    for t in range(T + 1):
        if t == T or ys[t] >= 0:
            if label >= 0:                                   # close the segment [start, t)
                D[t - 1, 2 * K + label] += sign
                Dc[2 * K + K * K + (t - start - 1) * K + label] += sign
                if prev >= 0:
                    Dc[2 * K + label * K + prev] += sign
                prev = label
            if t == T:
                break
            label, start = ys[t], t
            D[t, K + label] += sign
        D[t, label] += sign
    if T > 0:
        Dc[ys[0]] += sign
        Dc[K + label] += sign


@nb.njit(cache=True, nogil=True)
def wrong_states(s, T, K, Y, obs, ys):
    """Observed positions (``obs``) whose (label, begins-a-segment) state differs from the gold state Y[s + t]."""
    wrong, label = 0, -1
    for t in range(T):
        if ys[t] >= 0:
            label = ys[t]
        if obs[s + t] and (Y[s + t] % K != label or (Y[s + t] < K) != (ys[t] >= 0)):
            wrong += 1
    return wrong


@nb.njit(cache=True, nogil=True)
def _minus_point(i, s, T, P, Gc, D, Dc):
    """D -= M_i of the positions, Dc -= its counts (the block's current point)."""
    for t in range(T):
        for c in range(D.shape[1]):
            D[t, c] -= P[s + t, c]
    for g in range(Dc.shape[0]):
        Dc[g] -= Gc[i, g]


@nb.njit(cache=True, nogil=True)
def _theta_dot(T, D, Dc, U, wc):
    """<D, theta_i> = sum_t <D[t], U[t]> + <Dc, wc>: statistics of the positions (T, 3K) against the block's
    potentials U and the counts against the count weights wc."""
    acc = 0.0
    for t in range(T):
        for c in range(D.shape[1]):
            acc += D[t, c] * U[t, c]
    for g in range(Dc.shape[0]):
        acc += Dc[g] * wc[g]
    return acc


@nb.njit(cache=True, nogil=True)
def _sqnorm(i, T, D, Dc, G, goff):
    """||A_i D||^2 = sum_c D_c^T G_i D_c + |Dc|^2 (stores/segments.py), G_i = X_i X_i^T at G[goff[i]:]."""
    sq = 0.0
    for g in range(Dc.shape[0]):
        sq += Dc[g] * Dc[g]
    g0 = goff[i]
    for c in range(D.shape[1]):
        for t in range(T):
            if D[t, c] == 0.0:
                continue
            acc = 0.0
            for u in range(T):
                acc += G[g0 + t * T + u] * D[u, c]
            sq += D[t, c] * acc
    return sq


@nb.njit(cache=True, nogil=True)
def nb_segment_corner(i, c_i, outside, fptr, fidx, fval, offsets, Y, obs, W, wc, P, Gc, G, goff, K, L, U, S, ys, D,
                      Dc, with_sqnorm=True):
    """FW corner of block i: writes its loss-augmented best segmentation into ``ys`` (T,), D = s(y*) - M_i of
    the positions into ``D`` (T, 3K) and of the counts into ``Dc`` (G,); returns (L_i(y*) (not / n), <D, theta_i>,
    ||A_i D||^2). ``W`` (F, 3K) and ``wc`` (G,) are the emission and count blocks of w (models/semimarkov.py),
    ``Y`` the gold states, ``obs`` the observed positions (the loss counts only those: partial annotation), c_i the
    loss of one wrong position, ``outside`` a label of one-position segments or -1.
    ``U`` (T_max, 3K) and ``S`` (T_max, L, K) are scratch (U holds the block's potentials afterwards);
    ``with_sqnorm`` False skips the Gram part (the returned ||A_i D||^2 is then only the counts' part)."""
    s = offsets[i]
    T = offsets[i + 1] - s
    segment_potentials(s, T, fptr, fidx, fval, W, U)
    lens = wc[2 * K + K * K:]
    for t in range(T):
        gl_t, gb_t = Y[s + t] % K, Y[s + t] < K
        for k in range(K):
            tok, wrong = 0.0, 0.0
            for l in range(L):
                j = t + l
                if j >= T:
                    break
                gl_j, gb_j = Y[s + j] % K, Y[s + j] < K
                tok += U[j, k]
                if not obs[s + j]:
                    pass
                elif l == 0:
                    wrong += 1.0 if (gl_t != k or not gb_t) else 0.0
                else:
                    wrong += 1.0 if (gl_j != k or gb_j) else 0.0
                if k == outside and l > 0:
                    S[t, l, k] = NEG_INF
                else:
                    S[t, l, k] = tok + U[t, K + k] + U[j, 2 * K + k] + lens[l * K + k] + c_i * wrong
    best_row(S[:T], wc[:K], wc[K:2 * K], wc[2 * K:2 * K + K * K].reshape(K, K), T, ys)
    # statistics of y*: D = s(y*) - M_i, the loss, <D, theta> and ||A D||^2
    _zero(T, D, Dc)
    add_segment_statistics(ys, T, K, 1.0, D, Dc)
    _minus_point(i, s, T, P, Gc, D, Dc)
    loss = c_i * wrong_states(s, T, K, Y, obs, ys)
    dot = _theta_dot(T, D, Dc, U, wc)
    if not with_sqnorm:
        sq = 0.0
        for g in range(Dc.shape[0]):
            sq += Dc[g] * Dc[g]
        return loss, dot, sq
    return loss, dot, _sqnorm(i, T, D, Dc, G, goff)


@nb.njit(cache=True, nogil=True)
def nb_segment_delta(i, yp, p_current, yq, q_current, offsets, P, Gc, G, goff, K, D, Dc):
    """D = s(P) - s(Q) of block i into ``D`` (T, 3K) and ``Dc`` (G,), P and Q each a segmentation (``yp`` /
    ``yq``, (T,)) or, with ``p_current`` / ``q_current``, the block's point M_i (the pairwise and away steps of
    Osokin et al. 2016, Alg. 3 / 4); returns ||A_i D||^2."""
    s = offsets[i]
    T = offsets[i + 1] - s
    _zero(T, D, Dc)
    if p_current:
        _minus_point(i, s, T, P, Gc, D, Dc)
        for t in range(T):
            for c in range(D.shape[1]):
                D[t, c] = -D[t, c]
        for g in range(Dc.shape[0]):
            Dc[g] = -Dc[g]
    else:
        add_segment_statistics(yp, T, K, 1.0, D, Dc)
    if q_current:
        _minus_point(i, s, T, P, Gc, D, Dc)
    else:
        add_segment_statistics(yq, T, K, -1.0, D, Dc)
    return _sqnorm(i, T, D, Dc, G, goff)


@nb.njit(cache=True, nogil=True)
def nb_segment_labelings_gaps(i, c_i, labelings, fptr, fidx, fval, offsets, Y, obs, W, wc, P, Gc, K, U, D, Dc, out):
    """out[j] = <s(y_j) - M_i, theta_i> + L_i(y_j) (not / n) of every segmentation y_j (the rows of ``labelings``,
    (m, T_i)): block i's gap towards each corner before the 1/n and ell_i terms (eq. (6) of Osokin et al. 2016,
    what the cache and the away corner rank)."""
    s = offsets[i]
    T = offsets[i + 1] - s
    segment_potentials(s, T, fptr, fidx, fval, W, U)
    point = _theta_dot(T, P[s:s + T], Gc[i], U, wc)                # <M_i, theta_i>
    for j in range(labelings.shape[0]):
        _zero(T, D, Dc)
        add_segment_statistics(labelings[j], T, K, 1.0, D, Dc)
        out[j] = _theta_dot(T, D, Dc, U, wc) - point + c_i * wrong_states(s, T, K, Y, obs, labelings[j])


@nb.njit(cache=True, nogil=True)
def nb_segment_move(i, coef, gamma, fptr, fidx, fval, offsets, D, Dc, W, wc, P, Gc, shadow, shadow_W, shadow_wc,
                    shadow_coef):
    """Block i moves by gamma D: M_i += gamma D, w += coef A_i D (coef = -gamma / (lam n)), and the shadow
    vector (weighted averaging) by shadow_coef coef A_i D when ``shadow``."""
    s = offsets[i]
    T = offsets[i + 1] - s
    C = D.shape[1]
    for t in range(T):
        for a in range(fptr[s + t], fptr[s + t + 1]):
            f, v = fidx[a], coef * fval[a]
            for c in range(C):
                W[f, c] += v * D[t, c]
                if shadow:
                    shadow_W[f, c] += shadow_coef * v * D[t, c]
        for c in range(C):
            P[s + t, c] += gamma * D[t, c]
    for g in range(Dc.shape[0]):
        wc[g] += coef * Dc[g]
        Gc[i, g] += gamma * Dc[g]
        if shadow:
            shadow_wc[g] += shadow_coef * coef * Dc[g]


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_segment_gap_pass(c, outside, fptr, fidx, fval, offsets, Y, obs, W, wc, P, Gc, P_gt, G_gt, G, goff, K, L, T_max,
                        n_parts, labels, loss, dot, gold_dot):
    """Every block's FW corner at w (:func:`nb_segment_corner` without the Gram part), ``n_parts`` strided parts
    of the blocks in parallel threads, each with its own scratch: the labels into ``labels`` (N,), L_i(y*) into
    ``loss``, <s(y*) - M_i, theta_i> into ``dot`` and <s(y_i) - M_i, theta_i> into ``gold_dot`` (n,), from which
    the store forms g_i and H_i. Each block's figures are computed as in the serial loop (no sum crosses blocks),
    so they do not depend on the number of threads."""
    n = offsets.shape[0] - 1
    C = 3 * K
    for part in nb.prange(n_parts):
        # blocks part, part + n_parts, ...: long and short sentences spread over the parts alike
        U, S, D = np.empty((T_max, C)), np.empty((T_max, L, K)), np.empty((T_max, C))
        Dc = np.empty(Gc.shape[1])
        for i in range(part, n, n_parts):
            s, e = offsets[i], offsets[i + 1]
            loss[i], dot[i], _ = nb_segment_corner(i, c[i], outside, fptr, fidx, fval, offsets, Y, obs, W, wc, P, Gc,
                                                   G, goff, K, L, U, S, labels[s:e], D, Dc, False)
            acc = 0.0
            for t in range(e - s):
                for k in range(C):
                    acc += (P_gt[s + t, k] - P[s + t, k]) * U[t, k]
            for g in range(Dc.shape[0]):
                acc += (G_gt[i, g] - Gc[i, g]) * wc[g]
            gold_dot[i] = acc


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_segment_joint_scores(labelings, fptr, fidx, fval, offsets, W, wc, K, T_max, n_parts, out):
    """out[j, i] = <s(y_j,i), theta_i> of every block i under each joint segmentation y_j (the rows of
    ``labelings``, (m, N) ragged): the scores behind the cutting plane's products lam <a(y_j), w>
    (stores/segment_joint.py). Each block's potentials once, every labeling against them; blocks in
    ``n_parts`` strided parts over threads, each figure computed alone (no sum crosses blocks)."""
    n = offsets.shape[0] - 1
    C = 3 * K
    for part in nb.prange(n_parts):
        U, D = np.empty((T_max, C)), np.empty((T_max, C))
        Dc = np.empty(wc.shape[0])
        for i in range(part, n, n_parts):
            s, e = offsets[i], offsets[i + 1]
            T = e - s
            segment_potentials(s, T, fptr, fidx, fval, W, U)
            for j in range(labelings.shape[0]):
                _zero(T, D, Dc)
                add_segment_statistics(labelings[j, s:e], T, K, 1.0, D, Dc)
                out[j, i] = _theta_dot(T, D, Dc, U, wc)


@nb.njit(cache=True, nogil=True)
def nb_segment_add_labelings(labelings, weights, offsets, K, P, Gc):
    """P (N, 3K) += sum_j weights_j s(y_j) of the positions and Gc (n, G) += of the counts, y_j the rows of
    ``labelings`` ((m, N) ragged segmentations): the weighted statistics of the cutting plane's point."""
    for i in range(offsets.shape[0] - 1):
        s, e = offsets[i], offsets[i + 1]
        for j in range(labelings.shape[0]):
            if weights[j] != 0.0:
                add_segment_statistics(labelings[j, s:e], e - s, K, weights[j], P[s:e], Gc[i])


@nb.njit(cache=True, nogil=True)
def nb_segment_sparse_rows(rows, fptr, fidx, fval, stats, mark):
    """(the distinct features of the positions ``rows``, sorted (u,); block (u, C) with block[j] = sum over the rows
    r and their entries of feature feats[j] of x_r[f] stats[r]): the emission rows a mini-batch direction touches,
    X_rows^T stats without a d-sized scratch. ``mark`` (F,) int64 is -1 everywhere on entry and on return."""
    total = 0
    for r in range(rows.shape[0]):
        total += fptr[rows[r] + 1] - fptr[rows[r]]
    seen = np.empty(total, np.int64)
    u = 0
    for r in range(rows.shape[0]):
        for a in range(fptr[rows[r]], fptr[rows[r] + 1]):
            f = fidx[a]
            if mark[f] < 0:
                mark[f] = 0
                seen[u] = f
                u += 1
    feats = np.sort(seen[:u])
    for j in range(u):
        mark[feats[j]] = j
    C = stats.shape[1]
    block = np.zeros((u, C))
    for r in range(rows.shape[0]):
        for a in range(fptr[rows[r]], fptr[rows[r] + 1]):
            j, v = mark[fidx[a]], fval[a]
            for c in range(C):
                block[j, c] += v * stats[r, c]
    for j in range(u):
        mark[feats[j]] = -1
    return feats, block
