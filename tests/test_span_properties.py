"""Property tests of the ConstituencyTree layer on inputs drawn by hypothesis: 0-4 words, unlabeled or 1-2 labels,
ties (integer scores), a share of -inf span and label scores up to all of them (rows without a tree), the three
losses at three costs. Every operation against enumeration of every (labeled) binary tree
(tests/span_reference.py), on the numba and the torch path. test_spans.py's random batches draw finite scores;
a labeled n-best over a batch of empty rows raised an IndexError before these tests."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree
from span_reference import binary_trees

NEG = float("-inf")


@st.composite
def sentences(draw):
    """(span scores (B, N+1, N+1), label scores (B, N+1, N+1, L) or None, q's span scores, lengths, loss, cost,
    a seed)."""
    B, N = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    ties = draw(st.booleans())

    def scores(*shape, p_inf=0.0):
        x = torch.tensor(rng.integers(-2, 3, size=shape).astype(float) if ties else rng.normal(size=shape) * 2)
        x[torch.from_numpy(rng.random(shape) < p_inf)] = NEG
        return x
    S = scores(B, N + 1, N + 1, p_inf=draw(st.sampled_from([0.0, 0.2, 0.5, 1.0])))
    L = draw(st.sampled_from([None, 1, 2]))
    labels = scores(B, N + 1, N + 1, L, p_inf=draw(st.sampled_from([0.0, 0.3]))) if L else None
    return (S, labels, scores(B, N + 1, N + 1), torch.from_numpy(rng.integers(0, N + 1, size=B)),
            draw(st.sampled_from(["hinge", "crf", "softmax_margin"])),
            draw(st.sampled_from(["hamming", "normalized", 0.5])),
            int(rng.integers(2 ** 31)))


def _trees(S, labels, Q, b: int, n: int) -> list:
    """Every (labeled) binary tree of row b: ({span: label or True}, s(y), q's s(y))."""
    if n == 0:
        return [({}, 0.0, 0.0)]
    out = []
    for tree in binary_trees(0, n):
        spans = sorted(tree)
        s, q = sum(float(S[b, i, j]) for i, j in spans), sum(float(Q[b, i, j]) for i, j in spans)
        for labeling in (itertools.product(range(labels.shape[-1]), repeat=len(spans)) if labels is not None
                         else [(True,) * len(spans)]):
            extra = (sum(float(labels[b, i, j, lab]) for (i, j), lab in zip(spans, labeling))
                     if labels is not None else 0)
            out.append((dict(zip(spans, labeling)), s + extra, q))
    return out


def _spans(chart: torch.Tensor, labeled: bool) -> dict:
    where = np.nonzero(chart.numpy() >= 0 if labeled else chart.numpy())
    return {(int(i), int(j)): int(chart[i, j]) if labeled else True for i, j in zip(*where)}


def _log_sum_exp(s) -> float:
    return float(np.logaddexp.reduce(s[np.isfinite(s)]))


EMPTY_ROWS_LABELED = (torch.zeros(1, 2, 2, dtype=torch.float64), torch.zeros(1, 2, 2, 1, dtype=torch.float64),
                      torch.zeros(1, 2, 2, dtype=torch.float64), torch.tensor([0]), "hinge", "hamming", 0)


@given(sentences(), st.sampled_from(["numba", "torch"]))
@example(EMPTY_ROWS_LABELED, "numba").via("a labeled n-best over empty rows raised an IndexError")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_equals_enumeration(sentence, kernels):
    """decode (a best tree, any of the tied), log Z, the span (and label) marginals, entropy, the 3 best trees'
    scores and the three losses of a feasible gold: equal to enumeration; a row without a tree of finite score
    refused by every operation."""
    S, labels, Q, lengths, loss, cost, seed = sentence
    layer = ConstituencyTree(loss, cost=cost, kernels=kernels)
    labeled = labels is not None
    rows = [_trees(S, labels, Q, b, n) for b, n in enumerate(lengths.tolist())]
    scores = [np.array([s for _, s, _ in trees]) for trees in rows]
    kw = dict(lengths=lengths, label_scores=labels)
    if any(not np.isfinite(s).any() for s in scores):
        for operation in (layer.decode, layer.log_partition, layer.marginals, layer.entropy,
                          lambda S, **kw: layer.decode(S, nbest=2, **kw), lambda S, **kw: layer.sample(S, n=2, **kw)):
            with pytest.raises(SSVMInputError, match="no .*tree"):
                operation(S, **kw)
        return
    with torch.no_grad():
        best, logz, marginals = layer.decode(S, **kw), layer.log_partition(S, **kw), layer.marginals(S, **kw)
        entropy, nbest = layer.entropy(S, **kw), layer.decode(S, nbest=3, **kw)
    for b, (trees, s) in enumerate(zip(rows, scores)):
        found = [t for t, _, _ in trees]
        assert s[found.index(_spans(best[b], labeled))] == pytest.approx(s.max(), abs=1e-9)
        ref_logz = _log_sum_exp(s)
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-8)
        p = np.exp(s - ref_logz)
        ref_marginals = np.zeros(marginals[b].shape)
        for weight, (tree, _, _) in zip(p, trees):
            for (i, j), lab in tree.items():
                ref_marginals[(i, j, lab) if labeled else (i, j)] += weight
        assert np.abs(marginals[b].numpy() - ref_marginals).max() < 1e-8
        support = p > 0
        assert float(entropy[b]) == pytest.approx(-(p[support] * np.log(p[support])).sum(), abs=1e-8)
        top = np.sort(s[np.isfinite(s)])[::-1][:3]
        ranked = [s[found.index(_spans(chart, labeled))] for chart in nbest[b][:len(top)]]
        assert np.allclose(ranked, top, atol=1e-9)
    rng = np.random.default_rng(seed)
    gold = torch.full_like(best, -1) if labeled else torch.zeros_like(best)
    golds = [trees[rng.choice(np.flatnonzero(np.isfinite(s)))][0] for trees, s in zip(rows, scores)]
    for b, tree in enumerate(golds):
        for (i, j), lab in tree.items():
            gold[b, i, j] = lab
    losses = layer(S, gold, **kw, reduction="none").detach()
    for b, (trees, s, g) in enumerate(zip(rows, scores, golds)):
        n = int(lengths[b])
        c = {"hamming": 1.0, "normalized": 1.0 / max(n, 1)}.get(cost, cost)
        delta = np.array([c * sum(g.get(span) != lab for span, lab in tree.items()) for tree, _, _ in trees])
        top = {"crf": _log_sum_exp(s), "hinge": (s + delta).max(), "softmax_margin": _log_sum_exp(s + delta)}[loss]
        assert float(losses[b]) == pytest.approx(top - s[[t for t, _, _ in trees].index(g)], abs=1e-8)


@given(sentences(), st.sampled_from(["numba", "torch"]), st.sampled_from([0.3, 0.7, 1.0]))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_partial_brackets_equal_enumeration(sentence, kernels, keep):
    """``forward(partial=True)`` with a share ``keep`` of a feasible tree's (labeled) brackets observed: the three
    losses against C, the trees that contain them, with Delta_O = the observed brackets missed (a bracket of
    another label counts); a row with nothing observed loses 0."""
    S, labels, Q, lengths, loss, cost, seed = sentence
    rows = [_trees(S, labels, Q, b, n) for b, n in enumerate(lengths.tolist())]
    scores = [np.array([s for _, s, _ in trees]) for trees in rows]
    if any(not np.isfinite(s).any() for s in scores):
        return
    rng = np.random.default_rng(seed)
    labeled = labels is not None
    B, M, _ = S.shape
    charts = torch.full((B, M, M), -1) if labeled else torch.zeros((B, M, M), dtype=torch.bool)
    observed = []
    for b, (trees, s) in enumerate(zip(rows, scores)):
        gold = trees[rng.choice(np.flatnonzero(np.isfinite(s)))][0]
        observed.append({span: lab for span, lab in gold.items() if rng.random() < keep})
        for (i, j), lab in observed[-1].items():
            charts[b, i, j] = lab
    losses = ConstituencyTree(loss, cost=cost, kernels=kernels)(S, charts, lengths=lengths, label_scores=labels,
                                                                 partial=True, reduction="none").detach()
    for b, (trees, s, seen) in enumerate(zip(rows, scores, observed)):
        if not seen:
            assert float(losses[b]) == 0
            continue
        c = {"hamming": 1.0, "normalized": 1.0 / max(int(lengths[b]), 1)}.get(cost, cost)
        missed = np.array([c * sum(tree.get(span) != lab for span, lab in seen.items()) for tree, _, _ in trees])
        in_C = np.where([all(tree.get(span) == lab for span, lab in seen.items()) for tree, _, _ in trees], s, NEG)
        top = {"crf": _log_sum_exp(s), "hinge": (s + missed).max(), "softmax_margin": _log_sum_exp(s + missed)}[loss]
        assert float(losses[b]) == pytest.approx(top - (in_C.max() if loss == "hinge" else _log_sum_exp(in_C)),
                                                 abs=1e-8)
