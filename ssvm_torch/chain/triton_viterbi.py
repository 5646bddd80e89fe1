"""Fused batched Viterbi for CUDA: one Triton kernel decodes a block of sequences end to end.

The padded torch recursion (:func:`ssvm_torch.chain.torch_viterbi.viterbi_loop`) launches a handful of
kernels per position and materializes the (B, K, K) candidate scores of every position in memory;
on a GPU it is bound by launches at small B and by that memory traffic at large B. Here each program
holds ``BLOCK_B`` sequences' max-marginals delta (BLOCK_B, K) in registers, walks the positions with
the same recursion (the convention of :mod:`ssvm_torch.chain`: delta_t[k] = U[t, k] + max_j delta_{t-1}[j]
+ trans[k, j], with the Hamming loss c [k != gt_t] added on the fly), writes only the back-pointers,
then follows them back within the same program. One launch for the whole batch.

:func:`viterbi_fused` takes and returns what :func:`viterbi` does; :func:`fused_available` says
whether it applies (CUDA tensors, Triton importable, K <= :data:`MAX_K`). ``TRITON_INTERPRET=1``
runs the same kernel on CPU tensors (how tests/test_viterbi_triton.py checks it without a GPU).
Ties between equal candidates go to the lowest index, as in the numba kernel.
"""
from __future__ import annotations

import os

import torch

try:                                       # an optional dependency: the CUDA image ships it with torch
    import triton
    import triton.language as tl
except ImportError:                        # pragma: no cover - exercised where Triton is absent
    triton = None

MAX_K = 64          # the tile variant's (BLOCK_B, K, K) candidates live in registers: beyond 64 tags the loop is used


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def fused_available(unary: torch.Tensor) -> bool:
    """True where :func:`viterbi_fused` runs: Triton importable, K <= MAX_K, and CUDA tensors (or
    any tensors under ``TRITON_INTERPRET=1``)."""
    if triton is None or unary.shape[-1] > MAX_K:
        return False
    return unary.is_cuda or _interpreting()


if triton is not None:
    @triton.jit
    def _scores_at(U, GT, c, row, rb, rk, t, T, K, m2, bmask, HAS_GT: tl.constexpr):
        """The (BLOCK_B, BLOCK_K) unary scores of position t, with the Hamming loss c [k != gt_t]."""
        u = tl.load(U + row[:, None] + t * K + rk[None, :], mask=m2, other=0.0)
        if HAS_GT:
            g = tl.load(GT + rb.to(tl.int64) * T + t, mask=bmask, other=-1)
            u += tl.where(rk[None, :] != g[:, None], c[:, None], 0.0)
        return u

    @triton.jit
    def _start(U, LEN, FIRST, GT, C, B, T, K, HAS_GT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        """This program's sequences and tags, their masks and lengths, the loss weights c, the row
        offsets into U and the back-pointers, and delta at position 0 (first + scores)."""
        rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        rk = tl.arange(0, BLOCK_K)
        bmask, kmask = rb < B, rk < K
        m2 = bmask[:, None] & kmask[None, :]
        length = tl.load(LEN + rb, mask=bmask, other=1)
        c = tl.load(C + rb, mask=bmask, other=0.0)
        first = tl.load(FIRST + rk, mask=kmask, other=float("-inf"))
        row = rb.to(tl.int64) * T * K
        u = _scores_at(U, GT, c, row, rb, rk, 0, T, K, m2, bmask, HAS_GT)
        delta = tl.where(kmask[None, :], u + first[None, :], float("-inf"))
        return rb, rk, bmask, kmask, m2, length, c, row, delta

    @triton.jit
    def _advance(delta, best, arg, U, GT, BP, c, row, rb, rk, t, T, K, m2, bmask, kmask, length,
                 HAS_GT: tl.constexpr):
        """delta at position t from the max over the previous tag (``best``, argmax ``arg``), kept as
        it was past each sequence's length; the back-pointers of position t stored."""
        u = _scores_at(U, GT, c, row, rb, rk, t, T, K, m2, bmask, HAS_GT)
        active = (t < length)[:, None] & kmask[None, :]
        tl.store(BP + row[:, None] + t * K + rk[None, :], arg.to(BP.dtype.element_ty), mask=m2)
        return tl.where(active, best + u, delta)

    @triton.jit
    def _finish(delta, LAST, rk, kmask, BP, LABELS, SCORES, row, rb, bmask, length, T, K):
        """The best final tag and score of each sequence, then the walk back along the back-pointers
        (written by other threads of this program: a barrier first); -1 past each length."""
        neg = float("-inf")
        last = tl.load(LAST + rk, mask=kmask, other=neg)
        final = tl.where(kmask[None, :], delta + last[None, :], neg)
        tl.store(SCORES + rb, tl.max(final, axis=1), mask=bmask)
        cur = tl.argmax(final, axis=1).to(tl.int32)
        tl.debug_barrier()
        lab_row = rb.to(tl.int64) * T
        for s in range(0, T):
            t = T - 1 - s
            inside = t < length - 1
            prev = tl.load(BP + row + (t + 1) * K + cur, mask=bmask & inside, other=0).to(tl.int32)
            cur = tl.where(inside, prev, cur)
            lab = tl.where(t < length, cur, -1)
            tl.store(LABELS + lab_row + t, lab.to(tl.int64), mask=bmask)

    @triton.jit
    def _viterbi_kernel(U, LEN, FIRST, LAST, TRANS, GT, C, BP, LABELS, SCORES, B, T, K,
                        HAS_GT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        """The tile variant: the max and argmax over the previous tag of a (BLOCK_B, K, K) register
        tile of candidates delta[prev] + trans[next, prev] (a reduction across threads)."""
        rb, rk, bmask, kmask, m2, length, c, row, delta = _start(U, LEN, FIRST, GT, C, B, T, K, HAS_GT, BLOCK_B,
                                                                 BLOCK_K)
        neg = float("-inf")
        trans = tl.load(TRANS + rk[:, None] * K + rk[None, :], mask=kmask[:, None] & kmask[None, :], other=neg)
        for t in range(1, T):
            cand = delta[:, None, :] + trans[None, :, :]             # (BLOCK_B, next, prev)
            best = tl.max(cand, axis=2)
            arg = tl.argmax(cand, axis=2)
            delta = _advance(delta, best, arg, U, GT, BP, c, row, rb, rk, t, T, K, m2, bmask, kmask, length, HAS_GT)
        _finish(delta, LAST, rk, kmask, BP, LABELS, SCORES, row, rb, bmask, length, T, K)

    @triton.jit
    def _viterbi_rows_kernel(U, LEN, FIRST, LAST, TRANS_T, GT, C, BP, SCRATCH, LABELS, SCORES, B, T, K,
                             HAS_GT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        """The rows variant: the max over the previous tag as a loop inside each thread. A program's
        delta goes through a scratch row per sequence (L1-resident), and every thread keeps the
        running max and argmax of its own (sequence, tag) pairs: no cross-thread reduction and no
        (BLOCK_B, K, K) tile."""
        rb, rk, bmask, kmask, m2, length, c, row, delta = _start(U, LEN, FIRST, GT, C, B, T, K, HAS_GT, BLOCK_B,
                                                                 BLOCK_K)
        neg = float("-inf")
        srow = rb.to(tl.int64) * BLOCK_K
        for t in range(1, T):
            tl.store(SCRATCH + srow[:, None] + rk[None, :], delta, mask=bmask[:, None])
            tl.debug_barrier()                   # the row is read by the threads of other tags
            best = tl.full((BLOCK_B, BLOCK_K), neg, delta.dtype)
            arg = tl.zeros((BLOCK_B, BLOCK_K), tl.int32)
            for j in range(0, K):
                dj = tl.load(SCRATCH + srow + j, mask=bmask, other=neg)
                tj = tl.load(TRANS_T + j * K + rk, mask=kmask, other=neg)      # trans[next, j]
                cand = dj[:, None] + tj[None, :]
                better = cand > best                                            # ties keep the lowest j
                best = tl.where(better, cand, best)
                arg = tl.where(better, j, arg)
            tl.debug_barrier()                   # all reads done before the next position's store
            delta = _advance(delta, best, arg, U, GT, BP, c, row, rb, rk, t, T, K, m2, bmask, kmask, length, HAS_GT)
        _finish(delta, LAST, rk, kmask, BP, LABELS, SCORES, row, rb, bmask, length, T, K)


VARIANTS = ("tile", "rows")


def viterbi_fused(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                  trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
                  penalty=None, variant: str = "tile"):
    """:func:`ssvm_torch.chain.padded.viterbi` as one Triton kernel (same arguments, same result:
    labels (B, T) int64 padded with -1, scores (B,) including the loss term when ``gt`` is given).
    ``variant``: ``tile`` (the max over the previous tag as a (BLOCK_B, K, K) register tile) or
    ``rows`` (a loop over the previous tag inside each thread)."""
    if triton is None:
        raise RuntimeError("viterbi_fused: Triton is not installed")
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    if penalty is not None:
        first, last, trans = first + penalty[0], last + penalty[1], trans + penalty[2]
    B, T, K = unary.shape
    dtype, dev = unary.dtype, unary.device
    unary = unary.contiguous()
    first, last, trans = (x.to(dtype).contiguous() for x in (first, last, trans))
    lengths32 = lengths.to(torch.int32).contiguous()
    bp = torch.empty((B, T, K), dtype=torch.int8 if K <= 127 else torch.int16, device=dev)
    labels = torch.empty((B, T), dtype=torch.int64, device=dev)
    scores = torch.empty((B,), dtype=dtype, device=dev)
    if gt is not None:
        c = (1.0 / lengths.to(dtype) if token_loss is None else token_loss.to(dtype)).contiguous()
        gt_arg = gt.to(torch.int32).contiguous()
    else:
        c = torch.zeros((B,), dtype=dtype, device=dev)           # read, never used (HAS_GT is False)
        gt_arg = lengths32
    block_k = max(2, triton.next_power_of_2(K))
    if variant == "tile":
        block_b = max(1, min(64, 8192 // (block_k * block_k)))
        grid = (triton.cdiv(B, block_b),)
        _viterbi_kernel[grid](unary, lengths32, first, last, trans, gt_arg, c, bp, labels, scores, B, T, K,
                              HAS_GT=gt is not None, BLOCK_B=block_b, BLOCK_K=block_k,
                              num_warps=4 if block_k <= 32 else 8)
        return labels, scores
    block_b = max(1, min(64, 2048 // block_k))
    grid = (triton.cdiv(B, block_b),)
    scratch = torch.empty((grid[0] * block_b, block_k), dtype=dtype, device=dev)
    _viterbi_rows_kernel[grid](unary, lengths32, first, last, trans.T.contiguous(), gt_arg, c, bp, scratch, labels,
                               scores, B, T, K, HAS_GT=gt is not None, BLOCK_B=block_b, BLOCK_K=block_k,
                               num_warps=4)
    return labels, scores
