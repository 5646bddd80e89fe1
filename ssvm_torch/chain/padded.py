"""The chain package's calls on padded batches given by ``lengths`` (rows are their first
``lengths[b]`` positions), the form the BCFW models and stores use: :func:`viterbi` (torch or
Triton, any device), :func:`decode` (one dispatch over the numba, torch and Triton backends) and
:func:`check_chain`, the argument checks of every lengths-based call. Conventions in
:mod:`ssvm_torch.chain`."""
from __future__ import annotations


import torch

from ..devices import KERNELS, from_host, to_host
from ..errors import check, env_choice
from .numba_viterbi import NO_PEN, penalty_array, viterbi_ragged
from .torch_viterbi import viterbi_loop
from .triton_viterbi import fused_available, viterbi_fused

CUDA_DECODERS = ("fused", "fused-tile", "fused-rows", "fused-transposed", "loop")


def cuda_decoder() -> str:
    """Which kernel :func:`viterbi` runs on CUDA: ``fused`` (one Triton kernel,
    :mod:`ssvm_torch.chain.triton_viterbi`, the variant its measured rule picks by batch size; the
    default where Triton is importable), ``fused-tile`` / ``fused-rows`` / ``fused-transposed`` (one variant)
    or ``loop``
    (:func:`viterbi_loop`), from the environment variable ``SSVM_CUDA_VITERBI``."""
    return env_choice("SSVM_CUDA_VITERBI", CUDA_DECODERS, "fused")


def fused_variant() -> str | None:
    """The Triton kernel's variant that :func:`cuda_decoder`'s choice names (``auto`` for ``fused``),
    None for ``loop``."""
    choice = cuda_decoder()
    return None if choice == "loop" else {"fused": "auto"}.get(choice, choice.removeprefix("fused-"))


def viterbi(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
            trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
            penalty=None):
    """Batched Viterbi on padded input: :func:`viterbi_loop`'s arguments and result. On CUDA with
    shared (not per-sequence) scores it runs the fused Triton kernel unless
    ``SSVM_CUDA_VITERBI=loop`` (benchmarks/bench_gpu.py measures both), or unless the scores must
    carry gradients (an input requires grad): the kernel's scores have no autograd graph, the
    loop's do."""
    variant = fused_variant() if unary.is_cuda else None
    differentiable = torch.is_grad_enabled() and any(t.requires_grad for t in (unary, first, last, trans))
    if variant is not None and not differentiable and first.dim() == 1 and trans.dim() == 2 and fused_available(unary):
        return viterbi_fused(unary, lengths, first, last, trans, gt=gt, token_loss=token_loss, penalty=penalty,
                             variant=variant)
    return viterbi_loop(unary, lengths, first, last, trans, gt=gt, token_loss=token_loss, penalty=penalty)


def decode(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
           trans: torch.Tensor, gt: torch.Tensor | None = None, backend: str = "auto",
           token_loss: torch.Tensor | None = None, penalty=None):
    """Batched Viterbi on padded input with either kernel; the arguments and the result are those
    of :func:`viterbi` (labels (B, T) padded with -1, scores (B,)). ``numba`` runs the ragged
    compiled kernel on the valid rows (CPU float64 only), ``torch`` the padded recursion (any
    device), ``auto`` numba where it applies. ``penalty``: None or additive (first, last,
    trans) constraint scores (0 / -inf) as tensors."""
    if backend not in KERNELS:
        raise ValueError(f"backend: expected one of {KERNELS}, got {backend!r}")
    numba_ok = unary.device.type == "cpu" and unary.dtype == torch.float64
    if backend == "numba" and not numba_ok:
        raise ValueError(f"backend: 'numba' needs CPU float64 scores, got {unary.device} {unary.dtype}")
    if backend == "torch" or (backend == "auto" and not numba_ok):
        return viterbi(unary, lengths, first, last, trans, gt=gt, token_loss=token_loss, penalty=penalty)
    B, T, _ = unary.shape
    dev = unary.device
    valid = torch.arange(T, device=dev)[None, :] < lengths[:, None]
    offsets = torch.zeros(B + 1, dtype=torch.int64, device=dev)
    offsets[1:] = torch.cumsum(lengths.to(torch.int64), 0)
    rows, scores = viterbi_ragged(to_host(unary[valid]), to_host(offsets), to_host(first), to_host(last),
                                  to_host(trans), None if gt is None else to_host(gt[valid]),
                                  None if token_loss is None else to_host(token_loss),
                                  NO_PEN if penalty is None else penalty_array(*penalty))
    labels = torch.full((B, T), -1, dtype=torch.int64, device=dev)
    labels[valid] = from_host(rows, dev)
    return labels, from_host(scores, dev)


def check_chain(unary, lengths, first, last, trans, gt=None, per_sequence: bool = False) -> None:
    """Clear errors for the padded-chain arguments (shapes, devices, lengths, label ranges);
    ``per_sequence``: ``first``/``last``/``trans`` may also be given per sequence, (B, K) / (B, K, K)."""
    check(torch.is_tensor(unary) and unary.dim() == 3 and unary.is_floating_point(), "unary",
          "a float tensor (B, T, K)", getattr(unary, "shape", type(unary)))
    B, T, K = unary.shape
    check(B >= 1 and T >= 1 and K >= 1, "unary", "non-empty dimensions (B, T, K)", tuple(unary.shape))
    check(torch.is_tensor(lengths) and lengths.shape == (B,) and not lengths.is_floating_point(), "lengths",
          f"an integer tensor of shape ({B},)",
          f"{tuple(lengths.shape)} {lengths.dtype}" if torch.is_tensor(lengths) else type(lengths).__name__)
    if not bool(((lengths >= 1) & (lengths <= T)).all()):           # the range is read only to report it
        check(False, "lengths", f"values in [1, {T}]", f"range [{int(lengths.min())}, {int(lengths.max())}]")
    for name, t, shape in (("first", first, (K,)), ("last", last, (K,)), ("trans", trans, (K, K))):
        shapes = (shape, (B, *shape)) if per_sequence else (shape,)
        check(torch.is_tensor(t) and tuple(t.shape) in shapes, name,
              f"a tensor of shape {' or '.join(map(str, shapes))}", getattr(t, "shape", type(t)))
        check(t.device == unary.device, name, f"a tensor on {unary.device} like unary", t.device)
    check(lengths.device == unary.device, "lengths", f"a tensor on {unary.device} like unary", lengths.device)
    if gt is not None:
        check(torch.is_tensor(gt) and gt.shape == (B, T) and gt.dtype == torch.int64, "gt",
              f"an int64 tensor of shape ({B}, {T})", (getattr(gt, "shape", None), getattr(gt, "dtype", None)))
        valid = torch.arange(T, device=gt.device)[None, :] < lengths[:, None]
        check(bool(((gt >= 0) & (gt < K))[valid].all()), "gt", f"labels in [0, {K - 1}] within lengths",
              "a label out of range")
        check(bool((gt[~valid] == -1).all()), "gt", "-1 beyond each sequence's length (padding)", "other values")
