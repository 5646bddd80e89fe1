"""Numba kernels of the coordinate-sharded chain store (:mod:`ssvm_torch.distributed.column_shards`; CPU,
float64): partial unary scores of a column share of the features, the loss-augmented decoding of
some blocks of a batch from given unaries (with the terms of the block gap, eq. (6) of Osokin et al.
2016), the exact gap terms of a subset of blocks, and a column share of the mini-batch direction
accumulated, measured and applied without touching any other coordinate.

Positions are the rows of the store's CSR features. A rank's share of the emission weights is a
compact (F_r, K) C-contiguous array ``Wr`` (row c: the K weights of the rank's c-th column; the CSR
of the share holds these local column numbers): a column's K weights are one contiguous run, which
the inner loops over k vectorize, and a rank's working set is its share only -- 1/P of w, which
keeps the ranks from competing for the cache as much as the interleaved columns of the whole w did."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..chain.numba_viterbi import viterbi_segment, viterbi_segment_tt
from ..devices import launched
from .chain_kernels import _FAST, nb_gold_score_wrong, nb_m_theta


@nb.njit(cache=True, nogil=True)
def nb_balanced_owners(counts, order, P):
    """owner[f] in [0, P) for every feature column f: the columns in ``order`` (most stored entries
    first) each go to the rank with the fewest entries so far (longest-processing-time rule), so
    that every rank's share of the entries -- its share of the partial unaries and of the direction
    -- is about 1/P even when one column (a bias feature) is in every row."""
    owner = np.empty(counts.shape[0], dtype=np.int64)
    load = np.zeros(P, dtype=np.int64)
    for j in range(order.shape[0]):
        f = order[j]
        best = 0
        for r in range(1, P):
            if load[r] < load[best]:
                best = r
        owner[f] = best
        load[best] += counts[f]
    return owner


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nb_rows_unary(rows, fptr, fidx, fval, Wr, U):
    """U[j, k] = sum over the stored entries (c, v) of position rows[j] of v Wr[c, k]: with the CSR
    of one column share (local column numbers) and that share's weights Wr, the share's partial
    scores (the ranks' partial scores sum to X W^T; each sums its entries in CSR order)."""
    K = Wr.shape[1]
    for j in range(rows.shape[0]):
        r = rows[j]
        u = U[j]
        for k in range(K):
            u[k] = 0.0
        for e in range(fptr[r], fptr[r + 1]):
            v = fval[e]
            wc = Wr[fidx[e]]
            for k in range(K):
                u[k] += v * wc[k]


@nb.njit(cache=True, nogil=True)
def nb_decode_block(Ub, first, last, trans3, per_position, Yb, lw, pen, out):
    """The loss-augmented Viterbi of one block from its unaries Ub (T, K) (transitions trans3[0], or
    trans3[t] into position t when ``per_position``): y* into ``out``; returns (its augmented score,
    the number of positions where it differs from the ground truth Yb)."""
    T, K = Ub.shape
    ys = np.empty(T, dtype=np.int64)
    aug = viterbi_segment_tt(Ub, np.int64(0), T, first, last, trans3, per_position, Yb, lw, ys, np.empty(K),
                             np.empty(K), np.empty((T, K), dtype=np.int64), pen)
    wrong = 0
    for t in range(T):
        out[t] = ys[t]
        if ys[t] != Yb[t]:
            wrong += 1
    return aug, wrong


@launched
@nb.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def nb_decode_rows(mine, blocks, starts, shift, off, Y, U, first, last, trans, Mu, Mt, tw, pen, labels, loss, dot):
    """Loss-augmented Viterbi of the batch entries ``mine``: entry b is block blocks[b] whose
    unaries are the rows starts[b] - shift .. starts[b+1] - shift of ``U`` (the batch's positions in
    batch order, from its position ``shift`` on). Writes
    y*_b to labels[starts[b]:starts[b+1]], L(y*_b) to loss[b] and <S(y*_b) - M_i, theta_i> (the
    block-gap term of eq. (6) in units of 1/(lam n), as :func:`~ssvm_torch.oracles.chain_kernels.nb_batch_corners`)
    to dot[b]."""
    K = U.shape[1]
    trans3 = trans.reshape((1, K, K))
    for q in nb.prange(mine.shape[0]):
        b = mine[q]
        i = blocks[b]
        s0, e0, s = starts[b], starts[b + 1], off[i]
        Ub = U[s0 - shift:e0 - shift]
        aug, wrong = nb_decode_block(Ub, first, last, trans3, False, Y[s:s + e0 - s0], tw[i], pen, labels[s0:e0])
        loss[b] = wrong * tw[i]
        dot[b] = (aug - loss[b]) - nb_m_theta(i, off, Ub, first, last, trans, Mu, Mt)


@launched
@nb.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def nb_blocks_gap_terms(blocks, starts, shift, off, Y, U, first, last, trans, Mu, Mt, tw, pen, aug, m_theta,
                        gt_score, wrong):
    """The exact gap pass's terms of the blocks ``blocks`` (entry q: block blocks[q], its unaries the
    rows starts[q] - shift .. starts[q+1] - shift of ``U``): the loss-augmented score aug[q],
    <M_i, theta_i>, the ground-truth score and the count of wrong positions of y*
    (:func:`~ssvm_torch.oracles.chain_kernels.nb_gap_pass` on a subset of blocks)."""
    K = U.shape[1]
    for q in nb.prange(blocks.shape[0]):
        i = blocks[q]
        s = off[i]
        T = off[i + 1] - s
        Ub = U[starts[q] - shift:starts[q] - shift + T]
        delta, newd = np.empty(K), np.empty(K)
        bp = np.empty((T, K), dtype=np.int64)
        ys = np.empty(T, dtype=np.int64)
        aug[q] = viterbi_segment(Ub, np.int64(0), T, first, last, trans, Y[s:s + T], tw[i], ys, delta, newd, bp, pen)
        m_theta[q] = nb_m_theta(i, off, Ub, first, last, trans, Mu, Mt)
        gt_score[q], wrong[q] = nb_gold_score_wrong(Ub, ys, Y[s:s + T], first, last, trans, Y[s:s + T])


@nb.njit(cache=True, nogil=True)
def nb_apply_share(Wr, S, mark, touched, n, gamma):
    """Wr[c] += gamma S[c] on the n touched (local) columns (gamma = 0: none), then S and the marks
    there are zero again: the scratch is clean for the next step."""
    K = S.shape[1]
    for q in range(n):
        c = touched[q]
        s = S[c]
        if gamma != 0.0:
            wc = Wr[c]
            for k in range(K):
                wc[k] += gamma * s[k]
        for k in range(K):
            s[k] = 0.0
        mark[c] = False


@nb.njit(cache=True, nogil=True)       # no fastmath: dw's bits are one process's (mul, then add, in order)
def nb_share_direction(rows, labels, Mu, coef, fptr, fidx, fval, S, mark, touched):
    """S[c, k] += coef (onehot(labels[j])[k] - Mu[rows[j], k]) v for every stored entry (c, v) of
    every position rows[j], in batch order: the column share of dw = coef sum_b A_b(S(y*_b) - M_b)
    (each coordinate sums its entries in the order one process does,
    :meth:`~ssvm_torch.models.chain.ChainModel.direction_from_parts`); S is (F_r, K) in the share's
    local column numbers, the touched columns are listed in ``touched`` (marked in ``mark``).
    Returns (number of touched columns, ||S||^2 over them, summed in touched order)."""
    K = S.shape[1]
    n = 0
    stats = np.empty(K)
    for j in range(rows.shape[0]):
        r = rows[j]
        if fptr[r] == fptr[r + 1]:
            continue                       # no entry of this share at this position
        for k in range(K):
            stats[k] = coef * ((1.0 if k == labels[j] else 0.0) - Mu[r, k])
        for e in range(fptr[r], fptr[r + 1]):
            c = fidx[e]
            v = fval[e]
            if not mark[c]:
                mark[c] = True
                touched[n] = c
                n += 1
            s = S[c]
            for k in range(K):
                s[k] += stats[k] * v
    sq = 0.0
    for q in range(n):
        s = S[touched[q]]
        for k in range(K):
            sq += s[k] * s[k]
    return n, sq


@nb.njit(cache=True, nogil=True)
def nb_tail_direction(blocks, starts, rows, labels, Mu, Mt, coef, tail):
    """The first / last / transition part of dw = coef sum_b (S(y*_b) - M_b), packed as w's tail
    [first (K), last (K), trans (K, K) next-major]: D at each block's first and last position, and
    the transition counts of y*_b minus Mt_b."""
    K = Mu.shape[1]
    tail[:] = 0.0
    for b in range(blocks.shape[0]):
        i = blocks[b]
        s0, e0 = starts[b], starts[b + 1]
        r0, r1 = rows[s0], rows[e0 - 1]
        for k in range(K):
            tail[k] += coef * ((1.0 if k == labels[s0] else 0.0) - Mu[r0, k])
            tail[K + k] += coef * ((1.0 if k == labels[e0 - 1] else 0.0) - Mu[r1, k])
        for a in range(K):
            for c in range(K):
                tail[2 * K + a * K + c] -= coef * Mt[i, a, c]
        for j in range(s0 + 1, e0):
            tail[2 * K + labels[j] * K + labels[j - 1]] += coef


@nb.njit(cache=True, nogil=True)
def nb_move_blocks(blocks, starts, rows, labels, Mu, Mt, gamma):
    """alpha_b <- (1 - gamma) alpha_b + gamma delta(y*_b) in the statistics of every block of the
    batch: Mu[r] += gamma (onehot(y*) - Mu[r]) at its positions, Mt_b += gamma (counts(y*_b) - Mt_b)."""
    K = Mu.shape[1]
    for b in range(blocks.shape[0]):
        i = blocks[b]
        s0, e0 = starts[b], starts[b + 1]
        for j in range(s0, e0):
            r = rows[j]
            for k in range(K):
                Mu[r, k] += gamma * ((1.0 if k == labels[j] else 0.0) - Mu[r, k])
        for a in range(K):
            for c in range(K):
                Mt[i, a, c] -= gamma * Mt[i, a, c]
        for j in range(s0 + 1, e0):
            Mt[i, labels[j], labels[j - 1]] += gamma
