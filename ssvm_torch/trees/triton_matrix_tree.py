"""The direct path of the matrix-tree theorem (:func:`ssvm_torch.trees.matrix_tree._direct`: log Z and the arc
marginals of non-projective trees from the per-word shifted Laplacian) as one Triton kernel for CUDA float32
scores: one program per sentence builds A(h -> m) = exp(S[m, h] - max_h S[m, h]) and the Laplacian L (the
conventions of :mod:`ssvm_torch.trees.matrix_tree`: rows h', columns m', single-root's first row the root
potentials, Koo et al. 2007), inverts it by Gauss-Jordan elimination with partial pivoting on [L | I] held in
registers, and writes log Z = sum log |pivot| + sum of the shifts, the marginals

    multi-root:   mu(h -> m) = A(h -> m) (X[m', m'] - X[m', h']),   mu(0 -> m) = A(0 -> m) X[m', m']
    single-root:  mu(h -> m) = A(h -> m) ([m' != 1] X[m', m'] - [h' != 1] X[m', h']),   mu(0 -> m) = A(0 -> m) X[m', 1]

(X = L^-1), the smallest |pivot|, det L's sign and the largest |sum_h mu(h -> m) - 1| over the words (the check
of :func:`~ssvm_torch.trees.matrix_tree._screen`). The pivots are LU's with partial pivoting (the rows below k
are eliminated as LU does), so the screen's thresholds read them alike.

Why a kernel: the torch path is launch-bound at a training batch's size: on the H200 its time followed its
number of aten calls (~300, torch-struct's ~250) whatever the precision (docs/devices.md, "H200, 2026-12-04");
this is one launch. Sentences of up to :data:`MAX_WORDS` words (a (64, 64) tile per
matrix); longer batches and float64 keep the torch path.
"""
from __future__ import annotations


import torch

from ..chain.triton_viterbi import triton
from ..errors import env_choice

#: the longest sentence (words) the kernel takes: L and X are (BLOCK, BLOCK) register tiles
MAX_WORDS = 64

if triton is not None:                     # without Triton (the package's own dependencies) these names do not exist
    import triton.language as tl

    @triton.jit
    def _row(T, r, k):
        """Row k of the tile T (a vector over its columns)."""
        return tl.sum(tl.where(r[:, None] == k, T, 0.0), axis=0)

    @triton.jit
    def _col(T, c, k):
        """Column k of the tile T (a vector over its rows)."""
        return tl.sum(tl.where(c[None, :] == k, T, 0.0), axis=1)

    @triton.jit
    def _matrix_tree_kernel(S, LEN, LOGZ, M, STATS, N, MULTIROOT: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        n = tl.load(LEN + b).to(tl.int32)
        r = tl.arange(0, BLOCK)
        c = tl.arange(0, BLOCK)
        base = S + b.to(tl.int64) * N * N
        neg_inf = float("-inf")
        pair = (r[:, None] < n) & (c[None, :] < n) & (r[:, None] != c[None, :])
        # [h', m'] = S[m, h] (word heads), and the root scores S[m, 0] by column m'
        ST = tl.load(base + (c[None, :] + 1) * N + (r[:, None] + 1), mask=pair, other=neg_inf)
        SR = tl.load(base + (c + 1) * N, mask=c < n, other=neg_inf)
        shift = tl.maximum(tl.max(ST, axis=0), SR)
        shift = tl.where(shift > neg_inf, shift, 0.0)                      # a column without arcs (padding): 0
        AT = tl.exp(ST - shift[None, :])                                   # A(h -> m) at [h', m'], 0 off the arcs
        R = tl.exp(SR - shift)                                             # A(0 -> m) at m'
        diag = tl.sum(AT, axis=0)
        if MULTIROOT:
            diag += R
        eye = r[:, None] == c[None, :]
        L = tl.where(eye, tl.where(c[None, :] < n, diag[None, :], 1.0), -AT)
        if not MULTIROOT:                                                  # the first row: the root potentials
            first = tl.where(c < n, R, tl.where(c == 0, 1.0, 0.0))
            L = tl.where(r[:, None] == 0, first[None, :], L)
        X = tl.where(eye, 1.0, 0.0)
        logdet = tl.sum(tl.where(c < n, shift, 0.0), axis=0)
        zero = tl.sum(shift * 0.0, axis=0)                                 # loop-carried scalars: float32 tensors
        sign = zero + 1.0
        smallest = zero + float("inf")
        for k in range(0, n):
            col = _col(L, c, k)
            p = tl.argmax(tl.where((r >= k) & (r < n), tl.abs(col), -1.0), axis=0)
            lk, lp, xk, xp = _row(L, r, k), _row(L, r, p), _row(X, r, k), _row(X, r, p)
            L = tl.where(r[:, None] == k, lp[None, :], tl.where(r[:, None] == p, lk[None, :], L))
            X = tl.where(r[:, None] == k, xp[None, :], tl.where(r[:, None] == p, xk[None, :], X))
            piv = tl.sum(tl.where(c == k, lp, 0.0), axis=0)
            sign = tl.where(p != k, -sign, sign)
            sign = tl.where(piv < 0, -sign, sign)
            smallest = tl.minimum(smallest, tl.abs(piv))
            logdet += tl.log(tl.abs(piv))
            col = _col(L, c, k)                                            # column k after the exchange
            nl, nx = lp / piv, xp / piv
            L = tl.where(r[:, None] == k, nl[None, :], L - col[:, None] * nl[None, :])
            X = tl.where(r[:, None] == k, nx[None, :], X - col[:, None] * nx[None, :])
        # the marginals at [m', h'] (X = L^-1 indexed [m', h']), the root's by m'
        W = tl.trans(AT)                                                   # A(h -> m) at [m', h']
        Xd = tl.sum(tl.where(eye, X, 0.0), axis=1)
        if MULTIROOT:                                                      # R: the root potentials, by m'
            MU = W * (Xd[:, None] - X)
            MR = R * Xd
        else:
            MU = W * (tl.where(r[:, None] != 0, Xd[:, None], 0.0) - tl.where(c[None, :] != 0, X, 0.0))
            MR = R * _col(X, c, 0)
        words = r < n
        MU = tl.where(pair, MU, 0.0)
        MR = tl.where(words, MR, 0.0)
        out = M + b.to(tl.int64) * N * N
        tl.store(out + (r[:, None] + 1) * N + (c[None, :] + 1), MU, mask=(r[:, None] < n) & (c[None, :] < n))
        tl.store(out + (r + 1) * N, MR, mask=words)
        err = tl.max(tl.where(words, tl.abs(tl.sum(MU, axis=1) + MR - 1.0), 0.0), axis=0)
        tl.store(LOGZ + b, logdet)
        tl.store(STATS + b * 3, smallest)
        tl.store(STATS + b * 3 + 1, sign)
        tl.store(STATS + b * 3 + 2, err)


def available(S: torch.Tensor) -> bool:
    """True where the kernel serves the direct path: Triton importable, float32 scores on CUDA of at most
    :data:`MAX_WORDS` words, and ``SSVM_CUDA_MATRIX_TREE`` not ``torch`` (which keeps the torch path, for
    comparison)."""
    choice = env_choice("SSVM_CUDA_MATRIX_TREE", ("fused", "torch"), "fused")
    return (triton is not None and choice == "fused" and S.is_cuda and S.dtype == torch.float32
            and S.shape[1] - 1 <= MAX_WORDS)


def direct(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """(log Z (B,), marginals (B, N, N) [m, h], the smallest |pivot| (B,), det sign (B,), the largest error of
    the words' head-marginal sums (B,)) of the float32 scores S (B, N, N) by the kernel (module docstring):
    CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``."""
    B, N, _ = S.shape
    S = S.contiguous()
    block = max(16, triton.next_power_of_2(max(N - 1, 1)))
    logz = torch.empty(B, dtype=S.dtype, device=S.device)
    M = torch.zeros(B, N, N, dtype=S.dtype, device=S.device)
    stats = torch.empty(B, 3, dtype=S.dtype, device=S.device)
    if B:
        _matrix_tree_kernel[(B,)](S, lengths.contiguous(), logz, M, stats, N, MULTIROOT=multiroot, BLOCK=block,
                                  num_warps=4 if block <= 32 else 8)
    return logz, M, stats[:, 0], stats[:, 1], stats[:, 2]
