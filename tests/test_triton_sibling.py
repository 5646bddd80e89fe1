"""The second-order Triton kernels (ssvm_torch/trees/triton_sibling.py) on the device they run on -- CUDA where
there is a GPU, CPU tensors under Triton's interpreter without one (tests/conftest.py) -- against the torch
recursions and the numba kernels: best trees with their tie rule (integer scores), their scores, log Z and
its gradients (the arc and sibling marginals), single and multi root, ragged rows with an empty one, -inf
arcs and sibling pairs, tiles smaller than the sentence; float32; the kernels compiled to PTX without a GPU."""
import pytest
import torch

from ssvm_torch.trees import dependency_decode, dependency_log_partition, sibling_ops, torch_sibling, triton_sibling
from ssvm_torch.trees import triton_eisner
from ssvm_torch.trees.triton_eisner import interpreter_ready
from triton_compile import assert_kernels_compile

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
pytestmark = pytest.mark.skipif(triton_eisner.triton is None or not (CUDA or interpreter_ready()),
                                reason="needs Triton (the dev extra) and a GPU or TRITON_INTERPRET=1")
# the interpreter runs each tile op in numpy: short sentences there, longer ones on a GPU
N_SMALL = 40 if CUDA else 7


def scores(seed, B, N, dtype=torch.float64):
    """Random arc and sibling scores, the second half of the rows rounded to integers (ties everywhere),
    ragged lengths with an empty row, -inf arcs and sibling pairs that leave trees."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, N, N, generator=g, dtype=dtype) * 2
    SB = torch.randn(B, N, N, N, generator=g, dtype=dtype) * 2
    S[B // 2:], SB[B // 2:] = S[B // 2:].round(), SB[B // 2:].round()
    lengths = torch.randint(1, N, (B,), generator=g)
    lengths[0], lengths[1], lengths[2] = N - 1, 0, N - 2          # row 2 keeps trees without the arc 0 -> 1
    S[0, 2, 1] = S[2, 1, 0] = float("-inf")
    SB[0, 4, 1, 2] = SB[0, 1, 5, 3] = float("-inf")
    return S, SB, lengths


# small tiles with several roots is the interpreter's longest case: slow tier (each axis stays covered)
# the fast tier runs each tiling and each root rule once (one tile multi-root, small tiles single-root); the rest: slow
@pytest.mark.long
@pytest.mark.parametrize("tiles,multiroot", [pytest.param("one tile", False, marks=pytest.mark.slow),
                                             ("one tile", True), ("small tiles", False),
                                             pytest.param("small tiles", True, marks=pytest.mark.slow)],
                         ids=["one tile-single-root", "one tile-multi-root", "small tiles-single-root",
                              "small tiles-multi-root"], indirect=["tiles"])
def test_best_tree_and_log_z_equal_torch_and_numba(multiroot, tiles):
    S, SB, lengths = scores(0, 4, N_SMALL)
    heads, best = triton_sibling.best_tree(S.to(DEV), SB.to(DEV), lengths.to(DEV), multiroot)
    ref_heads, ref_best = torch_sibling.best_tree(S, SB, lengths, multiroot)
    assert torch.equal(heads.cpu(), ref_heads)                      # same trees, ties broken the same way
    torch.testing.assert_close(best.cpu(), ref_best)
    n_heads, _ = sibling_ops.best(S, SB, lengths, multiroot, kernels="numba")
    assert torch.equal(heads.cpu(), n_heads)

    s, sb = S.clone().to(DEV).requires_grad_(True), SB.clone().to(DEV).requires_grad_(True)
    logz = triton_sibling.log_partition(s, sb, lengths.to(DEV), multiroot)
    logz.sum().backward()
    rs, rsb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
    ref_logz = sibling_ops.log_partition(rs, rsb, lengths, multiroot, kernels="numba")
    ref_logz.sum().backward()
    torch.testing.assert_close(logz.detach().cpu(), ref_logz.detach())
    torch.testing.assert_close(s.grad.cpu(), rs.grad)
    torch.testing.assert_close(sb.grad.cpu(), rsb.grad)


def test_float32_agrees_with_float64():
    S, SB, lengths = scores(1, 4, N_SMALL)
    S, SB = S[:2], SB[:2]
    lengths = torch.tensor([N_SMALL - 1, N_SMALL // 2])             # random scores only: no tie to flip
    h64, s64 = triton_sibling.best_tree(S.to(DEV), SB.to(DEV), lengths.to(DEV), False)
    h32, s32 = triton_sibling.best_tree(S.float().to(DEV), SB.float().to(DEV), lengths.to(DEV), False)
    assert torch.equal(h32, h64) and s32.dtype == torch.float32
    torch.testing.assert_close(s32.double(), s64, rtol=1e-5, atol=1e-4)
    s, sb = S.float().to(DEV).requires_grad_(True), SB.float().to(DEV).requires_grad_(True)
    triton_sibling.log_partition(s, sb, lengths.to(DEV), False).sum().backward()
    rs, rsb = S.to(DEV).requires_grad_(True), SB.to(DEV).requires_grad_(True)
    triton_sibling.log_partition(rs, rsb, lengths.to(DEV), False).sum().backward()
    torch.testing.assert_close(s.grad.double(), rs.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(sb.grad.double(), rsb.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not CUDA, reason="the public operations pick the Triton kernels for CUDA scores only")
def test_public_operations_on_cuda_equal_the_cpu():
    S, SB, lengths = scores(2, 32, 40)
    heads = dependency_decode(S.cuda(), lengths=lengths.cuda(), sib_scores=SB.cuda())
    assert torch.equal(heads.cpu(), dependency_decode(S, lengths=lengths, sib_scores=SB))
    s, sb = S.cuda().requires_grad_(True), SB.cuda().requires_grad_(True)
    dependency_log_partition(s, lengths=lengths.cuda(), sib_scores=sb).sum().backward()
    rs, rsb = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
    dependency_log_partition(rs, lengths=lengths, sib_scores=rsb).sum().backward()
    torch.testing.assert_close(s.grad.cpu(), rs.grad)
    torch.testing.assert_close(sb.grad.cpu(), rsb.grad)


@pytest.mark.skipif(CUDA, reason="with a GPU the tests above run the compiled kernels")
@pytest.mark.parametrize("maxplus", ["max-plus", "log"])
def test_kernels_compile_for_an_h100(maxplus):
    """Without a GPU the interpreter runs the kernels' Python; this compiles them to PTX for sm_90 (types,
    layouts, the loops' carried values), float32 and float64, in a process without TRITON_INTERPRET."""
    assert_kernels_compile("triton_sibling", ("AX", "AR", "AL", "KR", "KL"), maxplus)
