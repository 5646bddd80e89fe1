"""A structured perceptron epoch over second-order (adjacent-sibling) dependency trees in one compiled call:
ssvm_torch/perceptron.py's loop at batch size 1, plain or loss-augmented, for
:class:`~ssvm_torch.models.sibling_dependency.SiblingDependencyModel` on CPU float64.

A step takes the sentence's arc and sibling scores as the model's host path does (:func:`block_scores`), folds the
first-child parts into them as the model's ``scores`` does (:func:`~ssvm_torch.trees.sibling.fold_first_child`:
the same sums, so the decoder meets the same numbers and breaks ties alike), decodes the best projective tree (the
second-order Eisner algorithm of McDonald & Pereira 2006, :func:`sibling_best`; loss-augmented, of the arc scores
plus the sentence's cost on every arc that is not a gold arc, the margin from the trees' scores as
:func:`~ssvm_torch.trees.sibling.sibling_score` sums them, :func:`sibling_tree_score`) and, on a mistake, adds eta
psi_i(y^)
in the order of the model's ``add_psi``: the arc and head-token features of the gold tree up and of the decoded
tree down (:func:`~ssvm_torch.oracles.tree_perceptron.add_tree`), then the sibling parts' features of the gold tree
up and of the decoded tree down; the lagged sum likewise times (k - 1) at step k (Daume 2006, Alg. 7). It lives
beside the second-order store's kernels (layer ``stores``) because it reads the sibling design's compiled lookup
(:mod:`ssvm_torch.data.sibling_keys`), which the ``oracles`` layer may not import."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..data.sibling_keys import adjacent_siblings, block_scores, has_first_child, sibling_part_ids
from ..oracles.chain_perceptron import longest_row, margin_violated
from ..oracles.tree_perceptron import add_tree, wrong_heads
from ..trees.numba_sibling_best import sibling_best


@nb.njit(cache=True, nogil=True)
def fold_first_child_into(S, SB, n):
    """:func:`~ssvm_torch.trees.sibling.fold_first_child` in place on the entries the decoder reads: with
    c = SB[m, h, h] (0 where not finite), S[m, h] += c and SB[m, h, s] -= c for s strictly between h and m."""
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            c = SB[m, h, h]
            if not np.isfinite(c):
                continue
            S[m, h] += c
            lo, hi = (h, m) if h < m else (m, h)
            for s in range(lo + 1, hi):
                SB[m, h, s] -= c


@nb.njit(cache=True, nogil=True)
def add_cost(S, gold, n, c):
    """S[m, h] += c for every word m and head h other than its gold head gold[m]: ``trees.ops.augment``'s sum (the
    Hamming loss over heads decomposes over arcs; the gold arcs' offset 0 leaves them as they are)."""
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h != gold[m]:
                S[m, h] += c


@nb.njit(cache=True, nogil=True)
def augmented_margin(best, gold_score, wrong, c, gold_ok, tie):
    """(violated, loss) of a loss-augmented step as ``DependencyModel.oracle`` and the perceptron's loop decide
    them: H = (s(y*) + wrong c) - s(gold) violated where H > tie (1 + |H|), the task loss wrong c; where the gold
    tree lies outside the decoder's space (not ``gold_ok``: crossing arcs, several root children under single-root
    decoding) and scores above the loss-augmented tree, the oracle returns the gold tree (H = 0, no loss)."""
    aug = best + wrong * c
    if not gold_ok and aug < gold_score:
        return False, 0.0
    return margin_violated(aug - gold_score, tie), wrong * c


@nb.njit(cache=True, nogil=True)
def sibling_tree_score(S, SB, tree, n, sib):
    """s(tree) = sum over the words m of S[m, h] + SB[m, h, s] (h = tree[m], s its adjacent sibling, no sibling
    term where s = 0): :func:`~ssvm_torch.trees.sibling.sibling_score`'s terms."""
    adjacent_siblings(tree, n, sib)
    total = 0.0
    for m in range(1, n + 1):
        h, s = tree[m], sib[m]
        total += S[m, h] + SB[m, h, s] if s > 0 else S[m, h]
    return total


@nb.njit(cache=True, nogil=True)
def add_sibling_parts(target, c, sign, tree, n, start, sdes, sib, found):
    """target[f] += sign c for every feature f of the sibling parts of ``tree`` (heads of words 1..n; words in
    order, each part's ids in item order, as the model's ``_sibling_ids``): the part (h, s, m) of a word with an
    adjacent sibling s, with the design's ``first_child`` (h, h, m) for a head's nearest dependent on each side."""
    codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr, offset, first_child = sdes
    adjacent_siblings(tree, n, sib)
    for m in range(1, n + 1):
        s = sib[m]
        if s == 0 and not first_child:
            continue
        h = tree[m]
        k = sibling_part_ids(codes, parts, part_ptr, mult, keys, key_ptr, table, table_ptr, offset, start, h,
                             s if s > 0 else h, m, found)
        for j in range(k):
            target[found[j]] += sign * c


@nb.njit(cache=True, nogil=True)
def _add_psi(target, c, gold, got, n, i, ades, sdes, sib, found):
    """target += c psi_i(got) = c (phi(x_i, gold) - phi(x_i, got)) in the model's add_psi order."""
    offsets, arc_off, ptr, ids, tptr, tids = ades
    start = offsets[i]
    add_tree(target, c, 1.0, gold, n, arc_off[i], start + i, ptr, ids, tptr, tids)
    add_tree(target, c, -1.0, got, n, arc_off[i], start + i, ptr, ids, tptr, tids)
    add_sibling_parts(target, c, 1.0, gold, n, start, sdes, sib, found)
    add_sibling_parts(target, c, -1.0, got, n, start, sdes, sib, found)


@nb.njit(cache=True, nogil=True)
def nb_sibling_perceptron_epoch(order, ades, sdes, heads, w, lagged, cost, multiroot, eta, steps, average,
                                loss_augmented, gold_ok, tie):
    """One epoch over the sentences in ``order``: returns (mistakes, summed task loss, steps after; every mistake
    is an update). ``ades`` the arc design's host tuple (offsets, arc_off, ptr, ids, tptr, tids), ``sdes`` the
    sibling design's (:meth:`~ssvm_torch.data.sibling_features.SiblingDesign.host`), ``heads`` the gold heads of
    every word (0 the root), ``cost[i]`` the loss of one wrong head of sentence i; w and ``lagged`` updated in
    place; ``steps`` the steps taken before the epoch. ``loss_augmented``, ``gold_ok``, ``tie``: as
    :func:`~ssvm_torch.oracles.tree_perceptron.nb_tree_perceptron_epoch`'s."""
    offsets = ades[0]
    first_child = has_first_child(sdes)
    nmax = longest_row(offsets)
    SB = np.empty((nmax + 1, nmax + 1, nmax + 1))
    got = np.empty(nmax + 1, dtype=np.int64)
    gold = np.empty(nmax + 1, dtype=np.int64)
    sib = np.empty(nmax + 1, dtype=np.int64)
    found = np.empty(sdes[2].shape[0], dtype=np.int64)          # at most one id per item
    mistakes, loss_sum = 0, 0.0
    for r in range(order.shape[0]):
        i = order[r]
        n = offsets[i + 1] - offsets[i]
        S = np.empty((n + 1, n + 1))
        block_scores(i, ades, sdes, w, S, SB)
        if first_child:
            fold_first_child_into(S, SB, n)
        S0, gold_score = S, 0.0                  # loss-augmented: the scores before the cost, the gold tree's
        if loss_augmented:
            gold[0] = -1
            gold[1:n + 1] = heads[offsets[i]:offsets[i] + n]
            gold_score = sibling_tree_score(S, SB, gold, n, sib)
            S0 = S.copy()
            add_cost(S, gold, n, cost[i])
        sibling_best(S, SB, n, multiroot, got, False)
        wrong = wrong_heads(got, heads, offsets[i], n, gold)
        if loss_augmented:
            violated, loss = augmented_margin(sibling_tree_score(S0, SB, got, n, sib), gold_score, wrong, cost[i],
                                              gold_ok[i], tie)
        else:
            violated, loss = wrong > 0, wrong * cost[i]
        loss_sum += loss
        if violated:
            mistakes += 1
            _add_psi(w, eta, gold, got, n, i, ades, sdes, sib, found)
            if average and steps > 0:
                _add_psi(lagged, eta * steps, gold, got, n, i, ades, sdes, sib, found)
        steps += 1
    return mistakes, loss_sum, steps
