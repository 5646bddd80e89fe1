"""Compiled kernels of linear chains given as a padded batch with an arbitrary mask (CPU, numba).

The layout of taggers (pytorch-crf, AllenNLP): emissions (B, T, K), a boolean mask (B, T) that may
start off, have gaps or be all off. Row b's chain is its masked-on positions in order ("the
compacted row"); a row with none has score 0 and no labels. Scores, with ``trans`` [next, prev]
(the chain package's convention, :mod:`ssvm_torch.chain`):

    s(y) = start[y_0] + sum_t E[t, y_t] + sum_{t>=1} trans[y_t, y_{t-1}] + end[y_{L-1}].

Tag constraints enter as -inf entries of ``start``/``end``/``trans`` (the caller adds them at every
call, :mod:`ssvm_torch.constraints`): the max recursion never takes them and they get weight
exp(-inf) = 0 in the sums.

* :func:`nb_decode` -- (loss-augmented) Viterbi of every row: the max oracle of the structured hinge
  (objective (1) of Osokin et al. 2016), Delta(y, y_i) = c_b sum_t C[y_i,t, y_t]. It copies each
  compacted row into a float64 scratch and runs the project's one Viterbi recursion
  (:func:`~ssvm_torch.chain.numba_viterbi.viterbi_segment_tt`) on it.
* :func:`nb_log_partition` / :func:`nb_forward_backward` -- the CRF's log Z and its gradient
  (label marginals, expected transitions) by the package's scaled forward-backward recursion
  (:mod:`ssvm_torch.chain.numba_fb`). Per-row scratch is O(T K); transition statistics are summed
  over rows in one (K, K) buffer per thread, so nothing of size (B, T, K, K) or (B, K, K) exists.
* :func:`nb_add_path_stats` -- coef_b times the sufficient statistics of given labelings (the
  subgradient of the hinge, the empirical term of the CRF gradient).

Every kernel reads emissions of any float dtype and accumulates in float64.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from .numba_fb import backward_row, exp_trans, forward_row, log_fb_row
from .numba_viterbi import NO_PEN, viterbi_segment_tt

NO_LOSS = np.zeros(1, dtype=np.int64)      # viterbi_segment_tt's gt when the loss is already in the scratch


@nb.njit(cache=True, nogil=True)
def masked_positions(mask, b, pos):
    """The masked-on positions of row b into pos; returns their count."""
    L = 0
    for t in range(mask.shape[1]):
        if mask[b, t]:
            pos[L] = t
            L += 1
    return L


@nb.njit(cache=True, nogil=True)
def _path_score(E, b, pos, L, labels, start, end, trans):
    """s(y) of row b for labels given at the compacted positions (labels[pos[s]])."""
    y = labels[b, pos[0]]
    v = start[y] + E[b, pos[0], y]
    for s in range(1, L):
        z = labels[b, pos[s]]
        v += E[b, pos[s], z] + trans[z, y]
        y = z
    return v + end[y]


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_decode(E, mask, start, end, trans3, augment, gold, cost, rowc, out, scores, gold_scores, order, nchunk):
    """Viterbi of every row of E (B, T, K) under ``mask``: out (B, T) gets the argmax labels at the
    masked-on positions (the caller fills it with -1 first), scores (B,) the max of
    Delta + s(y) (0 for an empty row). With ``rowc`` (B,) nonzero, the loss c_b C[gold_t, k] is added
    (loss-augmented decoding) and gold_scores (B,) gets s(gold) (-inf for a gold labeling the
    constraints forbid). trans3 is (1, K, K) [next, prev], start/end (K,), all float64; without
    ``augment``, gold/cost/rowc are not read. ``order``: the Viterbi loop order
    (:data:`~ssvm_torch.chain.numba_viterbi.AUTO` picks by K). ``nchunk`` row chunks run in parallel,
    each with one set of O(T K) work buffers (numba's thread count: the caller passes it), so no
    buffer is allocated per row."""
    B, T, K = E.shape
    nchunk = max(1, min(nchunk, B))
    for ch in nb.prange(nchunk):
        pos = np.empty(T, dtype=np.int64)
        U = np.empty((T, K))
        ys = np.empty(T, dtype=np.int64)
        delta, newd = np.empty(K), np.empty(K)
        bp = np.empty((T, K), dtype=np.int64)
        for b in range(ch, B, nchunk):
            L = masked_positions(mask, b, pos)
            if L == 0:
                scores[b] = 0.0
                gold_scores[b] = 0.0
                continue
            for s in range(L):
                for k in range(K):
                    U[s, k] = E[b, pos[s], k]
            if augment and rowc[b] != 0.0:
                for s in range(L):
                    g = gold[b, pos[s]]
                    for k in range(K):
                        U[s, k] += rowc[b] * cost[g, k]
            scores[b] = viterbi_segment_tt(U, np.int64(0), L, start, end, trans3, False, NO_LOSS, 0.0, ys, delta,
                                           newd, bp, NO_PEN, order)
            for s in range(L):
                out[b, pos[s]] = ys[s]
            if augment:
                gold_scores[b] = _path_score(E, b, pos, L, gold, start, end, trans3[0])


@nb.njit(cache=True, nogil=True, inline="always")
def _row(E, mask, b, pos, start, end, trans, X, tm, gb, gE, accs, acc, ch):
    """log Z of row b (0 for an empty row, nan without an allowed path) and, when gb != 0, gb times
    its marginals added to the buffers (row ``ch`` of ``accs`` / ``acc``): the scaled recursion, the
    log-space one where the scaling cannot hold the scores (:mod:`ssvm_torch.chain.numba_fb`)."""
    L = masked_positions(mask, b, pos)
    if L == 0:
        return 0.0
    K = E.shape[2]
    A, P, c = np.empty((L, K)), np.empty((L, K)), np.empty(L + 1)
    z = forward_row(E, b, pos, L, start, end, X, tm, A, P, c)
    if np.isnan(z):
        return log_fb_row(E, b, pos, L, start, end, trans, gb, gE, accs, acc, ch, A, P, np.empty(K))
    if gb != 0.0:
        backward_row(b, pos, L, end, X, A, P, c, gb, gE, accs, acc, ch)
    return z


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_log_partition(E, mask, start, end, trans, logz):
    """log Z of every row (0 for an empty row; nan where no allowed path exists)."""
    B, T, K = E.shape
    X = np.empty((K, K))
    tm = exp_trans(trans, X)
    unused_se, unused_t = np.zeros((1, 2, K)), np.zeros((1, K, K))      # gb = 0: nothing is accumulated
    for b in nb.prange(B):
        pos = np.empty(T, dtype=np.int64)
        logz[b] = _row(E, mask, np.int64(b), pos, start, end, trans, X, tm, 0.0, E, unused_se, unused_t, np.int64(0))


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_forward_backward(E, mask, start, end, trans, g, nchunk, logz, gE, gstart, gend, gtrans):
    """Forward-backward of every row (:func:`_row`): logz (B,), and g_b times the marginals added to
    the gradient buffers: gE[b, t, k] += g_b p(y_t = k), gstart/gend (K,) the first/last label
    marginals, gtrans (K, K) [next, prev] the expected transition counts (summed over rows). These
    are the gradient of sum_b g_b log Z_b. Rows without an allowed path get logz nan and add nothing.
    ``nchunk`` row chunks run in parallel, each with its own (K, K) buffer (numba's thread count: the
    caller passes it, a kernel that reads it cannot be cached)."""
    B, T, K = E.shape
    X = np.empty((K, K))
    tm = exp_trans(trans, X)
    nchunk = max(1, min(nchunk, B))
    acc = np.zeros((nchunk, K, K))
    accs = np.zeros((nchunk, 2, K))
    for ch in nb.prange(nchunk):
        pos = np.empty(T, dtype=np.int64)
        for b in range(ch, B, nchunk):
            logz[b] = _row(E, mask, b, pos, start, end, trans, X, tm, g[b], gE, accs, acc, np.int64(ch))
    for ch in range(nchunk):
        for k in range(K):
            gstart[k] += accs[ch, 0, k]
            gend[k] += accs[ch, 1, k]
            for j in range(K):
                gtrans[k, j] += acc[ch, k, j]


@nb.njit(cache=True, nogil=True)
def nb_add_path_stats(labels, mask, coef, gE, gstart, gend, gtrans):
    """coef_b times the statistics of labels (B, T) (read at the masked-on positions) added to the
    gradient buffers: indicator of y_t in gE, of y_0 / y_{L-1} in gstart / gend, transition counts
    in gtrans [next, prev]."""
    B, T = labels.shape
    for b in range(B):
        cb = coef[b]
        if cb == 0.0:
            continue
        prev = -1
        for t in range(T):
            if mask[b, t]:
                y = labels[b, t]
                gE[b, t, y] += cb
                if prev < 0:
                    gstart[y] += cb
                else:
                    gtrans[y, prev] += cb
                prev = y
        if prev >= 0:
            gend[prev] += cb


@nb.njit(cache=True, nogil=True)
def nb_path_scores(E, mask, labels, start, end, trans, out):
    """out[b] = s(labels_b) over row b's masked-on positions (0 for an empty row; -inf for a
    labeling the constraints in start/end/trans forbid)."""
    B, T, K = E.shape
    pos = np.empty(T, dtype=np.int64)
    for b in range(B):
        L = masked_positions(mask, b, pos)
        out[b] = _path_score(E, b, pos, L, labels, start, end, trans) if L > 0 else 0.0
