"""A structured perceptron epoch over semi-Markov segmentations in one compiled call: ssvm_torch/perceptron.py's loop at
batch size 1, plain decoding, for :class:`~ssvm_torch.models.semimarkov.SemiMarkovModel` on CPU float64 (Sarawagi &
Cohen 2004 trained their semi-CRF's features with the voted perceptron too).

A step computes the model's segment scores in its order of operations (``SemiMarkovModel.segment_scores``: the
token potentials' prefix sums, s(t, l, k) = ((P[t + l + 1] - P[t]) + begin[t, k]) + end[t + l, k] + len[l, k],
windows clamped at the row's end, the outside label's longer segments -inf), decodes the best segmentation
(:func:`~ssvm_torch.segments.numba_semimarkov.best_row`, the model's CPU decoder) and, on a mistake (a position whose
(label, begins-a-segment) state differs from the gold one), adds eta psi_i(y^) as ``SemiMarkovModel.add_psi`` does:
the positions' statistics of the gold segmentation minus the decoded one's, times each position's feature values,
at its feature rows, then the counts; the lagged sum likewise times (k - 1) at step k (Daume 2006, Alg. 7). Beside
the store's kernels (:mod:`ssvm_torch.stores.segment_kernels`), whose potentials, statistics and loss it reads."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..oracles.chain_perceptron import longest_row
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
                                counts_lag, cost, outside, eta, steps, average):
    """One epoch over the rows in ``order``: returns (mistakes, summed task loss, steps after; every mistake is an
    update). ``Y`` the gold states (k: a segment of label k begins, K + k: it goes on); W (F, 3K), first, last,
    trans [next, prev], lens (L, K) views of w, ``counts`` the view of w's count block (first .. lengths) and the
    ``_lag`` views the lagged sum's, all updated in place; ``cost[i]`` the loss of one wrong position of row i,
    ``outside`` a label of one-position segments or -1; ``steps`` the steps taken before the epoch."""
    K = first.shape[0]
    L = lens.shape[0]
    C = W.shape[1]
    T_max = longest_row(offsets)
    U = np.empty((T_max, C))
    prefix = np.empty((T_max + 1, K))
    S = np.empty((T_max, L, K))
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
        best_row(S[:T], first, last, trans, T, ys[:T])
        wrong = wrong_states(s, T, K, Y, obs, ys)
        loss_sum += cost[i] * wrong
        if wrong > 0:
            mistakes += 1
            for t in range(T):
                gold[t] = Y[s + t] if Y[s + t] < K else -1
            D[:T, :] = 0.0
            Dc[:] = 0.0
            add_segment_statistics(gold[:T], T, K, 1.0, D, Dc)
            add_segment_statistics(ys[:T], T, K, -1.0, D, Dc)
            _add_psi(W, counts, eta, s, T, fptr, fidx, fval, D, Dc)
            if average and steps > 0:
                _add_psi(W_lag, counts_lag, eta * steps, s, T, fptr, fidx, fval, D, Dc)
        steps += 1
    return mistakes, loss_sum, steps
