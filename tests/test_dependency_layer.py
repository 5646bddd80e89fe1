"""ssvm_torch.nn.DependencyTree: the three losses against brute force over labeled trees, gradients, decoding
with relations, reductions, masks, and the refusals of bad input."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from tree_reference import all_trees

LOSSES = ["hinge", "softmax_margin", "crf"]


def _labeled_values(S, lab, b, n, trees, gold, glab):
    """(s(y, l), Delta(y, l)) of every labeled tree of row b."""
    out = []
    L = lab.shape[3]
    for y in trees:
        base = sum(float(S[b, m, y[m]]) for m in range(1, n + 1))
        wrong_h = sum(int(y[m] != gold[b, m]) for m in range(1, n + 1))
        for ls in itertools.product(range(L), repeat=n):
            s = base + sum(float(lab[b, m, y[m], ls[m - 1]]) for m in range(1, n + 1))
            out.append((s, wrong_h + sum(int(ls[m - 1] != glab[b, m]) for m in range(1, n + 1))))
    return np.array(out)


@pytest.mark.parametrize("projective", [True, False])
@pytest.mark.parametrize("loss", LOSSES)
def test_labeled_losses_equal_brute_force(projective, loss):
    rng = np.random.default_rng(0)
    B, n, L = 3, 4, 2
    S = torch.tensor(rng.normal(size=(B, n + 1, n + 1)))
    lab = torch.tensor(rng.normal(size=(B, n + 1, n + 1, L)))
    trees = all_trees(n, projective, False)
    gold = torch.tensor(np.stack([trees[i] for i in rng.integers(len(trees), size=B)]))
    glab = torch.tensor(rng.integers(0, L, size=(B, n + 1)))
    layer = DependencyTree(projective=projective, loss=loss)
    got = layer(S, gold, label_scores=lab, labels=glab, reduction="none")
    for b in range(B):
        v = _labeled_values(S, lab, b, n, trees, gold, glab)
        gs = sum(float(S[b, m, gold[b, m]] + lab[b, m, gold[b, m], glab[b, m]]) for m in range(1, n + 1))
        ref = {"hinge": (v[:, 0] + v[:, 1]).max(), "softmax_margin": np.logaddexp.reduce(v[:, 0] + v[:, 1]),
               "crf": np.logaddexp.reduce(v[:, 0])}[loss] - gs
        assert float(got[b]) == pytest.approx(ref, abs=1e-9)
    Sg, lg = S.clone().requires_grad_(True), lab.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, c: layer(a, gold, label_scores=c, labels=glab, reduction="none"),
                                    (Sg, lg))


@pytest.mark.parametrize("loss", LOSSES)
def test_unlabeled_losses_order_and_reductions(loss):
    """hinge <= softmax-margin, CRF <= softmax-margin (module docstring); the reductions of one per-row vector."""
    rng = np.random.default_rng(1)
    S = torch.tensor(rng.normal(size=(5, 8, 8)) * 2)
    mask = torch.zeros(5, 8, dtype=torch.bool)
    lengths = [7, 3, 5, 1, 6]
    for b, n in enumerate(lengths):
        mask[b, 1:n + 1] = True
    gold = torch.full((5, 8), -1)
    for b, n in enumerate(lengths):
        gold[b, :n + 1] = torch.tensor(all_trees(n, True, False)[0] if n < 7 else [-1, 0, 1, 2, 3, 4, 5, 6])
    per = {k: DependencyTree(loss=k)(S, gold, mask, reduction="none") for k in LOSSES}
    assert bool((per["hinge"] <= per["softmax_margin"] + 1e-12).all())
    assert bool((per["crf"] <= per["softmax_margin"] + 1e-12).all()) and bool((per["hinge"] >= 0).all())
    layer = DependencyTree(loss=loss)
    assert float(layer(S, gold, mask)) == pytest.approx(float(per[loss].sum()))
    assert float(layer(S, gold, mask, reduction="mean")) == pytest.approx(float(per[loss].mean()))
    assert float(layer(S, gold, mask, reduction="token_mean")) == pytest.approx(float(per[loss].sum()) / sum(lengths))
    # lengths= gives what the mask gives; padding beyond a row never matters
    assert torch.allclose(layer(S, gold, lengths=torch.tensor(lengths), reduction="none"), per[loss])
    S2 = S.clone()
    S2[0, :, :] += 0.0
    S2[1, 5:, :] = 1e6
    S2[1, :, 5:] = -1e6
    assert torch.allclose(layer(S2, gold, mask, reduction="none")[1], per[loss][1])


def test_normalized_cost_divides_the_margin():
    rng = np.random.default_rng(2)
    S = torch.tensor(rng.normal(size=(1, 5, 5)))
    gold = torch.tensor(all_trees(4, True, False)[3:4])
    trees = all_trees(4, True, False)
    s = np.array([sum(float(S[0, m, y[m]]) for m in range(1, 5)) for y in trees])
    wrong = np.array([sum(int(y[m] != gold[0, m]) for m in range(1, 5)) for y in trees])
    gs = sum(float(S[0, m, gold[0, m]]) for m in range(1, 5))
    got = DependencyTree(loss="hinge", cost="normalized")(S, gold)
    assert float(got) == pytest.approx((s + wrong / 4).max() - gs, abs=1e-12)
    got = DependencyTree(loss="softmax_margin", cost=0.5)(S, gold)
    assert float(got) == pytest.approx(np.logaddexp.reduce(s + 0.5 * wrong) - gs, abs=1e-12)


def test_decode_with_relations_and_mask():
    rng = np.random.default_rng(3)
    S = torch.tensor(rng.normal(size=(2, 6, 6)), dtype=torch.float32)
    lab = torch.tensor(rng.normal(size=(2, 6, 6, 3)), dtype=torch.float32)
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]], dtype=torch.bool)
    layer = DependencyTree()
    heads, rel = layer.decode(S, mask, label_scores=lab)
    assert heads[1, 3:].tolist() == [-1, -1, -1] and rel[1, 3:].tolist() == [-1, -1, -1] and heads[0, 0] == -1
    eff = S + lab.amax(3)
    assert torch.equal(heads, layer.decode(eff, mask))
    for b in range(2):
        for m in range(1, int(mask[b].sum()) + 1):
            assert int(rel[b, m]) == int(lab[b, m, heads[b, m]].argmax())
    M = layer.marginals(S, mask)
    assert torch.allclose(M.sum(2)[0, 1:], torch.ones(5), atol=1e-5) and float(M[1, 3:].abs().sum()) == 0
    assert torch.allclose(layer.score(S, heads, mask), (S.gather(2, heads.clamp(min=0)[..., None])[..., 0] * mask).sum(1))
    assert layer.log_partition(S, mask).shape == (2,)


def test_float32_scores_and_training_step():
    """A few optimizer steps through each loss on float32 scores raise the gold tree's margin."""
    torch.manual_seed(0)
    B, N = 4, 9
    gold = torch.tensor([[-1, 2, 0, 2, 5, 3, 7, 5, 7]] * B)
    for loss in LOSSES:
        scores = torch.zeros(B, N, N, requires_grad=True)
        opt = torch.optim.SGD([scores], lr=0.5)
        layer = DependencyTree(loss=loss)
        first = float(layer(scores, gold).detach())
        for _ in range(10):
            opt.zero_grad()
            value = layer(scores, gold)
            value.backward()
            opt.step()
        assert float(layer(scores, gold).detach()) < first
        assert torch.equal(layer.decode(scores.detach()), gold)


def test_bad_input_is_refused_by_name():
    S = torch.zeros(2, 4, 4)
    gold = torch.tensor([[-1, 0, 1, 2], [-1, 2, 0, 2]])
    layer = DependencyTree()
    with pytest.raises(SSVMInputError, match="loss: expected one of"):
        DependencyTree(loss="nll")
    with pytest.raises(SSVMInputError, match="cost: expected"):
        DependencyTree(cost="words")
    with pytest.raises(SSVMInputError, match="projective: expected True or False"):
        DependencyTree(projective="yes")
    with pytest.raises(SSVMInputError, match="reduction: expected one of"):
        layer(S, gold, reduction="avg")
    with pytest.raises(SSVMInputError, match="heads: row 1 is not a projective single-root"):
        layer(S, torch.tensor([[-1, 0, 1, 2], [-1, 0, 0, 2]]))
    with pytest.raises(SSVMInputError, match="crossing arcs"):
        DependencyTree()(torch.zeros(1, 5, 5), torch.tensor([[-1, 3, 4, 0, 3]]))
    with pytest.raises(SSVMInputError, match="mask: position 0 is the root"):
        layer(S, gold, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(SSVMInputError, match=r"arc_scores: expected shape \(B, N, N\)"):
        layer(torch.zeros(2, 4), gold)
    with pytest.raises(SSVMInputError, match="arc_scores: expected a float tensor"):
        layer(torch.zeros(2, 4, 4, dtype=torch.long), gold)
    with pytest.raises(SSVMInputError, match=r"label_scores: expected shape \(B, N, N, L\)"):
        layer(S, gold, label_scores=torch.zeros(2, 4, 3, 2), labels=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(SSVMInputError, match=r"labels: expected relation ids in \[0, 1\]"):
        layer(S, gold, label_scores=torch.zeros(2, 4, 4, 2), labels=torch.full((2, 4), 2))
    with pytest.raises(SSVMInputError, match="labels: the gold relations"):
        layer(S, gold, label_scores=torch.zeros(2, 4, 4, 2))
    with pytest.raises(SSVMInputError, match="labels: given without label_scores"):
        layer(S, gold, labels=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(SSVMInputError, match="NaN"):
        layer(torch.full((2, 4, 4), float("nan")), gold)


@pytest.mark.parametrize("projective, multiroot, second_order",
                         [(True, False, False), (False, True, False), (True, False, True)])
def test_labeled_log_partition_marginals_and_score_equal_enumeration(projective, multiroot, second_order):
    """log_partition / marginals / score with label_scores are the labeled CRF's (the one the crf loss trains):
    log Z over every (tree, relation sequence), P(h -> m with r), and score - log Z = log p of a labeled sample."""
    from tree_reference import labeled_tree_log_probs, sibling_tree_scores, tree_scores
    g = torch.Generator().manual_seed(9)
    B, N, L = 2, 4, 3
    S = torch.randn(B, N, N, dtype=torch.float64, generator=g)
    lab = torch.randn(B, N, N, L, dtype=torch.float64, generator=g)
    SB = torch.randn(B, N, N, N, dtype=torch.float64, generator=g) if second_order else None
    lengths = torch.tensor([3, 2])
    layer = DependencyTree(projective=projective, multiroot=multiroot)
    logz = layer.log_partition(S, lengths=lengths, sib_scores=SB, label_scores=lab)
    M = layer.marginals(S, lengths=lengths, sib_scores=SB, label_scores=lab)
    M = M[0] if second_order else M
    assert M.shape == (B, N, N, L)
    heads, rels = layer.sample(S, lengths=lengths, label_scores=lab, sib_scores=SB, n=3,
                               generator=torch.Generator().manual_seed(1))
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        np_ = lambda x: None if x is None else x[b].numpy()      # noqa: E731
        s = tree_scores(S[b].numpy(), trees) if SB is None else sibling_tree_scores(S[b].numpy(), SB[b].numpy(), trees)
        outcomes = [(t, r) for t in trees.tolist() for r in itertools.product(range(L), repeat=n)]
        totals = [st + sum(lab[b, m, t[m], r[m - 1]].item() for m in range(1, n + 1))
                  for st, (t, r) in zip(np.repeat(s, L ** n), outcomes)]
        assert logz[b].item() == pytest.approx(np.logaddexp.reduce(totals), abs=1e-12)
        lp = labeled_tree_log_probs(S[b].numpy(), np_(SB), lab[b].numpy(), trees, n)
        expect = np.zeros((N, N, L))
        for pr, (t, r) in zip(np.exp(lp), outcomes):
            for m in range(1, n + 1):
                expect[m, t[m], r[m - 1]] += pr
        np.testing.assert_allclose(M[b].numpy(), expect, atol=1e-12)
        index = {(tuple(t), r): i for i, (t, r) in enumerate(outcomes)}
        for k in range(3):
            score = layer.score(S[b:b + 1], heads[b:b + 1, k], lengths=lengths[b:b + 1],
                                sib_scores=None if SB is None else SB[b:b + 1], label_scores=lab[b:b + 1],
                                labels=rels[b:b + 1, k])
            t = tuple(heads[b, k, : n + 1].tolist())
            r = tuple(rels[b, k, 1: n + 1].tolist())
            assert (score - logz[b]).item() == pytest.approx(lp[index[(t, r)]], abs=1e-12)
    with pytest.raises(SSVMInputError, match="labels: the relations"):
        layer.score(S, heads[:, 0], lengths=lengths, sib_scores=SB, label_scores=lab)
    with pytest.raises(SSVMInputError, match="labels: expected relation ids"):
        layer.score(S, heads[:, 0], lengths=lengths, sib_scores=SB, label_scores=lab, labels=rels[:, 0] + L)


@pytest.mark.parametrize("projective, multiroot, labeled, second_order",
                         [(True, False, False, False), (False, False, True, False), (False, True, False, False),
                          (True, True, True, True)])
def test_mbr_decoding_maximizes_the_expected_correct_arcs(projective, multiroot, labeled, second_order):
    """decode(mbr=True) against every tree enumerated: its tree (and each of its k best) has the largest expected
    number of correct arcs (labeled: correct (head, relation) pairs with each arc's best relation) under the CRF's
    marginals; a -inf arc is never taken; the relations are the labeled CRF's most probable at the heads."""
    from tree_reference import labeled_tree_log_probs, sibling_tree_scores, tree_scores
    g = torch.Generator().manual_seed(10)
    B, N, L = 2, 5, 3
    S = torch.randn(B, N, N, dtype=torch.float64, generator=g) * 2
    S[0, 2, 0] = S[0, 2, 1] = float("-inf")                      # word 2 of row 0 never under 0 or 1
    lab = torch.randn(B, N, N, L, dtype=torch.float64, generator=g) if labeled else None
    SB = torch.randn(B, N, N, N, dtype=torch.float64, generator=g) if second_order else None
    lengths = torch.tensor([4, 3])
    layer = DependencyTree(projective=projective, multiroot=multiroot)
    out = layer.decode(S, lengths=lengths, label_scores=lab, sib_scores=SB, mbr=True)
    top = layer.decode(S, lengths=lengths, label_scores=lab, sib_scores=SB, mbr=True, nbest=3)
    heads, rels = (out if labeled else (out, None))
    kheads, krels = (top if labeled else (top, None))
    assert kheads.shape == (B, 3, N) and torch.equal(kheads[:, 0], heads)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        if labeled:
            lp = labeled_tree_log_probs(S[b].numpy(), None if SB is None else SB[b].numpy(), lab[b].numpy(), trees, n)
            P = np.zeros((N, N, L))
            outcomes = [(t, r) for t in trees.tolist() for r in itertools.product(range(L), repeat=n)]
            for pr, (t, r) in zip(np.exp(lp), outcomes):
                for m in range(1, n + 1):
                    P[m, t[m], r[m - 1]] += pr
            W = P.max(2)
        else:
            s = tree_scores(S[b].numpy(), trees) if SB is None else sibling_tree_scores(S[b].numpy(), SB[b].numpy(),
                                                                                        trees)
            p = np.exp(s - np.logaddexp.reduce(s))
            W = np.zeros((N, N))
            for pr, t in zip(p, trees.tolist()):
                for m in range(1, n + 1):
                    W[m, t[m]] += pr
        allowed = [all(np.isfinite(S[b, m, t[m]].item()) for m in range(1, n + 1)) for t in trees.tolist()]
        values = sorted((sum(W[m, t[m]] for m in range(1, n + 1)) for t, ok in zip(trees.tolist(), allowed) if ok),
                        reverse=True)
        for k in range(3):
            t = kheads[b, k].tolist()
            assert sum(W[m, t[m]] for m in range(1, n + 1)) == pytest.approx(values[k], abs=1e-12)
            assert all(np.isfinite(S[b, m, t[m]].item()) for m in range(1, n + 1))
            if labeled:
                assert [krels[b, k, m].item() for m in range(1, n + 1)] == [int(lab[b, m, t[m]].argmax())
                                                                            for m in range(1, n + 1)]
    with pytest.raises(SSVMInputError, match="mbr: expected True or False"):
        layer.decode(S, lengths=lengths, mbr=1)


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("projective", [True, False])
def test_the_two_head_checks_agree_on_corrupted_trees(projective, multiroot):
    """The compiled and the torch check of head arrays give every row the same fault code: 800 decoded trees of
    ragged rows (up to 8 words), each with zero to three heads rewritten at random (out of range, self-loops,
    cycles, extra root children, crossing arcs) and junk after each row's words, which neither may read."""
    from ssvm_torch.trees.checks import tree_faults
    g = torch.Generator().manual_seed(13)
    rng = np.random.default_rng(13)
    B, N = 800, 9
    lengths = torch.randint(0, N, (B,), generator=g)
    heads = DependencyTree(projective=projective, multiroot=multiroot).decode(torch.randn(B, N, N, generator=g),
                                                                               lengths=lengths)
    for _ in range(3):
        rows = torch.as_tensor(rng.random(B) < 0.5)
        b = torch.arange(B)[rows]
        words = torch.as_tensor(rng.integers(1, N, B))[rows]
        heads[b, words] = torch.as_tensor(rng.integers(-1, N + 1, B))[rows]
    after = torch.arange(N)[None, :] > lengths[:, None]
    heads = torch.where(after, torch.as_tensor(rng.integers(-5, 50, (B, N))), heads)
    compiled = tree_faults(heads, lengths, multiroot, projective, compiled=True)
    assert torch.equal(compiled, tree_faults(heads, lengths, multiroot, projective, compiled=False))
    expected = {0, 1, 2} | ({4} if projective else set()) | (set() if multiroot else {3})
    assert set(compiled.tolist()) == expected                                    # every fault was met
