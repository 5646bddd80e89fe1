"""What every backend of the chain package shares: the dispatch test (:func:`use_numba`), the
effective scores the decoders see (parameters plus constraint penalties), and the checks of scores
and of rows without an allowed tag sequence."""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from .triton_viterbi import MAX_K, fused_available

NUMBA_DTYPES = (torch.float32, torch.float64)
LAYER_KERNELS = ("auto", "numba", "torch", "triton")   # the masked operations' backends (chain/ops.py)


def tracing() -> bool:
    """Under torch.compile / torch.export: the torch path only, and no data-dependent checks
    (a traced graph cannot branch on values)."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def use_numba(E: torch.Tensor, kernels: str) -> bool:
    ok = E.device.type == "cpu" and E.dtype in NUMBA_DTYPES and not tracing()
    if kernels == "numba" and not ok:
        raise SSVMInputError(f"kernels: 'numba' needs CPU float32/float64 emissions, got {E.device} {E.dtype}")
    return ok and kernels in ("auto", "numba")


def use_triton(E: torch.Tensor, kernels: str) -> bool:
    """The Triton kernels (chain/triton_autograd.py): by default on CUDA where Triton is importable
    and K <= MAX_K; ``kernels="triton"`` forces them (on CPU tensors too under TRITON_INTERPRET=1)."""
    ok = fused_available(E) and not tracing()
    if kernels == "triton" and not ok:
        raise SSVMInputError(f"kernels: 'triton' needs Triton installed, at most {MAX_K} tags and CUDA emissions "
                             f"(CPU ones under TRITON_INTERPRET=1), outside tracing; got {E.device} emissions with "
                             f"{E.shape[-1]} tags")
    return ok and (kernels == "triton" or (kernels == "auto" and E.is_cuda))


def effective(start, end, trans, penalty, dtype, device):
    """The scores the oracles see: parameters plus the constraint penalties, in ``dtype``."""
    s, e, t = (x.detach().to(device=device, dtype=dtype) for x in (start, end, trans))
    if penalty is not None:
        s, e, t = s + penalty[0].to(device, dtype), e + penalty[1].to(device, dtype), t + penalty[2].to(device, dtype)
    return s, e, t


def refuse_bad_scores(t: torch.Tensor, field: str, allow_neg_inf: bool = True) -> None:
    """NaN and +inf scores are refused (they would decode to arbitrary labels and NaN gradients);
    -inf is allowed where it marks a forbidden tag or move (``allow_neg_inf``). On CUDA an
    asynchronous device assertion (no host sync; the error surfaces at the next sync); elsewhere a
    host check that counts the bad entries, after a one-reduction test (the sum is finite exactly
    when no entry is NaN or infinite, unless finite entries overflow it: then the full check runs).
    O(B T K) against the decoders' O(B T K^2)."""
    if tracing():
        return
    if not t.is_cuda and t.numel() and bool(torch.isfinite(t.sum())):
        return          # one reduction: a NaN or an inf entry makes the sum non-finite (overflow falls through)
    bad = torch.isnan(t) | (t == float("inf")) if allow_neg_inf else ~torch.isfinite(t)
    what = "NaN or +inf (-inf marks a forbidden tag or move)" if allow_neg_inf else "NaN or inf"
    if t.is_cuda:
        torch._assert_async(~bad.any(), f"{field}: expected scores without {what}")
    elif bool(bad.any()):
        raise SSVMInputError(f"{field}: expected scores without {what}, found {int(bad.sum())} such entries")


def check_draws(n, generator, device: torch.device) -> None:
    """The arguments of a layer's ``sample``: ``n`` an int >= 1, ``generator`` None or a torch.Generator on the
    scores' device type (its draws are that device's)."""
    check(isinstance(n, int) and not isinstance(n, bool) and n >= 1, "n", "an int >= 1", repr(n))
    check(generator is None or isinstance(generator, torch.Generator), "generator", "a torch.Generator or None",
          type(generator).__name__)
    check(generator is None or generator.device.type == device.type, "generator",
          f"a generator on the scores' device ({device})", getattr(generator, "device", None))


def fail_no_path(scores: torch.Tensor, mask: torch.Tensor):
    if tracing() or bool(torch.isfinite(scores).all()):
        return
    bad = torch.nonzero(~torch.isfinite(scores) & mask.any(1))
    if len(bad):
        b = int(bad[0, 0])
        raise SSVMInputError(f"constraints: expected at least one allowed tag sequence for every row, "
                             f"row {b} ({int(mask[b].sum())} masked-on positions) has none")
