"""KL(p || q) is +inf in a row where p gives weight to a part that q forbids (-inf). A caller masks such rows out
of its loss (distillation, posterior regularization under constraints); the inputs and parameters they share with
the other rows must then get those rows' gradient, finite: before, 0 * inf in the masked row's backward sent NaN
into every shared parameter. For every layer's KL: the masked row's inputs get a gradient of exactly 0, the other
rows' inputs the gradient they get in a batch without the masked row, and nothing is NaN."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch.chain import edge_chain
from ssvm_torch.nn import (ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment, SemiMarkovChain,
                           allowed_transitions)

B = 3


def randn(*shape, seed):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def check_masked_row(kl, inputs):
    """``kl(*inputs)`` (B,) is +inf in row 0 only; the gradient of its sum over rows 1.. is 0 in row 0 of every
    input, finite everywhere, and in rows 1.. that of ``kl`` on rows 1.. alone."""
    leaves = [x.clone().requires_grad_() for x in inputs]
    value = kl(*leaves)
    assert torch.isinf(value[0]) and bool(torch.isfinite(value[1:]).all()), value
    value[1:].sum().backward()
    alone = [x[1:].clone().requires_grad_() for x in inputs]
    kl(*alone).sum().backward()
    for whole, part in zip(leaves, alone):
        assert bool(torch.isfinite(whole.grad).all())
        assert bool((whole.grad[0] == 0).all())
        torch.testing.assert_close(whole.grad[1:], part.grad, rtol=0, atol=1e-10)


def test_edge_chain():
    E, Q = randn(B, 4, 3, 3, seed=0), randn(B, 4, 3, 3, seed=1)
    Q[0, 1, 2, 0] = float("-inf")
    check_masked_row(lambda e, q: edge_chain.kl(e, q), (E, Q))


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_linear_chain_under_the_other_layers_constraints(kernels):
    """The chain layer's -inf comes from constraints, which hold for every row: a q with BIO constraints and a p
    without make every row +inf; masked out, every gradient (emissions and both layers' parameters) is 0."""
    tags = ["O", "B-NP", "I-NP"]
    p = LinearChain(3, batch_first=True, kernels=kernels).double()
    q = LinearChain(3, batch_first=True, kernels=kernels, constraints=allowed_transitions("BIO", tags)).double()
    E, F = randn(B, 5, 3, seed=2).requires_grad_(), randn(B, 5, 3, seed=3).requires_grad_()
    value = p.kl(E, F, other=q)
    assert bool(torch.isinf(value).all())
    torch.where(torch.isfinite(value), value, torch.zeros_like(value)).sum().backward()
    for g in [E.grad, F.grad] + [x.grad for x in (*p.parameters(), *q.parameters()) if x.grad is not None]:
        assert bool(torch.isfinite(g).all()) and bool((g == 0).all())


@pytest.mark.parametrize("projective", [True, False])
def test_dependency_tree(projective):
    S, Q = randn(B, 5, 5, seed=4), randn(B, 5, 5, seed=5)
    Q[0, 1, 2] = float("-inf")                                # word 1 under word 2: q forbids, p weighs it
    layer = DependencyTree(projective=projective)
    check_masked_row(lambda s, q: layer.kl(s, q), (S, Q))
    check_masked_row(lambda s, q: layer.cross_entropy(s, q), (S, Q))


def test_second_order_and_labeled_dependency_trees():
    S, Q = randn(B, 5, 5, seed=6), randn(B, 5, 5, seed=7)
    SB, QB = randn(B, 5, 5, 5, seed=8), randn(B, 5, 5, 5, seed=9)
    Q[0, 1, 2] = float("-inf")
    layer = DependencyTree()
    check_masked_row(lambda s, q, sb, qb: layer.kl(s, q, sib_scores=sb, other_sib_scores=qb), (S, Q, SB, QB))
    lab, labq = randn(B, 5, 5, 3, seed=10), randn(B, 5, 5, 3, seed=11)
    labq[0, 1, :, 2] = float("-inf")                         # relation 2 of word 1, whatever its head, under q
    Qf = randn(B, 5, 5, seed=7)
    check_masked_row(lambda s, q, la, lq: layer.kl(s, q, label_scores=la, other_label_scores=lq), (S, Qf, lab, labq))


def test_constituency_tree_unlabeled_and_labeled():
    S, Q = randn(B, 5, 5, seed=12), randn(B, 5, 5, seed=13)
    Q[0, 0, 2] = float("-inf")                                # the span of words 0..1 under q
    layer = ConstituencyTree()
    check_masked_row(lambda s, q: layer.kl(s, q), (S, Q))
    lab, labq = randn(B, 5, 5, 2, seed=14), randn(B, 5, 5, 2, seed=15)
    labq[0, 0, 4, 0] = float("-inf")                          # the root span's label 0 under q
    Qf = randn(B, 5, 5, seed=13)
    check_masked_row(lambda s, q, la, lq: layer.kl(s, q, label_scores=la, other_label_scores=lq), (S, Qf, lab, labq))


def test_semi_markov_chain():
    S, Q = randn(B, 5, 2, 3, seed=16), randn(B, 5, 2, 3, seed=17)
    Q[0, 0, 0, 1] = float("-inf")                             # a one-position segment of label 1 at position 0
    layer = SemiMarkovChain(3, 2)
    check_masked_row(lambda s, q: layer.kl(s, q), (S, Q))
    check_masked_row(lambda s, q: layer.cross_entropy(s, q), (S, Q))


@pytest.mark.parametrize("local", [False, True])
def test_monotonic_alignment(local):
    S, Q = randn(B, 4, 3, 3, seed=18), randn(B, 4, 3, 3, seed=19)
    Q[0, 1, 1, 1] = float("-inf")                             # the diagonal move into (1, 1) under q
    layer = MonotonicAlignment(local=local)
    check_masked_row(lambda s, q: layer.kl(s, q), (S, Q))
    check_masked_row(lambda s, q: layer.cross_entropy(s, q), (S, Q))
