"""Max-sum (Viterbi) decoding of linear chains.

Score of a labeling y of length T:
    s(y) = sum_t U[t, y_t] + first[y_0] + last[y_{T-1}] + sum_{t<T-1} trans[y_{t+1}, y_t]
(``trans`` is indexed [next, previous], the layout of the OCR weight vector, see models/chain.py).

Two implementations of the same recursion:

* :func:`viterbi` -- padded, masked batch of shape (B, T, K); any device: :func:`viterbi_loop` (pure
  torch) or, on CUDA, the fused Triton kernel of :mod:`ssvm_torch.oracles.viterbi_triton`.
* :func:`viterbi_ragged` -- ragged sequences (all positions stacked, ``offsets``), numba-compiled,
  CPU only. It serves the batch-1 BCFW step and full gap passes on CPU, where the per-op overhead
  of a framework call dominates a sequence of a few positions (benchmarks/bench_speed.py compares
  the two at batch size 1).

:func:`decode` is the one call over both: padded input, ``backend`` = ``numba`` (CPU float64),
``torch`` or ``auto`` (numba where it applies). Both optionally add a Hamming loss ``c [k != gt_t]``
to the unaries on the fly (loss-augmented decoding, the max oracle of the SSVM), with ``c`` the loss
of one wrong position of the sequence: 1/T (normalized Hamming, the default) or any per-sequence
``token_loss`` (1 for the plain Hamming count).

Tag constraints (:mod:`ssvm_torch.constraints`) enter every kernel as a penalty array ``pen``
(K+2, K): rows 0..K-1 the additive transition scores [next, prev], row K the first-tag and row K+1
the last-tag scores, each 0 (allowed) or -inf (forbidden); an array with no rows (:data:`NO_PEN`)
means unconstrained. Penalties are read by the max recursion only, never added into the weights.
"""
from __future__ import annotations

import os

import numba as nb
import numpy as np
import torch

from ..devices import KERNELS, from_host, to_host
from ..errors import check
from .viterbi_triton import fused_available, viterbi_fused

NO_PEN = np.zeros((0, 1))          # the unconstrained penalty array of the numba kernels


def penalty_array(start, end, trans) -> np.ndarray:
    """The (K+2, K) ``pen`` array of the numba kernels from additive (start, end, trans[next, prev])."""
    return np.ascontiguousarray(np.concatenate([to_host(trans), to_host(start)[None], to_host(end)[None]]),
                                dtype=np.float64)


CUDA_DECODERS = ("fused", "fused-rows", "loop")


def cuda_decoder() -> str:
    """Which kernel :func:`viterbi` runs on CUDA: ``fused`` (one Triton kernel,
    :mod:`ssvm_torch.oracles.viterbi_triton`, its tile variant; the default where Triton is
    importable), ``fused-rows`` (its rows variant) or ``loop`` (:func:`viterbi_loop`), from the
    environment variable ``SSVM_CUDA_VITERBI``."""
    choice = os.environ.get("SSVM_CUDA_VITERBI", "fused")
    if choice not in CUDA_DECODERS:
        raise ValueError(f"SSVM_CUDA_VITERBI: expected one of {CUDA_DECODERS}, got {choice!r}")
    return choice


def viterbi(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
            trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
            penalty=None):
    """Batched Viterbi on padded input: :func:`viterbi_loop`'s arguments and result. On CUDA with
    shared (not per-sequence) scores it runs the fused Triton kernel unless
    ``SSVM_CUDA_VITERBI=loop`` (benchmarks/bench_gpu.py measures both), or unless the scores must
    carry gradients (an input requires grad): the kernel's scores have no autograd graph, the
    loop's do."""
    choice = cuda_decoder() if unary.is_cuda else "loop"
    differentiable = torch.is_grad_enabled() and any(t.requires_grad for t in (unary, first, last, trans))
    if choice != "loop" and not differentiable and first.dim() == 1 and trans.dim() == 2 and fused_available(unary):
        return viterbi_fused(unary, lengths, first, last, trans, gt=gt, token_loss=token_loss, penalty=penalty,
                             variant="rows" if choice == "fused-rows" else "tile")
    return viterbi_loop(unary, lengths, first, last, trans, gt=gt, token_loss=token_loss, penalty=penalty)


def viterbi_loop(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                 trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
                 penalty=None):
    """Batched Viterbi on padded input, a loop over positions of batched torch ops (any device).

    unary (B, T, K); lengths (B,) with 1 <= lengths <= T; first, last (K,); trans (K, K) [next, prev];
    gt (B, T) ground-truth labels for loss augmentation, or None; token_loss (B,) the loss of one
    wrong position of each sequence (default 1 / length: normalized Hamming).
    Returns (labels (B, T) int64 with -1 at padded positions, scores (B,)) where the score includes
    the loss term when ``gt`` is given. ``penalty``: None or additive (first, last, trans) constraint
    scores (0 / -inf), tensors on unary's device.
    """
    if penalty is not None:
        first, last, trans = first + penalty[0], last + penalty[1], trans + penalty[2]
    B, T, K = unary.shape
    steps = torch.arange(T, device=unary.device)
    valid = steps[None, :] < lengths[:, None]
    if gt is not None:
        c = 1.0 / lengths.to(unary.dtype) if token_loss is None else token_loss.to(unary.dtype)
        inv_len = c[:, None, None]
        unary = unary + inv_len * (1.0 - torch.nn.functional.one_hot(gt.clamp(min=0), K).to(unary.dtype))
    delta = unary[:, 0] + first
    backptr = []
    for t in range(1, T):
        cand = delta[:, None, :] + trans[None]          # (B, next, prev)
        best, arg = cand.max(dim=2)
        backptr.append(arg)
        delta = torch.where(valid[:, t, None], best + unary[:, t], delta)
    final = delta + last
    scores, end = final.max(dim=1)
    labels = torch.full((B, T), -1, dtype=torch.int64, device=unary.device)
    cur = end
    for t in range(T - 1, -1, -1):
        if t < T - 1:
            prev = backptr[t].gather(1, cur[:, None]).squeeze(1)    # backptr[t] maps y_{t+1} -> y_t
            cur = torch.where(t == lengths - 1, end, prev)
        else:
            cur = end
        labels[:, t] = torch.where(valid[:, t], cur, labels[:, t])
    return labels, scores


@nb.njit(cache=True, nogil=True)
def viterbi_segment(U, start, T, first, last, trans, gt, lw, out, delta, newd, bp, pen):
    """Decode one sequence (rows start..start+T of U) into out[start:start+T]; returns its score.

    ``delta``/``newd`` (K,) and ``bp`` (>=T, K) are work buffers. If ``lw`` != 0, the Hamming loss
    lw [k != gt_t] against gt[start:start+T] is added to the unaries (lw = 1/T: normalized).
    ``pen``: the constraint penalties (module docstring) or :data:`NO_PEN`.
    """
    K = trans.shape[0]
    return viterbi_segment_tt(U, start, T, first, last, trans.reshape((1, K, K)), False, gt, lw, out, delta,
                              newd, bp, pen)


@nb.njit(cache=True, nogil=True)
def viterbi_segment_tt(U, start, T, first, last, trans3, per_position, gt, lw, out, delta, newd, bp, pen):
    """:func:`viterbi_segment` with the transition into position t read from ``trans3[t]`` (T, K, K)
    when ``per_position`` (edge-observation features, models/chain_edges.py), else ``trans3[0]``."""
    K = U.shape[1]
    cons = pen.shape[0] > 0
    for k in range(K):
        v = U[start, k] + first[k]
        if cons:
            v += pen[K, k]
        if lw != 0.0 and k != gt[start]:
            v += lw
        delta[k] = v
    for t in range(1, T):
        r = start + t
        trans = trans3[t if per_position else 0]
        for k in range(K):
            best = delta[0] + trans[k, 0]
            if cons:
                best += pen[k, 0]
            arg = 0
            if cons:
                for j in range(1, K):
                    c = delta[j] + trans[k, j] + pen[k, j]
                    if c > best:
                        best = c
                        arg = j
            else:
                for j in range(1, K):
                    c = delta[j] + trans[k, j]
                    if c > best:
                        best = c
                        arg = j
            v = best + U[r, k]
            if lw != 0.0 and k != gt[r]:
                v += lw
            newd[k] = v
            bp[t, k] = arg
        for k in range(K):
            delta[k] = newd[k]
    best = delta[0] + last[0] + (pen[K + 1, 0] if cons else 0.0)
    arg = 0
    for k in range(1, K):
        c = delta[k] + last[k] + (pen[K + 1, k] if cons else 0.0)
        if c > best:
            best = c
            arg = k
    out[start + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = bp[t, arg]
        out[start + t - 1] = arg
    return best


@nb.njit(cache=True, nogil=True)
def viterbi_all(U, offsets, first, last, trans, gt, lw, out, scores, pen):
    """Every sequence; ``lw`` (n,) the loss of one wrong position of each (zeros: plain decoding)."""
    K = U.shape[1]
    n = offsets.shape[0] - 1
    tmax = 1
    for i in range(n):
        tmax = max(tmax, offsets[i + 1] - offsets[i])
    delta = np.empty(K)
    newd = np.empty(K)
    bp = np.empty((tmax, K), dtype=np.int64)
    for i in range(n):
        scores[i] = viterbi_segment(U, offsets[i], offsets[i + 1] - offsets[i], first, last, trans, gt,
                                    lw[i], out, delta, newd, bp, pen)


def viterbi_ragged(unary: np.ndarray, offsets: np.ndarray, first: np.ndarray, last: np.ndarray,
                   trans: np.ndarray, gt: np.ndarray | None = None, token_loss: np.ndarray | None = None,
                   pen: np.ndarray = NO_PEN):
    """Viterbi over ragged sequences on CPU (numpy arrays or CPU tensors viewed as numpy).

    unary (N, K) float64 rows of all sequences; offsets (n+1,) int64; with ``gt`` (N,) loss-augmented,
    ``token_loss`` (n,) the loss of one wrong position (default 1 / length). Returns (labels (N,),
    scores (n,))."""
    U = np.ascontiguousarray(unary, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    out = np.empty(U.shape[0], dtype=np.int64)
    scores = np.empty(offsets.shape[0] - 1)
    if gt is None:
        gt_arr, lw = np.zeros(1, dtype=np.int64), np.zeros(len(scores))
    else:
        gt_arr = np.ascontiguousarray(gt, dtype=np.int64)
        lw = 1.0 / np.diff(offsets) if token_loss is None else np.ascontiguousarray(token_loss, dtype=np.float64)
    viterbi_all(U, offsets, np.ascontiguousarray(first, dtype=np.float64),
                np.ascontiguousarray(last, dtype=np.float64), np.ascontiguousarray(trans, dtype=np.float64),
                gt_arr, lw, out, scores, pen)
    return out, scores


BACKENDS = KERNELS


def decode(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
           trans: torch.Tensor, gt: torch.Tensor | None = None, backend: str = "auto",
           token_loss: torch.Tensor | None = None, penalty=None):
    """Batched Viterbi on padded input with either kernel; the arguments and the result are those
    of :func:`viterbi` (labels (B, T) padded with -1, scores (B,)). ``numba`` runs the ragged
    compiled kernel on the valid rows (CPU float64 only), ``torch`` the padded recursion (any
    device), ``auto`` numba where it applies. ``penalty``: None or additive (first, last,
    trans) constraint scores (0 / -inf) as tensors."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
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
