"""A structured perceptron epoch over a linear chain's examples in one compiled call: ssvm_torch/perceptron.py's
loop at batch size 1 (Collins 2002, Fig. 1; the averaged form kept lazily, Daume 2006, Alg. 7) for
:class:`~ssvm_torch.models.chain.ChainModel` on CPU float64, where each step of the generic loop spent about
2 ms in small torch operations (scores, decode, loss, psi's statistics) on a sentence of CoNLL-2000.

A step composes the chain store's kernels (:mod:`.chain_kernels`): the unaries of the example's positions
(``nb_block_unary``; the Hamming loss added to them for the loss-augmented perceptron), Viterbi
(``viterbi_segment``'s recursion, under the model's tag constraints) and, on a mistake, w += eta psi_i(y^)
(``nb_add_psi``) and the lagged sum's eta (k - 1) psi_i(y^) (step k). With ``edges``, the perceptron of the
edge-feature chain (:class:`~ssvm_torch.models.chain_edges.EdgeChainModel`): per-position transitions
(``nb_position_trans``) and the edge block's part of psi; loss-augmented too, which the generic loop cannot run
(the model has no padded oracle)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..chain.numba_viterbi import viterbi_segment_tt
from .chain_kernels import nb_add_psi, nb_block_unary
from .edge_kernels import nb_position_trans


@nb.njit(cache=True, nogil=True)
def longest_row(off):
    """The most rows between consecutive offsets (at least 1): a work buffer's length."""
    tmax = 1
    for i in range(off.shape[0] - 1):
        tmax = max(tmax, off[i + 1] - off[i])
    return tmax


@nb.njit(cache=True, nogil=True)
def margin_violated(H, tie):
    """Whether the loss-augmented margin H_i = L_i(y*) + <w, phi(x_i, y*)> - <w, phi(x_i, y_i)> is violated as the
    perceptron's loop decides it: H > tie (1 + |H|) (models/base.py's TIE)."""
    return H > tie * (1.0 + abs(H))


@nb.njit(cache=True, nogil=True)
def _add_loss(U, Y, s, T, lw):
    """U[t, k] += lw where k is not the gold label: the loss added to the unaries first, as the model's augment
    does (the same sums, so the same argmax where labelings tie: integer w, binary features)."""
    for t in range(T):
        for k in range(U.shape[1]):
            if k != Y[s + t]:
                U[t, k] += lw


@nb.njit(cache=True, nogil=True)
def _wrong_positions(ys, Y, s, T):
    wrong = 0
    for t in range(T):
        if ys[t] != Y[s + t]:
            wrong += 1
    return wrong


@nb.njit(cache=True, nogil=True)
def _add_edge_psi(s, T, coef, ys, Y, eptr, eidx, evals, pair_of, E):
    """The edge block's part of coef psi_i(ys): each transition's edge attributes up in the gold pair's column and
    down in the labeling's (a pair outside the supported ones has no column)."""
    for t in range(1, T):
        gold = pair_of[Y[s + t], Y[s + t - 1]]
        got = pair_of[ys[t], ys[t - 1]]
        if gold == got:
            continue
        for j in range(eptr[s + t], eptr[s + t + 1]):
            if gold >= 0:
                E[eidx[j], gold] += coef * evals[j]
            if got >= 0:
                E[eidx[j], got] -= coef * evals[j]


@nb.njit(cache=True, nogil=True)
def nb_perceptron_epoch(order, fptr, fidx, fval, off, Y, token_w, W, first, last, trans, LW, Lfirst, Llast, Ltrans,
                        pen, loss_augmented, eta, steps, average, tie, edges, E, LE, eptr, eidx, evals, pair_next,
                        pair_prev, pair_of):
    """One epoch over the examples in ``order``: returns (mistakes, summed task loss of the decoded labelings, steps
    after the epoch); at batch size 1 every mistake is an update. ``token_w[i]``: the loss of one wrong position of
    example i (1/T_i or 1); (W, first, last, trans) the views of w, (LW, ...) those of the lagged sum, both updated
    in place; ``steps``: the steps taken before the epoch. Plain decoding errs where the loss of y^ is > 0; the
    loss-augmented one where H_i = L_i(y*) + <w, phi(x_i, y*)> - <w, phi(x_i, y_i)> > tie (1 + |H_i|)
    (models/base.py's TIE). ``edges``: the edge-feature chain, E (A_e, P) the edge block of w and LE the lagged
    sum's, (eptr, eidx, evals) the edge attributes' CSR rows per position, (pair_next, pair_prev) the supported
    pairs and pair_of (K, K) their columns (-1: none); without, those arrays are not read."""
    K = W.shape[0]
    tmax = longest_row(off)
    U = np.empty((tmax, K))
    Tt = np.empty((tmax if edges else 1, K, K))
    trans3 = trans.reshape((1, K, K))
    ys = np.empty(tmax, dtype=np.int64)
    delta, newd = np.empty(K), np.empty(K)
    bp = np.empty((tmax, K), dtype=np.int64)
    mistakes, loss_sum = 0, 0.0
    for r in range(order.shape[0]):
        i = order[r]
        s = off[i]
        T = off[i + 1] - s
        nb_block_unary(i, fptr, fidx, fval, off, W, U)
        if loss_augmented:
            _add_loss(U, Y, s, T, token_w[i])
        if edges:
            nb_position_trans(s, T, eptr, eidx, evals, E, pair_next, pair_prev, trans, Tt)
            score = viterbi_segment_tt(U, np.int64(0), T, first, last, Tt, True, Y[s:s + T], 0.0, ys, delta, newd, bp,
                                       pen)
        else:                                    # viterbi_segment's call
            score = viterbi_segment_tt(U, np.int64(0), T, first, last, trans3, False, Y[s:s + T], 0.0, ys, delta,
                                       newd, bp, pen)
        wrong_positions = _wrong_positions(ys, Y, s, T)
        loss_sum += wrong_positions * token_w[i]
        if loss_augmented:
            gold = first[Y[s]] + last[Y[s + T - 1]]
            for t in range(T):
                gold += U[t, Y[s + t]]
            for t in range(1, T):
                gold += Tt[t, Y[s + t], Y[s + t - 1]] if edges else trans[Y[s + t], Y[s + t - 1]]
            wrong = margin_violated(score - gold, tie)
        else:
            wrong = wrong_positions > 0
        if wrong:
            mistakes += 1
            nb_add_psi(i, eta, ys, fptr, fidx, fval, off, Y, W, first, last, trans)
            if edges:
                _add_edge_psi(s, T, eta, ys, Y, eptr, eidx, evals, pair_of, E)
            if average and steps > 0:
                nb_add_psi(i, eta * steps, ys, fptr, fidx, fval, off, Y, LW, Lfirst, Llast, Ltrans)
                if edges:
                    _add_edge_psi(s, T, eta * steps, ys, Y, eptr, eidx, evals, pair_of, LE)
        steps += 1
    return mistakes, loss_sum, steps
