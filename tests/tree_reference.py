"""Brute force over dependency trees, the reference of the tree kernels' tests: every head assignment of n
words enumerated (n + 1)^n of them, kept where it is a tree of the asked kind (acyclic by pointer doubling,
one root child for single-root, no crossing arcs for projective). Vectorized in numpy: n = 6 (117,649
assignments) takes milliseconds."""
from __future__ import annotations

import functools
import itertools

import numpy as np


@functools.lru_cache(maxsize=None)
def all_trees(n: int, projective: bool, multiroot: bool) -> np.ndarray:
    """(T, n + 1) int64: every tree over n words as heads (column 0 is -1), in lexicographic order."""
    if n == 0:
        return np.full((1, 1), -1, dtype=np.int64)
    H = np.array(list(itertools.product(range(n + 1), repeat=n)), dtype=np.int64)        # heads of words 1..n
    words = np.arange(1, n + 1)
    keep = (H != words[None, :]).all(1)
    P = np.concatenate([np.zeros((len(H), 1), dtype=np.int64), H], 1)                    # parent pointers, 0 -> 0
    for _ in range(int(np.ceil(np.log2(n + 1))) + 1):
        P = np.take_along_axis(P, P, 1)
    keep &= (P[:, 1:] == 0).all(1)
    if not multiroot:
        keep &= (H == 0).sum(1) == 1
    if projective:
        lo, hi = np.minimum(H, words), np.maximum(H, words)
        cross = (lo[:, :, None] < lo[:, None, :]) & (lo[:, None, :] < hi[:, :, None]) & (hi[:, :, None] < hi[:, None, :])
        keep &= ~cross.reshape(len(H), -1).any(1)
    H = H[keep]
    return np.concatenate([np.full((len(H), 1), -1, dtype=np.int64), H], 1)


def tree_scores(S: np.ndarray, trees: np.ndarray) -> np.ndarray:
    """s(y) of every tree (T,) for one sentence's scores S (n+1, n+1) [modifier, head]."""
    n = trees.shape[1] - 1
    return S[np.arange(1, n + 1)[None, :], trees[:, 1:]].sum(1) if n else np.zeros(len(trees))


def brute_force(S: np.ndarray, n: int, projective: bool, multiroot: bool, gold=None, cost: float = 1.0):
    """For one sentence: (the best tree, its score, log Z, the arc marginals (n+1, n+1)) of the scores S,
    loss-augmented by cost x (wrong heads against ``gold``) when ``gold`` is given."""
    trees = all_trees(n, projective, multiroot)
    s, top, logz, p, M = distribution(tree_scores(S[:n + 1, :n + 1], trees), trees, gold, cost)
    return trees[top], float(s[top]), logz, M


def distribution(s: np.ndarray, trees: np.ndarray, gold, cost: float):
    """Over the enumerated ``trees`` with scores ``s``, loss-augmented by cost x (wrong heads against ``gold``)
    when it is given: (the scores, the best tree's index, log Z, the probabilities, the arc marginals)."""
    n = trees.shape[1] - 1
    if gold is not None:
        s = s + cost * (trees[:, 1:] != np.asarray(gold)[1:n + 1][None, :]).sum(1)
    logz = float(np.logaddexp.reduce(s))
    p = np.exp(s - logz)
    M = np.zeros((n + 1, n + 1))
    for m in range(1, n + 1):
        np.add.at(M[m], trees[:, m], p)
    return s, int(np.argmax(s)), logz, p, M


def adjacent_siblings(trees: np.ndarray) -> np.ndarray:
    """(T, n + 1) int64: for every tree (heads, column 0 = -1) and word m, its adjacent sibling s -- the
    dependent of the same head on the same side between the head and m, nearest to m -- or 0 for none
    (SuPar's ``CoNLL.get_sibs`` per word). A plain loop over words: the reference of the kernels' rule."""
    T, n1 = trees.shape
    sib = np.zeros((T, n1), dtype=np.int64)
    for m in range(1, n1):
        h = trees[:, m]
        for k in range(1, n1):
            between = ((h < k) & (k < m)) | ((m < k) & (k < h))
            same = between & (trees[:, k] == h)
            # nearest to m: the largest k on the right side (h < k < m), the smallest on the left
            closer = np.where(h < m, k > sib[:, m], (sib[:, m] == 0) | (k < sib[:, m]))
            sib[:, m] = np.where(same & closer, k, sib[:, m])
    return sib


def sibling_tree_scores(S: np.ndarray, SB: np.ndarray, trees: np.ndarray, first_child: bool = False) -> np.ndarray:
    """s(y) = sum_m S[m, y_m] + sum_{m with a sibling s} SB[m, y_m, s] of every tree (T,), + sum over the other
    words (the nearest dependents) SB[m, y_m, y_m] with ``first_child`` (McDonald & Pereira 2006's s(h, -, m))."""
    n = trees.shape[1] - 1
    if n == 0:
        return np.zeros(len(trees))
    words = np.arange(1, n + 1)[None, :]
    sib = adjacent_siblings(trees)[:, 1:]
    heads = trees[:, 1:]
    extra = np.where(sib > 0, SB[words, heads, sib], SB[words, heads, heads] if first_child else 0.0)
    return S[words, heads].sum(1) + extra.sum(1)


def sibling_brute_force(S: np.ndarray, SB: np.ndarray, n: int, multiroot: bool, gold=None, cost: float = 1.0,
                        first_child: bool = False):
    """For one sentence's second-order scores: (the best projective tree, its score, log Z, the arc marginals
    (n+1, n+1), the sibling marginals (n+1, n+1, n+1) [m, h, s]), loss-augmented by cost x (wrong heads
    against ``gold``) when it is given. ``first_child``: the nearest dependents score SB[m, h, h] and their
    marginals sit at [m, h, h]."""
    trees = all_trees(n, True, multiroot)
    s, top, logz, p, M = distribution(sibling_tree_scores(S[:n + 1, :n + 1], SB[:n + 1, :n + 1, :n + 1], trees,
                                                          first_child), trees, gold, cost)
    MS = np.zeros((n + 1, n + 1, n + 1))
    sib = adjacent_siblings(trees)
    for m in range(1, n + 1):
        has = sib[:, m] > 0
        np.add.at(MS[m], (trees[has, m], sib[has, m]), p[has])
        if first_child:
            np.add.at(MS[m], (trees[~has, m], trees[~has, m]), p[~has])
    return trees[top], float(s[top]), logz, M, MS


def check_gold_outside_the_space(model, data, lam: float = 0.1) -> None:
    """A projective decoder with some non-projective gold trees (first or second order): a block's labelings are the
    projective trees plus its gold tree, so after BCFW with gap sampling H_i >= 0, the last record's primal and gap
    are the brute-force primal (over that set, the model's dense phi) and it minus the store's dual, and the model's
    oracle and the store's gap pass give the enumerated H_i."""
    import pytest
    import torch
    from ssvm_torch import SolverConfig, make_store
    from ssvm_torch.solvers.make import make_solver
    store = make_store(model, data, lam)
    hist = make_solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=8, gap_check=4, seed=1)).run()
    w = store.w.clone()
    H = []
    for i in range(data.n):
        n = int(data.lengths[i])
        gold = data.padded_heads([i])[0, :n + 1].numpy()
        Y = torch.tensor(np.concatenate([all_trees(n, True, False), gold[None]]))
        idx = torch.full((len(Y),), i)
        loss = model.loss(data, idx, Y)
        v = model.phi(data, idx, Y) @ w + loss
        gold_score = float(model.phi(data, torch.tensor([i]), torch.tensor(gold[None])) @ w)
        assert float(loss[-1]) == 0.0 and float(v[-1]) == pytest.approx(gold_score, abs=1e-12)
        H.append(float(v.max()) - float(v[-1]))             # the gold row's own sum: H_i >= 0 exactly
    assert min(H) >= 0.0
    primal = lam / 2 * float(w @ w) + float(np.mean(H))
    assert hist[-1]["primal"] == pytest.approx(primal, abs=1e-9)
    assert hist[-1]["gap"] == pytest.approx(primal - store.dual(), abs=1e-9) and hist[-1]["gap"] >= 0
    _, H_model = model.oracle(w, data, torch.arange(data.n))
    assert torch.allclose(H_model, torch.tensor(H, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(store.gap_pass().H, H_model, atol=1e-9)


def labeled_tree_log_probs(S: np.ndarray, SB, lab: np.ndarray, trees: np.ndarray, n: int) -> np.ndarray:
    """log p(y, r) of every (tree, relations) pair of the labeled CRF s(y) + sum_m lab[m, y_m, r_m] (second order
    with SB), in the order trees x every relation sequence (itertools.product over the words 1..n)."""
    s = tree_scores(S, trees) if SB is None else sibling_tree_scores(S, SB, trees)
    out = []
    for t, st in zip(trees.tolist(), s):
        for rels in itertools.product(range(lab.shape[2]), repeat=n):
            out.append(st + sum(lab[m, t[m], rels[m - 1]] for m in range(1, n + 1)))
    out = np.array(out)
    return out - np.logaddexp.reduce(out)
