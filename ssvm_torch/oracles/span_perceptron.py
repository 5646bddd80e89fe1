"""A structured perceptron epoch over labeled binary constituency trees in one compiled call: ssvm_torch/perceptron.py's
loop at batch size 1, plain or loss-augmented, for :class:`~ssvm_torch.models.constituency.ConstituencyModel` on CPU
float64.

A step computes what the model's torch path computes, in the same order of operations so that the decoder meets the
same numbers: the fencepost potentials U[k] = sum of W's rows of fencepost k's features, the span scores
s(i, j, l) = (U[i, begin l] + U[j, end l]) + len[b(j - i), l] + (P[j, l] - P[i, l]) / (j - i) with P the prefix sums
of the inside potentials (``ConstituencyModel.span_scores``), each span's best label (the first on ties, as
torch's ``max``), the best tree by CKY (:func:`~ssvm_torch.spans.numba_cky.cky_best`, the model's CPU decoder).
Loss-augmented, each (span, label) that is not a gold bracket scores s + c_i first (``spans.ops.augment``'s sum) and the
step errs where the margin L_i(y*) + s(y*) - s(y_i) is violated, the trees' scores the sums of their labeled spans'
(``spans.ops.score``). On a mistake it adds eta psi_i(y^) as ``ConstituencyModel.add_psi`` does: the fenceposts'
statistics (begin / end indicators, the inside shares 1 / (j - i) by a difference array and its running sum) of the gold
tree minus the decoded one, added at each fencepost's feature rows, then the (length bucket, label) counts; the lagged
sum likewise times (k - 1) at step k (Daume 2006, Alg. 7)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..spans.numba_cky import cky_best
from .chain_perceptron import longest_row, margin_violated

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def bucket_of(width, buckets):
    """The length bucket of a span of ``width`` words: the last lower end <= width (``ConstituencyModel.bucket``)."""
    b = 0
    while b + 1 < buckets.shape[0] and buckets[b + 1] <= width:
        b += 1
    return b


@nb.njit(cache=True, nogil=True)
def span_scores_into(f0, T, fptr, fidx, W, lenw, buckets, L, inside, U, prefix, S):
    """The labeled span scores S[i, j, l] (i < j < T; -inf elsewhere) of the sentence whose fenceposts are rows
    f0 .. f0 + T - 1 of the feature CSR, in the model's order of operations (module docstring)."""
    C = W.shape[1]
    for k in range(T):
        for c in range(C):
            U[k, c] = 0.0
        for q in range(fptr[f0 + k], fptr[f0 + k + 1]):
            f = fidx[q]
            for c in range(C):
                U[k, c] += W[f, c]
    if inside:
        for l in range(L):
            prefix[0, l] = 0.0
            run = 0.0
            for k in range(T - 1):
                run += U[k, 2 * L + l]
                prefix[k + 1, l] = run
    for i in range(T):
        for j in range(T):
            if j <= i:
                for l in range(L):
                    S[i, j, l] = NEG_INF
                continue
            b = bucket_of(j - i, buckets)
            for l in range(L):
                v = U[i, l] + U[j, L + l]
                v += lenw[b, l]
                if inside:
                    v += (prefix[j, l] - prefix[i, l]) / (j - i)
                S[i, j, l] = v


@nb.njit(cache=True, nogil=True)
def tree_statistics(tree, k, L, inside, buckets, P, counts, diff):
    """P (T, C) and counts (buckets, L) := the fencepost statistics and (length bucket, label) counts of the tree
    whose spans are tree[:k] ((i, j, label) rows in (i, j) order), as ``ConstituencyModel.statistics`` sums them:
    the begins, the ends, then the inside shares 1 / (j - i) by a difference array (+ at i, then - at j) and its
    running sum."""
    T = P.shape[0]
    P[:, :] = 0.0
    counts[:, :] = 0.0
    for r in range(k):
        P[tree[r, 0], tree[r, 2]] += 1.0
    for r in range(k):
        P[tree[r, 1], L + tree[r, 2]] += 1.0
    if inside:
        diff[:T, :] = 0.0
        for r in range(k):
            diff[tree[r, 0], tree[r, 2]] += 1.0 / (tree[r, 1] - tree[r, 0])
        for r in range(k):
            diff[tree[r, 1], tree[r, 2]] -= 1.0 / (tree[r, 1] - tree[r, 0])
        for l in range(L):
            run = 0.0
            for t in range(T):
                run += diff[t, l]
                P[t, 2 * L + l] += run
    for r in range(k):
        counts[bucket_of(tree[r, 1] - tree[r, 0], buckets), tree[r, 2]] += 1.0


@nb.njit(cache=True, nogil=True)
def _add_psi(W, lenw, c, f0, T, fptr, fidx, D, Dc):
    """W[f] += c D[k] for every feature f of every fencepost k (in the feature CSR's order), then lenw += c Dc."""
    for k in range(T):
        for q in range(fptr[f0 + k], fptr[f0 + k + 1]):
            f = fidx[q]
            for col in range(W.shape[1]):
                W[f, col] += c * D[k, col]
    for b in range(lenw.shape[0]):
        for l in range(lenw.shape[1]):
            lenw[b, l] += c * Dc[b, l]


@nb.njit(cache=True, nogil=True)
def spans_sum(S, tree, k):
    """s(tree) = the sum of S[i, j, label] over the labeled spans tree[:k] (``spans.ops.score``)."""
    total = 0.0
    for r in range(k):
        total += S[tree[r, 0], tree[r, 1], tree[r, 2]]
    return total


@nb.njit(cache=True, nogil=True)
def nb_span_perceptron_epoch(order, offsets, fptr, fidx, spans, span_off, W, lenw, W_lag, lenw_lag, cost, buckets,
                             inside, eta, steps, average, loss_augmented, tie):
    """One epoch over the sentences in ``order``: returns (mistakes, summed task loss, steps after; every mistake
    is an update). ``spans`` (S, 3) the gold trees' (i, j, label) rows by ``span_off``, in (i, j) order; W (F, C),
    lenw (buckets, L) and their lagged sums views of w and of the lagged sum, updated in place; ``cost[i]`` the loss
    of one wrong span of sentence i; ``steps`` the steps taken before the epoch. ``loss_augmented``: decode the
    loss-augmented tree and update where its margin is violated (``tie`` models/base.py's TIE)."""
    L = lenw.shape[1]
    C = W.shape[1]
    nmax = longest_row(offsets)
    M = nmax + 1
    U = np.empty((M, C))
    prefix = np.empty((M, L))
    S = np.empty((M, M, L))
    diff = np.empty((M, L))
    P, Pg = np.empty((M, C)), np.empty((M, C))
    counts, counts_g = np.empty((buckets.shape[0], L)), np.empty((buckets.shape[0], L))
    best = np.empty((M, M), dtype=np.int64)
    tree = np.empty((2 * M, 3), dtype=np.int64)
    gold_label = np.empty((M, M), dtype=np.int64)
    mistakes, loss_sum = 0, 0.0
    for r in range(order.shape[0]):
        i = order[r]
        n = offsets[i + 1] - offsets[i]
        T, f0 = n + 1, offsets[i] + i
        span_scores_into(f0, T, fptr, fidx, W, lenw, buckets, L, inside, U, prefix, S)
        lo, hi = span_off[i], span_off[i + 1]
        c = cost[i] if loss_augmented else 0.0
        if loss_augmented:                       # no label of a span outside the gold tree is gold
            gold_label[:T, :T] = -1
            for q in range(lo, hi):
                gold_label[spans[q, 0], spans[q, 1]] = spans[q, 2]
        Su = np.empty((T, T))
        for a in range(T):
            for b in range(T):
                top, arg = NEG_INF, -1
                for l in range(L):
                    v = S[a, b, l] + c if (loss_augmented and b > a and l != gold_label[a, b]) else S[a, b, l]
                    if arg < 0 or v > top:
                        top, arg = v, l
                Su[a, b], best[a, b] = top, arg
        chart = np.zeros((T, T), dtype=np.bool_)
        cky_best(Su, n, chart)
        k = 0
        for a in range(T):
            for b in range(a + 1, T):
                if chart[a, b]:
                    tree[k, 0], tree[k, 1], tree[k, 2] = a, b, best[a, b]
                    k += 1
        wrong = 0
        for q in range(lo, hi):
            a, b = spans[q, 0], spans[q, 1]
            if not chart[a, b] or best[a, b] != spans[q, 2]:
                wrong += 1
        loss_sum += wrong * cost[i]
        if loss_augmented:
            H = (wrong * cost[i] + spans_sum(S, tree, k)) - spans_sum(S, spans[lo:hi], hi - lo)
            violated = margin_violated(H, tie)
        else:
            violated = wrong > 0
        if violated:
            mistakes += 1
            tree_statistics(spans[lo:hi], hi - lo, L, inside, buckets, Pg[:T], counts_g, diff)
            tree_statistics(tree, k, L, inside, buckets, P[:T], counts, diff)
            D = Pg[:T] - P[:T]
            Dc = counts_g - counts
            _add_psi(W, lenw, eta, f0, T, fptr, fidx, D, Dc)
            if average and steps > 0:
                _add_psi(W_lag, lenw_lag, eta * steps, f0, T, fptr, fidx, D, Dc)
        steps += 1
    return mistakes, loss_sum, steps
