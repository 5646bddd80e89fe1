"""Numba kernels of the compact chain store (CPU, float64): per-block unaries, the terms of the
block gap (eq. (6) of Osokin et al. 2016) in the sufficient-statistics form documented in
:mod:`ssvm_torch.stores.chain`, sparse block moves, the batched gap pass and the Gram matrices.
They read and write zero-copy numpy views of the store's tensors."""
from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from ..chain.numba_viterbi import viterbi_all, viterbi_segment
from ..devices import launched

# fastmath lets LLVM vectorize the floating-point reductions (the unary dot products dominate the
# batch-1 step); results stay deterministic for a given build, and exactness is tested against the
# torch path to 1e-9.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


class HostViews(NamedTuple):
    """Zero-copy numpy views of a numba chain store's tensors (what its kernels read and write)."""
    fptr: np.ndarray
    fidx: np.ndarray
    fval: np.ndarray
    offsets: np.ndarray
    Y: np.ndarray
    G: np.ndarray
    goff: np.ndarray
    W: np.ndarray            # (K, F) emission view of w
    first: np.ndarray
    last: np.ndarray
    trans: np.ndarray
    Mu: np.ndarray
    Mt: np.ndarray


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_block_unary(i, fptr, fidx, fval, off, W, U):
    """U[t, k] = <W[k], x_t> for the positions of block i (CSR features)."""
    s = off[i]
    T = off[i + 1] - s
    K = W.shape[0]
    for t in range(T):
        for k in range(K):
            U[t, k] = 0.0
        for j in range(fptr[s + t], fptr[s + t + 1]):
            v = fval[j]
            f = fidx[j]
            for k in range(K):
                U[t, k] += v * W[k, f]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_m_theta(i, off, U, first, last, trans, Mu, Mt):
    """<M_i, theta_i>: the expected score of block i's current dual point."""
    s = off[i]
    T = off[i + 1] - s
    K = U.shape[1]
    m = 0.0
    for t in range(T):
        for k in range(K):
            m += Mu[s + t, k] * U[t, k]
    for k in range(K):
        m += Mu[s, k] * first[k] + Mu[s + T - 1, k] * last[k]
    for a in range(K):
        for b in range(K):
            m += Mt[i, a, b] * trans[a, b]
    return m


@nb.njit(cache=True, nogil=True)
def nb_build_delta(i, p_cur, P, q_cur, Q, off, Mu, Mt, Du, Dt):
    """D = S(P) - S(Q) for two points of block i, each a labeling or (``*_cur``) the current dual
    point M_i: unary part Du (T, K), transition part Dt (K, K) [next, prev]."""
    s = off[i]
    T = off[i + 1] - s
    K = Mu.shape[1]
    for t in range(T):
        for k in range(K):
            Du[t, k] = (Mu[s + t, k] if p_cur else 0.0) - (Mu[s + t, k] if q_cur else 0.0)
        if not p_cur:
            Du[t, P[t]] += 1.0
        if not q_cur:
            Du[t, Q[t]] -= 1.0
    for a in range(K):
        for b in range(K):
            Dt[a, b] = (Mt[i, a, b] if p_cur else 0.0) - (Mt[i, a, b] if q_cur else 0.0)
    for t in range(T - 1):
        if not p_cur:
            Dt[P[t + 1], P[t]] += 1.0
        if not q_cur:
            Dt[Q[t + 1], Q[t]] -= 1.0


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_delta_sqnorm(i, Du, Dt, off, G, goff):
    """||A_i(D)||^2 = sum_k D_k^T G_i D_k + |D_0|^2 + |D_{T-1}|^2 + |Dt|_F^2."""
    s = off[i]
    T = off[i + 1] - s
    K = Du.shape[1]
    g0 = goff[i]
    sq = 0.0
    for k in range(K):
        for t in range(T):
            dt = Du[t, k]
            if dt == 0.0:
                continue
            acc = 0.0
            for u in range(T):
                acc += G[g0 + t * T + u] * Du[u, k]
            sq += dt * acc
    for k in range(K):
        sq += Du[0, k] * Du[0, k] + Du[T - 1, k] * Du[T - 1, k]
    for a in range(K):
        for b in range(K):
            sq += Dt[a, b] * Dt[a, b]
    return sq


@nb.njit(cache=True, nogil=True, fastmath=_FAST, inline="always")
def nb_add_position(s, t, T, k, coef, fptr, fidx, fval, W, first, last):
    """Add coef * (the features of position t, the first/last indicators) to state k's weights."""
    for j in range(fptr[s + t], fptr[s + t + 1]):
        W[k, fidx[j]] += coef * fval[j]
    if t == 0:
        first[k] += coef
    if t == T - 1:
        last[k] += coef


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_delta_move(i, c, gamma, Du, Dt, fptr, fidx, fval, off, W, first, last, trans, Mu, Mt,
                   sh_on, sh_c, SW, Sfirst, Slast, Strans):
    """w += c A_i(D) and M_i += gamma D (sparse in the nonzeros of D); with ``sh_on`` the shadow
    vector (SW, Sfirst, Slast, Strans) gets sh_c times the same change."""
    s = off[i]
    T = off[i + 1] - s
    K = W.shape[0]
    cs = c * sh_c
    for t in range(T):
        for k in range(K):
            dk = Du[t, k]
            if dk != 0.0:
                nb_add_position(s, t, T, k, c * dk, fptr, fidx, fval, W, first, last)
                if sh_on:
                    nb_add_position(s, t, T, k, cs * dk, fptr, fidx, fval, SW, Sfirst, Slast)
                Mu[s + t, k] += gamma * dk
    for a in range(K):
        for b in range(K):
            if Dt[a, b] != 0.0:
                trans[a, b] += c * Dt[a, b]
                if sh_on:
                    Strans[a, b] += cs * Dt[a, b]
                Mt[i, a, b] += gamma * Dt[a, b]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_fw_corner(i, lw, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt, U, delta, newd, bp, Du,
                 Dt, ys, pen):
    """Batch-1 loss-augmented oracle for block i (``lw``: the loss of one wrong position) and the
    terms of eq. (6) in units of 1/(lam n): returns (L(y*), <S(y*) - M_i, theta_i>,
    ||A_i(S(y*) - M_i)||^2) and writes y* into ys; ``pen``: tag constraints (oracles/viterbi.py). ``Y``
    enters the loss only (the gold statistics are in Mu, Mt): a negative label is unobserved, no loss."""
    s = off[i]
    T = off[i + 1] - s
    nb_block_unary(i, fptr, fidx, fval, off, W, U)
    aug = viterbi_segment(U, np.int64(0), T, first, last, trans, Y[s:s + T], lw, ys, delta, newd, bp, pen)
    wrong = 0
    for t in range(T):
        if ys[t] != Y[s + t] and Y[s + t] >= 0:
            wrong += 1
    loss = wrong * lw
    dot = (aug - loss) - nb_m_theta(i, off, U, first, last, trans, Mu, Mt)
    nb_build_delta(i, False, ys, True, ys, off, Mu, Mt, Du, Dt)
    return loss, dot, nb_delta_sqnorm(i, Du, Dt, off, G, goff)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_corner_gaps(i, lw, labels, fptr, fidx, fval, off, Y, W, first, last, trans, Mu, Mt, U, out):
    """For each row y of ``labels`` (m, T_i): <S(y), theta_i> + L(y) - <M_i, theta_i>, i.e. n times
    (block gap w.r.t. corner y + ell_i)."""
    s = off[i]
    T = off[i + 1] - s
    nb_block_unary(i, fptr, fidx, fval, off, W, U)
    m_theta = nb_m_theta(i, off, U, first, last, trans, Mu, Mt)
    for r in range(labels.shape[0]):
        v = first[labels[r, 0]] + last[labels[r, T - 1]]
        wrong = 0
        for t in range(T):
            v += U[t, labels[r, t]]
            if labels[r, t] != Y[s + t] and Y[s + t] >= 0:
                wrong += 1
            if t + 1 < T:
                v += trans[labels[r, t + 1], labels[r, t]]
        out[r] = v + wrong * lw - m_theta


@nb.njit(cache=True, nogil=True)
def nb_cached_gaps(flat, starts, counts, tw, fptr, fidx, fval, off, Y, W, first, last, trans, Mu, Mt, U, out):
    """:func:`nb_corner_gaps` of every block at once: block i's ``counts[i]`` cached labelings are rows of
    ``flat[starts[i]:]`` (each of its length T_i), their values go to ``out`` in the same order (one call for a
    cache round of the 1-slack cutting plane instead of one per block)."""
    n = off.shape[0] - 1
    r = 0
    for i in range(n):
        T = off[i + 1] - off[i]
        c = counts[i]
        nb_corner_gaps(i, tw[i], flat[starts[i]:starts[i] + c * T].reshape((c, T)), fptr, fidx, fval, off, Y, W,
                       first, last, trans, Mu, Mt, U, out[r:r + c])
        r += c


@nb.njit(cache=True, nogil=True)
def nb_cached_pick(gaps, flat, starts, counts, off, Y, labels, wrong):
    """Per block the first cached labeling of the largest gap (``gaps`` in :func:`nb_cached_gaps`' order), written
    into its rows of ``labels`` (N,), and its count of wrong observed positions (``Y`` >= 0) into ``wrong``."""
    n = off.shape[0] - 1
    r = 0
    for i in range(n):
        T = off[i + 1] - off[i]
        c = counts[i]
        b = 0
        for k in range(1, c):
            if gaps[r + k] > gaps[r + b]:
                b = k
        base = starts[i] + b * T
        s = off[i]
        w = 0
        for t in range(T):
            y = flat[base + t]
            labels[s + t] = y
            if y != Y[s + t] and Y[s + t] >= 0:
                w += 1
        wrong[i] = w
        r += c


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_gap_pass(U, off, Y, YL, first, last, trans, Mu, Mt, tw, pen):
    """Loss-augmented Viterbi for every block (``tw`` (n,): the loss of one wrong position of each);
    returns labels (N,), aug scores, <M_i, theta_i>, ground-truth scores and mismatch counts (n,).
    ``Y`` the labels of the ground-truth scores, ``YL`` those of the loss (``Y`` itself, or with negative
    unobserved positions: the latent SSVM's completion and observed labels, ssvm_torch/latent.py)."""
    N, K = U.shape
    n = off.shape[0] - 1
    labels = np.empty(N, dtype=np.int64)
    aug = np.empty(n)
    m_theta = np.empty(n)
    gt_score = np.empty(n)
    wrong = np.empty(n)
    viterbi_all(U, off, first, last, trans, YL, tw, labels, aug, pen)
    for i in range(n):
        s = off[i]
        T = off[i + 1] - s
        m_theta[i] = nb_m_theta(i, off, U[s:s + T], first, last, trans, Mu, Mt)
        gt_score[i], wrong[i] = nb_gold_score_wrong(U[s:s + T], labels[s:s + T], Y[s:s + T], first, last, trans,
                                                    YL[s:s + T])
    return labels, aug, m_theta, gt_score, wrong


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_gold_score_wrong(Ub, ys, gold, first, last, trans, loss_gold):
    """(<w, phi(x_i, y_i)> from the block's unaries ``Ub`` (T, K), the number of positions where the
    labeling ``ys`` differs from ``loss_gold`` (``gold``, or negative where unobserved: not counted))."""
    T = gold.shape[0]
    gs = first[gold[0]] + last[gold[T - 1]]
    wr = 0.0
    for t in range(T):
        gs += Ub[t, gold[t]]
        if t + 1 < T:
            gs += trans[gold[t + 1], gold[t]]
        if ys[t] != loss_gold[t] and loss_gold[t] >= 0:
            wr += 1.0
    return gs, wr


@nb.njit(cache=True, nogil=True)
def nb_add_psi(i, coef, ys, fptr, fidx, fval, off, Y, W, first, last, trans):
    """w += coef * psi_i(ys) = coef * (phi(x_i, y_i) - phi(x_i, ys))."""
    s = off[i]
    T = off[i + 1] - s
    for t in range(T):
        a, b = Y[s + t], ys[t]
        if a != b:
            for j in range(fptr[s + t], fptr[s + t + 1]):
                W[a, fidx[j]] += coef * fval[j]
                W[b, fidx[j]] -= coef * fval[j]
    first[Y[s]] += coef
    first[ys[0]] -= coef
    last[Y[s + T - 1]] += coef
    last[ys[T - 1]] -= coef
    for t in range(T - 1):
        trans[Y[s + t + 1], Y[s + t]] += coef
        trans[ys[t + 1], ys[t]] -= coef


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_row_unary(fptr, fidx, fval, r, W, out):
    """out[k] = sum over the stored entries (f, v) of CSR row r of v W[k, f] (W: (K, F), any layout)."""
    for k in range(W.shape[0]):
        out[k] = 0.0
    for j in range(fptr[r], fptr[r + 1]):
        v = fval[j]
        f = fidx[j]
        for k in range(W.shape[0]):
            out[k] += v * W[k, f]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_unary_all(WT, fptr, fidx, fval, U):
    """U[r, k] = sum_j fval[j] * W[k, fidx[j]] over the stored entries of row r (WT = W^T, (F, K))."""
    W = WT.T
    for r in range(U.shape[0]):
        nb_row_unary(fptr, fidx, fval, r, W, U[r])


@nb.njit(cache=True)
def nb_gram(fptr, fidx, fval, off, goff, G):
    """Per-sequence Gram matrices G_i[t, u] = <x_t, x_u> from CSR rows with sorted column indices."""
    n = off.shape[0] - 1
    for i in range(n):
        s = off[i]
        T = off[i + 1] - s
        for t in range(T):
            for u in range(t, T):
                a, a_end = fptr[s + t], fptr[s + t + 1]
                b, b_end = fptr[s + u], fptr[s + u + 1]
                acc = 0.0
                while a < a_end and b < b_end:
                    if fidx[a] == fidx[b]:
                        acc += fval[a] * fval[b]
                        a += 1
                        b += 1
                    elif fidx[a] < fidx[b]:
                        a += 1
                    else:
                        b += 1
                G[goff[i] + t * T + u] = acc
                G[goff[i] + u * T + t] = acc


@launched
@nb.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def nb_batch_corners(idx, lab_off, tw, fptr, fidx, fval, off, Y, W, first, last, trans, Mu, Mt, labels, loss, dot,
                     pen):
    """The loss-augmented oracle of the blocks ``idx`` in parallel threads (one mini-batch BCFW
    step; ``Y``: the loss labels, negative unobserved): block b's y* goes to labels[lab_off[b]:lab_off[b+1]], L(y*) to loss[b] and
    <S(y*) - M_i, theta_i> (units of 1/(lam n), as in :func:`nb_fw_corner`) to dot[b]."""
    K = W.shape[0]
    for b in nb.prange(idx.shape[0]):
        i = idx[b]
        s = off[i]
        T = off[i + 1] - s
        U = np.empty((T, K))
        delta, newd = np.empty(K), np.empty(K)
        bp = np.empty((T, K), dtype=np.int64)
        ys = np.empty(T, dtype=np.int64)
        nb_block_unary(i, fptr, fidx, fval, off, W, U)
        aug = viterbi_segment(U, np.int64(0), T, first, last, trans, Y[s:s + T], tw[i], ys, delta, newd, bp, pen)
        wrong = 0
        for t in range(T):
            labels[lab_off[b] + t] = ys[t]
            if ys[t] != Y[s + t] and Y[s + t] >= 0:
                wrong += 1
        loss[b] = wrong * tw[i]
        dot[b] = (aug - loss[b]) - nb_m_theta(i, off, U, first, last, trans, Mu, Mt)


def batch_corners_host(idx, lengths, tw, views, pen):
    """:func:`nb_batch_corners` on host arrays: (labels of all blocks concatenated, L(y*), dot) for
    the blocks ``idx`` of the given ``lengths``; ``tw`` (n,) the loss of one wrong position of every
    block; ``views`` are the chain store's numpy views; ``pen`` the tag constraints (oracles/viterbi.py)."""
    lab_off = np.zeros(len(lengths) + 1, dtype=np.int64)
    lab_off[1:] = np.cumsum(lengths)
    flat = np.empty(int(lab_off[-1]), dtype=np.int64)
    loss, dot = np.empty(len(lengths)), np.empty(len(lengths))
    fptr, fidx, fval, off, Y, _, _, W, first, last, trans, Mu, Mt = views
    nb_batch_corners(idx, lab_off, tw, fptr, fidx, fval, off, Y, W, first, last, trans, Mu, Mt, flat, loss, dot, pen)
    return flat, loss, dot


@nb.njit(cache=True, nogil=True)
def nb_csr_scatter_rows(fptr, fidx, fval, D, W):
    """W[k, f] += sum_r D[r, k] x_r[f] over the CSR rows r: X^T D without a sparse transpose."""
    K = W.shape[0]
    for r in range(fptr.shape[0] - 1):
        for j in range(fptr[r], fptr[r + 1]):
            f, v = fidx[j], fval[j]
            for k in range(K):
                W[k, f] += D[r, k] * v


@nb.njit(cache=True, nogil=True)
def nb_stats_scatter(fptr, fidx, fval, Mu, Y, W):
    """W[k, f] += sum_r D[r, k] x_r[f] with D[r] = e_{Y[r]} - Mu[r] (S(y) - M of a dual's positions) formed row by
    row, over its nonzeros only: the emission part of the map from duals to w (ChainDual.w_from_stats) without
    the (N, K) temporary D."""
    K = W.shape[0]
    labels = np.empty(K, dtype=np.int64)
    values = np.empty(K)
    for r in range(fptr.shape[0] - 1):
        m = 0
        for k in range(K):
            d = (1.0 if k == Y[r] else 0.0) - Mu[r, k]
            if d != 0.0:
                labels[m] = k
                values[m] = d
                m += 1
        for j in range(fptr[r], fptr[r + 1]):
            f, v = fidx[j], fval[j]
            for q in range(m):
                W[labels[q], f] += values[q] * v


@nb.njit(cache=True, nogil=True)
def nb_scatter_entries(W, index, value, stats, row):
    """W[k, index[e]] += stats[row[e], k] * value[e] for every entry e in order and every label k:
    the emission part of a mini-batch direction (one pass, no (entries, K) temporary)."""
    K = W.shape[0]
    for e in range(index.shape[0]):
        f, v, r = index[e], value[e], row[e]
        for k in range(K):
            W[k, f] += stats[r, k] * v


@nb.njit(cache=True, nogil=True)
def nb_labelings_scores(labelings, off, U, first, last, trans, out):
    """out[j] = sum over the sequences of <w, phi(x_i, y_j,i)> for each ragged labeling y_j (the rows of
    ``labelings``, (m, N)) from the potentials U (N, K), first, last and trans [next, prev]: the chain part of the
    cutting plane's products lam <a(y_j), w> (stores/chain.py), one walk per labeling, no (N, K) temporary."""
    for j in range(labelings.shape[0]):
        acc = 0.0
        for i in range(off.shape[0] - 1):
            s, e = off[i], off[i + 1]
            if e == s:
                continue
            acc += first[labelings[j, s]] + last[labelings[j, e - 1]]
            for r in range(s, e):
                acc += U[r, labelings[j, r]]
                if r > s:
                    acc += trans[labelings[j, r], labelings[j, r - 1]]
        out[j] = acc
