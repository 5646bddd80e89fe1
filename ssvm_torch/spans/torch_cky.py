"""CKY for binary constituency trees in torch, batched over rows and vectorized over a width's spans: the
path of every device (CUDA, or tracing) and the reference of the compiled kernels
(:mod:`~ssvm_torch.spans.numba_cky`, whose docstring states the recursion).

Two charts hold the inside values: ``L[b, i, w]`` = the span (i, i + w) (by start) and ``R[b, j, N - w]`` = the
span (j - w, j) (by end, widths reversed), so that for the spans of one width w the left children (i, i + u)
and the right children (i + u, i + w), u = 1..w-1, are two plain slices ``L[:, :n, 1:w]`` and
``R[:, w:, N-w+1:N]`` lined up by u: one add and one reduction per width (the layout of SuPar's and
torch-struct's CKY, by slicing instead of strided views).

Neither direction builds an autograd graph. log Z is a :class:`torch.autograd.Function` whose backward is the
top-down pass of the compiled kernels on the same slices: from the root, each width's spans hand their mass to
their splits in proportion to the splits' share of the span's inside sum (a softmax over u), so the gradient,
the span marginals, costs one pass of the forward's size over two (B, N+1, N+1) buffers (where autograd through
the recursion kept every width's charts). The best tree keeps the best split of every span and reads the tree
top-down the same way, from the root's spans to their children, as scatters into one table.

-inf scores (spans that may not be taken) enter as :data:`NEG`, so that no -inf - -inf makes a NaN; a row whose
best tree scores below ``NEG / 2`` has no tree of finite score.
"""
from __future__ import annotations

import torch

from ..trees.draws import draw_categorical

#: the stand-in for -inf in the charts (finite: its gradient is 0, never NaN)
NEG = -1e30


def _masked(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """S with -inf as NEG and the spans past each row's length at 0 (they are never read for the root, and
    a finite value keeps the padded charts' arithmetic free of inf - inf). Differentiable."""
    M = S.shape[1]
    pos = torch.arange(M, device=S.device)
    inside = pos[None, None, :] <= lengths[:, None, None]
    return torch.where(inside, S.clamp(min=NEG), S.new_zeros(()))


def _charts(S: torch.Tensor, semiring: str):
    """(L, R, splits): the filled inside charts of masked scores S (B, M, M) in the log or max semiring, and for
    "max" the best split u of every span of width w >= 2 (a list by width of (B, M - w) int64)."""
    B, M, _ = S.shape
    N = M - 1
    L = S.new_full((B, M, M), NEG)
    R = S.new_full((B, M, M), NEG)
    first = S.diagonal(1, 1, 2)                                   # (B, N): the one-word spans
    L[:, :N, 1] = first
    R[:, 1:, N - 1] = first
    splits = [None, None]
    for w in range(2, N + 1):
        n = M - w
        pairs = L[:, :n, 1:w] + R[:, w:, N - w + 1:N]            # (B, n, w - 1) over the splits u
        if semiring == "log":
            best = pairs.logsumexp(-1)
        else:
            best, arg = pairs.max(-1)
            splits.append(arg + 1)
        value = best + S.diagonal(w, 1, 2)
        L[:, :n, w] = value
        R[:, w:, N - w] = value
    return L, R, splits


def _by_span(table: torch.Tensor) -> torch.Tensor:
    """A (B, M, M) table by [start, width] as the (B, M, M) chart by [start, end] (zero where end <= start)."""
    M = table.shape[1]
    pos = torch.arange(M, device=table.device)
    width = pos[None, :] - pos[:, None]                           # [i, j] -> j - i
    out = table.gather(2, width.clamp(min=0)[None].expand_as(table))
    return torch.where((width > 0)[None], out, out.new_zeros(()))


def _roots(table: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(table.shape[0], device=table.device)
    return table[rows, 0, lengths]


class _LogPartition(torch.autograd.Function):
    """log Z of masked scores; the backward is the top-down marginal pass (module docstring)."""

    @staticmethod
    def forward(ctx, S, lengths):
        with torch.no_grad():
            L, R, _ = _charts(S, "log")
        ctx.save_for_backward(L, R, lengths)
        root = _roots(L, lengths)
        return torch.where(lengths > 0, root, root.new_zeros(()))

    @staticmethod
    def backward(ctx, grad):
        L, R, lengths = ctx.saved_tensors
        B, M, _ = L.shape
        N = M - 1
        mu_left = L.new_zeros(B, M, M)               # mass reaching (i, i + w) as a left child (and the roots)
        mu_right = L.new_zeros(B, M, M)              # as a right child, by end: [i + w, N - w]
        rows = torch.arange(B, device=L.device)
        mu_left[rows, 0, lengths] = torch.where(lengths > 0, grad, grad.new_zeros(()))
        mu = L.new_zeros(B, M, M)                    # the marginals by [start, width]
        for w in range(N, 0, -1):
            n = M - w
            here = mu_left[:, :n, w] + mu_right[:, w:, N - w]
            mu[:, :n, w] = here
            if w == 1:
                break
            p = here[..., None] * torch.softmax(L[:, :n, 1:w] + R[:, w:, N - w + 1:N], -1)
            mu_left[:, :n, 1:w] += p
            mu_right[:, w:, N - w + 1:N] += p
        return _by_span(mu), None


def log_partition(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z (B,) of every row of span scores S (B, N+1, N+1), 0 for an empty row; differentiable (the gradient
    is the span marginals, by :class:`_LogPartition`'s top-down backward)."""
    if S.shape[1] == 1:
        return S.new_zeros(S.shape[0])
    return _LogPartition.apply(_masked(S, lengths), lengths)


def log_partition_autograd(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z (B,) by the log-semiring inside pass differentiated by plain autograd (twice differentiable, unlike
    :func:`log_partition`'s top-down backward): the path of the span trees' Hessian-vector products off the CPU."""
    if S.shape[1] == 1:
        return S.new_zeros(S.shape[0])
    L, _, _ = _charts(_masked(S, lengths), "log")
    return torch.where(lengths > 0, _roots(L, lengths), S.new_zeros(()))


def best_tree(S: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(charts (B, N+1, N+1) bool, scores (B,)): the best tree of every row (ties to the smallest split), read
    top-down from the best splits. No gradient."""
    B, M, _ = S.shape
    N = M - 1
    if N == 0:
        return torch.zeros(B, 1, 1, dtype=torch.bool, device=S.device), S.new_zeros(B)
    with torch.no_grad():
        L, _, splits = _charts(_masked(S.detach(), lengths), "max")
        keep = L.new_zeros(B, M * M)                 # [start, width] flattened: 1 on the tree's spans
        rows = torch.arange(B, device=S.device)
        keep[rows, lengths] = (lengths > 0).to(keep.dtype)        # the roots (0, n_b): index 0 * M + n_b
        start = torch.arange(M, device=S.device)
        for w in range(N, 1, -1):
            n = M - w
            on = keep[:, start[:n] * M + w]                       # (B, n): the spans (i, i + w) of the tree
            u = splits[w]
            keep.scatter_add_(1, start[:n] * M + u, on)           # left children (i, i + u)
            keep.scatter_add_(1, (start[:n] + u) * M + (w - u), on)   # right children (i + u, i + w)
        charts = _by_span(keep.view(B, M, M)) > 0.5
        root = _roots(L, lengths)
    return charts, torch.where(lengths > 0, root, root.new_zeros(()))


def sample_trees(S: torch.Tensor, lengths: torch.Tensor, n: int, generator=None):
    """(charts (B, n, N+1, N+1) bool, log Z (B,) float64): n exact samples of every row's TreeCRF over binary trees
    of unlabeled span scores S (B, N+1, N+1), and its log Z. The inside chart in the log semiring (float64), then
    every sample's tree drawn top-down width by width as :func:`best_tree` reads the best one, each span of a
    sample choosing its split u with probability inside(i, i+u) inside(i+u, j) / sum over the splits, by the
    inverse CDF on float64 uniforms from ``generator`` (:func:`ssvm_torch.trees.sampling.draw_categorical`;
    forward filtering, backward sampling over CKY). Empty charts
    for empty rows; a row whose log Z is below NEG / 2 has no tree (the callers refuse it). No gradient."""
    B, M, _ = S.shape
    N = M - 1
    dev = S.device
    if N == 0:
        return torch.zeros(B, n, 1, 1, dtype=torch.bool, device=dev), torch.zeros(B, dtype=torch.float64, device=dev)
    with torch.no_grad():
        L, R, _ = _charts(_masked(S.detach().to(torch.float64), lengths), "log")
        Rn = B * n
        keep = torch.zeros(Rn, M * M, dtype=torch.float64, device=dev)        # [start, width], 1 on the spans drawn
        rows = torch.arange(Rn, device=dev)
        Ln = lengths.repeat_interleave(n)
        keep[rows, Ln] = (Ln > 0).to(keep.dtype)                               # the roots (0, n_b)
        start = torch.arange(M, device=dev)
        for w in range(N, 1, -1):
            m = M - w
            u = draw_categorical(L[:, :m, 1:w] + R[:, w:, N - w + 1:N], n, generator).reshape(Rn, m) + 1
            on = keep[:, start[:m] * M + w]                                    # (Rn, m): the spans (i, i + w) drawn
            keep.scatter_add_(1, start[:m] * M + u, on)                        # left children (i, i + u)
            keep.scatter_add_(1, (start[:m] + u) * M + (w - u), on)            # right children (i + u, i + w)
        charts = _by_span(keep.view(Rn, M, M)) > 0.5
        root = _roots(L, lengths)
    return charts.view(B, n, M, M), torch.where(lengths > 0, root, root.new_zeros(()))
