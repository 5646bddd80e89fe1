"""Training from partial annotation (ssvm_torch/chain/partial.py, ssvm_torch/trees/partial.py): negative tags and
heads are unobserved. The three losses and their gradients against brute force (every labeling / every tree of
small rows enumerated, the losses written out over them and differentiated by autograd): chains with and without
tag constraints and with ragged masks, trees projective and not, single- and multi-root, second order, labeled
trees with unobserved relations; fully observed rows equal today's losses bit for bit, rows with nothing observed
give 0, observed tags / heads that admit nothing are refused naming the row."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.constraints import allowed_transitions
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree, LinearChain
from ssvm_torch.trees import adjacent_siblings, dependency_crf_nll, dependency_hinge, dependency_softmax_margin
from tree_reference import all_trees

LOSSES = ("crf", "hinge", "softmax_margin")


# -- chains ---------------------------------------------------------------------------------------------------
def chain_brute(layer: LinearChain, E, mask, tags, loss: str) -> torch.Tensor:
    """The loss of one row (batch-first E (T, K)) over every labeling of its masked-on positions, in torch
    (differentiable): C = the labelings that agree with the observed tags and the constraints."""
    pos = [t for t in range(E.shape[0]) if mask[t]]
    if not pos:
        return E.sum() * 0.0
    K = E.shape[1]
    start, end, trans = layer.start_transitions, layer.end_transitions, layer.transitions
    cm = layer.constraint_masks
    allow_all, allow_c = [], []
    for y in itertools.product(range(K), repeat=len(pos)):
        if cm is not None and not (bool(cm["start"][y[0]]) and bool(cm["end"][y[-1]])
                                   and all(bool(cm["transitions"][a, b]) for a, b in zip(y, y[1:]))):
            continue
        s = start[y[0]] + end[y[-1]] + sum(E[p, k] for p, k in zip(pos, y)) + sum(trans[a, b] for a, b in zip(y, y[1:]))
        d = sum(1.0 for p, k in zip(pos, y) if tags[p] >= 0 and tags[p] != k)
        allow_all.append(s + (d if loss != "crf" else 0.0))
        if all(tags[p] < 0 or tags[p] == k for p, k in zip(pos, y)):
            allow_c.append(s)
    a, c = torch.stack(allow_all), torch.stack(allow_c)
    return a.max() - c.max() if loss == "hinge" else torch.logsumexp(a, 0) - torch.logsumexp(c, 0)


def _triton_ready() -> bool:
    from ssvm_torch.chain.triton_viterbi import interpreting, triton
    return triton is not None and (torch.cuda.is_available() or interpreting())


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("kernels", ["numba", "torch", pytest.param("triton", marks=pytest.mark.skipif(
    not _triton_ready(), reason="needs Triton and a GPU or TRITON_INTERPRET=1"))])
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "bio"])
def test_chain_losses_and_gradients_equal_enumeration(loss, kernels, constrained):
    torch.manual_seed(0)
    K, T = 3, 5                                                   # tags O, B-X, I-X under BIO constraints
    layer = LinearChain(K, batch_first=True, loss=loss, kernels=kernels,
                        constraints=allowed_transitions("bio", ["O", "B-X", "I-X"]) if constrained else None).double()
    E = torch.randn(5, T, K, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(5, T, dtype=torch.bool)
    mask[1, 3:] = False                                           # ragged
    mask[2, 0] = False                                            # a gap at the start
    tags = torch.tensor([[0, -1, 1, -1, -1], [1, 2, 0, 0, 0], [0, -1, -1, 2, -1], [-1, -1, -1, -1, -1],
                         [-1, 1, 2, 2, 0]])
    if constrained:                                               # observed tags that the constraints allow
        tags[1] = torch.tensor([1, 2, 0, 0, 0])
        tags[4] = torch.tensor([-1, 1, 2, 2, 0])
    dev = "cuda" if kernels == "triton" and torch.cuda.is_available() else "cpu"   # else Triton's interpreter
    on = layer.to(dev)
    Ed = E.detach().to(dev).requires_grad_(True)
    per = on(Ed, tags.to(dev), mask.to(dev), reduction="none").cpu()
    (g,) = torch.autograd.grad(per.sum(), Ed)
    g, layer = g.cpu(), on.cpu()
    E2 = E.detach().clone().requires_grad_(True)
    ref = torch.stack([chain_brute(layer, E2[b], mask[b], tags[b], loss) for b in range(5)])
    (g_ref,) = torch.autograd.grad(ref.sum(), E2)
    torch.testing.assert_close(per, ref.detach(), atol=1e-10, rtol=0)
    torch.testing.assert_close(g, g_ref, atol=1e-9, rtol=0)
    assert float(per[3]) == 0.0                                   # nothing observed


@pytest.mark.parametrize("loss", LOSSES)
def test_fully_observed_chain_rows_are_todays_losses_bit_for_bit(loss):
    torch.manual_seed(1)
    layer = LinearChain(4, batch_first=True, loss=loss, token_loss="normalized" if loss != "crf" else "hamming")
    E = torch.randn(6, 7, 4)
    mask = torch.rand(6, 7) < 0.8
    tags = torch.randint(0, 4, (6, 7))
    whole = layer(E, tags, mask, reduction="none")
    mixed = tags.clone()
    mixed[5, mask[5].nonzero()[0, 0]] = -1                        # one row partial: the others must not move
    got = layer(E, mixed, mask, reduction="none")
    assert torch.equal(got[:5], whole[:5])


def test_chain_observed_tags_that_admit_nothing_are_refused_by_row():
    layer = LinearChain(3, batch_first=True, constraints=allowed_transitions("bio", ["O", "B-X", "I-X"]))
    E = torch.randn(2, 3, 3)
    with pytest.raises(SSVMInputError, match="tags: row 1: the observed tags admit no tag sequence"):
        layer(E, torch.tensor([[0, -1, 0], [2, -1, 0]]))          # I-X may not start a row
    with pytest.raises(SSVMInputError, match=r"tags: expected values in \[0, 2\] \(or negative: unobserved\)"):
        layer(E, torch.tensor([[0, 3, 0], [0, 1, 2]]))
    with pytest.raises(SSVMInputError, match="tags: a score needs every masked-on tag"):
        layer.score(E, torch.tensor([[0, -1, 0], [0, 1, 2]]))


# -- trees ----------------------------------------------------------------------------------------------------
def tree_brute(S, SB, n, heads, projective, multiroot, loss) -> torch.Tensor:
    """The loss of one sentence over every tree of the kind, in torch (differentiable in S and SB)."""
    trees = all_trees(n, projective, multiroot)
    words = torch.arange(1, n + 1)
    T = torch.tensor(trees[:, 1:])
    s = S[words[None, :], T].sum(1)
    if SB is not None:
        sib = adjacent_siblings(torch.tensor(trees), torch.full((len(trees),), n))[:, 1:]
        picked = SB[words[None, :], T, sib.clamp(min=0)]
        s = s + torch.where(sib > 0, picked, torch.zeros_like(picked)).sum(1)
    h = torch.tensor(heads[1:n + 1])
    wrong = (T != h[None, :]) & (h >= 0)[None, :]
    in_c = ~wrong.any(1)
    first = s + (wrong.sum(1).to(s.dtype) if loss != "crf" else 0.0)
    if loss == "hinge":
        return first.max() - s[in_c].max()
    return torch.logsumexp(first, 0) - torch.logsumexp(s[in_c], 0)


KINDS = [(True, False, False), (False, False, False), (True, True, False), (False, True, False), (True, False, True)]


@pytest.mark.parametrize("projective,multiroot,second", KINDS,
                         ids=["proj", "nonproj", "proj-multi", "nonproj-multi", "proj-2o"])
@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_tree_losses_and_gradients_equal_enumeration(projective, multiroot, second, kernels):
    rng = np.random.default_rng(2)
    lengths = [5, 4, 6, 3, 2]
    N = 7
    S = torch.tensor(rng.normal(size=(5, N, N)) * 2)
    SB = torch.tensor(rng.normal(size=(5, N, N, N)) * 2) if second else None
    golds = torch.full((5, N), -1)
    for b, n in enumerate(lengths):
        trees = all_trees(n, projective, multiroot)
        t = torch.tensor(trees[int(rng.integers(len(trees)))])
        hide = {0: [2, 4], 1: [], 2: [1, 3, 5, 6], 3: [1, 2, 3], 4: [2]}[b]  # row 1 whole, row 3 nothing observed
        t[hide] = -1
        golds[b, :n + 1] = t
    L = torch.tensor(lengths)
    for loss, fn in (("hinge", dependency_hinge), ("softmax_margin", dependency_softmax_margin),
                     ("crf", dependency_crf_nll)):
        s = S.clone().requires_grad_(True)
        sb = None if SB is None else SB.clone().requires_grad_(True)
        per = fn(s, golds, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels, sib_scores=sb)
        grads = torch.autograd.grad(per.sum(), [s] + ([sb] if sb is not None else []))
        s2 = S.clone().requires_grad_(True)
        sb2 = None if SB is None else SB.clone().requires_grad_(True)
        ref = torch.stack([tree_brute(s2[b], None if sb2 is None else sb2[b], n, golds[b].tolist(), projective,
                                      multiroot, loss) for b, n in enumerate(lengths)])
        ref_grads = torch.autograd.grad(ref.sum(), [s2] + ([sb2] if sb2 is not None else []))
        torch.testing.assert_close(per.detach(), ref.detach(), atol=1e-10, rtol=0)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, atol=1e-9, rtol=0)
        assert float(per[3]) == 0.0


def tree_labeled_brute(S, lab, n, heads, rels, projective, loss) -> torch.Tensor:
    """One sentence's loss over every labeled single-root tree (relations enumerated too), differentiable."""
    trees = all_trees(n, projective, False)
    L = lab.shape[2]
    first, inside = [], []
    for t in trees:
        for ls in itertools.product(range(L), repeat=n):
            sc = sum(S[m, t[m]] + lab[m, t[m], ls[m - 1]] for m in range(1, n + 1))
            d = sum(1.0 for m in range(1, n + 1) if heads[m] >= 0 and t[m] != heads[m]) + \
                sum(1.0 for m in range(1, n + 1) if rels[m] >= 0 and ls[m - 1] != rels[m])
            first.append(sc + (d if loss != "crf" else 0.0))
            if all((heads[m] < 0 or t[m] == heads[m]) and (rels[m] < 0 or ls[m - 1] == rels[m]) for m in range(1, n + 1)):
                inside.append(sc)
    a, c = torch.stack(first), torch.stack(inside)
    return a.max() - c.max() if loss == "hinge" else torch.logsumexp(a, 0) - torch.logsumexp(c, 0)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("projective", [True, False], ids=["proj", "nonproj"])
def test_layer_with_unobserved_heads_and_relations_equals_enumeration(loss, projective):
    """DependencyTree with relations: unobserved heads, unobserved relations or both, and a whole row."""
    rng = np.random.default_rng(3)
    N, Lr, lengths = 5, 2, [4, 3, 4]
    S = torch.tensor(rng.normal(size=(3, N, N)) * 2, requires_grad=True)
    lab = torch.tensor(rng.normal(size=(3, N, N, Lr)), requires_grad=True)
    heads, rels = torch.full((3, N), -1), torch.full((3, N), -1)
    for b, n in enumerate(lengths):
        trees = all_trees(n, projective, False)
        t = torch.tensor(trees[int(rng.integers(len(trees)))])
        r = torch.tensor(rng.integers(0, Lr, size=n + 1))
        r[0] = -1
        if b == 0:
            t[2], r[3] = -1, -1
        if b == 1:
            r[1] = -1
        heads[b, :n + 1], rels[b, :n + 1] = t, r
    mask = (torch.arange(N)[None] >= 1) & (torch.arange(N)[None] <= torch.tensor(lengths)[:, None])
    layer = DependencyTree(projective=projective, loss=loss)
    per = layer(S, heads, mask, label_scores=lab, labels=rels, reduction="none")
    g = torch.autograd.grad(per.sum(), (S, lab))
    S2, lab2 = S.detach().clone().requires_grad_(True), lab.detach().clone().requires_grad_(True)
    ref = torch.stack([tree_labeled_brute(S2[b], lab2[b], n, heads[b].tolist(), rels[b].tolist(), projective, loss)
                       for b, n in enumerate(lengths)])
    g_ref = torch.autograd.grad(ref.sum(), (S2, lab2))
    torch.testing.assert_close(per.detach(), ref.detach(), atol=1e-10, rtol=0)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    whole = layer(S[2:], heads[2:], mask[2:], label_scores=lab[2:], labels=rels[2:], reduction="none")
    assert torch.equal(whole, per[2:])                            # the fully observed row, bit for bit


def test_tree_observed_heads_that_admit_no_tree_are_refused_by_row():
    S = torch.zeros(2, 5, 5)
    with pytest.raises(SSVMInputError, match="heads: row 1: the observed heads admit no projective single-root"):
        dependency_crf_nll(S, torch.tensor([[-1, 2, 0, -1, -1], [-1, 2, 1, -1, -1]]))     # 1 <-> 2: a cycle
    with pytest.raises(SSVMInputError, match="heads: row 0: the observed heads admit no"):
        dependency_hinge(S, torch.tensor([[-1, 0, 0, -1, -1], [-1, 2, 0, 2, 3]]))          # two root children
    with pytest.raises(SSVMInputError, match=r"heads: row 0, word 3: head 7 is out of \[0, 4\]"):
        dependency_hinge(S, torch.tensor([[-1, 0, -1, 7, -1], [-1, 2, 0, 2, 3]]))
    with pytest.raises(SSVMInputError, match="heads: row 1 is not a projective single-root dependency tree"):
        dependency_hinge(S, torch.tensor([[-1, 0, -1, -1, -1], [-1, 2, 1, 0, 3]]))           # a whole row: a tree
