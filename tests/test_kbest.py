"""The k best trees (ssvm_torch.trees.kbest, ssvm_torch.spans.kbest: Lawler's partition over the best-tree
oracles) against enumeration: every kind of dependency tree (projective or not, single- or multi-root, second
order, with relations) and binary span trees (unlabeled, labeled, MBR), with -inf parts, ties, ranks past the
number of trees, empty rows, chunked oracle calls, both backends, the layers and the refusals."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree, DependencyTree
from ssvm_torch.spans import span_decode, span_marginals, span_score
from ssvm_torch.trees import dependency_decode, dependency_score, is_tree
from ssvm_torch.trees import lawler
from ssvm_torch.trees.sibling import sibling_score
from span_reference import binary_trees, labeled_trees
from tree_reference import all_trees, sibling_tree_scores, tree_scores

KERNELS = ("numba", "torch")


def _arc_batch(rng, lengths, N, forbid=0.0):
    S = torch.tensor(rng.normal(size=(len(lengths), N, N)) * 2.0)
    if forbid:
        S[torch.tensor(rng.random(S.shape) < forbid)] = float("-inf")
        m = torch.arange(1, N)
        S[:, m, m - 1] = torch.tensor(rng.normal(size=(len(lengths), N - 1)))     # the chain 0 -> 1 -> ... stays
    return S


def _check_ranking(got_scores, want_scores, k, atol=1e-9):
    """The k returned scores are the top k of the enumerated (finite) scores, -inf past them."""
    want = np.sort(want_scores[np.isfinite(want_scores)])[::-1][:k]
    got = got_scores.numpy()
    assert np.isfinite(got[:len(want)]).all() and np.isneginf(got[len(want):]).all()
    np.testing.assert_allclose(got[:len(want)], want, atol=atol)
    return len(want)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("projective,multiroot", list(itertools.product((True, False), repeat=2)))
def test_dependency_kbest_equals_enumeration(projective, multiroot, kernels):
    rng = np.random.default_rng(3 + 2 * projective + multiroot)
    lengths = torch.tensor([4, 3, 1, 0, 2])
    N, k = 5, 12
    S = _arc_batch(rng, lengths.tolist(), N, forbid=0.15)
    S[0] = torch.tensor(rng.normal(size=(N, N)))              # one row with every arc allowed
    heads, scores = dependency_decode(S, lengths=lengths, projective=projective, multiroot=multiroot,
                                      kernels=kernels, nbest=k, return_scores=True)
    assert heads.shape == (5, k, N) and scores.shape == (5, k)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        want = tree_scores(S[b, :n + 1, :n + 1].numpy(), trees)
        found = _check_ranking(scores[b], want, k)
        got = heads[b, :found]
        assert (heads[b, found:] == -1).all()
        rows = torch.full((found,), n)
        assert is_tree(got, rows, multiroot=multiroot, projective=projective).all()
        assert len({tuple(h.tolist()) for h in got}) == found                     # distinct trees
        torch.testing.assert_close(dependency_score(S[b:b + 1].expand(found, N, N), got, lengths=rows), scores[b, :found])


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("multiroot", (False, True))
def test_second_order_kbest_equals_enumeration(multiroot, kernels):
    rng = np.random.default_rng(11 + multiroot)
    lengths, N, k = torch.tensor([4, 3]), 5, 10
    S = _arc_batch(rng, lengths.tolist(), N)
    SB = torch.tensor(rng.normal(size=(2, N, N, N)))
    heads, scores = dependency_decode(S, lengths=lengths, multiroot=multiroot, kernels=kernels, sib_scores=SB,
                                      nbest=k, return_scores=True)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, True, multiroot)
        want = sibling_tree_scores(S[b].numpy(), SB[b].numpy(), trees)
        found = _check_ranking(scores[b], want, k)
        got = heads[b, :found]
        torch.testing.assert_close(sibling_score(S[b:b + 1].expand(found, N, N), SB[b:b + 1].expand(found, N, N, N),
                                                 got, torch.full((found,), n)), scores[b, :found])


@pytest.mark.parametrize("projective", (True, False))
def test_labeled_kbest_ranks_every_labeled_tree(projective):
    """With relations a tree labeled two ways is two trees: the ranking is over (heads, relations)."""
    rng = np.random.default_rng(5)
    n, N, L, k = 3, 4, 2, 20
    arc = torch.tensor(rng.normal(size=(1, N, N)))
    lab = torch.tensor(rng.normal(size=(1, N, N, L)))
    layer = DependencyTree(projective=projective, multiroot=True)
    heads, rels = layer.decode(arc, label_scores=lab, lengths=torch.tensor([n]), nbest=k)
    assert heads.shape == rels.shape == (1, k, N)
    want = []
    for tree in all_trees(n, projective, True):
        for labels in itertools.product(range(L), repeat=n):
            want.append(sum(float(arc[0, m, tree[m]] + lab[0, m, tree[m], labels[m - 1]]) for m in range(1, n + 1)))
    want = np.sort(want)[::-1][:k]
    got = [sum(float(arc[0, m, heads[0, r, m]] + lab[0, m, heads[0, r, m], rels[0, r, m]]) for m in range(1, n + 1))
           for r in range(k)]
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert len({(tuple(h.tolist()), tuple(r.tolist())) for h, r in zip(heads[0], rels[0])}) == k
    top_heads, top_rels = layer.decode(arc, label_scores=lab, lengths=torch.tensor([n]))
    assert torch.equal(heads[:, 0], top_heads) and torch.equal(rels[:, 0], top_rels)


def _span_tree_scores(S, n):
    """(trees as charts, scores) of every (labeled) binary tree over n words of one row's scores."""
    M = S.shape[0]
    labeled = S.dim() == 3
    Sn = S.numpy()
    trees = list(labeled_trees(n, S.shape[2])) if labeled else [dict.fromkeys(t, 0) for t in binary_trees(0, n)]
    charts, scores = [], []
    for t in trees:
        chart = torch.full((M, M), -1, dtype=torch.int64) if labeled else torch.zeros(M, M, dtype=torch.bool)
        i, j = (np.array(x) for x in zip(*t))
        labels = np.array(list(t.values()))
        chart[torch.as_tensor(i), torch.as_tensor(j)] = torch.as_tensor(labels) if labeled else True
        charts.append(chart)
        scores.append(Sn[i, j, labels].sum() if labeled else Sn[i, j].sum())
    return charts, np.array(scores)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("labels", (0, 2))
def test_span_kbest_equals_enumeration(labels, kernels):
    rng = np.random.default_rng(7 + labels)
    lengths, M, k = torch.tensor([5, 4, 1, 0]), 6, 16
    shape = (4, M, M) + ((labels,) if labels else ())
    S = torch.tensor(rng.normal(size=shape))
    i, j = torch.meshgrid(torch.arange(M), torch.arange(M), indexing="ij")
    inner = ((j - i >= 2) & ~((i == 0) & (j == 4))).reshape((M, M) + (1,) * (S.dim() - 3))
    S[1] = S[1].masked_fill(torch.tensor(rng.random(shape[1:]) < 0.3) & inner, float("-inf"))   # a tree remains
    charts, scores = span_decode(S, lengths=lengths, kernels=kernels, nbest=k, return_scores=True)
    assert charts.shape == (4, k, M, M) and scores.shape == (4, k)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            assert scores[b, 0] == 0 and np.isneginf(scores[b, 1:].numpy()).all()
            continue
        trees, want = _span_tree_scores(S[b], n)
        found = _check_ranking(scores[b], want, k)
        got = charts[b, :found]
        assert (charts[b, found:] == (-1 if labels else False)).all()
        assert len({tuple(c.flatten().tolist()) for c in got}) == found
        assert all(any(torch.equal(c, t) for t in trees) for c in got)           # every chart is a tree
        torch.testing.assert_close(span_score(S[b:b + 1].expand((found,) + shape[1:]), got,
                                              lengths=torch.full((found,), n)), scores[b, :found])


def test_span_kbest_mbr_ranks_by_expected_correct_spans():
    rng = np.random.default_rng(2)
    S, n, k = torch.tensor(rng.normal(size=(1, 5, 5))), 4, 5
    charts, expected = span_decode(S, lengths=torch.tensor([n]), mbr=True, nbest=k, return_scores=True)
    P = span_marginals(S, lengths=torch.tensor([n]))[0]
    trees, want = _span_tree_scores(P, n)
    _check_ranking(expected[0], want, k)
    assert torch.equal(ConstituencyTree().decode(S, lengths=torch.tensor([n]), mbr=True, nbest=k), charts)


@pytest.mark.parametrize("structure", ("arcs", "spans"))
def test_ties_give_distinct_structures(structure):
    """All-equal scores: every structure ties, and the ranking still lists distinct ones, as many as exist."""
    if structure == "arcs":
        heads, scores = dependency_decode(torch.zeros(1, 5, 5), nbest=40, return_scores=True)
        found = int(torch.isfinite(scores).sum())
        assert found == len(all_trees(4, True, False))
        assert len({tuple(h.tolist()) for h in heads[0, :found]}) == found
    else:
        charts, scores = span_decode(torch.zeros(1, 6, 6), nbest=20, return_scores=True)
        found = int(torch.isfinite(scores).sum())
        assert found == len(binary_trees(0, 5)) == 14
        assert len({tuple(c.flatten().tolist()) for c in charts[0, :found]}) == found
    assert (scores[0, :found] == 0).all()


def test_chunked_oracle_calls_give_the_same_ranking(monkeypatch):
    rng = np.random.default_rng(9)
    S = torch.tensor(rng.normal(size=(3, 7, 7)))
    whole = dependency_decode(S, nbest=8, return_scores=True, projective=False)
    monkeypatch.setattr(lawler, "CHUNK_ELEMENTS", 3 * 49)           # three children per oracle call
    chunked = dependency_decode(S, nbest=8, return_scores=True, projective=False)
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])


def test_backends_and_dtypes_agree():
    rng = np.random.default_rng(4)
    S = torch.tensor(rng.normal(size=(4, 8, 8)))
    lengths = torch.tensor([7, 6, 3, 5])
    ref = dependency_decode(S, lengths=lengths, kernels="torch", nbest=6, return_scores=True)
    got = dependency_decode(S.float(), lengths=lengths, kernels="numba", nbest=6, return_scores=True)
    torch.testing.assert_close(got[1], ref[1].float())
    assert got[1].dtype == torch.float32
    P = torch.tensor(rng.normal(size=(4, 8, 8, 3)))
    ref = span_decode(P, lengths=lengths, kernels="torch", nbest=6, return_scores=True)
    got = span_decode(P, lengths=lengths, kernels="numba", nbest=6, return_scores=True)
    torch.testing.assert_close(got[1], ref[1])


def test_layers_rank_zero_is_the_best_tree():
    rng = np.random.default_rng(8)
    arc, mask = torch.tensor(rng.normal(size=(3, 9, 9))), torch.ones(3, 9, dtype=torch.bool)
    mask[:, 0] = False
    mask[1, 6:] = False
    for layer in (DependencyTree(), DependencyTree(projective=False, multiroot=True)):
        kb = layer.decode(arc, mask=mask, nbest=4)
        assert kb.shape == (3, 4, 9) and torch.equal(kb[:, 0], layer.decode(arc, mask=mask))
        assert (kb[1, :, 6:] == -1).all()
    span = torch.tensor(rng.normal(size=(3, 9, 9)))
    layer = ConstituencyTree()
    kb = layer.decode(span, lengths=torch.tensor([8, 5, 2]), nbest=3)
    assert torch.equal(kb[:, 0], layer.decode(span, lengths=torch.tensor([8, 5, 2])))
    assert not kb[2, 1:].any()                                   # two words: one binary tree


def test_refusals_name_the_field():
    S = torch.randn(2, 5, 5)
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(SSVMInputError, match="nbest"):
            dependency_decode(S, nbest=bad)
        with pytest.raises(SSVMInputError, match="nbest"):
            ConstituencyTree().decode(torch.randn(2, 6, 6), nbest=bad)
    S[1, 1:, :] = float("-inf")                                  # row 1: word 1 has no head
    with pytest.raises(SSVMInputError, match="arc_scores: row 1"):
        DependencyTree().decode(S, nbest=3)
    P = torch.randn(1, 4, 4)
    P[0, 0, 3] = float("-inf")                                   # the sentence span itself is forbidden
    with pytest.raises(SSVMInputError, match="span_scores: row 0"):
        span_decode(P, nbest=2)


@pytest.mark.parametrize("k", (3, 40))
def test_labeled_kbest_with_more_labels_than_ranks_and_forbidden_labels(k):
    """Labels expanded after the structures (ssvm_torch.trees.labelings): more labels than ranks (each part's
    list cut to k), against enumeration over the labeled trees, for both structures; -inf labels for the spans
    (the tree layer refuses infinite label scores)."""
    rng = np.random.default_rng(k)
    n, N, L = 3, 4, 5
    arc = torch.tensor(rng.normal(size=(2, N, N)))
    lab = torch.tensor(rng.normal(size=(2, N, N, L)))
    heads, rels = DependencyTree(multiroot=True).decode(arc, label_scores=lab, lengths=torch.tensor([n, 2]), nbest=k)
    for b, nb in enumerate((n, 2)):
        want = [sum(float(arc[b, m, t[m]] + lab[b, m, t[m], ls[m - 1]]) for m in range(1, nb + 1))
                for t in all_trees(nb, True, True) for ls in itertools.product(range(L), repeat=nb)]
        want = np.sort(np.array(want)[np.isfinite(want)])[::-1][:k]
        got = [sum(float(arc[b, m, heads[b, r, m]] + lab[b, m, heads[b, r, m], rels[b, r, m]]) for m in range(1, nb + 1))
               for r in range(len(want))]
        np.testing.assert_allclose(got, want, atol=1e-9)
        assert (heads[b, len(want):] == -1).all() and (rels[b, len(want):] == -1).all()
    span = torch.tensor(rng.normal(size=(1, 4, 4, L)))
    span[torch.tensor(rng.random(span.shape) < 0.3)] = float("-inf")
    span[..., 0] = torch.tensor(rng.normal(size=(1, 4, 4)))
    charts, scores = span_decode(span, nbest=k, return_scores=True)
    _, want = _span_tree_scores(span[0], 3)
    found = _check_ranking(scores[0], want, k)
    torch.testing.assert_close(span_score(span.expand(found, 4, 4, L), charts[0, :found]), scores[0, :found])
    assert len({tuple(c.flatten().tolist()) for c in charts[0, :found]}) == found


@pytest.mark.parametrize("multiroot", (False, True))
def test_compiled_kbest_eisner_equals_lawler(multiroot):
    """The compiled lazy k-best Eisner (numba_kbest, the CPU path of projective first-order trees) against Lawler's
    partition over the torch Eisner: the same scores at every rank (ties: rounded scores), the same trees
    without ties, -inf arcs, lengths 0..11."""
    from ssvm_torch.trees.kbest import dependency_kbest
    rng = np.random.default_rng(21 + multiroot)
    for trial in range(12):
        N = int(rng.integers(2, 13))
        S = torch.tensor(rng.normal(size=(6, N, N)))
        if trial % 2:
            S[torch.tensor(rng.random(S.shape) < 0.25)] = float("-inf")
        if trial % 3 == 0:
            S = S.round()                                         # many ties
        m = torch.arange(1, N)
        S[:, m, m - 1] = 1.0                                      # the chain tree keeps every row parseable
        lengths = torch.tensor(rng.integers(0, N, size=6))
        for k in (2, 9, 40):
            heads, _, scores = dependency_kbest(S, lengths, k, True, multiroot, "numba")
            ref_heads, _, ref_scores = dependency_kbest(S, lengths, k, True, multiroot, "torch")
            torch.testing.assert_close(scores, ref_scores)
            if trial % 3:
                assert torch.equal(heads, ref_heads)


def test_compiled_kbest_eisner_restarts_when_its_pool_runs_out():
    from ssvm_torch.trees.numba_kbest import eisner_kbest
    S = np.random.default_rng(2).normal(size=(14, 14))
    for multiroot in (False, True):
        runs = []
        for slots in (0, 1):                                      # one slot: the lazy part restarts with one per item
            heads, scores = np.empty((25, 14), dtype=np.int64), np.empty(25)
            runs.append((eisner_kbest(S, 13, multiroot, 25, heads, scores, slots), heads, scores))
        assert runs[0][0] == runs[1][0] == 25
        assert np.array_equal(runs[0][1], runs[1][1]) and np.array_equal(runs[0][2], runs[1][2])


@pytest.mark.parametrize("ties", (False, True))
def test_compiled_kbest_cky_equals_lawler(ties):
    """The compiled lazy k-best CKY (spans/numba_kbest, the CPU path) against Lawler's partition over the torch
    CKY: the same scores at every rank, the same charts without ties, -inf spans, lengths 0..10."""
    from ssvm_torch.spans.kbest import span_kbest
    rng = np.random.default_rng(31 + ties)
    for trial in range(10):
        M = int(rng.integers(2, 12))
        S = torch.tensor(rng.normal(size=(5, M, M)))
        i, j = torch.meshgrid(torch.arange(M), torch.arange(M), indexing="ij")
        S[torch.tensor(rng.random(S.shape) < 0.2) & (j - i >= 2) & (j - i < M - 1)] = float("-inf")
        if ties:
            S = S.round()
        lengths = torch.full((5,), M - 1)
        lengths[:2] = torch.tensor(rng.integers(0, M, size=2))
        S[:2] = torch.tensor(rng.normal(size=(2, M, M))).round() if ties else torch.tensor(rng.normal(size=(2, M, M)))
        for k in (2, 9, 40):
            try:
                charts, scores = span_kbest(S, lengths, k, "numba")
            except SSVMInputError:                                # -inf spans left a row without a tree
                with pytest.raises(SSVMInputError):
                    span_kbest(S, lengths, k, "torch")
                continue
            ref_charts, ref_scores = span_kbest(S, lengths, k, "torch")
            torch.testing.assert_close(scores, ref_scores)
            if not ties:
                assert torch.equal(charts, ref_charts)


def test_compiled_kbest_cky_restarts_when_its_pool_runs_out():
    from ssvm_torch.spans.numba_kbest import cky_kbest
    S = np.random.default_rng(3).normal(size=(10, 10))
    runs = []
    for slots in (0, 1):
        charts, scores = np.zeros((30, 10, 10), dtype=np.bool_), np.empty(30)
        runs.append((cky_kbest(S, 9, 30, charts, scores, slots), charts, scores))
    assert runs[0][0] == runs[1][0] == 30
    assert np.array_equal(runs[0][1], runs[1][1]) and np.array_equal(runs[0][2], runs[1][2])


def test_lawler_path_stays_on_the_device_but_for_its_queue():
    """Under the CPU device guard (no implicit host copy, no default-device tensor) the torch path of the k best
    -- Lawler's partition, what CUDA scores run -- makes only the queue's sanctioned copies: the lengths, each
    rank's structures and scores out, its masks in, the results back; a number that grows with k, not with the
    batch or the sentence length."""
    from ssvm_torch.devices import host_guard
    rng = np.random.default_rng(12)
    counts = {}
    layers = [DependencyTree(projective=p, kernels="torch") for p in (True, False)]
    spans = ConstituencyTree(kernels="torch")
    for B, N in ((2, 6), (6, 9)):
        arc = torch.tensor(rng.normal(size=(B, N, N)))
        lab = torch.tensor(rng.normal(size=(B, N, N, 3)))
        span = torch.tensor(rng.normal(size=(B, N, N, 3)))
        with host_guard() as guard:
            for layer in layers:
                layer.decode(arc, label_scores=lab, nbest=4)
            spans.decode(span[..., 0], label_scores=span, nbest=4)
        counts[B, N] = guard.host_copies
    assert counts[2, 6] == counts[6, 9] > 0, counts


def test_a_k_past_the_machines_memory_is_refused_by_name():
    with pytest.raises(SSVMInputError, match="nbest: .*fit this machine's"):
        dependency_decode(torch.randn(2, 5, 5), nbest=10 ** 12)
    with pytest.raises(SSVMInputError, match="nbest: .*fit this machine's"):
        span_decode(torch.randn(2, 6, 6), nbest=10 ** 12)


def test_compiled_label_expansion_equals_the_torch_one():
    """trees.labelings.kbest_labeled: the compiled merge (the CPU path) against the torch ops (every other
    device): the same scores at every rank, the same empty ranks, and each rank's labels give its score; -inf
    options, ties, structures without a tree, parts without options to choose."""
    from ssvm_torch.trees.labelings import kbest_labeled
    gen = torch.Generator().manual_seed(5)
    for trial in range(60):
        S, m, L, k = (int(torch.randint(lo, hi, (), generator=gen)) for lo, hi in ((1, 6), (0, 7), (1, 6), (1, 12)))
        scores = torch.randn(3, S, generator=gen, dtype=torch.float64).sort(1, descending=True).values
        scores[torch.rand(3, S, generator=gen) < 0.2] = float("-inf")
        opt = torch.randn(3, S, m, L, generator=gen, dtype=torch.float64)
        opt[torch.rand(opt.shape, generator=gen) < 0.2] = float("-inf")
        opt[..., 0] = 0.0 if trial % 2 else opt[..., 0].clamp(min=-1.0)
        if trial % 3 == 0:
            opt = opt.round()
        got, ref = kbest_labeled(scores, opt, k), kbest_labeled(scores, opt, k, kernels="torch")
        torch.testing.assert_close(got[2], ref[2])
        assert torch.equal(got[0] < 0, ref[0] < 0)
        pick, labels, best = got
        for b, q in (pick >= 0).nonzero().tolist():
            s = int(pick[b, q])
            want = scores[b, s] + sum(float(opt[b, s, t, labels[b, q, t]]) for t in range(m))
            assert abs(float(want) - float(best[b, q])) < 1e-9
