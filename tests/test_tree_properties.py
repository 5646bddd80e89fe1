"""Property tests of the dependency-tree operations (ssvm_torch.trees, the DependencyTree layer) on inputs drawn by
hypothesis: padded batches of 0-6 words, ties (integer scores), -inf arcs and sibling pairs (forbidden parts) and
rows whose -inf parts leave no tree. Against brute force over every tree (tests/tree_reference.py), first and
second order; each backend against the other on every operation of the layer. The fixed-seed tests of
test_trees.py / test_sibling_trees.py draw finite Gaussian scores and never met a 1-position batch with a -inf
entry (log Z was nan: -inf x 0) nor a second-order batch of under three positions on the torch path (its
marginals, entropy and KL raised: the sibling scores were not in the graph)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from ssvm_torch.trees import (dependency_crf_nll, dependency_decode, dependency_hinge, dependency_log_partition,
                              dependency_marginals, dependency_score, dependency_softmax_margin)
from tree_reference import adjacent_siblings, all_trees, sibling_tree_scores, tree_scores

NEG = float("-inf")
KINDS = [(True, False, False), (True, True, False), (False, False, False), (False, True, False),
         (True, False, True), (True, True, True)]                  # (projective, multiroot, second order)
BACKENDS = ("numba", "torch")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def batches(draw, longest: int = 5):
    """(S (B, N, N), SB (B, N, N, N), lengths (B,)) float64: integer scores in [-2, 2] (ties) or Gaussian ones,
    a share of -inf entries, N one more than the longest row or two more (padding)."""
    lengths = draw(st.lists(st.integers(0, longest), min_size=1, max_size=3))
    N, B = max(lengths) + 1 + draw(st.integers(0, 1)), len(lengths)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    ties, p_inf = draw(st.booleans()), draw(st.sampled_from([0.0, 0.05, 0.25, 1.0]))

    def scores(shape):
        x = rng.integers(-2, 3, size=shape).astype(float) if ties else rng.normal(size=shape) * 2
        x[rng.random(shape) < p_inf] = NEG
        return torch.tensor(x)
    return scores((B, N, N)), scores((B, N, N, N)), torch.tensor(lengths)


def _enumerated(S, SB, lengths, projective, multiroot, second):
    """Per row: every tree of the kind and its score (-inf where it takes a forbidden part)."""
    rows = []
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        Sb = S[b, :n + 1, :n + 1].numpy()
        s = (sibling_tree_scores(Sb, SB[b, :n + 1, :n + 1, :n + 1].numpy(), trees) if second
             else tree_scores(Sb, trees))
        rows.append((trees, s))
    return rows


def _log_sum_exp(s):
    finite = s[np.isfinite(s)]
    return float(np.logaddexp.reduce(finite)) if len(finite) else NEG


@given(batches(), st.sampled_from(KINDS), st.sampled_from(BACKENDS))
@example((torch.full((1, 1, 1), NEG, dtype=torch.float64), torch.zeros(1, 1, 1, 1, dtype=torch.float64),
          torch.tensor([0])), (True, False, False), "torch").via("the root alone with a -inf entry: log Z was nan")
@example((torch.zeros(2, 2, 2, dtype=torch.float64), torch.zeros(2, 2, 2, 2, dtype=torch.float64),
          torch.tensor([0, 0])), (True, False, True), "torch").via("second order, N = 2: the marginals raised")
@settings(max_examples=60, **SETTINGS)
def test_every_operation_equals_enumeration(inputs, kind, kernels):
    """Best tree (its score; a tree of the kind that reaches it, any of the tied), log Z, arc and sibling
    marginals, hinge / softmax-margin / CRF losses of a feasible gold: equal to enumeration; a row whose -inf
    parts exclude every tree is refused by each operation (an empty row never is)."""
    S, SB, lengths = inputs
    projective, multiroot, second = kind
    rows = _enumerated(S, SB, lengths, projective, multiroot, second)
    kw = dict(lengths=lengths, projective=projective, multiroot=multiroot, kernels=kernels,
              sib_scores=SB if second else None)
    if any(not np.isfinite(s).any() for _, s in rows):
        for operation in (dependency_decode, dependency_log_partition, dependency_marginals):
            with pytest.raises(SSVMInputError, match="has no dependency tree"):
                operation(S, **kw)
        return
    heads, best = dependency_decode(S, return_scores=True, **kw)
    logz = dependency_log_partition(S, **kw)
    M = dependency_marginals(S, **kw)
    M, MS = M if second else (M, None)
    gold = torch.full_like(heads, -1)
    for b, (trees, s) in enumerate(rows):
        gold[b, :trees.shape[1]] = torch.from_numpy(trees[np.flatnonzero(np.isfinite(s))[-1]])
    losses = {name: fn(S, gold, **kw) for name, fn in
              (("hinge", dependency_hinge), ("softmax_margin", dependency_softmax_margin), ("crf", dependency_crf_nll))}
    gold_score = dependency_score(S, gold, lengths=lengths, sib_scores=SB if second else None)
    for b, (trees, s) in enumerate(rows):
        n = trees.shape[1] - 1
        assert float(best[b]) == pytest.approx(s.max(), abs=1e-9)
        found = np.flatnonzero((trees == heads[b, :n + 1].numpy()).all(1))
        assert len(found) == 1 and s[found[0]] == pytest.approx(s.max(), abs=1e-9)
        assert (heads[b, n + 1:] == -1).all()
        ref_logz = _log_sum_exp(s)
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-8)
        p = np.exp(s - ref_logz)
        ref_M, ref_MS = np.zeros((n + 1, n + 1)), np.zeros((n + 1, n + 1, n + 1))
        sib = adjacent_siblings(trees)
        for m in range(1, n + 1):
            np.add.at(ref_M[m], trees[:, m], p)
            np.add.at(ref_MS[m], (trees[sib[:, m] > 0, m], sib[sib[:, m] > 0, m]), p[sib[:, m] > 0])
        assert np.abs(M[b, :n + 1, :n + 1].numpy() - ref_M).max(initial=0) < 1e-8
        assert float(M[b].abs().sum()) == pytest.approx(float(ref_M.sum()), abs=1e-8)          # zero elsewhere
        if second:
            assert np.abs(MS[b, :n + 1, :n + 1, :n + 1].numpy() - ref_MS).max(initial=0) < 1e-8
        augmented = s + (trees[:, 1:] != gold[b, 1:n + 1].numpy()[None, :]).sum(1)
        assert float(losses["hinge"][b]) == pytest.approx(augmented.max() - float(gold_score[b]), abs=1e-8)
        assert float(losses["softmax_margin"][b]) == pytest.approx(_log_sum_exp(augmented) - float(gold_score[b]),
                                                                   abs=1e-8)
        assert float(losses["crf"][b]) == pytest.approx(ref_logz - float(gold_score[b]), abs=1e-8)


def _layer_values(layer: DependencyTree, S, SB, Q, QB, lengths, second: bool):
    """Every operation of the layer on one batch, as tensors (None where the batch is refused)."""
    kw = dict(lengths=lengths, sib_scores=SB if second else None)
    try:
        heads = layer.decode(S, **kw)
    except SSVMInputError:
        return None
    marginals = layer.marginals(S, **kw)
    s = S.clone().requires_grad_(True)
    sb = SB.clone().requires_grad_(True) if second else None
    entropy = layer.entropy(s, lengths=lengths, sib_scores=sb)
    entropy.sum().backward()
    nbest = layer.decode(S, nbest=3, **kw)
    found = (nbest[:, :, 1:] >= 0).any(2) | (lengths == 0)[:, None]           # ranks past the number of trees: -1
    ranked = [torch.where(found[:, j], layer.score(S, torch.where(found[:, j, None], nbest[:, j], heads), **kw), 0.0)
              for j in range(3)]
    values = {"best": layer.score(S, heads, **kw), "log Z": layer.log_partition(S, **kw),
              "marginals": marginals[0] if second else marginals, "entropy": entropy.detach(),
              "d entropy / d S": torch.nan_to_num(s.grad), "n-best found": found,
              "n-best scores": torch.stack(ranked, 1)}
    if second:
        values["sibling marginals"] = marginals[1]
        values["d entropy / d SB"] = torch.nan_to_num(sb.grad)
    try:
        values["KL"] = layer.kl(S, Q, **kw, **({"other_sib_scores": QB} if second else {}))
    except SSVMInputError:                      # q's trees must cover p's: refused alike by both backends
        values["KL"] = None
    return values


@given(batches(longest=6), batches(longest=6), st.sampled_from(KINDS))
@example((torch.zeros(1, 3, 3, dtype=torch.float64), torch.zeros(1, 3, 3, 3, dtype=torch.float64), torch.tensor([2])),
         (torch.zeros(1, 3, 3, dtype=torch.float64), torch.zeros(1, 3, 3, 3, dtype=torch.float64), torch.tensor([2])),
         (True, False, True)).via("second order, single root, N = 3: the torch entropy and KL raised")
@example((torch.full((1, 1, 1), NEG, dtype=torch.float64), torch.zeros(1, 1, 1, 1, dtype=torch.float64),
          torch.tensor([0])),
         (torch.zeros(1, 1, 1, dtype=torch.float64), torch.zeros(1, 1, 1, 1, dtype=torch.float64), torch.tensor([0])),
         (False, False, False)).via("the root alone: the entropy's gradient raised")
@settings(max_examples=40, **SETTINGS)
def test_the_backends_agree_on_every_layer_operation(inputs, others, kind):
    """numba and torch give one answer on every operation of the layer (the best tree's score, log Z, the
    marginals, the entropy and its gradients, KL, the 3 best trees' scores and how many exist), and refuse the
    same batches; q's scores (``others``) cut to p's shape."""
    S, SB, lengths = inputs
    B, N = S.shape[:2]
    Q, QB = others[0][:1].expand(B, -1, -1), others[1][:1].expand(B, -1, -1, -1)
    Q = torch.nn.functional.pad(Q, (0, max(0, N - Q.shape[2]), 0, max(0, N - Q.shape[1])))[:, :N, :N].contiguous()
    QB = torch.nn.functional.pad(QB, (0, max(0, N - QB.shape[3])) * 3)[:, :N, :N, :N].contiguous()
    projective, multiroot, second = kind
    a, b = (_layer_values(DependencyTree(projective=projective, multiroot=multiroot, kernels=k), S, SB, Q, QB,
                          lengths, second) for k in BACKENDS)
    assert (a is None) == (b is None)
    for name in a or {}:
        x, y = a[name], b[name]
        assert (x is None) == (y is None), name
        if x is not None:
            torch.testing.assert_close(x, y, rtol=1e-7, atol=1e-7, equal_nan=True, msg=name)


@st.composite
def labeled_batches(draw):
    """(S, label scores (B, N, N, L), SB, lengths, the share of hidden heads, of hidden relations): 0-4 words."""
    S, SB, lengths = draw(batches(longest=4))
    B, N = S.shape[:2]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    L = draw(st.integers(1, 2))
    labels = torch.tensor(rng.normal(size=(B, N, N, L)) * 2)
    labels[torch.from_numpy(rng.random(labels.shape) < draw(st.sampled_from([0.0, 0.2])))] = NEG
    return S, labels, SB, lengths, draw(st.sampled_from([0.0, 0.4])), draw(st.sampled_from([0.0, 0.4]))


@given(labeled_batches(), st.sampled_from(KINDS), st.sampled_from(["hinge", "crf", "softmax_margin"]),
       st.sampled_from(BACKENDS), st.integers(0, 2 ** 31))
@settings(max_examples=40, **SETTINGS)
def test_labeled_trees_and_partial_annotation_equal_enumeration(batch, kind, loss, kernels, seed):
    """With relations: the best labeled tree and log Z over (tree, relations), and the three losses of a gold
    with hidden heads and relations (-1) against C, the labeled trees that agree with what is observed:
    max / log-sum over all of [s + Delta_O] minus max / log-sum over C, Delta_O = the observed heads and
    relations missed; a row with nothing observed loses 0."""
    S, labels, SB, lengths, hide_heads, hide_relations = batch
    projective, multiroot, second = kind
    layer = DependencyTree(loss=loss, projective=projective, multiroot=multiroot, kernels=kernels)
    rows = []
    for (trees, s), n in zip(_enumerated(S, SB, lengths, projective, multiroot, second), lengths.tolist()):
        b = len(rows)
        relations = np.array(list(itertools.product(range(labels.shape[-1]), repeat=n)), dtype=np.int64)
        relations = relations.reshape(len(relations), n)
        words = np.arange(1, n + 1)
        extra = labels[b].numpy()[words[None, None, :], trees[:, None, 1:], relations[None, :, :]].sum(2)
        rows.append((np.repeat(trees, len(relations), 0), np.tile(relations, (len(trees), 1)),
                     (s[:, None] + extra).reshape(-1)))
    kw = dict(lengths=lengths, label_scores=labels, sib_scores=SB if second else None)
    if any(not np.isfinite(s).any() for _, _, s in rows):
        with pytest.raises(SSVMInputError, match="has no dependency tree"):
            layer.decode(S, **kw)
        return
    heads, relations = layer.decode(S, **kw)
    logz = layer.log_partition(S, **kw)
    rng = np.random.default_rng(seed)
    gold_heads, gold_relations = torch.full_like(heads, -1), torch.full_like(heads, -1)
    for b, ((trees, rels, s), n) in enumerate(zip(rows, lengths.tolist())):
        pick = (trees[:, 1:] == heads[b, 1:n + 1].numpy()).all(1) & (rels == relations[b, 1:n + 1].numpy()).all(1)
        assert pick.sum() == 1 and s[pick][0] == pytest.approx(s.max(), abs=1e-9)
        assert float(logz[b]) == pytest.approx(_log_sum_exp(s), abs=1e-8)
        g = rng.choice(np.flatnonzero(np.isfinite(s)))
        gold_heads[b, 1:n + 1] = torch.from_numpy(np.where(rng.random(n) < hide_heads, -1, trees[g, 1:]))
        gold_relations[b, 1:n + 1] = torch.from_numpy(np.where(rng.random(n) < hide_relations, -1, rels[g]))
    losses = layer(S, gold_heads, labels=gold_relations, reduction="none", **kw).detach()
    for b, ((trees, rels, s), n) in enumerate(zip(rows, lengths.tolist())):
        h, r = gold_heads[b, 1:n + 1].numpy(), gold_relations[b, 1:n + 1].numpy()
        missed = ((h >= 0) & (trees[:, 1:] != h)).sum(1) + ((r >= 0) & (rels != r)).sum(1)
        if not ((h >= 0).any() or (r >= 0).any()):
            assert float(losses[b]) == 0
            continue
        in_C = np.where(((h < 0) | (trees[:, 1:] == h)).all(1) & ((r < 0) | (rels == r)).all(1), s, NEG)
        top = {"crf": _log_sum_exp(s), "hinge": (s + missed).max(), "softmax_margin": _log_sum_exp(s + missed)}[loss]
        assert float(losses[b]) == pytest.approx(top - (in_C.max() if loss == "hinge" else _log_sum_exp(in_C)),
                                                 abs=1e-8)
