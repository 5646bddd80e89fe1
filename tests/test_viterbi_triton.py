"""The fused Triton Viterbi (chain/triton_viterbi.py, every variant) against the loop over positions: same labels
and scores, with loss augmentation, per-sequence token losses and -inf constraint penalties. On CUDA
the kernel runs directly; without a GPU it runs under Triton's interpreter (``TRITON_INTERPRET=1``,
which must be set before Triton compiles the kernel, hence a subprocess). Both skip without Triton
(it ships with CUDA builds of torch, not with the CPU wheel CI installs)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ssvm_torch.chain.padded import cuda_decoder, viterbi

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def _interpreter_breaks_on_numpy() -> bool:
    """Triton's interpreter before 3.7 turns a kernel's integer argument into a one-element array and calls
    int() on it inside range(); NumPy 2.4 refuses that (TypeError 'only 0-dimensional arrays ...'),
    triton-lang/triton#9171, fixed by #9172. The compiled kernel is unaffected (the CUDA test runs it)."""
    if not HAVE_TRITON:
        return False
    import numpy
    import triton

    def major_minor(v):
        return tuple(int(x) for x in v.split(".")[:2])
    return major_minor(triton.__version__) < (3, 7) and major_minor(numpy.__version__) >= (2, 4)

COMPARE = textwrap.dedent("""
    import torch
    from ssvm_torch.chain.torch_viterbi import viterbi_loop
    from ssvm_torch.chain.triton_viterbi import viterbi_fused

    def compare(device):
        g = torch.Generator().manual_seed(0)
        cases = 0
        for dtype, K in ((torch.float64, 1), (torch.float64, 26), (torch.float32, 5), (torch.float32, 40)):
            B, T = 21, 7
            lengths = torch.randint(1, T + 1, (B,), generator=g)
            lengths[0] = T
            U, f, l, tr = (torch.randn(*s, generator=g, dtype=dtype) for s in ((B, T, K), (K,), (K,), (K, K)))
            gt = torch.randint(0, K, (B, T), generator=g)
            gt = torch.where(torch.arange(T)[None] < lengths[:, None], gt, -1)
            pen = None
            if K > 2:                                  # forbid half of the moves, one first and one last tag
                forbid = torch.rand(K, K, generator=g) < 0.5
                forbid.fill_diagonal_(False)
                pen = (torch.zeros(K, dtype=dtype).index_fill_(0, torch.tensor([0]), float("-inf")),
                       torch.zeros(K, dtype=dtype).index_fill_(0, torch.tensor([1]), float("-inf")),
                       torch.zeros(K, K, dtype=dtype).masked_fill_(forbid, float("-inf")))
            for kw in ({}, {"gt": gt}, {"gt": gt, "token_loss": torch.rand(B, generator=g, dtype=dtype)},
                       {"gt": gt, "penalty": pen}):
                if "penalty" in kw and pen is None:
                    continue
                args = [x.to(device) for x in (U, lengths, f, l, tr)]
                kw = {k: (tuple(p.to(device) for p in v) if isinstance(v, tuple) else v.to(device))
                      for k, v in kw.items()}
                a_lab, a_sc = viterbi_loop(*args, **kw)
                for variant, unroll, sort in (("tile", False, False), ("rows", False, True), ("rows", True, False),
                                              ("transposed", False, True)):
                    b_lab, b_sc = viterbi_fused(*args, variant=variant, unroll=unroll, sort=sort, **kw)
                    assert torch.equal(a_lab.cpu(), b_lab.cpu()), (variant, unroll, sort, dtype, K, sorted(kw))
                    torch.testing.assert_close(a_sc.cpu(), b_sc.cpu())
                    cases += 1
        return cases
""")


@pytest.mark.skipif(not (HAVE_TRITON and torch.cuda.is_available()), reason="needs Triton and a CUDA GPU")
def test_fused_viterbi_equals_loop_on_cuda():
    scope = {}
    exec(COMPARE, scope)
    assert scope["compare"]("cuda") == 60


@pytest.mark.skipif(not HAVE_TRITON, reason="needs Triton (TRITON_INTERPRET=1 runs the kernel on the CPU)")
@pytest.mark.skipif(_interpreter_breaks_on_numpy(), reason="Triton < 3.7's interpreter fails under NumPy >= 2.4 "
                    "(triton-lang/triton#9171); the compiled kernel's test covers the GPU")
@pytest.mark.slow          # tests/test_triton_chain.py runs the same kernel under the interpreter in the fast tier
def test_fused_viterbi_equals_loop_in_triton_interpreter():
    script = COMPARE + "\nprint('cases', compare('cpu'))\n"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "cases 60" in r.stdout


def test_cuda_decoder_choice_is_validated(monkeypatch):
    monkeypatch.setenv("SSVM_CUDA_VITERBI", "loop")
    assert cuda_decoder() == "loop"
    monkeypatch.setenv("SSVM_CUDA_VITERBI", "cudnn")
    with pytest.raises(ValueError, match="SSVM_CUDA_VITERBI: expected one of"):
        cuda_decoder()


def test_cpu_viterbi_never_takes_the_cuda_kernel(monkeypatch):
    """On the CPU ``viterbi`` is the loop whatever the setting (the fused kernel is CUDA's)."""
    monkeypatch.setenv("SSVM_CUDA_VITERBI", "fused")
    U = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]], dtype=torch.float64)
    z = torch.zeros(2, dtype=torch.float64)
    labels, scores = viterbi(U, torch.tensor([2]), z, z, torch.zeros(2, 2, dtype=torch.float64))
    assert labels.tolist() == [[1, 0]] and scores.tolist() == [3.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_viterbi_scores_keep_their_gradients():
    """With an input that requires grad, ``viterbi`` on CUDA runs the loop (the fused kernel's scores
    carry no autograd graph): the gradient of the best score is the one-hot of the best path."""
    g = torch.Generator().manual_seed(3)
    U = torch.randn(4, 6, 5, generator=g).cuda().requires_grad_()
    f, la, t = (torch.randn(*s, generator=g).cuda() for s in ((5,), (5,), (5, 5)))
    lengths = torch.tensor([6, 3, 1, 5], device="cuda")
    labels, scores = viterbi(U, lengths, f, la, t)
    scores.sum().backward()
    onehot = torch.nn.functional.one_hot(labels.clamp(min=0), 5).float() * (labels >= 0)[..., None]
    torch.testing.assert_close(U.grad, onehot)


def test_the_default_variant_follows_the_measured_rule():
    """``variant="auto"``: below ROWS_FROM_B sequences the transposed tile up to TRANSPOSED_MAX_K tags and the
    tile beyond, the rows variant from there on; a decode call sorts from SORT_FROM_B chains, a store's kept
    order from STORE_SORT_FROM_B (docs/devices.md has the H100 and H200 figures behind the rule); every CUDA
    decoder name is accepted."""
    from ssvm_torch.chain.triton_viterbi import (ROWS_FROM_B, SORT_FROM_B, STORE_SORT_FROM_B, TRANSPOSED_MAX_K,
                                                 choose_variant, length_order)
    assert choose_variant(ROWS_FROM_B - 1, TRANSPOSED_MAX_K) == "transposed"
    assert choose_variant(ROWS_FROM_B - 1, TRANSPOSED_MAX_K + 1) == "tile"
    assert choose_variant(ROWS_FROM_B, TRANSPOSED_MAX_K + 1) == "rows"
    lengths = torch.arange(SORT_FROM_B) % 7
    assert length_order(lengths[:SORT_FROM_B - 1], None) is None and length_order(lengths, None) is not None
    assert length_order(lengths[:STORE_SORT_FROM_B - 1], None, kept=True) is None
    order = length_order(lengths[:STORE_SORT_FROM_B], None, kept=True)
    assert torch.equal(lengths[order.long()], lengths[:STORE_SORT_FROM_B].sort(descending=True).values)
    for name in ("fused", "fused-tile", "fused-rows", "fused-transposed", "loop"):
        os.environ["SSVM_CUDA_VITERBI"] = name
        try:
            assert cuda_decoder() == name
        finally:
            del os.environ["SSVM_CUDA_VITERBI"]


@pytest.mark.long
def test_the_package_works_and_refuses_triton_clearly_without_triton():
    """Triton is optional (the package's dependencies do not bring it): with its import blocked,
    ssvm_torch imports, LinearChain decodes and trains on its other kernels, and kernels="triton"
    is refused by name (the wheel smoke test of .ci/run caught an import of Triton-only names)."""
    script = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("blocked")
        sys.meta_path.insert(0, Block())
        import torch
        from ssvm_torch.nn import LinearChain
        from ssvm_torch.errors import SSVMInputError
        E = torch.randn(2, 4, 3)
        lay = LinearChain(3, batch_first=True)
        assert lay.decode(E).shape == (2, 4) and float(lay(E, torch.zeros(2, 4, dtype=torch.long))) >= 0
        try:
            LinearChain(3, batch_first=True, kernels="triton").decode(E)
        except SSVMInputError as e:
            print("refused:", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: kernels: 'triton' needs Triton installed" in r.stdout
