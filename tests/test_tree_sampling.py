"""DependencyTree.sample (ssvm_torch/trees/sampling.py, ssvm_torch/trees/numba_sampling.py): exact samples of the tree
CRF checked against every tree enumerated (tests/tree_reference.py) by a chi-square test, projective or not, single-
or multi-root, compiled or torch; the compiled sampler's log-space pass, the non-projective sampler's matrix-tree
fallback, labeled samples, padding, reproducibility and the refusals."""
from collections import Counter

import numpy as np
import pytest
import torch
from frequency_check import pooled_pvalue
from tree_reference import all_trees, tree_scores

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree, DependencyTree
from ssvm_torch.trees import sampling

SHAPES = [(projective, multiroot) for projective in (True, False) for multiroot in (False, True)]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def _scores(seed: int, B: int = 3, N: int = 5, scale: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, N, dtype=torch.float64, generator=g) * scale


def _follows(draws: np.ndarray, S: np.ndarray, n: int, projective: bool, multiroot: bool) -> float:
    """The chi-square p-value of the drawn trees (k, >= n+1) against the CRF of S over every tree; asserts that
    nothing outside the tree space was drawn."""
    trees = all_trees(n, projective, multiroot)
    s = tree_scores(S, trees)
    p = np.exp(s - np.logaddexp.reduce(s))
    index = {tuple(t): i for i, t in enumerate(trees.tolist())}
    drawn = Counter(tuple(row[: n + 1]) for row in draws.tolist())
    assert set(drawn) <= set(index), set(drawn) - set(index)
    observed = np.zeros(len(trees))
    for t, c in drawn.items():
        observed[index[t]] = c
    keep = p > 1e-12
    assert observed[~keep].sum() == 0
    return pooled_pvalue(observed[keep], p[keep] / p[keep].sum(), len(draws))


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("projective, multiroot", SHAPES)
def test_samples_follow_the_tree_crf(projective, multiroot, kernels):
    layer = DependencyTree(projective=projective, multiroot=multiroot, kernels=kernels)
    S = _scores(0)
    lengths = torch.tensor([4, 2, 0])
    k = 20_000
    draws = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator().manual_seed(3))
    assert draws.shape == (3, k, 5) and draws.dtype == torch.int64
    assert (draws[:, :, 0] == -1).all() and (draws[1, :, 3:] == -1).all() and (draws[2] == -1).all()
    for b in (0, 1):
        assert _follows(draws[b].numpy(), S[b].numpy(), int(lengths[b]), projective, multiroot) > 1e-3
    again = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator().manual_seed(3))
    assert torch.equal(draws, again)


@pytest.mark.parametrize("projective, multiroot", SHAPES)
def test_wide_scores_take_the_log_space_and_fallback_paths(projective, multiroot, monkeypatch):
    """Scores far below each word's best arc underflow the compiled real-space pass (its log-space pass takes
    over); with TOLERANCE < 0 every non-projective step fails its check, so the matrix-tree fallback draws all."""
    S = _scores(1, B=1) * 0.5 - 800.0
    S[0, 1, 2], S[0, 2, 1] = 0.3, -0.2            # words 1 and 2 prefer each other: every tree pays -800 at least once
    if not projective:
        monkeypatch.setattr(sampling, "TOLERANCE", -1.0)
    layer = DependencyTree(projective=projective, multiroot=multiroot)
    draws = layer.sample(S, lengths=torch.tensor([4]), n=8_000, generator=torch.Generator().manual_seed(5))
    assert _follows(draws[0].numpy(), S[0].numpy(), 4, projective, multiroot) > 1e-3
    if projective:
        torch_draws = DependencyTree(projective=True, multiroot=multiroot, kernels="torch").sample(
            S, lengths=torch.tensor([4]), n=8_000, generator=torch.Generator().manual_seed(5))
        assert _follows(torch_draws[0].numpy(), S[0].numpy(), 4, True, multiroot) > 1e-3


@pytest.mark.parametrize("projective", [True, False])
def test_sample_frequencies_match_the_marginals_of_long_sentences(projective):
    layer = DependencyTree(projective=projective)
    S = _scores(2, B=4, N=16, scale=2.0).float()
    mask = torch.zeros(4, 16, dtype=torch.bool)
    for b, n in enumerate((15, 9, 1, 12)):
        mask[b, 1:n + 1] = True
    k = 4_000
    draws = layer.sample(S, mask, n=k, generator=torch.Generator().manual_seed(0))
    assert ((draws >= 0) == mask[:, None, :]).all()                # every word a head, nothing else
    freq = torch.zeros(4, 16, 16, dtype=torch.float64)
    b, s, m = (draws >= 0).nonzero(as_tuple=True)
    freq.index_put_((b, m, draws[b, s, m]), torch.ones(len(b), dtype=torch.float64), accumulate=True)
    M = layer.marginals(S, mask).double()
    z = (freq / k - M).abs() / ((M * (1 - M)).clamp(min=1e-4) / k).sqrt()
    assert z.max() < 5.5                                            # 4 x 16 x 16 cells, no |z| beyond 5.5 sigma
    if projective:                                                  # no crossing arcs in any draw
        lo, hi = torch.minimum(draws, torch.arange(16)), torch.maximum(draws, torch.arange(16))
        on = draws >= 0
        cross = (on[..., :, None] & on[..., None, :] & (lo[..., :, None] < lo[..., None, :])
                 & (lo[..., None, :] < hi[..., :, None]) & (hi[..., :, None] < hi[..., None, :]))
        assert not cross.any()
    assert ((draws == 0).sum(2) == (mask.sum(1) > 0).long()[:, None]).all()     # one root child (single root)


def test_labeled_samples_follow_the_labeled_crf():
    layer = DependencyTree(projective=False)
    g = torch.Generator().manual_seed(4)
    S, lab = torch.randn(1, 4, 4, dtype=torch.float64, generator=g), torch.randn(1, 4, 4, 2, dtype=torch.float64,
                                                                                 generator=g)
    k = 30_000
    heads, rels = layer.sample(S, label_scores=lab, lengths=torch.tensor([3]), n=k,
                               generator=torch.Generator().manual_seed(1))
    assert rels.shape == heads.shape and ((rels >= 0) == (heads >= 0)).all()
    trees = all_trees(3, False, False)
    labelings = np.array(np.meshgrid(*[[0, 1]] * 3, indexing="ij")).reshape(3, -1).T        # (8, 3)
    Sn, Ln = S[0].numpy(), lab[0].numpy()
    outcomes, scores = [], []
    for t in trees:
        for ls in labelings:
            outcomes.append((tuple(t[1:]), tuple(ls)))
            scores.append(sum(Sn[m, t[m]] + Ln[m, t[m], ls[m - 1]] for m in (1, 2, 3)))
    scores = np.array(scores)
    p = np.exp(scores - np.logaddexp.reduce(scores))
    drawn = Counter((tuple(h[1:]), tuple(r[1:])) for h, r in zip(heads[0].tolist(), rels[0].tolist()))
    assert set(drawn) <= set(outcomes)
    observed = [drawn.get(o, 0) for o in outcomes]
    assert pooled_pvalue(observed, p, k) > 1e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("projective", [True, False])
def test_samples_on_the_device(device, projective):
    """The torch paths on the device (the CPU runs them with kernels="torch"): valid trees, reproducible."""
    layer = DependencyTree(projective=projective, kernels="torch" if device == "cpu" else "auto")
    S = _scores(6, B=2, N=5).to(device)
    lengths = torch.tensor([4, 3], device=device)
    k = 20_000
    draws = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator(device=device).manual_seed(2))
    assert draws.device.type == device
    for b in (0, 1):
        assert _follows(draws[b].cpu().numpy(), S[b].cpu().numpy(), int(lengths[b]), projective, False) > 1e-3
    again = layer.sample(S, lengths=lengths, n=k, generator=torch.Generator(device=device).manual_seed(2))
    assert torch.equal(draws, again)


def test_refusals_name_the_field():
    layer = DependencyTree()
    S = _scores(7)
    lengths = torch.tensor([4, 2, 3])
    for bad in (0, True, 2.0):
        with pytest.raises(SSVMInputError, match="n: expected an int >= 1"):
            layer.sample(S, lengths=lengths, n=bad)
    with pytest.raises(SSVMInputError, match="generator"):
        layer.sample(S, lengths=lengths, generator=7)
    with pytest.raises(SSVMInputError, match="arc_scores"):
        layer.sample(S.clone().fill_(float("nan")), lengths=lengths)
    no_head = S.clone()
    no_head[1, 2, :] = float("-inf")                                # word 2 of row 1 can take no head
    for projective in (True, False):
        with pytest.raises(SSVMInputError, match="arc_scores: row 1 .* has no dependency tree"):
            DependencyTree(projective=projective).sample(no_head, lengths=lengths)
    some = S.clone()
    some[0, 1, 0] = some[2, 3, 1] = float("-inf")                 # arcs forbidden, trees left: never drawn
    for kernels in ("auto", "torch"):
        draws = DependencyTree(projective=False, kernels=kernels).sample(some, lengths=lengths, n=200)
        assert (draws[0, :, 1] != 0).all() and (draws[2, :, 3] != 1).all()
    rootless = S.clone()
    rootless[2, :, 0] = float("-inf")                               # no root arc in row 2: no single-root tree
    with pytest.raises(SSVMInputError, match="arc_scores: row 2 .* has no dependency tree"):
        DependencyTree(projective=False).sample(rootless, lengths=lengths)
    with pytest.raises(SSVMInputError, match="label_scores"):
        layer.sample(S, lengths=lengths, label_scores=torch.randn(3, 5, 5))


@pytest.mark.parametrize("multiroot", [False, True])
def test_the_exact_continuation_draws_the_rest_given_the_prefix(multiroot):
    """continue_exactly finishes samples whose fast path failed at word `first`: the words from `first` on follow
    the CRF conditioned on the heads drawn before."""
    S = _scores(8, B=1)[0]
    k, n = 12_000, 4
    trees = all_trees(n, False, multiroot)
    prefix = trees[len(trees) // 3, :2]                              # word 1's head fixed
    heads = torch.full((k, 5), -1, dtype=torch.int64)
    heads[:, 1] = int(prefix[1])
    out = sampling.continue_exactly(S.expand(k, -1, -1).clone(), torch.full((k,), n), heads, torch.full((k,), 2),
                                    multiroot, torch.Generator().manual_seed(9))
    assert (out[:, 1] == int(prefix[1])).all()
    given = trees[trees[:, 1] == prefix[1]]
    s = tree_scores(S.numpy(), given)
    p = np.exp(s - np.logaddexp.reduce(s))
    index = {tuple(t): i for i, t in enumerate(given.tolist())}
    drawn = Counter(tuple(row) for row in out.tolist())
    assert set(drawn) <= set(index)
    assert pooled_pvalue([drawn.get(tuple(t), 0) for t in given.tolist()], p, k) > 1e-3


def test_many_samples_are_drawn_in_chunks(monkeypatch):
    """With a tiny chunk budget the torch samplers draw a few samples per call: the same shapes, valid trees, and
    the same distribution (the draws of one budget differ from another's, each reproducible)."""
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 3 * 2 * 5 * 5)           # 3 samples a call for B 2, N 5
    S = _scores(10, B=2)
    lengths = torch.tensor([4, 3])
    for projective in (True, False):
        layer = DependencyTree(projective=projective, kernels="torch")
        draws = layer.sample(S, lengths=lengths, n=4_000, generator=torch.Generator().manual_seed(0))
        assert draws.shape == (2, 4_000, 5)
        assert _follows(draws[0].numpy(), S[0].numpy(), 4, projective, False) > 1e-3
        again = layer.sample(S, lengths=lengths, n=4_000, generator=torch.Generator().manual_seed(0))
        assert torch.equal(draws, again)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("first_child", [False, True])
@pytest.mark.parametrize("multiroot", [False, True])
def test_second_order_samples_follow_the_second_order_crf(multiroot, first_child, kernels):
    """The compiled and the torch second-order samplers (ssvm_torch/trees/numba_sibling_sampling.py,
    ssvm_torch/trees/torch_tree_sampling.py) against every projective tree's second-order score."""
    from tree_reference import sibling_tree_scores
    g = torch.Generator().manual_seed(11)
    S, SB = torch.randn(2, 5, 5, dtype=torch.float64, generator=g), torch.randn(2, 5, 5, 5, dtype=torch.float64,
                                                                               generator=g)
    SB[0, 3, 1, 2] = float("-inf")                                  # a sibling pair that may not occur
    lengths = torch.tensor([4, 3])
    layer = DependencyTree(multiroot=multiroot, first_child=first_child, kernels=kernels)
    k = 20_000
    draws = layer.sample(S, lengths=lengths, n=k, sib_scores=SB, generator=torch.Generator().manual_seed(2))
    assert draws.shape == (2, k, 5) and (draws[1, :, 4] == -1).all()
    for b in (0, 1):
        n = int(lengths[b])
        trees = all_trees(n, True, multiroot)
        s = sibling_tree_scores(S[b].numpy(), SB[b].numpy(), trees, first_child)
        p = np.exp(s - np.logaddexp.reduce(s))
        index = {tuple(t): i for i, t in enumerate(trees.tolist())}
        drawn = Counter(tuple(row[: n + 1]) for row in draws[b].tolist())
        assert set(drawn) <= {t for t, i in index.items() if p[i] > 0}
        keep = p > 0
        observed = np.array([drawn.get(tuple(t), 0) for t in trees.tolist()])
        assert pooled_pvalue(observed[keep], p[keep] / p[keep].sum(), k) > 1e-3
    again = layer.sample(S, lengths=lengths, n=k, sib_scores=SB, generator=torch.Generator().manual_seed(2))
    assert torch.equal(draws, again)
    with pytest.raises(SSVMInputError, match="sib_scores: expected a layer with projective=True"):
        DependencyTree(projective=False).sample(S, lengths=lengths, sib_scores=SB)


@pytest.mark.parametrize("device", DEVICES)
def test_second_order_samples_stay_on_the_device(device):
    """Second-order samples on the scores' device by the torch sampler (CUDA: no host copy; the CPU runs it with
    kernels="torch"): the trees follow the second-order CRF, the same draws from the same generator."""
    from tree_reference import sibling_tree_scores
    g = torch.Generator().manual_seed(5)
    S, SB = torch.randn(1, 5, 5, dtype=torch.float64, generator=g), torch.randn(1, 5, 5, 5, dtype=torch.float64,
                                                                               generator=g)
    layer = DependencyTree(kernels="torch" if device == "cpu" else "auto")
    lengths = torch.tensor([4], device=device)
    k = 20_000
    draws = layer.sample(S.to(device), lengths=lengths, n=k, sib_scores=SB.to(device),
                         generator=torch.Generator(device=device).manual_seed(1))
    assert draws.device.type == device
    trees = all_trees(4, True, False)
    s = sibling_tree_scores(S[0].numpy(), SB[0].numpy(), trees, False)
    index = {tuple(t): i for i, t in enumerate(trees.tolist())}
    observed = np.zeros(len(trees))
    for t, c in Counter(tuple(row) for row in draws[0].cpu().tolist()).items():
        observed[index[t]] += c
    assert pooled_pvalue(observed, np.exp(s - np.logaddexp.reduce(s)), k) > 1e-3
    again = layer.sample(S.to(device), lengths=lengths, n=k, sib_scores=SB.to(device),
                         generator=torch.Generator(device=device).manual_seed(1))
    assert torch.equal(draws, again)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("projective", [True, False])
def test_an_empty_batch_gives_empty_results(projective, kernels):
    """B = 0 through every tree operation of the layer (the torch Eisner and second-order passes once reshaped
    (0, -1) and raised)."""
    layer = DependencyTree(projective=projective, kernels=kernels)
    S, SB, lengths = torch.randn(0, 5, 5), torch.randn(0, 5, 5, 5), torch.zeros(0, dtype=torch.int64)
    assert layer.sample(S, lengths=lengths, n=3).shape == (0, 3, 5)
    assert layer.decode(S, lengths=lengths).shape == (0, 5) and layer.marginals(S, lengths=lengths).shape == (0, 5, 5)
    for value in (layer.log_partition(S, lengths=lengths), layer.entropy(S, lengths=lengths),
                  layer.kl(S, S, lengths=lengths)):
        assert value.shape == (0,)
    if projective:
        assert layer.sample(S, lengths=lengths, n=2, sib_scores=SB).shape == (0, 2, 5)
        assert layer.entropy(S, lengths=lengths, sib_scores=SB).shape == (0,)
        assert layer.log_partition(S, lengths=lengths, sib_scores=SB).shape == (0,)
    assert ConstituencyTree(kernels=kernels).sample(S, lengths=lengths, n=2).shape == (0, 2, 5, 5)
