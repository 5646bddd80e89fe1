"""A structured perceptron epoch over semi-Markov segmentations in one compiled call: ssvm_torch/perceptron.py's loop at
batch size 1, plain or loss-augmented, for :class:`~ssvm_torch.models.semimarkov.SemiMarkovModel` on CPU float64
(Sarawagi & Cohen 2004 trained their semi-CRF's features with the voted perceptron too).

A step computes the model's segment scores in its order of operations (``SemiMarkovModel.segment_scores``: the token
potentials' prefix sums, s(t, l, k) = ((P[t + l + 1] - P[t]) + begin[t, k]) + end[t + l, k] + len[l, k], windows clamped
at the row's end, the outside label's longer segments -inf), decodes the best segmentation
(:func:`~ssvm_torch.segments.numba_semimarkov.best_row`, the model's CPU decoder; loss-augmented, of the scores plus c_i
times each segment's wrong positions, ``segments.scoring.augmented``'s "tokens" sum, the step erring where the margin
L_i(y*) + s(y*) - s(y_i) is violated, the segmentations scored as ``segments.scoring.score`` sums them) and, on a
mistake (plain: a position whose (label, begins-a-segment) state differs from the gold one), adds eta psi_i(y^) as
``SemiMarkovModel.add_psi`` does: the positions' statistics of the gold segmentation minus the decoded one's, times each
position's feature values, at its feature rows, then the counts; the lagged sum likewise times (k - 1) at step k (Daume
2006, Alg. 7). Beside the store's kernels (:mod:`ssvm_torch.stores.segment_kernels`), whose potentials, statistics and
loss it reads."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..oracles.chain_perceptron import longest_row, margin_violated
from ..segments.numba_semimarkov import best_row
from .segment_kernels import add_segment_statistics, segment_potentials, wrong_states

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def segment_scores_into(s, T, fptr, fidx, fval, W, lens, K, outside, U, prefix, S):
    """S[t, l, k] (t < T, l < L) of the row whose positions are rows s .. s + T - 1 of the feature CSR, as the
    model computes them (module docstring); U holds the potentials afterwards."""
    L = lens.shape[0]
    segment_potentials(s, T, fptr, fidx, fval, W, U)
    for k in range(K):
        prefix[0, k] = 0.0
        run = 0.0
        for t in range(T):
            run += U[t, k]
            prefix[t + 1, k] = run
    for t in range(T):
        for l in range(L):
            j = min(t + l, T - 1)
            for k in range(K):
                v = prefix[j + 1, k] - prefix[t, k]
                v += U[t, K + k]
                v += U[j, 2 * K + k]
                v += lens[l, k]
                S[t, l, k] = NEG_INF if (k == outside and l > 0) else v


@nb.njit(cache=True, nogil=True)
def add_token_cost(S, Sa, s, T, K, Y, c):
    """Sa[t, l, k] := S[t, l, k] + c (the segment (t, l + 1, k)'s wrong positions: t unless the gold segment of
    label k begins there, each later position of the window up to the row's end unless the gold segment of label k
    goes on there), as ``segments.scoring.augmented`` adds them ("tokens")."""
    L = S.shape[1]
    for t in range(T):
        for k in range(K):
            count = 0 if Y[s + t] == k else 1
            for l in range(L):
                if l > 0 and t + l < T and Y[s + t + l] != K + k:
                    count += 1
                Sa[t, l, k] = S[t, l, k] + c * count


@nb.njit(cache=True, nogil=True)
def segmentation_score(S, first, last, trans, seg, T):
    """s(y) of the segmentation ``seg`` (its label at each segment's first position, -1 elsewhere): the segments'
    scores S[t, length - 1, k], then the transitions trans[next, prev] between them, then first + last
    (``segments.scoring.score``'s terms)."""
    segments, between, label, lead = 0.0, 0.0, -1, -1
    for t in range(T):
        if seg[t] < 0:
            continue
        e = t + 1
        while e < T and seg[e] < 0:
            e += 1
        segments += S[t, e - t - 1, seg[t]]
        if label >= 0:
            between += trans[seg[t], label]
        else:
            lead = seg[t]
        label = seg[t]
    return (segments + between) + (first[lead] + last[label]) if T > 0 else 0.0


@nb.njit(cache=True, nogil=True)
def _add_psi(W, counts, c, s, T, fptr, fidx, fval, D, Dc):
    """W[f] += x_t[f] (c D[t]) for every feature f of every position t (the CSR's order), then counts += c Dc."""
    C = W.shape[1]
    for t in range(T):
        for a in range(fptr[s + t], fptr[s + t + 1]):
            f, v = fidx[a], fval[a]
            for col in range(C):
                W[f, col] += v * (c * D[t, col])
    for g in range(counts.shape[0]):
        counts[g] += c * Dc[g]


@nb.njit(cache=True, nogil=True)
def nb_segment_perceptron_epoch(order, offsets, fptr, fidx, fval, Y, W, first, last, trans, lens, counts, W_lag,
                                counts_lag, cost, outside, eta, steps, average, loss_augmented, tie):
    """One epoch over the rows in ``order``: returns (mistakes, summed task loss, steps after; every mistake is an
    update). ``Y`` the gold states (k: a segment of label k begins, K + k: it goes on); W (F, 3K), first, last,
    trans [next, prev], lens (L, K) views of w, ``counts`` the view of w's count block (first .. lengths) and the
    ``_lag`` views the lagged sum's, all updated in place; ``cost[i]`` the loss of one wrong position of row i,
    ``outside`` a label of one-position segments or -1; ``steps`` the steps taken before the epoch.
    ``loss_augmented``: decode the loss-augmented segmentation and update where its margin is violated (``tie``
    models/base.py's TIE)."""
    K = first.shape[0]
    L = lens.shape[0]
    C = W.shape[1]
    T_max = longest_row(offsets)
    U = np.empty((T_max, C))
    prefix = np.empty((T_max + 1, K))
    S = np.empty((T_max, L, K))
    Sa = np.empty((T_max if loss_augmented else 0, L, K))
    ys = np.empty(T_max, dtype=np.int64)
    gold = np.empty(T_max, dtype=np.int64)
    D = np.empty((T_max, C))
    Dc = np.empty(counts.shape[0])
    obs = np.ones(Y.shape[0], dtype=np.bool_)
    mistakes, loss_sum = 0, 0.0
    for r in range(order.shape[0]):
        i = order[r]
        s = offsets[i]
        T = offsets[i + 1] - s
        segment_scores_into(s, T, fptr, fidx, fval, W, lens, K, outside, U, prefix, S)
        for t in range(T):
            gold[t] = Y[s + t] if Y[s + t] < K else -1
        if loss_augmented:
            add_token_cost(S, Sa, s, T, K, Y, cost[i])
            best_row(Sa[:T], first, last, trans, T, ys[:T])
        else:
            best_row(S[:T], first, last, trans, T, ys[:T])
        wrong = wrong_states(s, T, K, Y, obs, ys)
        loss_sum += cost[i] * wrong
        if loss_augmented:
            H = (cost[i] * wrong + segmentation_score(S, first, last, trans, ys, T)) - \
                segmentation_score(S, first, last, trans, gold, T)
            violated = margin_violated(H, tie)
        else:
            violated = wrong > 0
        if violated:
            mistakes += 1
            D[:T, :] = 0.0
            Dc[:] = 0.0
            add_segment_statistics(gold[:T], T, K, 1.0, D, Dc)
            add_segment_statistics(ys[:T], T, K, -1.0, D, Dc)
            _add_psi(W, counts, eta, s, T, fptr, fidx, fval, D, Dc)
            if average and steps > 0:
                _add_psi(W_lag, counts_lag, eta * steps, s, T, fptr, fidx, fval, D, Dc)
        steps += 1
    return mistakes, loss_sum, steps
