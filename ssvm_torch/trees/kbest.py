"""The k best dependency trees of every row (first order, projective or not, single- or multi-root; second
order with sibling scores; with relations), by Lawler's partition (:mod:`ssvm_torch.trees.lawler`) over the
package's best-tree oracles.

A part is an arc with its relation, (m, h, l), a flat index into the labeled arc scores X[m, h, l] =
arc_scores[m, h] + label_scores[m, h, l] (L = 1 without relations); forcing it excludes every other (h', l')
of word m, so a subproblem is one call of the ordinary best-tree oracle on X with -inf there, each arc then
taking its best remaining relation. Exact for every tree kind the oracles decode: Eisner's and
Chu-Liu-Edmonds' -inf arcs are never taken, and the sibling scores are untouched (they score arcs the
subproblem still allows). O(k n) oracle calls per row, batched by rank.
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import to_host
from . import ops, sibling_ops
from .lawler import kbest


def dependency_kbest(S: torch.Tensor, lengths: torch.Tensor, k: int, projective: bool, multiroot: bool,
                     kernels: str = "auto", SB: torch.Tensor | None = None, lab: torch.Tensor | None = None):
    """(heads (B, k, N) int64, relations (B, k, N) int64 or None without ``lab``, scores (B, k)): the k best
    (labeled) trees of every row of the checked arc scores S (B, N, N) [with label scores ``lab`` (B, N, N, L),
    sibling scores SB (B, N, N, N)], in non-increasing score order; the ranks past a row's number of trees of
    finite score are -1 with score -inf. An empty row's one tree (no arcs) scores 0; a row without a tree of finite
    score is refused by name. No gradient."""
    S = S.detach()
    X = S[..., None] if lab is None else S[..., None] + lab.detach()
    B, N, _, L = X.shape
    words = to_host(lengths)

    def decode(Xc, rows):
        eff = Xc[..., 0] if L == 1 else Xc.amax(3)
        if SB is None:
            heads, scores = ops.best(eff, lengths[rows], projective, multiroot, kernels, refuse=False)
        else:
            heads, scores = sibling_ops.best(eff, SB.detach().index_select(0, rows), lengths[rows], multiroot, kernels,
                                             refuse=False)
        rel = Xc.argmax(3).gather(2, heads.clamp(min=0)[:, :, None])[:, :, 0]
        return (heads, torch.where(heads >= 0, rel, torch.full_like(rel, -1))), scores

    def parts_of(sol, b):
        heads, rel = sol
        m = np.arange(1, int(words[b]) + 1)
        return (m * N + heads[m]) * L + rel[m]

    def conflicts(p, b):
        start = (p // (N * L)) * N * L
        idx = np.arange(start, start + N * L)
        return idx[idx != p]

    (heads, rel), scores = kbest(X, k, decode, parts_of, conflicts, fills=(-1, -1),
                                 extra_elements=0 if SB is None else N ** 3)
    ops.fail_no_tree(scores[:, 0], lengths)               # a row without any tree: refused as by the best tree
    return heads, (None if lab is None else rel), scores
