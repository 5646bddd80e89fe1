"""The k best dependency trees of every row (first order, projective or not, single- or multi-root; second
order with sibling scores; with relations), by Lawler's partition (:mod:`ssvm_torch.trees.lawler`) over the
package's best-tree oracles; first-order projective trees on the CPU by the compiled k-best Eisner instead
(:mod:`ssvm_torch.trees.numba_kbest`: Huang & Chiang 2005's lazy k-best on Eisner's items).

A part is an arc (m, h), a flat index into the arc scores; forcing it excludes every other head of word m, so a
subproblem is one call of the ordinary best-tree oracle with -inf there. Exact for every tree kind the oracles
decode: Eisner's and Chu-Liu-Edmonds' -inf arcs are never taken, and the sibling scores are untouched (they
score arcs the subproblem still allows). O(k n) oracle calls per row, batched by rank. With relations the k best
trees of the arc scores plus each arc's best relation score are ranked first and their relations expanded
after (:mod:`ssvm_torch.trees.labelings`: relations are independent given the heads).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..devices import from_host, to_host
from . import ops, sibling_ops
from .checks import host_batch, parallel_rows, use_numba
from .labelings import kbest_labeled
from .lawler import check_room, kbest
from .numba_kbest import eisner_kbest_batch, eisner_kbest_batch_parallel


def _compiled_projective(S, lengths, multiroot: bool, k: int):
    """(heads (B, k, N), scores (B, k)) by the compiled k-best Eisner (:mod:`~ssvm_torch.trees.numba_kbest`)."""
    Sh, Lh = host_batch(S, lengths)
    B, N, _ = Sh.shape
    heads, scores = np.empty((B, k, N), dtype=np.int64), np.empty((B, k))
    (eisner_kbest_batch_parallel if parallel_rows(B) else eisner_kbest_batch)(Sh, Lh, multiroot, k, heads, scores)
    return from_host(heads, S.device), from_host(scores, S.device).to(S.dtype)


def dependency_kbest(S: torch.Tensor, lengths: torch.Tensor, k: int, projective: bool, multiroot: bool,
                     kernels: str = "auto", SB: torch.Tensor | None = None, lab: torch.Tensor | None = None):
    """(heads (B, k, N) int64, relations (B, k, N) int64 or None without ``lab``, scores (B, k)): the k best
    (labeled) trees of every row of the checked arc scores S (B, N, N) [with label scores ``lab`` (B, N, N, L),
    sibling scores SB (B, N, N, N)], in non-increasing score order; the ranks past a row's number of trees of
    finite score are -1 with score -inf. An empty row's one tree (no arcs) scores 0; a row without a tree of finite
    score is refused by name. No gradient."""
    S = S.detach()
    X = S if lab is None else S + lab.detach().amax(3)
    B, N, _ = X.shape
    L = 1 if lab is None else min(lab.shape[3], k)
    check_room(B * k * N * (24 + 32 * L), k)               # heads, relations, the relation lists and their merge
    words = to_host(lengths)

    def decode(Xc, rows):
        if SB is None:
            heads, scores = ops.best(Xc, lengths[rows], projective, multiroot, kernels, refuse=False)
        else:
            heads, scores = sibling_ops.best(Xc, SB.detach().index_select(0, rows), lengths[rows], multiroot, kernels,
                                             refuse=False)
        return (heads,), scores

    def parts_of(sol, b):
        m = np.arange(1, int(words[b]) + 1)
        return m * N + sol[0][m]

    @functools.lru_cache(maxsize=None)
    def conflicts(p):
        idx = np.arange((p // N) * N, (p // N + 1) * N)
        return idx[idx != p]

    if SB is None and projective and use_numba(X, kernels):
        heads, scores = _compiled_projective(X, lengths, multiroot, k)
    else:
        (heads,), scores = kbest(X, k, decode, parts_of, conflicts, fills=(-1,),
                                 extra_elements=0 if SB is None else N ** 3)
    ops.fail_no_tree(scores[:, 0], lengths)               # a row without any tree: refused as by the best tree
    if lab is None:
        return heads, None, scores
    lab = lab.detach()
    word = heads >= 0                                                         # (B, k, N)
    chosen = lab[torch.arange(B, device=S.device)[:, None, None], torch.arange(N, device=S.device), heads.clamp(min=0)]
    neutral = torch.full_like(chosen[0, 0, 0], float("-inf"))
    neutral[0] = 0.0
    options = torch.where(word[..., None], chosen - chosen.amax(3, keepdim=True), neutral)
    pick, labels, scores = kbest_labeled(scores, options, k)
    heads = heads.gather(1, pick.clamp(min=0)[:, :, None].expand(B, k, N))
    heads = torch.where(pick[:, :, None] >= 0, heads, torch.full_like(heads, -1))
    return heads, torch.where(heads >= 0, labels, torch.full_like(labels, -1)), scores
