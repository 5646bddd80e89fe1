"""Compiled exact samples of the TreeCRF over binary trees on the CPU: CKY's log-space inside chart once per
sentence (:func:`ssvm_torch.spans.numba_cky.inside_log`), then each sample's tree read top-down with a stack, every
span (i, j) of it choosing its split k with probability inside(i, k) inside(k, j) / sum over the splits
(:func:`ssvm_torch.trees.numba_sampling.pick_log`): O(n^3) per sentence, O(n^2) per sample, against the torch
path's O(n^3) per sample (:func:`ssvm_torch.spans.torch_cky.sample_trees`). The uniforms come from the caller
(torch's generator), n - 1 per sample (one per split).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..trees.numba_sampling import pick_log
from .numba_cky import NEG_INF, inside_log


@nb.njit(cache=True, nogil=True)
def sample_sentence(S, n, U, charts):
    """Fills charts (k, >= n+1, >= n+1) (uint8, zero-filled by the caller) with k exact samples of one sentence's
    TreeCRF of span scores S from the uniforms U (k, >= n); returns log Z (0 for n = 0; -inf, and nothing drawn,
    without a tree)."""
    if n == 0:
        return 0.0
    I = np.empty((n + 1, n))
    logz = inside_log(S, n, I)
    if logz == NEG_INF:
        return logz
    vals = np.empty(n + 1)
    stack = np.empty((2 * n + 2, 2), dtype=np.int64)
    for s in range(U.shape[0]):
        stack[0, 0], stack[0, 1] = 0, n
        top, d = 1, 0
        while top > 0:
            top -= 1
            i, j = stack[top, 0], stack[top, 1]
            charts[s, i, j] = 1
            w = j - i
            if w == 1:
                continue
            for u in range(1, w):
                vals[u] = I[u, i] + I[w - u, i + u]
            u = pick_log(vals, 1, w, U[s, d])
            d += 1
            stack[top, 0], stack[top, 1] = i, i + u
            stack[top + 1, 0], stack[top + 1, 1] = i + u, j
            top += 2
    return logz


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def sample_batch(S, lengths, U, charts, logz):
    """:func:`sample_sentence` of every row of a padded batch: S (B, N+1, N+1), U (B, k, >= N), charts (B, k, N+1,
    N+1) uint8 zero-filled, logz (B,); spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        logz[b] = sample_sentence(S[b], lengths[b], U[b], charts[b])
