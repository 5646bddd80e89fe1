"""Exact samples y ~ p(y) = exp s(y) / Z of the first-order dependency-tree CRF (the conventions of
:mod:`ssvm_torch.trees`: S (B, N, N) [modifier, head], s(y) = sum_m S[m, y_m]), projective or not, single- or
multi-root, batched over rows and samples on any device.

**Projective trees**: one Eisner inside pass, then each sample's derivation drawn top-down, every chart item on it
choosing its split point with probability inside(left part) inside(right part) / inside(item): compiled on the CPU
(:mod:`ssvm_torch.trees.numba_sampling`), in batched torch operations elsewhere
(:mod:`ssvm_torch.trees.torch_tree_sampling`, no host synchronisation).

**Every tree** (non-projective): the sequential algorithm of Colbourn, Myrvold & Neufeld (1996) as Zmigrod, Vieira &
Cotterell (2021, "Efficient Sampling of Dependency Structures", Alg. 2) write it for dependency trees: the words'
heads are drawn one word at a time from their marginals given the heads already drawn. The marginals come from X =
L^-1 of Koo et al. (2007)'s Laplacian (:mod:`ssvm_torch.trees.information`), whose first row holds the root arcs
for single-root trees, so the root constraint needs no rejection; fixing a word's head keeps one arc of its column
of L, a rank-one change that Sherman-Morrison folds into X: O(n^2) per word, O(n^3) per sample, float64. Each step
checks that the conditional probabilities it draws from form a distribution (they sum to 1 within
:data:`TOLERANCE`, none negative); a sample where they do not (an ill-conditioned Laplacian: scores of a very wide
range) takes its remaining words' conditionals from :func:`ssvm_torch.trees.matrix_tree.marginals` of its
conditioned scores, which balances and checks its factorization.

**Second order** (adjacent siblings, projective): the same top-down reading of the second-order chart, compiled
(:mod:`ssvm_torch.trees.numba_sibling_sampling`) for CPU scores and in torch
(:mod:`ssvm_torch.trees.torch_tree_sampling`) elsewhere.

:func:`sample` and :func:`second_order_samples` refuse rows without any tree of finite score by name
(:func:`ssvm_torch.trees.ops.fail_no_tree`).
"""
from __future__ import annotations

import numpy as np
import torch

from ..devices import from_host, to_host
from . import matrix_tree
from .checks import arc_mask, host_batch, parallel_rows, use_numba
from .draws import CHUNK_ELEMENTS, draw_categorical, in_chunks
from .information import arc_potentials, laplacian
from .numba_colbourn import colbourn_batch, colbourn_batch_parallel
from .numba_sibling_sampling import draws_per_sample as sibling_draws_per_sample, sibling_sample_batch
from .numba_sampling import draws_per_sample, sample_batch, sample_batch_parallel
from .ops import fail_no_tree
from .torch_tree_sampling import projective_samples, second_order_torch_samples

#: the largest |sum of a word's conditional head probabilities - 1| (and negative probability) the
#: Sherman-Morrison path accepts before a sample falls back to the matrix-tree marginals
TOLERANCE = 1e-6


def _conditionals(X, A, m: int, multiroot: bool) -> torch.Tensor:
    """P(h -> m | the heads drawn so far) (R, N) over the heads h (0 the root) from X = L^-1 of the conditioned
    arc potentials A (R, N, N): mu(h -> m) = A(h -> m) D[m', h'], mu(0 -> m) = A(0 -> m) R[m'] (Koo et al. 2007;
    D and R as :func:`ssvm_torch.trees.information.laplacian_hessian_product` reads them, here one row m' = m - 1)."""
    row = X[:, m - 1, :]
    own = row[:, m - 1]
    if multiroot:
        words, root = own[:, None] - row, own
    else:                                           # the first row of L holds the root arcs, not word 1's
        not_first = (torch.arange(row.shape[1], device=X.device) > 0).to(X.dtype)
        words, root = own[:, None] * float(m > 1) - row * not_first, row[:, 0]
    return torch.cat([(A[:, m, 0] * root)[:, None], A[:, m, 1:] * words], 1)


def _laplacian_column(a: torch.Tensor, m: int, multiroot: bool) -> torch.Tensor:
    """Column m' = m - 1 (R, n) of :func:`ssvm_torch.trees.information.laplacian` for the potentials a (R, N) of
    the arcs into word m (a[:, h], h = 0 the root): -a(h -> m) at row h', their sum (the root's too when
    ``multiroot``) on the diagonal, and for single-root trees the root's potential in row 0 (which holds the root
    arcs, not word 1's). Linear in a."""
    col = -a[:, 1:].clone()
    col[:, m - 1] = a[:, 1:].sum(1) + (a[:, 0] if multiroot else 0.0)
    if not multiroot:
        col[:, 0] = a[:, 0]
    return col


def _wide(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(R,) bool: rows whose finite arc scores span matrix_tree.SPAN or more, where potentials exp(S - max)
    underflow to 0 and the trees through them would be lost without a failed check."""
    arc = arc_mask(lengths, S.shape[1]) & torch.isfinite(S)
    hi = torch.where(arc, S, torch.full_like(S, float("-inf"))).amax((1, 2))
    lo = torch.where(arc, S, torch.full_like(S, float("inf"))).amin((1, 2))
    return hi - lo >= matrix_tree.SPAN


def continue_exactly(S: torch.Tensor, lengths: torch.Tensor, heads: torch.Tensor, first: torch.Tensor,
                     multiroot: bool, generator=None) -> torch.Tensor:
    """heads (R, N) with the words first[r]..lengths[r] of every sample r drawn, each from its marginals under the
    scores S (R, N, N) float64 conditioned on the heads before it (the matrix-tree marginals of
    :func:`ssvm_torch.trees.matrix_tree.marginals`, which balance and check their factorization): the fallback of
    the Sherman-Morrison samplers, one call per word over the samples that need it."""
    N = S.shape[1]
    pos = torch.arange(N, device=S.device)
    fixed = (pos[None, :] < first[:, None]) & (heads >= 0)
    cond = torch.where(fixed[:, :, None] & (pos[None, None, :] != heads[:, :, None]), float("-inf"), S)
    for m in range(max(int(first.min()), 1), N):
        idx = ((m >= first) & (m <= lengths)).nonzero()[:, 0]
        if len(idx) == 0:
            continue
        p = matrix_tree.marginals(cond[idx], lengths[idx], multiroot)[0][:, m, :].to(torch.float64)
        h = draw_categorical(torch.log(p.clamp(min=0)), 1, generator)[:, 0]
        heads[idx, m] = h
        cond[idx, m, :] = torch.where(pos[None, :] == h[:, None], cond[idx, m, :], float("-inf"))
    return heads


def nonprojective_samples(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int, generator=None):
    """heads (B, n, N) int64, -1 at the root position and past each row's length: n exact samples of every row's
    CRF over all trees (module docstring: Colbourn's sequential algorithm with Sherman-Morrison updates, a checked
    fallback to the matrix-tree marginals), float64, in torch operations (any device). Rows must have a tree
    (:func:`sample` checks)."""
    B, N, _ = S.shape
    dev = S.device
    heads = torch.full((B * n, N), -1, dtype=torch.int64, device=dev)
    if N == 1:
        return heads.view(B, n, N)
    S = S.detach().to(torch.float64).repeat_interleave(n, 0)
    L = lengths.repeat_interleave(n)
    A, _ = arc_potentials(S, L)
    X, info = torch.linalg.inv_ex(laplacian(A, L, multiroot, True))
    # fail[r]: the first word sample r leaves to the exact fallback (N: none)
    fail = torch.where((info != 0) | _wide(S, L), 1, N)
    X = torch.where((fail == 1)[:, None, None], torch.eye(N - 1, dtype=X.dtype, device=dev), X)
    pos = torch.arange(N, device=dev)
    for m in range(1, N):
        p = _conditionals(X, A, m, multiroot)
        bad = ((p.sum(1) - 1).abs() > TOLERANCE) | (p.amin(1) < -TOLERANCE) | ~torch.isfinite(p).all(1)
        fail = torch.where(bad & (m < fail) & (m <= L), m, fail)
        active = (m < fail) & (m <= L)
        h = draw_categorical(torch.log(torch.where(active[:, None], p, 1.0).clamp(min=0)), 1, generator)[:, 0]
        heads[:, m] = torch.where(active, h, heads[:, m])
        keep = (pos[None, :] == h[:, None]) | ~active[:, None]          # word m keeps the arc from its drawn head
        dropped = torch.where(keep, torch.zeros_like(A[:, m, :]), A[:, m, :])   # the arcs into m given up
        u = _laplacian_column(dropped, m, multiroot).neg_()            # the change of L's column m' = m - 1
        Xu = (X @ u[:, :, None])[:, :, 0]
        denom = 1.0 + Xu[:, m - 1]                                      # det L_new / det L = P(h -> m | drawn)
        ok = denom > TOLERANCE
        fail = torch.where(active & ~ok, m + 1, fail)
        X = X - Xu[:, :, None] * X[:, m - 1, None, :] / torch.where(ok, denom, 1.0)[:, None, None]
    left = fail <= L
    if bool(left.any()):
        idx = left.nonzero()[:, 0]
        heads[idx] = continue_exactly(S[idx], L[idx], heads[idx], fail[idx], multiroot, generator)
    return heads.view(B, n, N)


def compiled_nonprojective_samples(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int,
                                   generator=None) -> torch.Tensor:
    """:func:`nonprojective_samples` by the compiled sampler of :mod:`ssvm_torch.trees.numba_colbourn` (CPU
    scores), its failed samples finished by :func:`continue_exactly`."""
    B, N, _ = S.shape
    U = torch.rand(B, n, N, dtype=torch.float64, generator=generator)
    Sh, Lh = host_batch(S.detach().to(torch.float64), lengths)
    heads, fail = np.empty((B, n, N), dtype=np.int64), np.empty((B, n), dtype=np.int64)
    kernel = colbourn_batch_parallel if parallel_rows(B) else colbourn_batch
    kernel(Sh, Lh, multiroot, matrix_tree.SPAN, TOLERANCE, U.numpy(), heads, fail)
    heads, fail = torch.from_numpy(heads).view(B * n, N), torch.from_numpy(fail).view(B * n)
    L = lengths.repeat_interleave(n)
    left = fail <= L
    if bool(left.any()):
        idx = left.nonzero()[:, 0]
        S64 = S.detach().to(torch.float64)[idx // n]
        heads[idx] = continue_exactly(S64, L[idx], heads[idx], fail[idx], multiroot, generator)
    return heads.view(B, n, N)


def compiled_projective_samples(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int, generator=None):
    """(heads, log Z) as :func:`projective_samples` by the compiled sampler of
    :mod:`ssvm_torch.trees.numba_sampling` (CPU scores), the uniforms drawn from ``generator`` in float64."""
    B, N, _ = S.shape
    U = torch.rand(B, n, draws_per_sample(N), dtype=torch.float64, generator=generator)
    Sh, Lh = host_batch(S.detach(), lengths)
    heads, logz = np.empty((B, n, N), dtype=np.int64), np.empty(B)
    (sample_batch_parallel if parallel_rows(B) else sample_batch)(Sh, Lh, multiroot, U.numpy(), heads, logz)
    return torch.from_numpy(heads), torch.from_numpy(logz)


def torch_samples(draw, n: int, S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """heads (B, n, N): ``draw(k)`` -> (heads (B, k, N), log Z (B,)) of a torch sampler run in chunks of samples
    (:func:`in_chunks`), a row without any tree of finite score (its log Z) refused by name."""
    logz = []

    def chunk(k):
        heads, z = draw(k)
        logz.append(z)
        return heads
    heads = in_chunks(chunk, n, S.shape[0] * S.shape[1] ** 2)
    fail_no_tree(logz[0], lengths, "log Z")
    return heads


def second_order_samples(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int,
                         generator=None, kernels: str = "auto") -> torch.Tensor:
    """heads (B, n, N) int64: n exact samples of every row's second-order (adjacent-sibling) projective CRF, -1 at
    the root position and past each row's length: the compiled sampler of
    :mod:`ssvm_torch.trees.numba_sibling_sampling` for CPU float32 / float64 scores (``kernels`` "auto" or "numba"),
    the torch one of :mod:`ssvm_torch.trees.torch_tree_sampling` elsewhere (CUDA: no host copy), drawn in chunks
    of samples (:func:`in_chunks`). A row without any tree of finite score is refused by name."""
    B, N, _ = S.shape
    if not use_numba(S, kernels):
        return torch_samples(lambda k: second_order_torch_samples(S, SB, lengths, multiroot, k, generator), n, S,
                             lengths)
    U = torch.rand(B, n, sibling_draws_per_sample(N), dtype=torch.float64, device=S.device, generator=generator)
    Sh, Lh = host_batch(S.detach().to(torch.float64), lengths)
    SBh = to_host(SB.detach().to(torch.float64).contiguous())
    heads, logz = np.empty((B, n, N), dtype=np.int64), np.empty(B)
    sibling_sample_batch(Sh, SBh, Lh, multiroot, to_host(U), heads, logz)
    fail_no_tree(torch.from_numpy(logz), lengths.cpu(), "log Z")
    return from_host(heads, S.device)


def refuse_rows_without_trees(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> None:
    """Refuses by name a row without any non-projective tree of finite score. Every arc of a row finite (within
    its words; into the root none), the complete graph has spanning trees (a root arc and every other arc
    finite: single-root trees too), so only the rows with a -inf arc take the matrix-tree log Z."""
    some = (arc_mask(lengths, S.shape[1]) & torch.isneginf(S.detach())).flatten(1).any(1)
    if bool(some.any()):
        rows = some.nonzero()[:, 0]
        logz = torch.zeros(S.shape[0], dtype=torch.float64, device=S.device)
        logz[rows] = matrix_tree.log_partition(S.detach()[rows], lengths[rows], multiroot).to(torch.float64)
        fail_no_tree(logz, lengths, "log Z")


def sample(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool, n: int, generator=None,
           kernels: str = "auto") -> torch.Tensor:
    """heads (B, n, N) int64: n exact samples of every row's tree CRF (projective or every tree), -1 at the root
    position and past each row's length. The compiled samplers for CPU float32 / float64 scores (``kernels``
    "auto" or "numba", :func:`ssvm_torch.trees.checks.use_numba`), the torch ones elsewhere, drawn in chunks of
    samples (:func:`in_chunks`). A row without any tree of finite score is refused by name
    (:func:`ssvm_torch.trees.ops.fail_no_tree`)."""
    B, N, _ = S.shape
    if projective:
        if not use_numba(S, kernels):
            return torch_samples(lambda k: projective_samples(S, lengths, multiroot, k, generator), n, S, lengths)
        heads, logz = compiled_projective_samples(S, lengths, multiroot, n, generator)
        fail_no_tree(logz.to(S.device), lengths, "log Z")
        return heads.to(S.device)
    refuse_rows_without_trees(S, lengths, multiroot)
    if use_numba(S, kernels):
        return compiled_nonprojective_samples(S, lengths, multiroot, n, generator)
    return in_chunks(lambda k: nonprojective_samples(S, lengths, multiroot, k, generator), n, B * N * N)


__all__ = ["CHUNK_ELEMENTS", "TOLERANCE", "compiled_nonprojective_samples", "compiled_projective_samples",
           "continue_exactly", "draw_categorical", "in_chunks", "nonprojective_samples", "projective_samples", "sample",
           "refuse_rows_without_trees", "second_order_samples", "torch_samples"]
