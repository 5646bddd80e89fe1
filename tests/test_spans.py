"""Binary constituency trees (ssvm_torch.spans, the ConstituencyTree layer): every operation against brute-force
enumeration of the binary trees on small rows (log Z, the best tree, marginals, the loss-augmented tree and the
three losses, labeled and unlabeled, both backends), against SuPar's ConstituencyCRF and torch-struct's TreeCRF,
and the refusals."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree
from ssvm_torch.spans import (binarize, bracket_counts, chart_faults, chart_from_spans, debinarize, span_crf_nll,
                              span_decode, span_hinge, span_log_partition, span_marginals, span_score,
                              span_softmax_margin, spans_of_chart)

from span_reference import binary_trees, labeled_trees

KERNELS = ("numba", "torch")


def brute(S: torch.Tensor, n: int, gold=None, cost: float = 0.0):
    """(log Z, best score, best tree, marginals) of one row by enumeration, the scores augmented by ``cost`` per
    span (and label) of the tree that ``gold`` lacks. Unlabeled S (M, M) or labeled (M, M, L)."""
    labeled = S.dim() == 3
    trees = (list(labeled_trees(n, S.shape[2])) if labeled
             else [{s: None for s in t} for t in binary_trees(0, n)])
    totals = []
    for t in trees:
        total = 0.0
        for (i, j), lab in t.items():
            total += float(S[i, j, lab] if labeled else S[i, j])
            if gold is not None and (gold.get((i, j), -2) != lab if labeled else (i, j) not in gold):
                total += cost
        totals.append(total)
    logz = torch.logsumexp(torch.tensor(totals, dtype=torch.float64), 0).item()
    k = max(range(len(trees)), key=lambda a: totals[a])
    M = torch.zeros(S.shape, dtype=torch.float64)
    for t, total in zip(trees, totals):
        p = math.exp(total - logz)
        for (i, j), lab in t.items():
            if labeled:
                M[i, j, lab] += p
            else:
                M[i, j] += p
    return logz, totals[k], trees[k], M


def random_rows(B: int, N: int, L: int | None, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    shape = (B, N + 1, N + 1) if L is None else (B, N + 1, N + 1, L)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def random_gold(n: int, N: int, L: int | None, seed: int):
    """A random binary tree over n words as one row's chart and its dict of spans -> label."""
    g = torch.Generator().manual_seed(seed)
    trees = binary_trees(0, n)
    tree = sorted(trees[int(torch.randint(len(trees), (1,), generator=g))])
    if L is None:
        return chart_from_spans([tree], N + 1)[0], {s: None for s in tree}
    labels = torch.randint(L, (len(tree),), generator=g).tolist()
    return chart_from_spans([[(i, j, lab) for (i, j), lab in zip(tree, labels)]], N + 1, labeled=True)[0], \
        dict(zip(tree, labels))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("L", [None, 2])
def test_against_brute_force(kernels, L):
    """log Z, the best tree and its score, the marginals and the three losses of rows of 0..5 words (labeled:
    0..3 words, 2 labels) equal the enumeration of every (labeled) binary tree."""
    N = 5 if L is None else 3
    lengths = torch.tensor(list(range(N, -1, -1)))
    S = random_rows(len(lengths), N, L, seed=1)
    golds = [random_gold(max(int(n), 1), N, L, seed=10 + b) for b, n in enumerate(lengths)]
    charts = torch.stack([g[0] for g in golds])
    if L is None:
        charts[lengths == 0] = False
    else:
        charts[lengths == 0] = -1
    logz = span_log_partition(S, lengths=lengths, kernels=kernels)
    best, best_score = span_decode(S, lengths=lengths, kernels=kernels, return_scores=True)
    marg = span_marginals(S, lengths=lengths, kernels=kernels)
    cost = 0.7
    hinge = span_hinge(S, charts, lengths=lengths, cost=cost, kernels=kernels)
    sm = span_softmax_margin(S, charts, lengths=lengths, cost=cost, kernels=kernels)
    nll = span_crf_nll(S, charts, lengths=lengths, kernels=kernels)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            assert logz[b] == 0 and best_score[b] == 0 and hinge[b] == 0 and nll[b] == 0
            assert not bool((best[b] >= 0).any() if L else best[b].any())
            continue
        z, top, tree, M = brute(S[b], n)
        assert logz[b].item() == pytest.approx(z, abs=1e-10)
        assert best_score[b].item() == pytest.approx(top, abs=1e-10)
        assert {s[:2]: (s[2] if L else None) for s in spans_of_chart(best[b:b + 1])[0]} == tree
        assert torch.allclose(marg[b], M, atol=1e-10)
        gold = golds[b][1]
        s_gold = sum(float(S[b, i, j, lab] if L else S[b, i, j]) for (i, j), lab in gold.items())
        z_aug, top_aug, _, _ = brute(S[b], n, gold, cost)
        assert hinge[b].item() == pytest.approx(top_aug - s_gold, abs=1e-10)
        assert sm[b].item() == pytest.approx(z_aug - s_gold, abs=1e-10)
        assert nll[b].item() == pytest.approx(z - s_gold, abs=1e-10)


@pytest.mark.parametrize("L", [None, 3])
def test_backends_agree_with_gradients(L):
    """The compiled kernels and the torch recursion give the same log Z, best trees and gradients (the
    compiled backward writes the marginals; torch differentiates the recursion), float64 and float32."""
    N = 12
    lengths = torch.tensor([12, 7, 1, 0, 9])
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-4)):
        S = random_rows(5, N, L, seed=2, dtype=dtype) * 2
        grads, outs = [], []
        for k in KERNELS:
            leaf = S.clone().requires_grad_(True)
            logz = span_log_partition(leaf, lengths=lengths, kernels=k)
            (g,) = torch.autograd.grad(logz.sum(), leaf)
            grads.append(g)
            outs.append((logz.detach(), *span_decode(S, lengths=lengths, kernels=k, return_scores=True)))
        assert torch.allclose(outs[0][0], outs[1][0], atol=tol)
        assert torch.equal(outs[0][1], outs[1][1])
        assert torch.allclose(outs[0][2], outs[1][2], atol=tol)
        assert torch.allclose(grads[0], grads[1], atol=tol)
        assert grads[0].dtype == dtype


def test_log_space_fallback():
    """Rows whose shifted partition function Z' underflows the real-space pass (scores spread over thousands) are
    redone in log space: log Z and the marginals still equal the enumeration's; a long row at a large scale
    agrees with the torch recursion."""
    from ssvm_torch.spans import numba_cky
    S = random_rows(1, 6, None, seed=9) * 400
    I, X = torch.empty(7, 6, dtype=torch.float64).numpy(), torch.empty(7, 6, dtype=torch.float64).numpy()
    _, Z = numba_cky.inside_real(S[0].numpy(), 6, I, X)
    assert Z == 0.0 or math.log(Z) < numba_cky.LOG_REAL_MIN + 6 * math.log(4.0)      # the fallback runs
    z, _, _, M = brute(S[0], 6)
    assert span_log_partition(S, kernels="numba").item() == pytest.approx(z, rel=1e-12)
    assert torch.allclose(span_marginals(S, kernels="numba")[0], M, atol=1e-10)
    long = random_rows(2, 40, None, seed=10) * 30
    assert torch.allclose(span_log_partition(long, kernels="numba"), span_log_partition(long, kernels="torch"),
                          rtol=1e-12)
    assert torch.allclose(span_marginals(long, kernels="numba"), span_marginals(long, kernels="torch"), atol=1e-9)


@pytest.mark.parametrize("kernels", KERNELS)
def test_gradient_is_exact(kernels):
    """torch.autograd.gradcheck through log Z on both backends (each backward is a top-down marginal pass, no
    graph through the recursion), rows of several lengths, one empty, and a -inf span."""
    S = random_rows(3, 6, None, seed=3)
    S[0, 1, 4] = -math.inf
    S.requires_grad_(True)
    lengths = torch.tensor([6, 4, 0])
    assert torch.autograd.gradcheck(lambda x: span_log_partition(x, lengths=lengths, kernels=kernels), (S,))


def test_against_supar_and_torch_struct(torch_struct_deps):
    """SuPar's ConstituencyCRF (same layout): log Z, marginals and argmax; torch-struct's TreeCRF (inclusive spans
    (i, j-1), labels last): log Z of the labeled model."""
    from supar.structs import ConstituencyCRF
    N = 9
    lengths = torch.tensor([9, 5, 2, 8])
    S = random_rows(4, N, None, seed=4)
    ref = ConstituencyCRF(S, lengths)
    for k in KERNELS:
        assert torch.allclose(span_log_partition(S, lengths=lengths, kernels=k), ref.log_partition.detach(), atol=1e-10)
        assert torch.allclose(span_marginals(S, lengths=lengths, kernels=k), ref.marginals.detach(), atol=1e-10)
        mine = [[list(s) for s in row] for row in spans_of_chart(span_decode(S, lengths=lengths, kernels=k))]
        assert mine == ref.argmax
    SL = random_rows(4, N, 3, seed=5)
    inclusive = torch.full((4, N, N, 3), -1e9, dtype=torch.float64)         # [i, j - 1]: words i..j-1
    for i in range(N):
        inclusive[:, i, i:] = SL[:, i, i + 1:]
    tree = torch_struct_deps.TreeCRF(inclusive, lengths=lengths)
    assert torch.allclose(span_log_partition(SL, lengths=lengths), tree.partition.detach(), atol=1e-8)


def test_forbidden_spans():
    """-inf spans are never taken (marginal 0, no NaN in the gradient); a row whose every tree takes one is
    refused by name."""
    S = random_rows(2, 5, None, seed=6)
    S[:, 0, 2] = -math.inf
    S[:, 1, 5] = -math.inf
    for k in KERNELS:
        leaf = S.clone().requires_grad_(True)
        logz = span_log_partition(leaf, kernels=k)
        (g,) = torch.autograd.grad(logz.sum(), leaf)
        assert torch.isfinite(g).all() and bool((g[:, 0, 2] == 0).all()) and bool((g[:, 1, 5] == 0).all())
        charts = span_decode(S, kernels=k)
        assert not charts[:, 0, 2].any() and not charts[:, 1, 5].any()
        z, _, _, _ = brute(torch.where(torch.isinf(S[0]), torch.full_like(S[0], -1e4), S[0]), 5)
        assert logz[0].item() == pytest.approx(z, abs=1e-8)
    bad = S.clone()
    bad[1, 0, 5] = -math.inf                                   # the whole sentence: in every tree
    for k in KERNELS:
        with pytest.raises(SSVMInputError, match=r"row 1 \(5 words\) has no binary tree"):
            span_log_partition(bad, kernels=k)
        with pytest.raises(SSVMInputError, match="row 1"):
            span_decode(bad, kernels=k)
    gold = chart_from_spans([[(0, 5), (0, 2), (0, 1), (1, 2), (2, 5), (2, 3), (3, 5), (3, 4), (4, 5)]] * 2, 6)
    with pytest.raises(SSVMInputError, match="row 0's gold tree takes a span .* -inf"):
        span_crf_nll(S, gold)


def test_the_two_chart_checks_agree_on_corrupted_trees():
    """The compiled and the torch check give every row the same fault code: 600 decoded trees of ragged rows (up
    to 7 words), each with zero to three entries flipped (a span added or removed, off the row too)."""
    g = torch.Generator().manual_seed(11)
    rng = np.random.default_rng(11)
    lengths = torch.randint(0, 8, (600,), generator=g)
    charts = span_decode(torch.randn(600, 8, 8, generator=g), lengths=lengths)
    for _ in range(3):
        rows = torch.as_tensor(rng.random(600) < 0.6)
        i, j = torch.as_tensor(rng.integers(0, 8, 600)), torch.as_tensor(rng.integers(0, 8, 600))
        b = torch.arange(600)[rows]
        charts[b, i[rows], j[rows]] = ~charts[b, i[rows], j[rows]]
    compiled, plain = chart_faults(charts, lengths, True), chart_faults(charts, lengths, False)
    assert torch.equal(compiled, plain)
    assert set(compiled.tolist()) == {0, 1, 2, 3, 4}                 # every fault was met


def test_chart_faults_and_refusals():
    """Each fault of a gold chart is refused naming the row and the fault; bad scores, lengths and masks by name."""
    S = random_rows(1, 4, None, seed=7)
    good = [(0, 4), (0, 1), (1, 4), (1, 3), (1, 2), (2, 3), (3, 4)]
    cases = {1: good + [(2, 2)], 2: [s for s in good if s != (3, 4)], 3: good[:-3] + [(0, 2), (2, 3), (3, 4)]}
    cases[3] = [(0, 4), (0, 1), (1, 4), (1, 3), (2, 4), (1, 2), (2, 3), (3, 4)]
    cases[4] = [(0, 4), (0, 1), (1, 4), (1, 2), (2, 3), (3, 4)]
    for compiled in (True, False):
        assert chart_faults(chart_from_spans([good], 5), torch.tensor([4]), compiled).tolist() == [0]
    for code, spans in cases.items():
        chart = torch.zeros(1, 5, 5, dtype=torch.bool)
        for i, j in spans:
            chart[0, i, j] = True
        for compiled in (True, False):
            assert chart_faults(chart, torch.tensor([4]), compiled).tolist() == [code], (spans, compiled)
        for kernels in ("auto", "torch"):
            with pytest.raises(SSVMInputError, match="charts: row 0 is not a binary tree"):
                span_crf_nll(S, chart, kernels=kernels)
    with pytest.raises(SSVMInputError, match="span_scores"):
        span_decode(torch.randn(2, 4, 5))
    with pytest.raises(SSVMInputError, match="span_scores"):
        span_decode(torch.full((1, 3, 3), float("nan")))
    with pytest.raises(SSVMInputError, match=r"lengths: expected values in \[0, 4\]"):
        span_decode(S, lengths=torch.tensor([5]))
    with pytest.raises(SSVMInputError, match="mask: expected the words of a row at positions 0..n-1"):
        span_decode(S, mask=torch.tensor([[True, False, True, False]]))
    with pytest.raises(SSVMInputError, match="charts: .*bool"):
        span_crf_nll(S, chart_from_spans([good], 5).long())
    SL = random_rows(1, 4, 2, seed=8)
    labeled = chart_from_spans([[(i, j, 0) for i, j in good]], 5, labeled=True)
    labeled[0, 1, 3] = 2
    with pytest.raises(SSVMInputError, match=r"row 0, span \(1, 3\): label 2 is out of \[0, 2\)"):
        span_hinge(SL, labeled)
    with pytest.raises(SSVMInputError, match="spans: row 0: span"):
        chart_from_spans([[(3, 1)]], 5)


@pytest.mark.parametrize("loss", ["hinge", "softmax_margin", "crf"])
def test_layer_matches_functions_and_learns(loss):
    """The layer's losses are the functions' (span + label scores), zero-or-positive, and gradient descent on
    free scores makes the gold trees the decoded ones."""
    torch.manual_seed(0)
    B, N, L = 3, 6, 4
    lengths = torch.tensor([6, 3, 5])
    golds = [random_gold(int(n), N, L, seed=20 + b)[0] for b, n in enumerate(lengths)]
    charts = torch.stack(golds)
    span = torch.zeros(B, N + 1, N + 1, requires_grad=True)
    label = torch.zeros(B, N + 1, N + 1, L, requires_grad=True)
    layer = ConstituencyTree(loss=loss, cost="hamming")
    fn = {"hinge": span_hinge, "softmax_margin": span_softmax_margin, "crf": span_crf_nll}[loss]
    first = layer(span, charts, lengths=lengths, label_scores=label, reduction="none")
    assert torch.allclose(first, fn(span[..., None] + label, charts, lengths=lengths), atol=1e-5)
    assert bool((first > 0).all())
    opt = torch.optim.Adam([span, label], lr=0.3)
    for _ in range(60):
        opt.zero_grad()
        out = layer(span, charts, lengths=lengths, label_scores=label, reduction="mean")
        out.backward()
        opt.step()
    assert out.item() < first.mean().item() / 10
    decoded = layer.decode(span, lengths=lengths, label_scores=label)
    assert torch.equal(decoded, charts)
    assert torch.allclose(layer.score(span, charts, lengths=lengths, label_scores=label),
                          span_score(span[..., None] + label, charts, lengths=lengths))


def test_bracket_counts():
    """evalb's bracket counts: the one-word spans do not count unless asked; labels must match."""
    gold = chart_from_spans([[(0, 3, 0), (0, 1, 1), (1, 3, 2), (1, 2, 1), (2, 3, 1)]], 4, labeled=True)
    pred = chart_from_spans([[(0, 3, 0), (0, 2, 2), (0, 1, 1), (1, 2, 1), (2, 3, 1)]], 4, labeled=True)
    assert bracket_counts(pred, gold, torch.tensor([3])).tolist() == [1, 2, 2]
    assert bracket_counts(pred, gold, torch.tensor([3]), unary=True).tolist() == [4, 5, 5]
    relabeled = pred.clone()
    relabeled[0, 0, 3] = 1
    assert bracket_counts(relabeled, gold, torch.tensor([3])).tolist() == [0, 2, 2]
    assert bracket_counts(pred >= 0, gold >= 0, torch.tensor([3])).tolist() == [1, 2, 2]


def random_nary(n: int, g: torch.Generator, label: int = 1) -> list:
    """A random n-ary tree over words 0..n-1 without one-word spans: (i, j, label) spans, the root included."""
    out = [(0, n, label)]

    def split(i, j):
        if j - i < 2:
            return
        k = int(torch.randint(2, min(j - i, 4) + 1, (1,), generator=g))      # 2..4 children
        cuts = sorted(torch.randperm(j - i - 1, generator=g)[:k - 1].add(i + 1).tolist())
        for a, b in zip([i] + cuts, cuts + [j]):
            if b - a >= 2 and (a, b) != (i, j):
                out.append((a, b, int(torch.randint(1, 4, (1,), generator=g))))
            split(a, b)
    split(0, n)
    return out


def test_binarize_round_trip():
    """binarize gives a binary tree (2n - 1 spans, no fault) whose debinarized spans are the n-ary tree's; crossing
    or repeated spans are refused by name."""
    g = torch.Generator().manual_seed(11)
    for n in (1, 2, 5, 9, 17):
        for _ in range(5):
            tree = random_nary(n, g)
            binary = binarize(tree, n, fill=0)
            assert len(binary) == 2 * n - 1
            chart = chart_from_spans([binary], n + 1, labeled=True)
            assert chart_faults(chart >= 0, torch.tensor([n])).tolist() == [0]
            assert sorted(debinarize(binary, fill=0)) == sorted(set(tree)) if n > 1 else True
    assert binarize([(0, 4, 2)], 4, fill=0) == [(0, 4, 2), (0, 3, 0), (0, 2, 0), (0, 1, 0), (1, 2, 0), (2, 3, 0),
                                               (3, 4, 0)]
    with pytest.raises(SSVMInputError, match=r"spans: \(0, 2\) and \(1, 3\) cross"):
        binarize([(0, 2, 1), (1, 3, 1)], 4, fill=0)
    with pytest.raises(SSVMInputError, match="appears twice"):
        binarize([(0, 2, 1), (0, 2, 2)], 4, fill=0)


def test_half_precision_and_the_torch_path_on_every_device():
    """The torch path on every device present equals the compiled CPU kernels; half precision runs in float32."""
    S = random_rows(3, 8, 2, seed=12)
    lengths = torch.tensor([8, 5, 0])
    ref = span_log_partition(S, lengths=lengths)
    ref_chart = span_decode(S, lengths=lengths)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        got = span_log_partition(S.to(dev), lengths=lengths.to(dev), kernels="torch")
        assert got.device.type == dev and torch.allclose(got.cpu(), ref, atol=1e-10)
        assert torch.equal(span_decode(S.to(dev), lengths=lengths.to(dev)).cpu(), ref_chart)
        assert torch.allclose(span_marginals(S.to(dev), lengths=lengths.to(dev)).cpu(),
                              span_marginals(S, lengths=lengths), atol=1e-10)
    half = span_log_partition(S.to(torch.bfloat16), lengths=lengths)
    assert half.dtype == torch.float32 and torch.allclose(half.double(), ref, atol=0.5)


def observed_subset(gold: dict, g: torch.Generator, keep: float) -> dict:
    return {s: lab for s, lab in gold.items() if float(torch.rand((), generator=g)) < keep}


def brute_partial(S: torch.Tensor, n: int, O: dict, cost: float):
    """(log Z_C, max_C s, log sum exp(s + Delta_O), max (s + Delta_O)) by enumeration: C the (labeled) trees that
    contain every observed bracket with its label, Delta_O = cost x the observed brackets a tree lacks."""
    labeled = S.dim() == 3
    trees = (list(labeled_trees(n, S.shape[2])) if labeled else [{s: None for s in t} for t in binary_trees(0, n)])
    in_c, aug = [], []
    for t in trees:
        total = sum(float(S[i, j, lab] if labeled else S[i, j]) for (i, j), lab in t.items())
        missed = sum(1 for s, lab in O.items() if s not in t or (labeled and t[s] != lab))
        if missed == 0:
            in_c.append(total)
        aug.append(total + cost * missed)
    as_t = lambda v: torch.tensor(v, dtype=torch.float64)       # noqa: E731
    return (torch.logsumexp(as_t(in_c), 0).item(), max(in_c), torch.logsumexp(as_t(aug), 0).item(), max(aug))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("L", [None, 2])
def test_partial_brackets_against_brute_force(kernels, L):
    """With partial=True each row's chart holds some of a tree's brackets: the CRF's log Z - log Z_C, the latent
    hinge and the softmax-margin equal the enumeration over C; a whole tree gives the full losses bit for bit,
    nothing observed 0."""
    N = 5 if L is None else 3
    g = torch.Generator().manual_seed(30)
    lengths = torch.tensor([N, N, N, N - 1, 2])
    S = random_rows(len(lengths), N, L, seed=31)
    rows, observed = [], []
    for b, n in enumerate(lengths.tolist()):
        chart, gold = random_gold(n, N, L, seed=40 + b)
        keep = {0: 1.0, 1: 0.0}.get(b, 0.5)
        O = observed_subset(gold, g, keep)
        observed.append(O)
        if L is None:
            rows.append(chart_from_spans([sorted(O)], N + 1)[0])
        else:
            rows.append(chart_from_spans([[(i, j, lab) for (i, j), lab in O.items()]], N + 1, labeled=True)[0])
    charts = torch.stack(rows)
    cost = 0.6
    out = {"crf": span_crf_nll(S, charts, lengths=lengths, kernels=kernels, partial=True),
           "hinge": span_hinge(S, charts, lengths=lengths, cost=cost, kernels=kernels, partial=True),
           "softmax_margin": span_softmax_margin(S, charts, lengths=lengths, cost=cost, kernels=kernels, partial=True)}
    full = {"crf": span_crf_nll(S[:1], charts[:1], lengths=lengths[:1], kernels=kernels),
            "hinge": span_hinge(S[:1], charts[:1], lengths=lengths[:1], cost=cost, kernels=kernels),
            "softmax_margin": span_softmax_margin(S[:1], charts[:1], lengths=lengths[:1], cost=cost, kernels=kernels)}
    for name in out:
        assert torch.equal(out[name][:1], full[name]), name             # the whole tree: bit for bit
        assert out[name][1].item() == pytest.approx(0.0, abs=1e-12), name  # nothing observed
    for b, n in enumerate(lengths.tolist()):
        zc, mc, za, ma = brute_partial(S[b], n, observed[b], cost)
        z, _, _, _ = brute(S[b], n)
        assert out["crf"][b].item() == pytest.approx(z - zc, abs=1e-9)
        assert out["hinge"][b].item() == pytest.approx(ma - mc, abs=1e-9)
        assert out["softmax_margin"][b].item() == pytest.approx(za - zc, abs=1e-9)


def test_partial_refusals_and_layer():
    """Crossing observed brackets and a non-bool flag are refused by name; without partial=True a chart that is not
    a whole tree is refused; the layer trains from half the brackets and its trees keep the observed ones."""
    S = random_rows(1, 4, None, seed=50)
    crossing = chart_from_spans([[(0, 2), (1, 3)]], 5)
    with pytest.raises(SSVMInputError, match=r"row 0 is not a set of nested brackets \(partial=True\).*crossing"):
        span_crf_nll(S, crossing, partial=True)
    with pytest.raises(SSVMInputError, match="partial: expected True or False"):
        span_crf_nll(S, crossing, partial="yes")
    with pytest.raises(SSVMInputError, match="row 0 is not a binary tree"):
        span_crf_nll(S, chart_from_spans([[(0, 2)]], 5))
    torch.manual_seed(1)
    B, N = 4, 7
    lengths = torch.tensor([7, 6, 5, 7])
    golds = [random_gold(int(n), N, None, seed=60 + b) for b, n in enumerate(lengths)]
    g = torch.Generator().manual_seed(61)
    observed = [observed_subset(gd, g, 0.5) for _, gd in golds]
    charts = chart_from_spans([sorted(o) for o in observed], N + 1)
    span = torch.zeros(B, N + 1, N + 1, requires_grad=True)
    layer = ConstituencyTree(loss="hinge")
    opt = torch.optim.Adam([span], lr=0.3)
    for _ in range(40):
        opt.zero_grad()
        loss = layer(span, charts, lengths=lengths, partial=True)
        loss.backward()
        opt.step()
    assert loss.item() < 1e-6
    decoded = layer.decode(span, lengths=lengths)
    assert bool((decoded | ~charts).all())                   # every observed bracket is in the decoded tree


def test_subtree_brackets_of_dependency_trees():
    """A projective tree's constituents are its words' subtrees (each word with dependents: the span of its
    descendants and itself), computed here from the descendant sets; a non-projective tree gives None; the
    brackets binarize to a binary tree."""
    from ssvm_torch.spans import subtree_brackets
    from ssvm_torch.trees import tree_faults
    g = torch.Generator().manual_seed(70)
    seen = {"projective": 0, "non-projective": 0}
    for _ in range(200):
        n = int(torch.randint(1, 9, (1,), generator=g))
        heads = [0] * n
        order = torch.randperm(n, generator=g).tolist()
        for k, m in enumerate(order[1:], 1):                      # attach to an earlier word: a tree
            heads[m] = order[int(torch.randint(k, (1,), generator=g))] + 1
        labels = torch.randint(1, 5, (n,), generator=g).tolist()
        padded = torch.tensor([[-1] + heads])
        projective = int(tree_faults(padded, torch.tensor([n]), True, True)[0]) == 0
        got = subtree_brackets(heads, labels)
        if not projective:
            seen["non-projective"] += 1
            assert got is None
            continue
        seen["projective"] += 1
        want = []
        for m in range(1, n + 1):
            below = {m}
            while True:
                more = {w for w in range(1, n + 1) if heads[w - 1] in below} - below
                if not more:
                    break
                below |= more
            if len(below) > 1:
                want.append((min(below) - 1, max(below), labels[m - 1]))
        assert sorted(got) == sorted(want)
        assert chart_faults(chart_from_spans([binarize(got, n, 0)], n + 1, labeled=True) >= 0,
                            torch.tensor([n])).tolist() == [0]
    assert min(seen.values()) > 10


@pytest.mark.parametrize("L", [None, 2])
def test_mbr_decoding_maximizes_expected_correct_spans(L):
    """mbr=True gives the tree whose expected number of correct (labeled) spans under the CRF is the largest (by
    enumeration), its returned value that expectation; -inf spans stay out of it."""
    N = 5 if L is None else 3
    S = random_rows(3, N, L, seed=80) * 1.5
    S[0, 1, 3] = -math.inf
    lengths = torch.tensor([N, N - 1, 2])
    for k in KERNELS:
        charts, value = span_decode(S, lengths=lengths, kernels=k, return_scores=True, mbr=True)
        for b, n in enumerate(lengths.tolist()):
            _, _, _, M = brute(torch.where(torch.isinf(S[b]), torch.full_like(S[b], -1e4), S[b]), n)
            trees = (list(labeled_trees(n, L)) if L else [{s: None for s in t} for t in binary_trees(0, n)])
            gain = [sum(float(M[i, j, lab] if L else M[i, j]) for (i, j), lab in t.items()) for t in trees
                    if not any(math.isinf(float(S[b, i, j, lab] if L else S[b, i, j])) for (i, j), lab in t.items())]
            assert value[b].item() == pytest.approx(max(gain), abs=1e-9)
        assert not bool((charts[0, 1, 3] >= 0) if L else charts[0, 1, 3])
    layer = ConstituencyTree()
    if L is None:
        assert torch.equal(layer.decode(S, lengths=lengths, mbr=True), span_decode(S, lengths=lengths, mbr=True))


def test_partial_row_whose_trees_are_all_forbidden_is_named():
    """A partial row (the caller's row 1) whose observed brackets leave only trees with a -inf span is refused
    naming that row."""
    S = random_rows(2, 4, None, seed=90)
    S[1, 0, 2] = -math.inf                   # (0, 3) observed: its children are (0, 1) + (1, 3) or (0, 2) + (2, 3)
    S[1, 1, 3] = -math.inf
    charts = torch.zeros(2, 5, 5, dtype=torch.bool)
    charts[0, 0, 4] = True
    charts[1, 0, 3] = True
    with pytest.raises(SSVMInputError, match="charts: row 1: every tree that contains the observed brackets"):
        span_crf_nll(S, charts, partial=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 14), min_size=1, max_size=5), st.sampled_from([None, 1, 3]), st.integers(0, 2**31 - 1),
       st.floats(0.1, 20.0))
def test_invariants_on_random_batches(lengths, L, seed, scale):
    """On random batches (lengths 0..14, unlabeled or 1-3 labels, scores up to +-60): the backends agree (log Z,
    the best tree, marginals); the best tree is a binary tree; the marginals of a row's spans sum to 2n - 1 with
    every one-word span and the sentence at 1; softmax-margin >= hinge >= 0 and softmax-margin >= CRF >= 0."""
    lengths = torch.tensor(lengths)
    N = max(int(lengths.max()), 1)
    S = random_rows(len(lengths), N, L, seed=seed % 100000) * scale
    logz = {k: span_log_partition(S, lengths=lengths, kernels=k) for k in KERNELS}
    assert torch.allclose(logz["numba"], logz["torch"], rtol=1e-10, atol=1e-9)
    charts = {k: span_decode(S, lengths=lengths, kernels=k) for k in KERNELS}
    assert torch.equal(charts["numba"], charts["torch"])
    present = charts["numba"] >= 0 if L else charts["numba"]
    assert chart_faults(present, lengths).tolist() == [0] * len(lengths)
    marg = span_marginals(S, lengths=lengths)
    assert torch.allclose(marg, span_marginals(S, lengths=lengths, kernels="torch"), atol=1e-8)
    per_span = marg.sum(-1) if L else marg
    assert torch.allclose(per_span.flatten(1).sum(1), (2 * lengths - 1).clamp(min=0).double(), atol=1e-8)
    for b, n in enumerate(lengths.tolist()):
        if n:
            assert torch.allclose(torch.diagonal(per_span[b], 1)[:n], torch.ones(n, dtype=torch.float64), atol=1e-8)
            assert per_span[b, 0, n].item() == pytest.approx(1.0, abs=1e-8)
    flip = torch.Generator().manual_seed(seed % 1000)
    gold = span_decode(S + torch.randn(S.shape, generator=flip, dtype=S.dtype) * scale, lengths=lengths)
    hinge = span_hinge(S, gold, lengths=lengths)
    sm = span_softmax_margin(S, gold, lengths=lengths)
    nll = span_crf_nll(S, gold, lengths=lengths)
    assert bool((hinge >= -1e-9).all()) and bool((nll >= -1e-9).all())
    assert bool((sm >= hinge - 1e-9).all()) and bool((sm >= nll - 1e-9).all())


def test_conversions_refuse_bad_input():
    """A repeated span in chart_from_spans, and heads that are no tree in subtree_brackets, are refused by name."""
    from ssvm_torch.spans import subtree_brackets
    with pytest.raises(SSVMInputError, match=r"spans: row 0: span \(0, 2\) appears twice"):
        chart_from_spans([[(0, 2, 1), (0, 2, 3)]], 4, labeled=True)
    with pytest.raises(SSVMInputError, match=r"spans: row 1: span \(1, 2\) appears twice"):
        chart_from_spans([[(0, 1)], [(1, 2), (1, 2)]], 4)
    with pytest.raises(SSVMInputError, match="heads: word 2 is on a cycle"):
        subtree_brackets([0, 3, 2], [1, 1, 1])
    with pytest.raises(SSVMInputError, match=r"heads: word 1's head 4 is not in \[0, 3\]"):
        subtree_brackets([4, 0, 2], [1, 1, 1])
