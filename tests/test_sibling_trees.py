"""Second-order (adjacent-sibling) dependency trees (ssvm_torch/trees/sibling*.py, numba_sibling.py,
torch_sibling.py) against brute force over every projective tree (n <= 6): best and loss-augmented trees,
scores, log Z, arc and sibling marginals, the three losses and their gradients, single and multi root, ragged
rows; against SuPar 1.1.4's Dependency2oCRF (a test-only reference) and its CoNLL.get_sibs; the backends
against each other (padded batches, ties, the real-space underflow's compiled log-space redo, float32); the
DependencyTree layer's second order; the refusals."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch.devices import host_guard
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from ssvm_torch.trees import (adjacent_siblings, dependency_crf_nll, dependency_decode, dependency_hinge,
                              dependency_log_partition, dependency_marginals, dependency_score,
                              dependency_softmax_margin, is_tree)
from tree_reference import adjacent_siblings as reference_siblings
from tree_reference import all_trees, sibling_brute_force, sibling_tree_scores

roots = pytest.mark.parametrize("multiroot", [False, True], ids=["single-root", "multi-root"])
backends = pytest.mark.parametrize("kernels", ["numba", "torch"])
LOSSES = {"hinge": dependency_hinge, "softmax_margin": dependency_softmax_margin, "crf": dependency_crf_nll}


def _batch(rng, lengths, N=None, scale=2.0, dtype=torch.float64):
    N = N or max(lengths) + 1
    S = torch.tensor(rng.normal(size=(len(lengths), N, N)) * scale, dtype=dtype)
    SB = torch.tensor(rng.normal(size=(len(lengths), N, N, N)) * scale, dtype=dtype)
    return S, SB, torch.tensor(lengths)


def _golds(rng, lengths, N, multiroot):
    golds = torch.full((len(lengths), N), -1)
    for b, n in enumerate(lengths):
        trees = all_trees(n, True, multiroot)
        golds[b, :n + 1] = torch.tensor(trees[int(rng.integers(len(trees)))])
    return golds


def _indicators(heads, lengths, N):
    """The arc (B, N, N) and sibling (B, N, N, N) indicators of trees."""
    B = heads.shape[0]
    arcs, sibs = torch.zeros(B, N, N, dtype=torch.float64), torch.zeros(B, N, N, N, dtype=torch.float64)
    sib = adjacent_siblings(heads, lengths)
    for b in range(B):
        for m in range(1, int(lengths[b]) + 1):
            arcs[b, m, heads[b, m]] = 1.0
            if sib[b, m] > 0:
                sibs[b, m, heads[b, m], sib[b, m]] = 1.0
    return arcs, sibs


def _assert_gradients(s, sb, b, n, N, M, MS, gold_arcs, gold_sibs):
    """Row b's gradients in S and SB: the expected part marginals M (n+1, n+1) and MS (n+1, n+1, n+1) padded to
    N, minus the gold tree's indicators."""
    want_S = torch.zeros(N, N, dtype=torch.float64)
    want_S[:n + 1, :n + 1] = torch.tensor(M)
    want_SB = torch.zeros(N, N, N, dtype=torch.float64)
    want_SB[:n + 1, :n + 1, :n + 1] = torch.tensor(MS)
    torch.testing.assert_close(s.grad[b], want_S - gold_arcs[b], atol=1e-10, rtol=0)
    torch.testing.assert_close(sb.grad[b], want_SB - gold_sibs[b], atol=1e-10, rtol=0)


def test_adjacent_siblings_equal_supar_get_sibs_and_the_reference():
    """The gold siblings of trees (every projective and non-projective tree of 5 words): SuPar's
    CoNLL.get_sibs(heads)[m - 1][heads[m]] and the reference's loop, -1 off the words."""
    supar_transform = pytest.importorskip("supar.utils.transform")
    trees = all_trees(5, False, True)
    heads = torch.tensor(trees)
    sib = adjacent_siblings(heads, torch.full((len(trees),), 5))
    assert torch.equal(sib[:, 1:], torch.tensor(reference_siblings(trees))[:, 1:]) and (sib[:, 0] == -1).all()
    for t in range(0, len(trees), 37):
        ref = supar_transform.CoNLL.get_sibs([str(h) for h in trees[t, 1:]])
        assert [ref[m - 1][trees[t, m]] for m in range(1, 6)] == sib[t, 1:].tolist()
    # the worked example of ssvm_torch/trees/sibling.py
    ex = torch.tensor([[-1, 3, 3, 0, 6, 6, 3]])
    assert adjacent_siblings(ex, torch.tensor([6]))[0, 1:].tolist() == [2, 0, 0, 5, 0, 0]


@roots
@backends
def test_every_operation_equals_enumeration(multiroot, kernels):
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 4, 5, 6, 0, 6]
    S, SB, L = _batch(rng, lengths)
    N = S.shape[1]
    kw = dict(lengths=L, multiroot=multiroot, kernels=kernels, sib_scores=SB)
    heads, scores = dependency_decode(S, return_scores=True, **kw)
    logz = dependency_log_partition(S, **kw)
    M, MS = dependency_marginals(S, **kw)
    golds = _golds(rng, lengths, N, multiroot)
    values = {name: fn(S, golds, **kw) for name, fn in LOSSES.items()}
    gold_score = dependency_score(S, golds, lengths=L, sib_scores=SB)
    for b, n in enumerate(lengths):
        Sb, SBb = S[b].numpy(), SB[b].numpy()
        top, best, ref_logz, ref_M, ref_MS = sibling_brute_force(Sb, SBb, n, multiroot)
        assert float(scores[b]) == pytest.approx(best, abs=1e-10)
        assert heads[b, :n + 1].tolist() == top.tolist() and (heads[b, n + 1:] == -1).all()
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-10)
        assert np.abs(M[b, :n + 1, :n + 1].numpy() - ref_M).max() < 1e-10 and float(M[b, n + 1:].abs().sum()) == 0
        assert np.abs(MS[b, :n + 1, :n + 1, :n + 1].numpy() - ref_MS).max() < 1e-10
        assert float(MS[b].abs().sum()) == pytest.approx(float(np.abs(ref_MS).sum()), abs=1e-9)   # zero elsewhere
        g = golds[b, :n + 1].numpy()
        _, aug_best, aug_logz, _, _ = sibling_brute_force(Sb, SBb, n, multiroot, gold=g)
        assert float(gold_score[b]) == pytest.approx(float(sibling_tree_scores(Sb, SBb, g[None, :])[0]), abs=1e-10)
        assert float(values["hinge"][b]) == pytest.approx(aug_best - float(gold_score[b]), abs=1e-10)
        assert float(values["softmax_margin"][b]) == pytest.approx(aug_logz - float(gold_score[b]), abs=1e-10)
        assert float(values["crf"][b]) == pytest.approx(ref_logz - float(gold_score[b]), abs=1e-10)


@roots
@backends
def test_gradients_equal_enumeration(multiroot, kernels):
    """d loss / d (S, SB): the loss-augmented tree's arc and sibling indicators (hinge), the loss-augmented
    marginals (softmax-margin), the marginals (CRF), each minus the gold tree's indicators."""
    rng = np.random.default_rng(1)
    lengths = [6, 4, 5, 0]
    S, SB, L = _batch(rng, lengths)
    N = S.shape[1]
    golds = _golds(rng, lengths, N, multiroot)
    cost = torch.tensor([1.0, 0.5, 2.0, 1.0], dtype=torch.float64)
    gold_arcs, gold_sibs = _indicators(golds, L, N)
    for name, fn in LOSSES.items():
        s, sb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
        kw = {} if name == "crf" else {"cost": cost}
        fn(s, golds, lengths=L, multiroot=multiroot, kernels=kernels, sib_scores=sb, **kw).sum().backward()
        for b, n in enumerate(lengths):
            c = 0.0 if name == "crf" else float(cost[b])
            top, _, _, ref_M, ref_MS = sibling_brute_force(S[b].numpy(), SB[b].numpy(), n, multiroot,
                                                           gold=golds[b, :n + 1].numpy(), cost=c)
            if name == "hinge":
                arcs, sibs = _indicators(torch.tensor(np.concatenate([top, np.full(N - n - 1, -1)]))[None], L[b:b + 1], N)
                ref_M, ref_MS = arcs[0, :n + 1, :n + 1].numpy(), sibs[0, :n + 1, :n + 1, :n + 1].numpy()
            _assert_gradients(s, sb, b, n, N, ref_M, ref_MS, gold_arcs, gold_sibs)


@roots
@pytest.mark.parametrize("loss", ["softmax_margin", "crf"])
def test_gradcheck(multiroot, loss):
    """Finite differences of the compiled kernels' gradients (the torch recursion's are autograd's; both are
    compared with enumeration above)."""
    rng = np.random.default_rng(2)
    lengths = [3, 2, 3]
    S, SB, L = _batch(rng, lengths)
    golds = _golds(rng, lengths, S.shape[1], multiroot)
    for kernels in ("numba",):
        s, sb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda x, y: LOSSES[loss](x, golds, lengths=L, multiroot=multiroot,
                                                                  kernels=kernels, sib_scores=y), (s, sb))


@roots
def test_equal_to_supar_dependency2o_crf(multiroot):
    """SuPar 1.1.4 (pip install --no-deps supar==1.1.4, with nltk and dill): log Z, the max score, the argmax
    trees and both marginals (its gradients of log Z), on random float64 scores of ragged rows."""
    structs = pytest.importorskip("supar.structs")
    g = torch.Generator().manual_seed(3)
    B, N = 5, 12
    S = torch.randn(B, N, N, generator=g, dtype=torch.float64) * 2
    SB = torch.randn(B, N, N, N, generator=g, dtype=torch.float64) * 2
    L = torch.tensor([11, 8, 5, 2, 1])
    ref = structs.Dependency2oCRF((S.clone().requires_grad_(), SB.clone().requires_grad_()), L, multiroot=multiroot)
    ref_logz, ref_max, ref_arg = ref.log_partition.detach(), ref.max.detach(), ref.argmax
    ref = structs.Dependency2oCRF((S.clone().requires_grad_(), SB.clone().requires_grad_()), L, multiroot=multiroot)
    gS, gSB = torch.autograd.grad(ref.log_partition.sum(), ref.scores)
    for kernels in ("numba", "torch"):
        kw = dict(lengths=L, multiroot=multiroot, kernels=kernels, sib_scores=SB)
        torch.testing.assert_close(dependency_log_partition(S, **kw), ref_logz, atol=1e-10, rtol=0)
        heads, best = dependency_decode(S, return_scores=True, **kw)
        torch.testing.assert_close(best, ref_max, atol=1e-10, rtol=0)
        assert torch.equal(heads.clamp(min=0), ref_arg)
        M, MS = dependency_marginals(S, **kw)
        torch.testing.assert_close(M, gS, atol=1e-10, rtol=0)
        torch.testing.assert_close(MS, gSB, atol=1e-10, rtol=0)


@roots
def test_backends_agree_on_padded_batches_and_ties(multiroot):
    rng = np.random.default_rng(4)
    lengths = [int(v) for v in rng.integers(0, 12, size=7)]
    S, SB, L = _batch(rng, lengths, N=13, scale=3.0)
    S[4:], SB[4:] = S[4:].round(), SB[4:].round()                   # integer scores: ties everywhere
    SB[0, 5, 1, 3] = SB[1, 2, 6, 4] = float("-inf")                   # forbidden sibling pairs
    out = {}
    for kernels in ("numba", "torch"):
        kw = dict(lengths=L, multiroot=multiroot, kernels=kernels, sib_scores=SB)
        out[kernels] = (dependency_decode(S, return_scores=True, **kw), dependency_log_partition(S, **kw),
                        dependency_marginals(S, **kw))
    (h1, s1), z1, (m1, ms1) = out["numba"]
    (h2, s2), z2, (m2, ms2) = out["torch"]
    assert torch.equal(h1, h2) and bool(is_tree(h1, L, multiroot, True).all())
    torch.testing.assert_close(s1, s2, atol=1e-10, rtol=0)
    torch.testing.assert_close(z1, z2, atol=1e-10, rtol=0)
    torch.testing.assert_close(m1, m2, atol=1e-10, rtol=0)
    torch.testing.assert_close(ms1, ms2, atol=1e-10, rtol=0)
    assert float(ms1[0, 5, 1, 3]) == 0 and float(ms1[1, 2, 6, 4]) == 0


def test_real_space_underflow_is_redone_in_the_log_semiring():
    """Every word's best head is the root, but one word may take it: the shifted Z' is about exp(-30 (n - 1)),
    below float64's range; that row is redone by the compiled log-space pass (numba_sibling_log), equal to the
    torch recursions (log semiring); the other row stays in real space."""
    n = 40
    S = torch.full((2, n + 1, n + 1), -30.0, dtype=torch.float64)
    S[:, :, 0] = 0.0
    S[1] = torch.randn(n + 1, n + 1, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    SB = torch.randn(2, n + 1, n + 1, n + 1, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    kw = dict(sib_scores=SB, multiroot=False)
    a = dependency_log_partition(S, kernels="numba", **kw)
    b = dependency_log_partition(S, kernels="torch", **kw)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=0)
    assert float(a[0]) < -30 * n / 2
    (m1, ms1), (m2, ms2) = dependency_marginals(S, kernels="numba", **kw), dependency_marginals(S, kernels="torch", **kw)
    torch.testing.assert_close(m1, m2, atol=1e-12, rtol=0)
    torch.testing.assert_close(ms1, ms2, atol=1e-12, rtol=0)
    from ssvm_torch.trees.numba_eisner import REAL_MIN
    from ssvm_torch.trees.numba_sibling import real_space_partition
    assert real_space_partition(S[0].numpy(), SB[0].numpy(), n, False) < REAL_MIN       # that row does underflow
    assert real_space_partition(S[1].numpy(), SB[1].numpy(), n, False) >= REAL_MIN


@roots
@pytest.mark.parametrize("scale", [2.0, 300.0], ids=["scores-2", "scores-300"])
def test_log_space_pass_equals_brute_force(multiroot, scale):
    """The compiled log-space pass on its own (the real-space pass's fallback) against enumeration: log Z, the
    arc and the sibling marginals, n = 1..6, absent arcs and siblings (-inf), scores of a trained parser's
    size (a few hundred nats, where the real-space pass underflows) and small ones."""
    from ssvm_torch.trees.numba_sibling_log import sibling_inside_outside_log
    rng = np.random.default_rng(11)
    for n in range(1, 7):
        S = rng.normal(size=(n + 1, n + 1)) * scale
        SB = rng.normal(size=(n + 1, n + 1, n + 1)) * scale
        if n > 1:
            S[n, n - 1] = -np.inf                       # word n never takes word n - 1 as its head
            SB[n, 0, 1:n] = -np.inf                     # nor a sibling under the root
        _, _, ref_logz, ref_M, ref_MS = sibling_brute_force(S, SB, n, multiroot)
        M, MS = np.zeros((n + 1, n + 1)), np.zeros((n + 1,) * 3)
        logz = sibling_inside_outside_log(S, SB, n, multiroot, True, M, MS)
        assert abs(logz - ref_logz) <= 1e-9 * max(1.0, abs(ref_logz)), (n, logz, ref_logz)
        np.testing.assert_allclose(M, ref_M, atol=1e-10, rtol=0)
        np.testing.assert_allclose(MS, ref_MS, atol=1e-10, rtol=0)
    M = np.zeros((2, 2))
    assert sibling_inside_outside_log(np.full((2, 2), -np.inf), np.zeros((2, 2, 2)), 1, multiroot, True, M,
                                      np.zeros((2, 2, 2))) == -np.inf and not M.any()


@roots
def test_long_sentences_float32(multiroot):
    """float32 scores of 60 words: finite, equal to the float64 computation, the backends agree, every word's
    arc marginals sum to one and its sibling marginals to at most one."""
    rng = np.random.default_rng(7)
    S, SB, L = _batch(rng, [60, 57], scale=3.0, dtype=torch.float32)
    kw = dict(lengths=L, multiroot=multiroot, sib_scores=SB)
    h, s = dependency_decode(S, return_scores=True, **kw)
    h64, s64 = dependency_decode(S.double(), return_scores=True, lengths=L, multiroot=multiroot, sib_scores=SB.double())
    assert torch.equal(h, h64) and torch.allclose(s.double(), s64, rtol=1e-6)
    assert torch.equal(dependency_decode(S, kernels="torch", **kw), h)
    lz = dependency_log_partition(S, **kw)
    lz64 = dependency_log_partition(S.double(), lengths=L, multiroot=multiroot, sib_scores=SB.double())
    assert lz.dtype == torch.float32 and torch.allclose(lz.double(), lz64, rtol=1e-6)
    assert torch.allclose(dependency_log_partition(S, kernels="torch", **kw).double(), lz64, rtol=1e-5)
    M, MS = dependency_marginals(S, **kw)
    assert MS.dtype == torch.float32 and torch.isfinite(MS).all()
    assert torch.allclose(M.sum(2)[0, 1:], torch.ones(60, dtype=M.dtype), atol=1e-4)
    assert float(MS.sum((2, 3)).max()) <= 1 + 1e-4


def test_torch_path_stays_on_the_device():
    """Under the CPU device guard the torch recursions make no host copy."""
    rng = np.random.default_rng(8)
    S, SB, L = _batch(rng, [5, 3])
    gold = dependency_decode(S, lengths=L, sib_scores=SB)
    with host_guard() as guard:
        kw = dict(lengths=L, kernels="torch", sib_scores=SB)
        dependency_decode(S, **kw)
        dependency_log_partition(S, **kw)
        dependency_marginals(S, **kw)
        for fn in LOSSES.values():
            fn(S, gold, **kw)
        assert guard.host_copies == 0


def test_layer_second_order():
    """DependencyTree(sib_scores=...): each loss equals the function's, decode / marginals / log_partition /
    score likewise, relations factor over the arcs (the labeled losses equal the unlabeled ones on the
    effective arc scores), reductions over rows."""
    rng = np.random.default_rng(9)
    lengths = [6, 4, 5]
    S, SB, L = _batch(rng, lengths)
    N = S.shape[1]
    golds = _golds(rng, lengths, N, False)
    mask = (torch.arange(N)[None, :] >= 1) & (torch.arange(N)[None, :] <= L[:, None])
    lab = torch.tensor(rng.normal(size=(3, N, N, 4)))
    rels = torch.tensor(rng.integers(0, 4, size=(3, N)))
    for loss, fn in LOSSES.items():
        layer = DependencyTree(loss=loss)
        per = layer(S, golds, mask, reduction="none", sib_scores=SB)
        torch.testing.assert_close(per, fn(S, golds, lengths=L, sib_scores=SB))
        assert float(layer(S, golds, mask, sib_scores=SB)) == pytest.approx(float(per.sum()))
        labeled = layer(S, golds, mask, label_scores=lab, labels=rels, reduction="none", sib_scores=SB)
        wrong = torch.ones_like(lab).scatter_(3, rels[:, :, None, None].expand(-1, -1, N, 1), 0.0)
        picked = lab.gather(3, rels[:, :, None, None].expand(-1, -1, N, 1))[..., 0]
        gold_lab = picked.gather(2, golds.clamp(min=0)[:, :, None])[:, :, 0]
        gold_lab = torch.where(mask, gold_lab, torch.zeros_like(gold_lab)).sum(1)
        eff = {"crf": S + torch.logsumexp(lab, 3), "softmax_margin": S + torch.logsumexp(lab + wrong, 3),
               "hinge": S + (lab + wrong).amax(3)}[loss]
        # the effective arc scores' loss, with the gold relations' scores moved from the gold tree to Delta's side
        ref = fn(eff, golds, lengths=L, sib_scores=SB) + dependency_score(eff, golds, lengths=L, sib_scores=SB) \
            - dependency_score(S, golds, lengths=L, sib_scores=SB) - gold_lab
        torch.testing.assert_close(labeled, ref)
    layer = DependencyTree()
    heads = layer.decode(S, mask, sib_scores=SB)
    assert torch.equal(heads, dependency_decode(S, lengths=L, sib_scores=SB))
    heads_l, rel = layer.decode(S, mask, label_scores=lab, sib_scores=SB)
    assert torch.equal(heads_l, dependency_decode(S + lab.amax(3), lengths=L, sib_scores=SB))
    assert ((rel >= 0) == (heads_l >= 0)).all()
    M, MS = layer.marginals(S, mask, sib_scores=SB)
    ref_M, ref_MS = dependency_marginals(S, lengths=L, sib_scores=SB)
    assert torch.equal(M, ref_M) and torch.equal(MS, ref_MS)
    torch.testing.assert_close(layer.log_partition(S, mask, sib_scores=SB),
                               dependency_log_partition(S, lengths=L, sib_scores=SB))
    torch.testing.assert_close(layer.score(S, golds, mask, sib_scores=SB),
                               dependency_score(S, golds, lengths=L, sib_scores=SB))


def _first_child_indicators(heads, lengths, N):
    """The arc and sibling indicators of trees under first-child parts: a nearest dependent m of h at [m, h, h]."""
    arcs, sibs = _indicators(heads, lengths, N)
    sib = adjacent_siblings(heads, lengths)
    for b in range(heads.shape[0]):
        for m in range(1, int(lengths[b]) + 1):
            if sib[b, m] == 0:
                sibs[b, m, heads[b, m], heads[b, m]] = 1.0
    return arcs, sibs


@roots
@pytest.mark.parametrize("loss", list(LOSSES))
def test_layer_first_child_equals_enumeration(multiroot, loss):
    """DependencyTree(first_child=True): the nearest dependent of each head on each side scores SB[m, h, h]
    (McDonald & Pereira 2006). Decode, log Z, the arc and sibling marginals (the nearest dependents' at
    [m, h, h]), the loss of each row and its gradient in S and SB, against enumeration with those parts."""
    rng = np.random.default_rng(12 + multiroot)
    lengths = [1, 3, 5, 6, 0]
    S, SB, L = _batch(rng, lengths)
    N = S.shape[1]
    mask = (torch.arange(N)[None, :] >= 1) & (torch.arange(N)[None, :] <= L[:, None])
    golds = _golds(rng, lengths, N, multiroot)
    layer = DependencyTree(multiroot=multiroot, loss=loss, first_child=True)
    heads = layer.decode(S, mask, sib_scores=SB)
    top3 = layer.decode(S, mask, sib_scores=SB, nbest=3)
    logz = layer.log_partition(S, mask, sib_scores=SB)
    M, MS = layer.marginals(S, mask, sib_scores=SB)
    s, sb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
    per = layer(s, golds, mask, reduction="none", sib_scores=sb)
    per.sum().backward()
    gold_arcs, gold_sibs = _first_child_indicators(golds, L, N)
    for b, n in enumerate(lengths):
        Sb, SBb, g = S[b].numpy(), SB[b].numpy(), golds[b, :n + 1].numpy()
        top, _, ref_logz, ref_M, ref_MS = sibling_brute_force(Sb, SBb, n, multiroot, first_child=True)
        assert heads[b, :n + 1].tolist() == top.tolist()
        trees = all_trees(n, True, multiroot)
        ranked = np.sort(sibling_tree_scores(Sb, SBb, trees, first_child=True))[::-1][:3]
        got = [float(sibling_tree_scores(Sb, SBb, top3[b, r, :n + 1].numpy()[None], first_child=True)[0])
               for r in range(len(ranked))]
        assert np.allclose(got, ranked, atol=1e-10)                       # the k best under first-child parts
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-10)
        assert np.abs(M[b, :n + 1, :n + 1].numpy() - ref_M).max() < 1e-10
        assert np.abs(MS[b, :n + 1, :n + 1, :n + 1].numpy() - ref_MS).max() < 1e-10
        gold_score = float(sibling_tree_scores(Sb, SBb, g[None, :], first_child=True)[0])
        c = 0.0 if loss == "crf" else 1.0
        aug_top, aug_best, aug_logz, aug_M, aug_MS = sibling_brute_force(Sb, SBb, n, multiroot, gold=g, cost=c,
                                                                         first_child=True)
        want = {"hinge": aug_best, "softmax_margin": aug_logz, "crf": ref_logz}[loss] - gold_score
        assert float(per[b].detach()) == pytest.approx(want, abs=1e-10)
        if loss == "hinge":
            full = torch.tensor(np.concatenate([aug_top, np.full(N - n - 1, -1)]))[None]
            arcs, sibs = _first_child_indicators(full, L[b:b + 1], N)
            aug_M, aug_MS = arcs[0, :n + 1, :n + 1].numpy(), sibs[0, :n + 1, :n + 1, :n + 1].numpy()
        _assert_gradients(s, sb, b, n, N, aug_M, aug_MS, gold_arcs, gold_sibs)


def test_first_child_refusals():
    """first_child=True refuses -inf first-child scores where the arc may be taken (the fold cannot forbid
    being the nearest dependent), accepts them where the arc is -inf, and is refused without projective."""
    S, SB = torch.zeros(1, 4, 4, dtype=torch.float64), torch.zeros(1, 4, 4, 4, dtype=torch.float64)
    gold = torch.tensor([[-1, 2, 0, 2]])
    layer = DependencyTree(first_child=True)
    SB[0, 1, 2, 2] = float("-inf")
    with pytest.raises(SSVMInputError, match=r"sib_scores: expected finite first-child scores .* got -inf at b=0, "
                                             r"m=1, h=2"):
        layer(S, gold, sib_scores=SB)
    S[0, 1, 2] = float("-inf")
    assert layer.decode(S, sib_scores=SB)[0, 1] != 2                  # the arc forbidden: accepted
    with pytest.raises(SSVMInputError, match="first_child: expected False with projective=False"):
        DependencyTree(projective=False, first_child=True)
    assert "first_child=True" in repr(layer)


def test_refusals_name_the_field():
    S = torch.zeros(2, 5, 5)
    SB = torch.zeros(2, 5, 5, 5)
    gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 0, 1, 2, 3]])
    with pytest.raises(SSVMInputError, match="sib_scores: expected projective=True .* NP-hard.*got projective=False"):
        dependency_decode(S, projective=False, sib_scores=SB)
    with pytest.raises(SSVMInputError, match="sib_scores: expected a layer with projective=True"):
        DependencyTree(projective=False)(S, gold, sib_scores=SB)
    with pytest.raises(SSVMInputError, match=r"sib_scores: expected shape \(B, N, N, N\) = \(2, 5, 5, 5\)"):
        dependency_log_partition(S, sib_scores=torch.zeros(2, 5, 5))
    with pytest.raises(SSVMInputError, match="sib_scores: expected a float tensor"):
        dependency_log_partition(S, sib_scores=torch.zeros(2, 5, 5, 5, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match="sib_scores.*NaN"):
        dependency_hinge(S, gold, sib_scores=torch.full((2, 5, 5, 5), float("nan")))
    with pytest.raises(SSVMInputError, match="sib_scores: expected a tensor on cpu"):
        dependency_decode(S, sib_scores=torch.zeros(2, 5, 5, 5, device="meta"))
    with pytest.raises(SSVMInputError, match="projective: expected True or False, got 'False'"):
        dependency_decode(S, projective="False")
    with pytest.raises(SSVMInputError, match="multiroot: expected True or False, got 'no'"):
        dependency_log_partition(S, multiroot="no")
    with pytest.raises(SSVMInputError, match=r"lengths: expected values in \[0, 4\]"):
        is_tree(gold, torch.tensor([4, 9]))
    blocked = torch.zeros(1, 3, 3)
    blocked[0, 1:, :] = float("-inf")
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_decode(blocked, sib_scores=torch.zeros(1, 3, 3, 3))
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_log_partition(blocked, sib_scores=torch.zeros(1, 3, 3, 3))
