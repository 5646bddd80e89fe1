"""Compiled block algebra of the dense store (CPU, float64): one block's FW corner terms and moves,
with the corner's features phi(x_i, y) given sparse, as (cols, vals) with distinct cols.

Block i holds w_i (a row of W) and the store keeps g_i = phi(x_i, y_i); a labeling y has the point
w_s(y) = s (g_i - phi(x_i, y)) with s = 1 / (lam n) (Osokin et al. 2016, eq. (2)), so
    w_i - w_s(y) = (w_i - s g_i) + s phi(x_i, y)
is a dense part plus the sparse corner: every kernel is one O(d) pass plus O(nnz), and no d-vector
is allocated per call. ``shadow`` (the loop's weighted average, see stores/base.py) receives
``coef`` times every change of w; pass a length-0 array when there is none.
"""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def corner_terms(Wi, g, cols, vals, w, s):
    """(<w_i - w_s, w>, ||w_i - w_s||^2): the dot and squared norm of the FW step (eq. (6) and the
    line search of Alg. 1)."""
    dot = 0.0
    sq = 0.0
    for k in range(Wi.shape[0]):
        b = Wi[k] - s * g[k]
        dot += b * w[k]
        sq += b * b
    for j in range(cols.shape[0]):
        c = cols[j]
        b = Wi[c] - s * g[c]
        b2 = b + s * vals[j]
        sq += b2 * b2 - b * b
        dot += s * vals[j] * w[c]
    return dot, sq


@nb.njit(cache=True)
def phi_dot(cols, vals, w):
    """<phi(x_i, y), w> of a sparse feature vector."""
    acc = 0.0
    for j in range(cols.shape[0]):
        acc += vals[j] * w[cols[j]]
    return acc


@nb.njit(cache=True)
def fw_move(Wi, g, cols, vals, w, s, gamma, shadow, coef):
    """w_i <- (1 - gamma) w_i + gamma w_s; w (and the shadow) follow by the same change."""
    has_shadow = shadow.shape[0] > 0
    for k in range(Wi.shape[0]):
        new = (1.0 - gamma) * Wi[k] + gamma * s * g[k]
        dw = new - Wi[k]
        w[k] += dw
        if has_shadow:
            shadow[k] += coef * dw
        Wi[k] = new
    for j in range(cols.shape[0]):
        c = cols[j]
        dw = -gamma * s * vals[j]
        Wi[c] += dw
        w[c] += dw
        if has_shadow:
            shadow[c] += coef * dw


@nb.njit(cache=True)
def point_diff(out, Wi, g, s, p_none, cols_p, vals_p, q_none, cols_q, vals_q):
    """out <- w(P) - w(Q) for two points of block i, each a labeling (its sparse phi) or the block's
    current point w_i (``*_none``)."""
    for k in range(Wi.shape[0]):
        a = Wi[k] if p_none else s * g[k]
        b = Wi[k] if q_none else s * g[k]
        out[k] = a - b
    if not p_none:
        for j in range(cols_p.shape[0]):
            out[cols_p[j]] -= s * vals_p[j]
    if not q_none:
        for j in range(cols_q.shape[0]):
            out[cols_q[j]] += s * vals_q[j]


@nb.njit(cache=True)
def add_step(Wi, w, step, gamma, shadow, coef):
    """w_i += gamma step and w += gamma step (a pairwise or away move)."""
    has_shadow = shadow.shape[0] > 0
    for k in range(Wi.shape[0]):
        dw = gamma * step[k]
        Wi[k] += dw
        w[k] += dw
        if has_shadow:
            shadow[k] += coef * dw


@nb.njit(cache=True)
def block_base_dot(Wi, g, w, s):
    """<w_i - s g_i, w>: the part of every corner gap of block i that does not depend on the corner."""
    acc = 0.0
    for k in range(Wi.shape[0]):
        acc += (Wi[k] - s * g[k]) * w[k]
    return acc


@nb.njit(cache=True)
def box_sync(w, idx, v_c, w_c, lower, upper):
    """Box constraints (App. H, stores/box.py): the change a move added to w on the constrained
    coordinates belongs to v; then w = clip(v, lower, upper) there."""
    for k in range(idx.shape[0]):
        j = idx[k]
        v = v_c[k] + w[j] - w_c[k]
        v_c[k] = v
        c = min(max(v, lower[k]), upper[k])
        w_c[k] = c
        w[j] = c


#: the ``shadow`` argument when the store has none
NO_SHADOW = np.empty(0)
