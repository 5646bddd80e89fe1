"""The Triton Eisner kernels (ssvm_torch/trees/triton_eisner.py) on the device they run on -- CUDA where there
is a GPU, CPU tensors under Triton's interpreter without one (tests/conftest.py) -- against the numba kernels
on the CPU and the torch recursions: best trees with their tie rule (integer scores), their scores, log Z
and its gradient (the arc marginals), single and multi root, ragged rows with an empty one, -inf arcs,
tiles smaller than the sentence (the kernels' chunk loops), float64 and float32; and the dispatch."""
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.trees import dependency_decode, dependency_log_partition, ops, torch_eisner, triton_eisner
from ssvm_torch.trees.triton_eisner import interpreter_ready
from triton_compile import assert_kernels_compile

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
pytestmark = pytest.mark.skipif(triton_eisner.triton is None or not (CUDA or interpreter_ready()),
                                reason="needs Triton (the dev extra) and a GPU or TRITON_INTERPRET=1")
# the interpreter runs each tile op in numpy: small sentences there, longer ones on a GPU
N_SMALL, N_LONG = (12, 64) if CUDA else (9, 12)


def scores(seed, B, N, dtype=torch.float64):
    """Random arc scores, the second half of the rows rounded to integers (ties everywhere), ragged lengths
    with an empty row, and two -inf arcs that leave trees."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, N, N, generator=g, dtype=dtype) * 2
    S[B // 2:] = S[B // 2:].round()
    lengths = torch.randint(1, N, (B,), generator=g)
    lengths[0], lengths[1] = N - 1, 0
    S[0, 2, 1] = S[2 % B, 1, 0] = float("-inf")
    return S, lengths


# small tiles with several roots is the interpreter's longest case: slow tier (each axis stays covered)
# the fast tier runs each tiling and each root rule once (one tile multi-root, small tiles single-root); the rest: slow
@pytest.mark.long
@pytest.mark.parametrize("tiles,multiroot", [pytest.param("one tile", False, marks=pytest.mark.slow),
                                             ("one tile", True), ("small tiles", False),
                                             pytest.param("small tiles", True, marks=pytest.mark.slow)],
                         ids=["one tile-single-root", "one tile-multi-root", "small tiles-single-root",
                              "small tiles-multi-root"], indirect=["tiles"])
def test_best_tree_and_log_z_equal_numba_and_torch(multiroot, tiles):
    # the interpreter's cost grows with the tiles per width: small tiles on a shorter batch there
    N = N_LONG if CUDA else (N_SMALL if tiles == "one tile" else 7)
    S, lengths = scores(0, 6, N)
    heads, best = triton_eisner.best_tree(S.to(DEV), lengths.to(DEV), multiroot)
    ref_heads, ref_best = ops.best(S, lengths, True, multiroot, kernels="numba")
    assert torch.equal(heads.cpu(), ref_heads)                      # same trees, ties broken the same way
    torch.testing.assert_close(best.cpu(), ref_best)
    t_heads, _ = torch_eisner.best_tree(S, lengths, multiroot)
    assert torch.equal(heads.cpu(), t_heads)

    leaf = S.clone().to(DEV).requires_grad_(True)
    logz = triton_eisner.log_partition(leaf, lengths.to(DEV), multiroot)
    logz.sum().backward()
    ref = S.clone().requires_grad_(True)
    ref_logz = ops.log_partition(ref, lengths, True, multiroot, kernels="numba")
    ref_logz.sum().backward()
    torch.testing.assert_close(logz.detach().cpu(), ref_logz.detach())
    torch.testing.assert_close(leaf.grad.cpu(), ref.grad)
    # the marginals: each word's head distribution sums to one, nothing off the words
    M = leaf.grad.cpu()
    word = torch.arange(S.shape[1])[None] <= lengths[:, None]
    word[:, 0] = False
    torch.testing.assert_close(M.sum(2), word.double())


@pytest.mark.long
def test_float32_agrees_with_float64():
    S, lengths = scores(1, 4, N_LONG)
    S = S[:2]                                   # random scores only: float32 rounding must not flip a tie
    lengths = torch.tensor([N_LONG - 1, N_LONG // 2])
    h64, s64 = triton_eisner.best_tree(S.to(DEV), lengths.to(DEV), False)
    h32, s32 = triton_eisner.best_tree(S.float().to(DEV), lengths.to(DEV), False)
    assert torch.equal(h32, h64) and s32.dtype == torch.float32
    torch.testing.assert_close(s32.double(), s64, rtol=1e-5, atol=1e-4)
    leaf = S.float().clone().to(DEV).requires_grad_(True)
    triton_eisner.log_partition(leaf, lengths.to(DEV), False).sum().backward()
    ref = S.clone().to(DEV).requires_grad_(True)
    triton_eisner.log_partition(ref, lengths.to(DEV), False).sum().backward()
    torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)


def test_the_dispatch_and_its_switch(monkeypatch):
    """CUDA float scores go to the Triton kernels unless SSVM_CUDA_EISNER=loop; CPU scores never do (the
    numba kernels serve them); a bad value of the switch is refused by name."""
    assert not triton_eisner.available(torch.zeros(1, 3, 3))
    monkeypatch.setenv("SSVM_CUDA_EISNER", "loop")
    assert not triton_eisner.available(torch.zeros(1, 3, 3, device=DEV))
    monkeypatch.setenv("SSVM_CUDA_EISNER", "eisner")
    with pytest.raises(ValueError, match="SSVM_CUDA_EISNER: expected one of"):
        triton_eisner.available(torch.zeros(1, 3, 3))
    monkeypatch.setenv("SSVM_CUDA_EISNER", "fused")
    assert triton_eisner.available(torch.zeros(1, 3, 3, device=DEV)) == CUDA


@pytest.mark.skipif(not CUDA, reason="the public operations pick the Triton kernels for CUDA scores only")
def test_public_operations_on_cuda_equal_the_cpu():
    S, lengths = scores(2, 32, 40)
    heads = dependency_decode(S.cuda(), lengths=lengths.cuda())
    assert torch.equal(heads.cpu(), dependency_decode(S, lengths=lengths))
    leaf = S.cuda().requires_grad_(True)
    dependency_log_partition(leaf, lengths=lengths.cuda()).sum().backward()
    ref = S.clone().requires_grad_(True)
    dependency_log_partition(ref, lengths=lengths).sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), ref.grad)
    S[3, 1:, :] = float("-inf")                 # word 1 of row 3 has no head: no tree
    with pytest.raises(SSVMInputError, match="row 3"):
        dependency_decode(S.cuda(), lengths=lengths.cuda())


@pytest.mark.long
@pytest.mark.skipif(CUDA, reason="with a GPU the tests above run the compiled kernels")
@pytest.mark.parametrize("maxplus", ["max-plus", "log"])
def test_kernels_compile_for_an_h100(maxplus):
    """Without a GPU the interpreter runs the kernels' Python; this compiles them to PTX for sm_90 (what
    the interpreter cannot check: types, layouts, the loops' carried values), float32 and float64, in a
    process without TRITON_INTERPRET (which makes the kernels interpreted functions at import)."""
    assert_kernels_compile("triton_eisner", ("AX", "AR", "AL"), maxplus)
