"""A structured perceptron epoch over first-order dependency trees in one compiled call: ssvm_torch/perceptron.py's
loop at batch size 1, plain or loss-augmented, for :class:`~ssvm_torch.models.dependency.DependencyModel` on CPU
float64. A step scores the sentence's arcs (``nb_theta``: each arc's features plus its head token's), decodes the best
tree (Eisner or Chu-Liu-Edmonds, the kernels the model's ``decode`` runs; loss-augmented, the tree store's block
oracle :func:`~ssvm_torch.oracles.tree_kernels.nb_block_oracle`: the scores plus the sentence's cost on every arc
that is not a gold arc, as ``ops.augment`` adds it, and the gold tree outside the decoder's space returned as the
model's ``oracle`` returns it) and, on a mistake, adds eta psi_i(y^) through
the stored feature ids of the gold tree's arcs and head tokens (up) and the decoded tree's (down), in the order the
model's ``add_psi`` adds them; the lagged sum likewise times (k - 1) at step k (Daume 2006, Alg. 7)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..trees.numba_eisner import eisner_best
from ..trees.numba_mst import mst_best
from .chain_perceptron import longest_row, margin_violated
from .tree_kernels import arc_index, nb_block_oracle, nb_theta


@nb.njit(cache=True, nogil=True)
def add_tree(target, c, sign, tree, n, base, t0, ptr, ids, tptr, tids):
    """target[f] += sign c for every feature f of the arcs of ``tree`` (heads of words 1..n), then of their head
    tokens (the arc rows first, as add_psi's index_add_ calls go)."""
    for m in range(1, n + 1):
        a = base + arc_index(m, tree[m], n)
        for j in range(ptr[a], ptr[a + 1]):
            target[ids[j]] += sign * c
    for m in range(1, n + 1):
        r = t0 + tree[m]
        for j in range(tptr[r], tptr[r + 1]):
            target[tids[j]] += sign * c


@nb.njit(cache=True, nogil=True)
def wrong_heads(got, heads, start, n, gold):
    """gold[0..n] := -1 then the gold heads ``heads[start:start + n]`` of the sentence's words; returns how many
    words the tree ``got`` gives another head."""
    wrong = 0
    gold[0] = -1
    for m in range(1, n + 1):
        gold[m] = heads[start + m - 1]
        if got[m] != gold[m]:
            wrong += 1
    return wrong


@nb.njit(cache=True, nogil=True)
def nb_tree_perceptron_epoch(order, offsets, arc_off, heads, ptr, ids, tptr, tids, w, lagged, cost, projective,
                             multiroot, eta, steps, average, loss_augmented, gold_ok, tie):
    """One epoch over the sentences in ``order``: returns (mistakes, summed task loss, steps after; every mistake
    is an update).
    ``heads`` the gold heads of every word (0 the root), ``cost[i]`` the loss of one wrong head of sentence i;
    w and ``lagged`` updated in place; ``steps`` the steps taken before the epoch. ``loss_augmented``: decode the
    loss-augmented tree and update where its margin H = L + s(y*) - s(gold) > tie (1 + |H|) (``gold_ok[i]``: sentence
    i's gold tree lies in the decoder's space, ``DependencyModel.gold_in_space``; ``tie`` models/base.py's TIE)."""
    nmax = longest_row(offsets)
    theta = np.empty(nmax * nmax)
    got = np.empty(nmax + 1, dtype=np.int64)
    gold = np.empty(nmax + 1, dtype=np.int64)
    mistakes, loss_sum = 0, 0.0
    for r in range(order.shape[0]):
        i = order[r]
        n = offsets[i + 1] - offsets[i]
        base, t0 = arc_off[i], offsets[i] + i
        nb_theta(base, n, ptr, ids, t0, tptr, tids, w, theta)
        S = np.full((n + 1, n + 1), -np.inf)
        if loss_augmented:
            best, gold_score, wrong = nb_block_oracle(theta, n, heads, heads, offsets[i], cost[i], projective,
                                                      multiroot, gold_ok[i], S, got[1:])
            wrong_heads(got, heads, offsets[i], n, gold)           # gold[] := the gold tree
            violated = margin_violated((best + wrong * cost[i]) - gold_score, tie)
        else:
            for m in range(1, n + 1):
                for h in range(n + 1):
                    if h != m:
                        S[m, h] = theta[arc_index(m, h, n)]
            if projective:
                eisner_best(S, n, multiroot, got)
            else:
                mst_best(S, n, multiroot, got)
            wrong = wrong_heads(got, heads, offsets[i], n, gold)
            violated = wrong > 0
        loss = wrong * cost[i]
        loss_sum += loss
        if violated:
            mistakes += 1
            add_tree(w, eta, 1.0, gold, n, base, t0, ptr, ids, tptr, tids)
            add_tree(w, eta, -1.0, got, n, base, t0, ptr, ids, tptr, tids)
            if average and steps > 0:
                add_tree(lagged, eta * steps, 1.0, gold, n, base, t0, ptr, ids, tptr, tids)
                add_tree(lagged, eta * steps, -1.0, got, n, base, t0, ptr, ids, tptr, tids)
        steps += 1
    return mistakes, loss_sum, steps
