"""DependencyTree with forbidden relations (-inf in label_scores, as ConstituencyTree's span labels allow): every call
against enumeration of the labeled trees whose (arc, relation) scores are finite -- log Z, the labeled marginals (0,
not NaN, on arcs whose every relation is forbidden), the three losses, decoding, the k best, MBR, samples, entropy --
and the refusal of a gold relation the scores forbid."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from tree_reference import all_trees

N, L = 4, 3                                   # 3 words, 3 relations


def problem(seed=0, B=2):
    """Scores with relation 0 forbidden on every arc into word 1, relation 2 forbidden from the root, and every
    relation of the arc 3 -> 2 forbidden (so that arc is forbidden)."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, N, N, dtype=torch.float64, generator=g)
    lab = torch.randn(B, N, N, L, dtype=torch.float64, generator=g)
    lab[:, 1, :, 0] = float("-inf")
    lab[:, :, 0, 2] = float("-inf")
    lab[:, 2, 3, :] = float("-inf")
    return S, lab


def labeled_outcomes(S, lab, b, projective):
    """[(heads, relations, score)] of every labeled tree of row b with a finite score."""
    n = N - 1
    out = []
    for t in all_trees(n, projective, False).tolist():
        for r in itertools.product(range(L), repeat=n):
            s = sum(float(S[b, m, t[m]]) + float(lab[b, m, t[m], r[m - 1]]) for m in range(1, n + 1))
            if s > float("-inf"):
                out.append((tuple(t), r, s))
    return out


@pytest.mark.parametrize("projective", [True, False])
def test_forbidden_relations_against_enumeration(projective):
    layer = DependencyTree(projective=projective, loss="crf")
    S, lab = problem()
    lengths = torch.full((2,), N - 1)
    logz = layer.log_partition(S, lengths=lengths, label_scores=lab)
    M = layer.marginals(S, lengths=lengths, label_scores=lab)
    heads, rels = layer.decode(S, lengths=lengths, label_scores=lab)
    kh, kr = layer.decode(S, lengths=lengths, label_scores=lab, nbest=5)
    H = layer.entropy(S, lengths=lengths, label_scores=lab)
    assert torch.isfinite(M).all() and bool((M[:, 1, :, 0] == 0).all()) and bool((M[:, 2, 3] == 0).all())
    for b in range(2):
        outs = labeled_outcomes(S, lab, b, projective)
        scores = np.array([s for *_, s in outs])
        assert logz[b].item() == pytest.approx(np.logaddexp.reduce(scores), abs=1e-12)
        p = np.exp(scores - np.logaddexp.reduce(scores))
        expect = np.zeros((N, N, L))
        for pr, (t, r, _) in zip(p, outs):
            for m in range(1, N):
                expect[m, t[m], r[m - 1]] += pr
        np.testing.assert_allclose(M[b].numpy(), expect, atol=1e-12)
        assert H[b].item() == pytest.approx(-(p * np.log(p)).sum(), abs=1e-10)
        best = outs[int(np.argmax(scores))]
        assert (tuple(heads[b].tolist()), tuple(rels[b, 1:].tolist())) == (best[0], best[1])
        top = sorted(scores, reverse=True)[:5]
        for j in range(5):
            t, r = tuple(kh[b, j].tolist()), tuple(kr[b, j, 1:].tolist())
            got = sum(float(S[b, m, t[m]]) + float(lab[b, m, t[m], r[m - 1]]) for m in range(1, N))
            assert got == pytest.approx(top[j], abs=1e-12)
        # MBR: the labeled tree of most expected correct (head, relation) pairs among the allowed ones
        mh, mr = layer.decode(S[b:b + 1], lengths=lengths[b:b + 1], label_scores=lab[b:b + 1], mbr=True)
        gain = {(t, r): sum(expect[m, t[m], r[m - 1]] for m in range(1, N)) for t, r, _ in outs}
        assert gain[(tuple(mh[0].tolist()), tuple(mr[0, 1:].tolist()))] == pytest.approx(max(gain.values()), abs=1e-12)
    sh, sr = layer.sample(S, lengths=lengths, label_scores=lab, n=200, generator=torch.Generator().manual_seed(3))
    picked = lab[torch.arange(2)[:, None, None], torch.arange(N)[None, None, :], sh.clamp(min=0), sr.clamp(min=0)]
    assert bool(torch.isfinite(picked[:, :, 1:]).all())          # no draw takes a forbidden relation


@pytest.mark.parametrize("loss", ["hinge", "softmax_margin", "crf"])
def test_losses_with_forbidden_relations_equal_enumeration_and_refuse_a_forbidden_gold(loss):
    layer = DependencyTree(projective=True, loss=loss)
    S, lab = problem(1)
    lengths = torch.full((2,), N - 1)
    gold = torch.tensor([[-1, 0, 1, 1], [-1, 2, 0, 2]])
    glab = torch.tensor([[-1, 1, 0, 2], [-1, 2, 1, 0]])
    got = layer(S, gold, lengths=lengths, label_scores=lab, labels=glab, reduction="none")
    for b in range(2):
        outs = labeled_outcomes(S, lab, b, True)
        s_gold = sum(float(S[b, m, gold[b, m]]) + float(lab[b, m, gold[b, m], glab[b, m]]) for m in range(1, N))
        delta = np.array([sum(int(t[m] != gold[b, m]) + int(r[m - 1] != glab[b, m]) for m in range(1, N))
                          for t, r, _ in outs])
        scores = np.array([s for *_, s in outs])
        want = {"hinge": (scores + delta).max(), "softmax_margin": np.logaddexp.reduce(scores + delta),
                "crf": np.logaddexp.reduce(scores)}[loss] - s_gold
        assert got[b].item() == pytest.approx(want, abs=1e-10)
    bad = glab.clone()
    bad[0, 1] = 0                                                 # relation 0 is forbidden into word 1
    with pytest.raises(SSVMInputError, match="labels: row 0, word 1: the gold relation 0 on the gold arc 0 -> 1"):
        layer(S, gold, lengths=lengths, label_scores=lab, labels=bad)
    with pytest.raises(SSVMInputError, match="label_scores"):
        layer(S, gold, lengths=lengths, label_scores=torch.full_like(lab, float("inf")), labels=glab)
