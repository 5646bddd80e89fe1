"""ConstituencyTree.sample (ssvm_torch/spans/torch_cky.py sample_trees, spans/ops.py sample): exact samples of the
TreeCRF checked against every binary tree enumerated (tests/span_reference.py) by a chi-square test, labeled
samples against every labeled tree, -inf spans, padding, reproducibility, the device path and the refusals."""
from collections import Counter

import numpy as np
import pytest
import torch
from frequency_check import pooled_pvalue
from span_reference import binary_trees, labeled_trees

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree


def _pvalue(outcomes, log_scores, drawn: Counter, k: int) -> float:
    index = set(outcomes)
    assert set(drawn) <= index, set(drawn) - index                  # nothing outside the trees of finite score
    p = np.exp(np.array(log_scores) - np.logaddexp.reduce(log_scores))
    return pooled_pvalue([drawn.get(o, 0) for o in outcomes], p, k)


@pytest.mark.parametrize("device, kernels", [("cpu", "auto"), ("cpu", "torch"), pytest.param(
    "cuda", "auto", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))])
def test_samples_follow_the_tree_crf(device, kernels):
    g = torch.Generator().manual_seed(0)
    S = torch.randn(3, 7, 7, dtype=torch.float64, generator=g)
    S[0, 1, 3] = float("-inf")                                      # a span no tree may take
    S, lengths = S.to(device), torch.tensor([5, 3, 0], device=device)
    k = 20_000
    layer = ConstituencyTree(kernels=kernels)
    charts = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator(device=device).manual_seed(1))
    assert charts.shape == (3, k, 7, 7) and charts.dtype == torch.bool
    assert not charts[2].any() and not charts[1, :, 4:].any() and not charts[1, :, :, 4:].any()
    assert (charts.sum((2, 3)) == (2 * lengths - 1).clamp(min=0)[:, None]).all()      # 2n - 1 spans a tree
    Sc = S.cpu()
    for b in (0, 1):
        n = int(lengths[b])
        trees = [t for t in binary_trees(0, n) if all(torch.isfinite(Sc[b, i, j]) for i, j in t)]
        drawn = Counter(frozenset(map(tuple, c.nonzero().tolist())) for c in charts[b].cpu())
        scores = [sum(float(Sc[b, i, j]) for i, j in t) for t in trees]
        assert _pvalue(trees, scores, drawn, k) > 1e-3
    again = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator(device=device).manual_seed(1))
    assert torch.equal(charts, again)


def test_labeled_samples_follow_the_labeled_crf():
    g = torch.Generator().manual_seed(2)
    S, lab = torch.randn(1, 4, 4, dtype=torch.float64, generator=g), torch.randn(1, 4, 4, 2, dtype=torch.float64,
                                                                                 generator=g)
    k = 30_000
    charts = ConstituencyTree().sample(S, label_scores=lab, lengths=torch.tensor([3]), n=k,
                                       generator=torch.Generator().manual_seed(3))
    assert charts.dtype == torch.int64 and charts.shape == (1, k, 4, 4)
    outcomes, scores = [], []
    for tree in labeled_trees(3, 2):
        outcomes.append(frozenset(tree.items()))
        scores.append(sum(float(S[0, i, j] + lab[0, i, j, l]) for (i, j), l in tree.items()))
    drawn = Counter(frozenset(((i, j), int(c[i, j])) for i, j in (c >= 0).nonzero().tolist()) for c in charts[0])
    assert _pvalue(outcomes, scores, drawn, k) > 1e-3


def test_mask_and_float32_scores():
    S = torch.randn(2, 6, 6)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    charts = ConstituencyTree().sample(S, mask, n=3, generator=torch.Generator().manual_seed(0))
    assert charts.shape == (2, 3, 6, 6)
    assert (charts[:, :, 0, :].sum(-1) >= 1).all() and charts[0, :, 0, 5].all() and charts[1, :, 0, 2].all()


def test_refusals_name_the_field():
    layer = ConstituencyTree()
    S = torch.randn(2, 5, 5, dtype=torch.float64)
    lengths = torch.tensor([4, 2])
    for bad in (0, False, 1.0):
        with pytest.raises(SSVMInputError, match="n: expected an int >= 1"):
            layer.sample(S, lengths=lengths, n=bad)
    with pytest.raises(SSVMInputError, match="generator"):
        layer.sample(S, lengths=lengths, generator="7")
    no_tree = S.clone()
    no_tree[1, 0, 2] = float("-inf")                                # the root span of row 1
    with pytest.raises(SSVMInputError, match="span_scores: row 1 .* has no binary tree"):
        layer.sample(no_tree, lengths=lengths)
    with pytest.raises(SSVMInputError, match="label_scores"):
        layer.sample(S, lengths=lengths, label_scores=torch.randn(2, 5, 5))


def test_many_samples_are_drawn_in_chunks(monkeypatch):
    from ssvm_torch.trees import sampling
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 2 * 6 * 6 * 2 * 5)     # 5 labeled samples a call
    g = torch.Generator().manual_seed(4)
    S, lab = torch.randn(2, 6, 6, generator=g), torch.randn(2, 6, 6, 2, generator=g)
    charts = ConstituencyTree().sample(S, label_scores=lab, lengths=torch.tensor([5, 3]), n=23,
                                       generator=torch.Generator().manual_seed(0))
    assert charts.shape == (2, 23, 6, 6)
    assert ((charts >= 0).sum((2, 3)) == torch.tensor([9, 5])[:, None]).all()
