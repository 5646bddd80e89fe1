"""Compiled kernels of the dependency-tree block store (:mod:`ssvm_torch.stores.tree`), on numpy views of
its tensors (CPU float64).

Block i is sentence i with n_i words and n_i^2 possible arcs; arc (m, h) is number
``arc_off[i] + (m - 1) n_i + (h if h < m else h - 1)`` and its features are ``ids[ptr[a]:ptr[a + 1]]`` plus its head
token's, ``tids[tptr[t]:tptr[t + 1]]`` with t = t0 + h, t0 = offsets[i] + i (binary; data/trees.py). A
coefficient on arcs reaches a token's features through the column sum c_h = sum_m D[m, h]. The block's dual point is its arc marginals M_i (the expected arc indicators under alpha_i), so
with G_i the gold tree's indicators and theta_a = <w, f_a> the arc scores:

    w_i = sum_a (G_a - M_a) f_a / (lam n)
    lam <w_i - w_s, w> = (<S(y*), theta> - <M_i, theta>) / n
    ||w_i - w_s||^2   = || sum_a (S(y*)_a - M_a) f_a ||^2 / (lam n)^2

(stores/tree.py's docstring). A difference of two points is a dense D over the block's arcs; its image
v = sum_a D_a f_a is accumulated in a small hash table of the touched features (:func:`nb_image`), which
gives both the squared norm and the move of w.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..trees.numba_eisner import eisner_best
from ..trees.numba_mst import mst_best

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def arc_index(m, h, n):
    """The position of arc h -> m among a sentence's n^2 arcs."""
    return (m - 1) * n + (h if h < m else h - 1)


@nb.njit(cache=True, nogil=True)
def nb_theta(base, n, ptr, ids, t0, tptr, tids, w, theta):
    """theta[a] = <w, f_a> for the n^2 arcs of the sentence whose arcs start at ``base`` and tokens at ``t0``."""
    u = np.empty(n + 1)
    for h in range(n + 1):
        s = 0.0
        for j in range(tptr[t0 + h], tptr[t0 + h + 1]):
            s += w[tids[j]]
        u[h] = s
    a = 0
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            s = u[h]
            for j in range(ptr[base + a], ptr[base + a + 1]):
                s += w[ids[j]]
            theta[a] = s
            a += 1


@nb.njit(cache=True, nogil=True)
def nb_column_sums(D, n, c):
    """c[h] = sum_m D[arc(m, h)]: what the arcs' coefficients put on head token h's features."""
    for h in range(n + 1):
        c[h] = 0.0
    a = 0
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            c[h] += D[a]
            a += 1


@nb.njit(cache=True, nogil=True)
def nb_labeling_score(theta, n, heads):
    """sum_m theta[arc(m, heads[m - 1])] for a labeling of the words 1..n."""
    s = 0.0
    for m in range(1, n + 1):
        s += theta[arc_index(m, heads[m - 1], n)]
    return s


@nb.njit(cache=True, nogil=True)
def nb_block_oracle(theta, n, gold, lgold, g0, cost, projective, multiroot, gold_ok, S, heads):
    """The loss-augmented best tree y* of one sentence from its arc scores theta into heads[0:n]; returns
    (<S(y*), theta>, <G, theta>, wrong heads of y*). ``gold`` holds the gold (or completed) heads, ``lgold`` the
    heads the loss reads: -1 at an unobserved word, whose arcs cost nothing and which is never wrong. Where the gold tree is outside the decoder's space
    (``gold_ok`` False: non-projective gold under a projective decoder, several root children under a
    single-root one) the block's labelings are that space plus the gold tree, so y* is the gold tree when no
    decoded tree beats it: H_i >= 0 as for every other sentence."""
    for h in range(n + 1):
        S[0, h] = NEG_INF
    for m in range(1, n + 1):
        gm = lgold[g0 + m - 1]
        for h in range(n + 1):
            if h == m:
                S[m, h] = NEG_INF
            else:
                S[m, h] = theta[arc_index(m, h, n)] + (0.0 if h == gm or gm < 0 else cost)
    hd = np.empty(n + 1, dtype=np.int64)
    if projective:
        eisner_best(S, n, multiroot, hd)
    else:
        mst_best(S, n, multiroot, hd)
    gold_score = 0.0
    for m in range(1, n + 1):
        gold_score += theta[arc_index(m, gold[g0 + m - 1], n)]
    wrong = 0
    score = 0.0
    for m in range(1, n + 1):
        heads[m - 1] = hd[m]
        score += theta[arc_index(m, hd[m], n)]
        if hd[m] != lgold[g0 + m - 1] and lgold[g0 + m - 1] >= 0:
            wrong += 1
    if not gold_ok and score + cost * wrong < gold_score:
        for m in range(1, n + 1):
            heads[m - 1] = gold[g0 + m - 1]
        return gold_score, gold_score, 0
    return score, gold_score, wrong


@nb.njit(cache=True, nogil=True)
def nb_m_dot(M, base, n, theta):
    """<M_i, theta> over the block's arcs."""
    s = 0.0
    for a in range(n * n):
        s += M[base + a] * theta[a]
    return s


@nb.njit(cache=True, nogil=True)
def nb_delta(p_is_m, p_heads, q_is_m, q_heads, M, base, n, D):
    """D = S(P) - S(Q) over the block's arcs, a point being the block's marginals M_i (``*_is_m``) or a
    labeling (heads of words 1..n)."""
    for a in range(n * n):
        D[a] = (M[base + a] if p_is_m else 0.0) - (M[base + a] if q_is_m else 0.0)
    if not p_is_m:
        for m in range(1, n + 1):
            D[arc_index(m, p_heads[m - 1], n)] += 1.0
    if not q_is_m:
        for m in range(1, n + 1):
            D[arc_index(m, q_heads[m - 1], n)] -= 1.0


@nb.njit(cache=True, nogil=True)
def nb_support_nnz(D, n, base, ptr, t0, tptr):
    """The number of feature entries of the arcs with D_a != 0 and of their heads' tokens (bounds the distinct
    features of the image)."""
    k = 0
    for a in range(n * n):
        if D[a] != 0.0:
            k += ptr[base + a + 1] - ptr[base + a]
    c = np.empty(n + 1)
    nb_column_sums(D, n, c)
    for h in range(n + 1):
        if c[h] != 0.0:
            k += tptr[t0 + h + 1] - tptr[t0 + h]
    return k


@nb.njit(cache=True, nogil=True)
def _insert(f, c, keys, vals, used, nu, mask):
    s = (f * 2654435761) & mask
    while True:
        k = keys[s]
        if k == f:
            vals[s] += c
            return nu
        if k == -1:
            keys[s] = f
            vals[s] = c
            used[nu] = s
            return nu + 1
        s = (s + 1) & mask


@nb.njit(cache=True, nogil=True)
def nb_image(D, n, base, ptr, ids, t0, tptr, tids, keys, vals, used, nu):
    """v += sum_a D_a f_a over the arcs with D_a != 0, in an open-addressing table (keys: feature ids, -1
    empty; its size a power of two above twice the distinct features, so probes stay short) whose used slots
    are listed in used[:nu]; returns the new nu. A table of the step's features stays in cache where a
    d-sized scratch would miss on every feature."""
    mask = keys.shape[0] - 1
    for a in range(n * n):
        c = D[a]
        if c == 0.0:
            continue
        for j in range(ptr[base + a], ptr[base + a + 1]):
            nu = _insert(ids[j], c, keys, vals, used, nu, mask)
    col = np.empty(n + 1)
    nb_column_sums(D, n, col)
    for h in range(n + 1):
        if col[h] != 0.0:
            for j in range(tptr[t0 + h], tptr[t0 + h + 1]):
                nu = _insert(tids[j], col[h], keys, vals, used, nu, mask)
    return nu


@nb.njit(cache=True, nogil=True)
def nb_sqnorm(vals, used, nu):
    s = 0.0
    for k in range(nu):
        v = vals[used[k]]
        s += v * v
    return s


@nb.njit(cache=True, nogil=True)
def nb_apply(keys, vals, used, nu, w, scale, shadow, shadow_scale):
    """w += scale v and shadow += shadow_scale v on the image's features (shadow_scale 0: none)."""
    for k in range(nu):
        s = used[k]
        f = keys[s]
        w[f] += scale * vals[s]
        if shadow_scale != 0.0:
            shadow[f] += shadow_scale * vals[s]


@nb.njit(cache=True, nogil=True)
def nb_clear(keys, used, nu):
    for k in range(nu):
        keys[used[k]] = -1


@nb.njit(cache=True, nogil=True)
def nb_gap_pass(offsets, arc_off, ptr, ids, tptr, tids, w, gold, lgold, costs, projective, multiroot, gold_ok, M, labels,
                aug, gold_scores, m_theta, wrong):
    """The loss-augmented best tree of every sentence at w (labels: the heads of every word, flat) with
    aug = <S(y*), theta> + cost wrong, <G, theta>, <M_i, theta> and the wrong heads per sentence."""
    nmax = 0
    for i in range(offsets.shape[0] - 1):
        nmax = max(nmax, offsets[i + 1] - offsets[i])
    theta = np.empty(nmax * nmax)
    S = np.empty((nmax + 1, nmax + 1))
    for i in range(offsets.shape[0] - 1):
        n, base, g0 = offsets[i + 1] - offsets[i], arc_off[i], offsets[i]
        nb_theta(base, n, ptr, ids, g0 + i, tptr, tids, w, theta)
        s, gs, k = nb_block_oracle(theta, n, gold, lgold, g0, costs[i], projective, multiroot, gold_ok[i], S,
                                   labels[g0:g0 + n])
        aug[i] = s + costs[i] * k
        gold_scores[i] = gs
        m_theta[i] = nb_m_dot(M, base, n, theta)
        wrong[i] = k


@nb.njit(cache=True, nogil=True)
def nb_decode_all(offsets, arc_off, ptr, ids, tptr, tids, w, projective, multiroot, labels, scores):
    """The best tree (no loss) of every sentence at w: labels (flat heads) and s(y) per sentence."""
    nmax = 0
    for i in range(offsets.shape[0] - 1):
        nmax = max(nmax, offsets[i + 1] - offsets[i])
    theta = np.empty(nmax * nmax)
    S = np.empty((nmax + 1, nmax + 1))
    hd = np.empty(nmax + 1, dtype=np.int64)
    for i in range(offsets.shape[0] - 1):
        n, base, g0 = offsets[i + 1] - offsets[i], arc_off[i], offsets[i]
        nb_theta(base, n, ptr, ids, g0 + i, tptr, tids, w, theta)
        for h in range(n + 1):
            S[0, h] = NEG_INF
        for m in range(1, n + 1):
            for h in range(n + 1):
                S[m, h] = NEG_INF if h == m else theta[arc_index(m, h, n)]
        if projective:
            scores[i] = eisner_best(S, n, multiroot, hd)
        else:
            scores[i] = mst_best(S, n, multiroot, hd)
        for m in range(1, n + 1):
            labels[g0 + m - 1] = hd[m]


@nb.njit(cache=True, nogil=True)
def nb_statistics_image(offsets, arc_off, ptr, ids, tptr, tids, gold, M, labels, use_labels, coef, out):
    """out += coef sum_i sum_a (G_a - X_a) f_a with X = the labels' indicators (``use_labels``) or M:
    the map from dual points to w (times lam n), over every sentence (head tokens' features included)."""
    nmax = 0
    for i in range(offsets.shape[0] - 1):
        nmax = max(nmax, offsets[i + 1] - offsets[i])
    col = np.empty(nmax + 1)
    for i in range(offsets.shape[0] - 1):
        n, base, g0 = offsets[i + 1] - offsets[i], arc_off[i], offsets[i]
        for h in range(n + 1):
            col[h] = 0.0
        for m in range(1, n + 1):
            gm = gold[g0 + m - 1]
            ym = labels[g0 + m - 1] if use_labels else -1
            for h in range(n + 1):
                if h == m:
                    continue
                a = base + arc_index(m, h, n)
                c = (1.0 if h == gm else 0.0) - ((1.0 if h == ym else 0.0) if use_labels else M[a])
                if c != 0.0:
                    col[h] += c
                    c *= coef
                    for j in range(ptr[a], ptr[a + 1]):
                        out[ids[j]] += c
        t0 = g0 + i
        for h in range(n + 1):
            if col[h] != 0.0:
                c = col[h] * coef
                for j in range(tptr[t0 + h], tptr[t0 + h + 1]):
                    out[tids[j]] += c


@nb.njit(cache=True, nogil=True)
def nb_fw_corner(i, offsets, arc_off, ptr, ids, tptr, tids, w, gold, lgold, costs, projective, multiroot, gold_ok, M,
                 theta, S, D, keys, vals, used, nu_prev, heads):
    """BCFW's corner of block i in one call: the arc scores, the loss-augmented tree (into heads), <M_i, theta>,
    D = S(y*) - M_i and, when the hash table is large enough, the image of D and its squared norm. Returns
    (<S(y*), theta>, <M_i, theta>, wrong heads, features in the image (-1: the table is too small: the
    caller grows it and builds the image), ||image||^2, the support's feature entries)."""
    n, base, g0 = offsets[i + 1] - offsets[i], arc_off[i], offsets[i]
    t0 = g0 + i
    nb_theta(base, n, ptr, ids, t0, tptr, tids, w, theta)
    score, _, wrong = nb_block_oracle(theta, n, gold, lgold, g0, costs[i], projective, multiroot, gold_ok[i], S, heads)
    m_theta = nb_m_dot(M, base, n, theta)
    nb_delta(False, heads, True, heads, M, base, n, D)
    need = nb_support_nnz(D, n, base, ptr, t0, tptr)
    nb_clear(keys, used, nu_prev)
    if 2 * need > keys.shape[0]:
        return score, m_theta, wrong, -1, 0.0, need
    nu = nb_image(D, n, base, ptr, ids, t0, tptr, tids, keys, vals, used, 0)
    return score, m_theta, wrong, nu, nb_sqnorm(vals, used, nu), need


@nb.njit(cache=True, nogil=True)
def nb_move(base, n, gamma, D, M, keys, vals, used, nu, w, scale, shadow, shadow_scale):
    """M_i += gamma D and w += scale v (the image of D, in the table), the shadow likewise."""
    for a in range(n * n):
        M[base + a] += gamma * D[a]
    nb_apply(keys, vals, used, nu, w, scale, shadow, shadow_scale)
