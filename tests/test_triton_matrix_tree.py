"""The Triton matrix-tree kernel (ssvm_torch/trees/triton_matrix_tree.py) on the device it runs on -- CUDA where
there is a GPU, CPU tensors under Triton's interpreter without one (tests/conftest.py) -- against enumeration of
every tree and the float64 torch path: log Z, the arc marginals, det's sign and the head-marginal check, single
and multi root, ragged rows with an empty one, -inf arcs, sentences up to the 64-word tile; a cancelling row
flagged; the dispatch; and the kernel compiled to PTX for sm_90 without a GPU."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from ssvm_torch.trees import dependency_log_partition, dependency_marginals, matrix_tree, triton_matrix_tree
from ssvm_torch.trees.triton_eisner import interpreter_ready
from tree_reference import brute_force

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
pytestmark = pytest.mark.skipif(triton_matrix_tree.triton is None or not (CUDA or interpreter_ready()),
                                reason="needs Triton (the dev extra) and a GPU or TRITON_INTERPRET=1")
roots = pytest.mark.parametrize("multiroot", [False, True], ids=["single-root", "multi-root"])


@roots
def test_kernel_equals_enumeration(multiroot):
    g = torch.Generator().manual_seed(3 + multiroot)
    lengths = torch.tensor([6, 3, 0, 5, 1, 6])
    S = torch.randn(6, 7, 7, generator=g) * 2
    S[3, 2, :] = float("-inf")
    S[3, 2, 4] = 0.0                                                   # word 2 may take only word 4 as its head
    if not multiroot:              # the root's arcs far below the others (multi-root: a near-singular L, redone)
        S[5, 1:, 0] -= 30.0
    logz, M, pivot, sign, err = triton_matrix_tree.direct(S.to(DEV), lengths.to(DEV), multiroot)
    assert bool((sign == 1).all()) and float(err.max()) < 1e-5
    for b, n in enumerate(lengths.tolist()):
        _, _, ref_logz, ref_M = brute_force(S[b].double().numpy(), n, False, multiroot)
        assert float(logz[b]) == pytest.approx(ref_logz, rel=1e-6, abs=1e-5), b
        got = M[b].double().cpu().numpy()
        assert np.abs(got[:n + 1, :n + 1] - ref_M).max() < 2e-6, b
        assert np.abs(got).sum() == pytest.approx(np.abs(ref_M).sum(), abs=1e-5), b   # zero off the sentence


@roots
def test_long_sentences_equal_the_float64_torch_path(multiroot):
    """Up to the 64-word tile: the kernel in float32 against the package's float64 computation."""
    g = torch.Generator().manual_seed(11)
    lengths = torch.tensor([64, 40, 17])
    S = torch.randn(3, 65, 65, generator=g, dtype=torch.float64)
    logz, M, pivot, sign, err = triton_matrix_tree.direct(S.float().to(DEV), lengths.to(DEV), multiroot)
    ref_logz = dependency_log_partition(S, lengths=lengths, projective=False, multiroot=multiroot)
    ref_M = dependency_marginals(S, lengths=lengths, projective=False, multiroot=multiroot)
    torch.testing.assert_close(logz.double().cpu(), ref_logz, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(M.double().cpu(), ref_M, rtol=0, atol=1e-5)
    assert bool((sign == 1).all()) and float(err.max()) < 1e-4 and float(pivot.min()) > 1e-3


@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # the interpreter's numpy on the flagged row
def test_a_cancelling_row_is_flagged():
    """Two words that prefer each other by 20 over everything else (multi-root): float32 elimination loses
    det L, and the kernel's check (a head-marginal sum off 1, or a tiny pivot) marks the row for the float64
    redo of ssvm_torch/trees/matrix_tree.py, whose result is the enumeration's."""
    g = torch.Generator().manual_seed(5)
    S = torch.randn(2, 7, 7, generator=g)
    S[1, 1, 2] = S[1, 2, 1] = 20.0
    lengths = torch.tensor([6, 6])
    logz, M, pivot, sign, err = triton_matrix_tree.direct(S.to(DEV), lengths.to(DEV), True)
    flagged = (sign <= 0) | (pivot < 1e-5) | ~(err <= 1e-4) | ~torch.isfinite(logz)
    assert flagged.tolist() == [False, True]
    x = S.to(DEV).clone().requires_grad_(True)
    dependency_log_partition(x, projective=False, multiroot=True).sum().backward()
    _, _, _, ref_M = brute_force(S[1].double().numpy(), 6, False, True)
    assert np.abs(x.grad[1].double().cpu().numpy() - ref_M).max() < 2e-4


@pytest.mark.long
@roots
@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # the interpreter's numpy on flagged rows (inf / NaN)
def test_rows_it_does_not_flag_are_accurate(multiroot):
    """Over random batches at score scales 0.5-30 with peaked 2-cycles, the rows the kernel's checks pass (no
    small pivot, det > 0, head marginals summing to 1 within 1e-4) hold log Z within 1e-4 (relative) and the
    marginals within 5e-4 of the float64 path (the check bounds each word's sum; one entry's error can exceed
    it a little: 1.15e-4 seen); the others go to the float64 redo."""
    g = torch.Generator().manual_seed(7 + multiroot)
    passed = 0
    for scale in (0.5, 3.0, 10.0, 30.0):
        S = torch.randn(12, 16, 16, generator=g, dtype=torch.float64) * scale
        S[::3, 1, 2] = S[::3, 2, 1] = 4 * scale
        lengths = torch.randint(1, 16, (12,), generator=g)
        S32 = S.float()
        logz, M, pivot, sign, err = triton_matrix_tree.direct(S32.to(DEV), lengths.to(DEV), multiroot)
        ok = ((sign > 0) & (pivot >= 1e-5) & (err <= 1e-4) & torch.isfinite(logz)).cpu()
        ref_M = dependency_marginals(S32.double(), lengths=lengths, projective=False, multiroot=multiroot)
        ref_z = dependency_log_partition(S32.double(), lengths=lengths, projective=False, multiroot=multiroot)
        assert float((M.double().cpu() - ref_M).abs().amax((1, 2))[ok].max()) < 5e-4
        assert float(((logz.double().cpu() - ref_z).abs() / ref_z.abs().clamp(min=1))[ok].max()) < 1e-4
        passed += int(ok.sum())
    assert passed >= 24                                                # most rows stay on the kernel


def test_dispatch():
    """The kernel serves float32 CUDA scores of up to 64 words unless SSVM_CUDA_MATRIX_TREE=torch; a bad
    value is refused by name."""
    on = torch.zeros(2, 65, 65, device="meta")                                  # read for its env var only
    assert not triton_matrix_tree.available(torch.zeros(2, 5, 5))              # CPU: the torch path
    if CUDA:
        assert triton_matrix_tree.available(torch.zeros(2, 65, 65, device="cuda"))
        assert not triton_matrix_tree.available(torch.zeros(2, 66, 66, device="cuda"))
        assert not triton_matrix_tree.available(torch.zeros(2, 5, 5, device="cuda", dtype=torch.float64))
    # the first pass's precision follows (matrix_tree._float32_first_pass): float32 on the CPU, on CUDA only
    # where the kernel takes the batch (CUDA's float32 torch path was slower than its float64 one)
    first32 = matrix_tree._float32_first_pass
    assert first32(torch.zeros(2, 66, 66), True, True)
    assert not first32(torch.zeros(2, 66, 66), False, True) and not first32(torch.zeros(2, 66, 66), True, False)
    assert not first32(torch.zeros(2, 5, 5, dtype=torch.float64), True, True)
    if CUDA:
        assert first32(torch.zeros(2, 65, 65, device="cuda"), True, True)
        assert not first32(torch.zeros(2, 66, 66, device="cuda"), True, True)
    os.environ["SSVM_CUDA_MATRIX_TREE"] = "torch"
    try:
        assert not triton_matrix_tree.available(on)
        if CUDA:
            assert not first32(torch.zeros(2, 65, 65, device="cuda"), True, True)
        os.environ["SSVM_CUDA_MATRIX_TREE"] = "fast"
        with pytest.raises(ValueError, match="SSVM_CUDA_MATRIX_TREE: expected one of"):
            triton_matrix_tree.available(on)
    finally:
        del os.environ["SSVM_CUDA_MATRIX_TREE"]


COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ssvm_torch.trees.triton_matrix_tree import _matrix_tree_kernel as fn
for multiroot in (False, True):
    for block in (16, 64):
        sig = {name: ("i32" if name == "N" else "*i64" if name == "LEN" else "constexpr"
                      if name in ("MULTIROOT", "BLOCK") else "*fp32") for name in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig, constexprs={"MULTIROOT": multiroot, "BLOCK": block})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
        assert ".entry" in kernel.asm["ptx"]
        print("compiled", multiroot, block)
"""


@pytest.mark.long
def test_the_kernel_compiles_for_sm90():
    """What the interpreter cannot check (types, the loop's carried values): the kernel compiles to PTX for
    sm_90, single and multi root, the smallest and largest tiles; in a process without TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("compiled") == 4
