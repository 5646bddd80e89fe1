"""The dependency-tree kernels (ssvm_torch.trees) against brute force over every tree (n <= 6), against
torch-struct in float64, each backend against the other, gradients by gradcheck, long sentences in float32,
and the refusals of bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch.devices import host_guard
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.trees import (dependency_crf_nll, dependency_decode, dependency_hinge, dependency_log_partition,
                              dependency_marginals, dependency_score, dependency_softmax_margin, is_tree)
from ssvm_torch.trees.numba_eisner import inside_outside, inside_outside_log
from tree_reference import all_trees, brute_force

KINDS = [(p, m) for p in (True, False) for m in (False, True)]
kinds = pytest.mark.parametrize("projective,multiroot", KINDS, ids=lambda v: str(v))
backends = pytest.mark.parametrize("kernels", ["numba", "torch"])


def test_tree_counts():
    """The enumerator itself: Catalan-like counts of projective single-root trees (OEIS A006013: 1, 2, 7, 30,
    143, 728), Cayley's (n + 1)^(n - 1) rooted trees for non-projective multi-root, n^(n - 1) single-root."""
    assert [len(all_trees(n, True, False)) for n in range(1, 7)] == [1, 2, 7, 30, 143, 728]
    assert [len(all_trees(n, False, True)) for n in range(1, 7)] == [(n + 1) ** (n - 1) for n in range(1, 7)]
    assert [len(all_trees(n, False, False)) for n in range(1, 7)] == [n ** (n - 1) for n in range(1, 7)]


def _batch(rng, lengths, N=None, scale=2.0, dtype=torch.float64):
    N = N or max(lengths) + 1
    S = torch.tensor(rng.normal(size=(len(lengths), N, N)) * scale, dtype=dtype)
    return S, torch.tensor(lengths)


@kinds
@backends
def test_every_operation_equals_enumeration(projective, multiroot, kernels):
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 4, 5, 6, 0, 6]
    S, L = _batch(rng, lengths)
    heads, scores = dependency_decode(S, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels,
                                      return_scores=True)
    logz = dependency_log_partition(S, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
    M = dependency_marginals(S, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
    golds = torch.full_like(heads, -1)
    for b, n in enumerate(lengths):
        trees = all_trees(n, projective, multiroot)
        golds[b, :n + 1] = torch.tensor(trees[int(rng.integers(len(trees)))])
    hinge = dependency_hinge(S, golds, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
    smm = dependency_softmax_margin(S, golds, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
    nll = dependency_crf_nll(S, golds, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
    gold_score = dependency_score(S, golds, lengths=L)
    for b, n in enumerate(lengths):
        Sb = S[b].numpy()
        top, best, ref_logz, ref_M = brute_force(Sb, n, projective, multiroot)
        assert float(scores[b]) == pytest.approx(best, abs=1e-10)
        assert heads[b, :n + 1].tolist() == top.tolist() and (heads[b, n + 1:] == -1).all()
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-10)
        assert np.abs(M[b, :n + 1, :n + 1].numpy() - ref_M).max() < 1e-10 and float(M[b, n + 1:].abs().sum()) == 0
        g = golds[b, :n + 1].numpy()
        _, aug_best, aug_logz, _ = brute_force(Sb, n, projective, multiroot, gold=g)
        assert float(hinge[b]) == pytest.approx(aug_best - float(gold_score[b]), abs=1e-10)
        assert float(smm[b]) == pytest.approx(aug_logz - float(gold_score[b]), abs=1e-10)
        assert float(nll[b]) == pytest.approx(ref_logz - float(gold_score[b]), abs=1e-10)


@kinds
@backends
def test_loss_augmented_decode_is_the_augmented_argmax(projective, multiroot, kernels):
    """The hinge's tree: decode of S + c [h != gold] attains the brute-force max of s(y) + c Delta(y)."""
    from ssvm_torch.trees import ops
    rng = np.random.default_rng(1)
    lengths = [5, 6, 4]
    S, L = _batch(rng, lengths)
    golds = torch.full((3, S.shape[1]), -1)
    for b, n in enumerate(lengths):
        trees = all_trees(n, projective, multiroot)
        golds[b, :n + 1] = torch.tensor(trees[0])
    cost = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    heads, score = ops.best(ops.augment(S, golds, L, cost), L, projective, multiroot, kernels)
    for b, n in enumerate(lengths):
        top, best, _, _ = brute_force(S[b].numpy(), n, projective, multiroot, gold=golds[b, :n + 1].numpy(),
                                      cost=float(cost[b]))
        assert float(score[b]) == pytest.approx(best, abs=1e-10)
        assert heads[b, :n + 1].tolist() == top.tolist()


@kinds
@backends
@pytest.mark.parametrize("loss", ["hinge", "softmax_margin", "crf"])
def test_gradcheck(projective, multiroot, kernels, loss):
    rng = np.random.default_rng(2)
    S, L = _batch(rng, [4, 3, 5])
    golds = torch.full((3, S.shape[1]), -1)
    for b, n in enumerate([4, 3, 5]):
        golds[b, :n + 1] = torch.tensor(all_trees(n, projective, multiroot)[-1])
    fn = {"hinge": dependency_hinge, "softmax_margin": dependency_softmax_margin, "crf": dependency_crf_nll}[loss]
    S.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: fn(x, golds, lengths=L, projective=projective, multiroot=multiroot,
                                                 kernels=kernels), (S,))


def to_torch_struct(S: torch.Tensor) -> torch.Tensor:
    """Our [b, m, h] with the root at 0 -> torch-struct's [b, h - 1, m - 1] with the root scores on the diagonal."""
    out = S[:, 1:, 1:].transpose(1, 2).clone()
    n = out.shape[1]
    out[:, torch.arange(n), torch.arange(n)] = S[:, 1:, 0]
    return out


@pytest.mark.parametrize("multiroot", [False, True])
def test_projective_against_torch_struct(torch_struct_deps, multiroot):
    rng = np.random.default_rng(3)
    S, L = _batch(rng, [9, 9, 7, 4], scale=1.5)
    dist = torch_struct_deps.DependencyCRF(to_torch_struct(S), lengths=L, multiroot=multiroot)
    ref_logz = dist.partition.detach()
    ours = dependency_log_partition(S, lengths=L, multiroot=multiroot)
    assert torch.allclose(ours, ref_logz, rtol=1e-10, atol=0)
    ref_M = dist.marginals.detach()
    M = dependency_marginals(S, lengths=L, multiroot=multiroot)
    assert torch.allclose(to_torch_struct(M), ref_M, rtol=0, atol=1e-10)
    # the best tree: torch-struct's argmax marks its arcs in the same layout
    arg = torch_struct_deps.DependencyCRF(to_torch_struct(S), lengths=L, multiroot=multiroot).argmax.detach()
    heads = dependency_decode(S, lengths=L, multiroot=multiroot)
    mine = torch.zeros_like(S)
    for b in range(S.shape[0]):
        for m in range(1, int(L[b]) + 1):
            mine[b, m, heads[b, m]] = 1.0
    assert torch.equal(to_torch_struct(mine), arg)


@pytest.mark.parametrize("multiroot", [False, True])
def test_matrix_tree_against_torch_struct(multiroot):
    """torch-struct adds eps = 1e-5 to every potential by default; with eps = 0 its matrix-tree theorem is exact."""
    from torch_struct.deptree import deptree_nonproj, deptree_part
    rng = np.random.default_rng(4)
    S, L = _batch(rng, [10, 10, 10], scale=1.5)
    ts = to_torch_struct(S)
    logz = dependency_log_partition(S, lengths=L, projective=False, multiroot=multiroot)
    assert torch.allclose(logz, deptree_part(ts, multiroot, eps=0.0), rtol=1e-10, atol=0)
    M = dependency_marginals(S, lengths=L, projective=False, multiroot=multiroot)
    assert torch.allclose(to_torch_struct(M), deptree_nonproj(ts, multiroot, eps=0.0), rtol=0, atol=1e-10)


@pytest.mark.parametrize("multiroot", [False, True])
def test_matrix_tree_paths_against_brute_force(multiroot):
    """One batch through each path of trees/matrix_tree.py, against enumeration of every tree: narrow rows (the
    direct per-word shift), rows whose scores span hundreds or thousands (the balanced log-domain Laplacian), a
    row peaked around a 2-cycle (LU cancels: the GTH elimination), a row with forbidden arcs (-inf scores) and an
    empty row. log Z and the marginals (a row that allows no tree is refused: test_bad_input_is_refused_by_name)."""
    rng = np.random.default_rng(11)
    lengths = [5, 6, 4, 6, 5, 0]
    S, L = _batch(rng, lengths, scale=1.5)
    S[1, 1:, 3] -= 800.0                                             # spans over SPAN, well conditioned:
    S[1, 2, 0] += 300.0                                              # the balanced path's LU is kept
    S[2] *= 900.0                                                    # span ~ 10^4, one tree dominates: balanced,
    #                                                                  then its tiny pivots send it to GTH
    S[3, :, :] = torch.tensor(rng.normal(size=(7, 7)))               # peaked 2-cycle between words 1 and 2
    S[3, 1, 2] = S[3, 2, 1] = 500.0
    S[4, 2, :] = float("-inf")
    S[4, 2, 4] = 0.0                                                 # word 2 may take only word 4 as its head
    logz = dependency_log_partition(S, lengths=L, projective=False, multiroot=multiroot)
    M = dependency_marginals(S, lengths=L, projective=False, multiroot=multiroot)
    for b, n in enumerate(lengths):
        _, _, ref_logz, ref_M = brute_force(S[b].numpy(), n, False, multiroot)
        assert float(logz[b]) == pytest.approx(ref_logz, rel=1e-9, abs=1e-9), b
        assert np.abs(M[b, :n + 1, :n + 1].numpy() - ref_M).max() < 1e-7, b
        assert float(M[b, n + 1:].abs().sum() + M[b, :, n + 1:].abs().sum()) == 0.0, b


@pytest.mark.parametrize("multiroot", [False, True])
def test_matrix_tree_float32_gradient_is_checked_against_brute_force(multiroot):
    """float32 scores with a gradient take the float32 direct path (trees/matrix_tree.py): each word's head
    marginals must sum to 1, and a row that fails (a 2-cycle peaked by 20: float32 LU cancels, its marginals
    off by ~0.6 unchecked) or spans more than SPAN32 is redone in float64. log Z and the gradient of every row,
    the narrow ones included, against enumeration at float32's precision."""
    rng = np.random.default_rng(5)
    lengths = [6, 6, 6, 5, 4, 0]
    S, L = _batch(rng, lengths, scale=1.0, dtype=torch.float32)
    S[1, 1, 2] = S[1, 2, 1] = 12.0                                   # peaked: float32 holds (1e-3) or is redone
    S[2, 1, 2] = S[2, 2, 1] = 20.0                                   # float32 cancels: redone in float64
    S[3, 1:, 3] -= 70.0                                              # spans over SPAN32
    S[4, 2, :] = float("-inf")
    S[4, 2, 4] = 0.0
    x = S.clone().requires_grad_(True)
    logz = dependency_log_partition(x, lengths=L, projective=False, multiroot=multiroot)
    assert logz.dtype == torch.float32
    logz.sum().backward()
    assert x.grad.dtype == torch.float32
    for b, n in enumerate(lengths):
        _, _, ref_logz, ref_M = brute_force(S[b].double().numpy(), n, False, multiroot)
        assert float(logz[b].detach()) == pytest.approx(ref_logz, rel=1e-5, abs=1e-5), b
        assert np.abs(x.grad[b, :n + 1, :n + 1].double().numpy() - ref_M).max() < 2e-4, b
        assert float(x.grad[b, n + 1:].abs().sum() + x.grad[b, :, n + 1:].abs().sum()) == 0.0, b


@kinds
@pytest.mark.parametrize("n", [40, 150])
def test_long_sentences_float32(projective, multiroot, n):
    """float32 scores of n words: finite and equal to the float64 computation (the kernels work in float64),
    and the backends agree."""
    rng = np.random.default_rng(5)
    S64, L = _batch(rng, [n, n - 3], scale=4.0)
    S32 = S64.float()
    for kernels in ("numba", "torch") if n <= 40 or not projective else ("numba",):
        h32, s32 = dependency_decode(S32, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels,
                                     return_scores=True)
        h64, s64 = dependency_decode(S32.double(), lengths=L, projective=projective, multiroot=multiroot,
                                     kernels="numba", return_scores=True)
        assert torch.isfinite(s32).all() and torch.allclose(s32.double(), s64, rtol=1e-6)
        assert bool(is_tree(h32, L, multiroot, projective).all())
        lz32 = dependency_log_partition(S32, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
        lz64 = dependency_log_partition(S32.double(), lengths=L, projective=projective, multiroot=multiroot)
        assert lz32.dtype == torch.float32 and torch.isfinite(lz32).all()
        assert torch.allclose(lz32.double(), lz64, rtol=1e-6)
        M = dependency_marginals(S32, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels)
        assert torch.isfinite(M).all()
        words = M.sum(2)[:, 1:]
        assert torch.allclose(words[0], torch.ones(n), atol=1e-4)            # every word has exactly one head


def test_real_space_underflow_falls_back_to_log_space():
    """Scores whose row maxima are far from every single-root tree (each word's best head is the root, but
    only one word may take it): the rescaled Z is exp(-30 (n - 1)), below float64's range, and the log-space
    pass takes over."""
    n = 60
    S = np.full((n + 1, n + 1), -30.0)
    S[:, 0] = 0.0
    M1, M2 = np.zeros((n + 1, n + 1)), np.zeros((n + 1, n + 1))
    a = inside_outside(S, n, False, True, M1)
    b = inside_outside_log(S, n, False, True, M2)
    assert np.isfinite(a) and a == pytest.approx(b, rel=1e-12) and np.abs(M1 - M2).max() < 1e-12
    assert a < -30 * n / 2                      # far below the row maxima: the fallback was needed


@kinds
def test_backends_agree_on_padded_batches(projective, multiroot):
    rng = np.random.default_rng(6)
    lengths = [int(v) for v in rng.integers(0, 12, size=9)]
    S, L = _batch(rng, lengths, N=13, scale=3.0)
    out = {}
    for kernels in ("numba", "torch"):
        out[kernels] = (dependency_decode(S, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels),
                        dependency_log_partition(S, lengths=L, projective=projective, multiroot=multiroot,
                                                 kernels=kernels),
                        dependency_marginals(S, lengths=L, projective=projective, multiroot=multiroot, kernels=kernels))
    assert torch.equal(out["numba"][0], out["torch"][0])
    assert torch.allclose(out["numba"][1], out["torch"][1], atol=1e-10)
    assert torch.allclose(out["numba"][2], out["torch"][2], atol=1e-10)


def test_torch_path_stays_on_the_device():
    """Under the CPU device guard the torch path makes no host copy except the non-projective decoder's one
    copy each way per batch."""
    rng = np.random.default_rng(7)
    S, L = _batch(rng, [5, 3])
    gold = dependency_decode(S, lengths=L)
    with host_guard() as guard:
        for proj in (True, False):
            dependency_log_partition(S, lengths=L, projective=proj, kernels="torch")
            dependency_marginals(S, lengths=L, projective=proj, kernels="torch")
            dependency_softmax_margin(S, gold, lengths=L, projective=proj, kernels="torch")
            dependency_crf_nll(S, gold, lengths=L, projective=proj, kernels="torch")
        dependency_hinge(S, gold, lengths=L, kernels="torch")
        assert guard.host_copies == 0
        dependency_decode(S, lengths=L, projective=False, kernels="torch")
        assert guard.host_copies == 4               # scores and lengths out, heads and scores back


def test_ties_are_broken_alike():
    """All-zero scores: every tree ties; both backends return the same (deterministic) tree."""
    S = torch.zeros(2, 7, 7, dtype=torch.float64)
    for projective in (True, False):
        a = dependency_decode(S, projective=projective, kernels="numba")
        b = dependency_decode(S, projective=projective, kernels="torch")
        assert torch.equal(a, b) and bool(is_tree(a, torch.tensor([6, 6]), False, projective).all())


def test_bad_input_is_refused_by_name():
    S = torch.zeros(2, 5, 5)
    with pytest.raises(SSVMInputError, match="arc_scores: expected a float tensor"):
        dependency_decode(torch.zeros(2, 5, 5, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match=r"arc_scores: expected shape \(B, N, N\)"):
        dependency_decode(torch.zeros(2, 5, 4))
    with pytest.raises(SSVMInputError, match="NaN"):
        dependency_decode(torch.full((1, 3, 3), float("nan")))
    with pytest.raises(SSVMInputError, match="position 0 is the root"):
        dependency_decode(S, mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(SSVMInputError, match="positions 1..n with nothing after"):
        dependency_decode(S, mask=torch.tensor([[0, 1, 0, 1, 0], [0, 1, 1, 0, 0]], dtype=torch.bool))
    with pytest.raises(SSVMInputError, match=r"lengths: expected values in \[0, 4\]"):
        dependency_decode(S, lengths=torch.tensor([5, 1]))
    with pytest.raises(SSVMInputError, match="mask, lengths: expected one of them"):
        dependency_decode(S, mask=torch.zeros(2, 5, dtype=torch.bool), lengths=torch.tensor([0, 0]))
    gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 0, 1, 2, 3]])
    with pytest.raises(SSVMInputError, match="heads: row 0 is not a projective single-root dependency tree"):
        dependency_hinge(S, torch.tensor([[-1, 2, 1, 0, 3], [-1, 0, 1, 2, 3]]))              # 1 <-> 2 cycle
    with pytest.raises(SSVMInputError, match="a cycle"):
        dependency_hinge(S, torch.tensor([[-1, 2, 1, 0, 3], [-1, 0, 1, 2, 3]]))
    with pytest.raises(SSVMInputError, match="not exactly one word attached to the root"):
        dependency_crf_nll(S, torch.tensor([[-1, 0, 0, 2, 3], [-1, 0, 1, 2, 3]]))
    with pytest.raises(SSVMInputError, match="crossing arcs"):
        dependency_crf_nll(S, torch.tensor([[-1, 3, 4, 0, 3], [-1, 0, 1, 2, 3]]))
    assert dependency_crf_nll(S, torch.tensor([[-1, 3, 4, 0, 3], [-1, 0, 1, 2, 3]]), projective=False).shape == (2,)
    with pytest.raises(SSVMInputError, match=r"a head out of \[0, n\]"):
        dependency_hinge(S, torch.tensor([[-1, 5, 0, 2, 3], [-1, 0, 1, 2, 3]]))
    with pytest.raises(SSVMInputError, match=r"heads: expected shape \(B, N\)"):
        dependency_hinge(S, gold[:, :4])
    with pytest.raises(SSVMInputError, match="heads: expected an integer tensor"):
        dependency_hinge(S, gold.float())
    with pytest.raises(SSVMInputError, match="cost: expected"):
        dependency_hinge(S, gold, cost="wrong")
    with pytest.raises(SSVMInputError, match="kernels: expected one of"):
        dependency_decode(S, kernels="cuda")
    blocked = torch.zeros(1, 3, 3)
    blocked[0, 1:, :] = float("-inf")
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_decode(blocked)
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_log_partition(blocked)


def test_forbidden_arcs_are_never_taken():
    rng = np.random.default_rng(8)
    S, L = _batch(rng, [6, 6])
    S[:, 3, 0] = float("-inf")                  # word 3 may not attach to the root
    S[:, 1:, 2] = float("-inf")                 # word 2 heads nothing
    for projective in (True, False):
        for kernels in ("numba", "torch"):
            heads = dependency_decode(S, lengths=L, projective=projective, kernels=kernels)
            assert (heads[:, 3] != 0).all() and (heads != 2).all()
            M = dependency_marginals(S, lengths=L, projective=projective, kernels=kernels)
            assert float(M[:, 3, 0].abs().max()) == 0 and float(M[:, :, 2].abs().max()) == 0


@pytest.mark.parametrize("kernels", ("numba", "torch"))
def test_forbidden_arcs_that_leave_only_multiroot_trees_are_refused_for_single_root(kernels):
    """Words 1 and 2 may attach to the root only: every tree gives the root two children. Chu-Liu-Edmonds' fewest
    root children is then two, and the single-root decode refuses the row instead of returning that tree (it
    once did, with a finite score: found by the k best trees' enumeration check, tests/test_kbest.py)."""
    S = torch.randn(1, 3, 3, dtype=torch.float64)
    S[0, 1, 2] = S[0, 2, 1] = float("-inf")
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_decode(S, projective=False, multiroot=False, kernels=kernels)
    with pytest.raises(SSVMInputError, match="row 0 .* has no dependency tree"):
        dependency_decode(S, projective=True, multiroot=False, kernels=kernels)
    assert dependency_decode(S, projective=False, multiroot=True, kernels=kernels).tolist() == [[-1, 0, 0]]
