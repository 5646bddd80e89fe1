"""Minimum-Bayes-risk decoding of the UD parser (``decode="mbr"``, ssvm_torch.deep.ud_decode.expected_las_heads):
the tree of highest expected LAS -- sum over words of the arc marginal times the best relation's probability at
that head -- against enumeration over every tree of the layer's kind, first order (projective and not) and second
order, with the marginals themselves from brute force; a bad decode is refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch.deep.ud_decode import decode_split, expected_las_heads
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from tree_reference import all_trees, brute_force, sibling_brute_force


@pytest.mark.parametrize("order, projective", [(1, True), (1, False), (2, True)])
def test_the_heads_maximize_expected_las_over_every_tree(order, projective):
    rng = np.random.default_rng(10 * order + projective)
    B, N, L, lengths = 4, 7, 5, [6, 3, 5, 1]
    arcs = torch.tensor(rng.normal(0, 2, (B, N, N)))
    sibs = torch.tensor(rng.normal(0, 2, (B, N, N, N))) if order == 2 else None
    rel = torch.tensor(rng.normal(0, 2, (B, N, N, L)))
    pos = torch.arange(N)[None, :]
    mask = (pos >= 1) & (pos <= torch.tensor(lengths)[:, None])
    tree = DependencyTree(projective=projective, multiroot=False, loss="crf")
    heads = expected_las_heads(tree, arcs, mask, rel, sibs)
    best_p = torch.softmax(rel, -1).amax(-1).numpy()
    differs = 0
    for b, n in enumerate(lengths):
        if order == 1:
            top, _, _, M = brute_force(arcs[b].numpy(), n, projective, False)
        else:
            top, _, _, M, _ = sibling_brute_force(arcs[b].numpy(), sibs[b].numpy(), n, False)
        trees = all_trees(n, projective, False)
        gain = M * best_p[b, :n + 1, :n + 1]                        # [m, h]: P(h -> m) x max_l p(l | h, m)
        values = gain[np.arange(1, n + 1)[None, :], trees[:, 1:]].sum(1)
        assert heads[b, 1:n + 1].tolist() == trees[int(np.argmax(values)), 1:].tolist()
        assert heads[b, 0] == -1 and (heads[b, n + 1:] == -1).all()
        differs += heads[b, 1:n + 1].tolist() != list(top[1:])
    assert differs >= 1                     # the draw has a sentence whose MBR tree is not the best-scoring one


def test_a_decode_other_than_max_or_mbr_is_refused_by_name():
    with pytest.raises(SSVMInputError, match="decode: expected one of"):
        decode_split(None, None, None, [], "cpu", decode="viterbi")
