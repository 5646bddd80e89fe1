"""CKY for binary constituency trees in torch, batched over rows and vectorized over a width's spans: the
path of every device (CUDA, or tracing) and the reference of the compiled kernels
(:mod:`~ssvm_torch.spans.numba_cky`, whose docstring states the recursion).

Two charts hold the inside values: ``L[b, i, w]`` = the span (i, i + w) (by start) and ``R[b, j, N - w]`` = the
span (j - w, j) (by end, widths reversed), so that for the spans of one width w the left children (i, i + u)
and the right children (i + u, i + w), u = 1..w-1, are two plain slices ``L[:, :n, 1:w]`` and
``R[:, w:, N-w+1:N]`` lined up by u: one add and one reduction per width (the layout of SuPar's and
torch-struct's CKY, by slicing instead of strided views). log Z and the best score are differentiable; the
gradient of log Z is the span marginals, that of the best score (max picks one split) the best tree's spans.

-inf scores (spans that may not be taken) enter as :data:`NEG`, so that no -inf - -inf makes a NaN in the
backward pass; a row whose best tree scores below ``NEG / 2`` has no tree of finite score.
"""
from __future__ import annotations

import torch

#: the stand-in for -inf in the charts (finite: its gradient is 0, never NaN)
NEG = -1e30


def _masked(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """S with -inf as NEG and the spans past each row's length at 0 (they are never read for the root, and
    a finite value keeps the padded charts' arithmetic free of inf - inf)."""
    M = S.shape[1]
    pos = torch.arange(M, device=S.device)
    inside = pos[None, None, :] <= lengths[:, None, None]
    return torch.where(inside, S.clamp(min=NEG), S.new_zeros(()))


def inside(S: torch.Tensor, lengths: torch.Tensor, semiring: str) -> torch.Tensor:
    """The root value I[0, n_b] of every row (B,) of span scores S (B, N+1, N+1): log Z for ``semiring="log"``,
    the best tree's score for ``"max"``; 0 for an empty row. Differentiable in S."""
    B, M, _ = S.shape
    N = M - 1
    if N == 0:
        return S.new_zeros(B)
    S = _masked(S, lengths)
    L = S.new_full((B, M, M), NEG)
    R = S.new_full((B, M, M), NEG)
    first = S.diagonal(1, 1, 2)                                   # (B, N): the one-word spans
    L[:, :N, 1] = first
    R[:, 1:, N - 1] = first
    for w in range(2, N + 1):
        n = M - w
        pairs = L[:, :n, 1:w] + R[:, w:, N - w + 1:N]            # (B, n, w - 1) over the splits u
        best = pairs.logsumexp(-1) if semiring == "log" else pairs.max(-1).values
        value = best + S.diagonal(w, 1, 2)
        L[:, :n, w] = value
        R[:, w:, N - w] = value
    root = L[torch.arange(B, device=S.device), 0, lengths]
    return torch.where(lengths > 0, root, root.new_zeros(()))


def log_partition(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z (B,) of every row; differentiable (the gradient is the span marginals)."""
    return inside(S, lengths, "log")


def best_tree(S: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(charts (B, N+1, N+1) bool, scores (B,)): the best tree of every row, read off the gradient of the
    max-plus root value (one split per span). No gradient."""
    with torch.enable_grad():
        leaf = S.detach().clone().requires_grad_(True)
        score = inside(leaf, lengths, "max")
        (grad,) = torch.autograd.grad(score.sum(), leaf)
    return grad > 0.5, score.detach()
