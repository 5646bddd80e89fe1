"""The k best binary trees of every row (unlabeled or labeled spans), by Lawler's partition
(:mod:`ssvm_torch.trees.lawler`) over the CKY oracle.

A part is a labeled span (i, j, l), a flat index into the scores X[i, j, l] (L = 1 unlabeled). Forcing it
excludes the spans that cross (i, j) and its other labels: a binary tree over n words is a maximal set of
non-crossing spans, so every span that crosses none of a tree's spans is one of them, and the trees without a
span crossing (i, j) are exactly the trees holding it. Unlabeled, the one-word spans and the sentence are in
every tree and are not parts. O(k n) CKY calls per row, batched by rank.
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from ..trees.lawler import kbest
from . import ops


def span_kbest(S: torch.Tensor, lengths: torch.Tensor, k: int, kernels: str = "auto"):
    """(charts (B, k, N+1, N+1), scores (B, k)): the k best trees of every row of the checked span scores S
    (B, N+1, N+1) or labeled (B, N+1, N+1, L), in non-increasing score order; charts as :func:`ops.best`'s (bool,
    or int64 labels with -1 off the tree), all False / -1 with score -inf for the ranks past a row's number of
    trees of finite score. An empty row's one tree (no spans) scores 0; a row without a tree of finite score is
    refused by name. No gradient."""
    S = S.detach()
    labeled = S.dim() == 4
    X = S if labeled else S[..., None]
    B, M, _, L = X.shape
    words = to_host(lengths)
    ii, jj = np.meshgrid(np.arange(M), np.arange(M), indexing="ij")

    def decode(Xc, rows):
        charts, scores = ops.best(Xc if labeled else Xc[..., 0], lengths[rows], kernels, refuse=False)
        return (charts,), scores

    def parts_of(sol, b):
        (chart,) = sol
        if labeled:
            i, j = np.nonzero(chart >= 0)
            return (i * M + j) * L + chart[i, j]
        i, j = np.nonzero(chart)
        keep = (j - i >= 2) & ~((i == 0) & (j == int(words[b])))
        return i[keep] * M + j[keep]

    def conflicts(p, b):
        i, j, l = p // (M * L), (p // L) % M, p % L
        cross = ((ii < i) & (i < jj) & (jj < j)) | ((i < ii) & (ii < j) & (j < jj))
        mask = np.repeat(cross[:, :, None], L, axis=2)
        mask[i, j, :] = True
        mask[i, j, l] = False
        return np.flatnonzero(mask)

    (charts,), scores = kbest(X, k, decode, parts_of, conflicts, fills=(-1 if labeled else False,))
    ops.fail_no_tree(scores[:, 0], lengths, "best-tree score")    # refused as by the best tree
    return charts, scores
