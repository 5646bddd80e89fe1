"""Generalized distance transforms (Felzenszwalb & Huttenlocher 2005) for max-sum messages with
concave quadratic pairwise scores, and batched max-sum on trees of parts (pictorial structures).

1-D transform, for rows f (R, P) and q, p in {0..P-1}:
    D(p) = max_q  f(q) + a (q - t_p) - c (q - t_p)^2,   t_p = p + shift,   c >= 0,
computed in O(P) per row as the upper envelope of the parabolas h_q(t) = f(q) + a q - a t - c (q - t)^2
(FH 2005, Alg. 1 with max instead of min; the shift allows real-valued rest offsets). Two kernels,
one recursion: a numba loop per row (CPU, float64: the latency-bound batch-1 BCFW step) and a torch
version vectorized over rows (any device): its outer loop runs over the P parabolas, the pops of the
envelope stack are masked tensor ops. c = 0 (the box constraint's boundary) is the linear case,
D(p) = max_q (f(q) + a q) - a t_p. For short rows (P <= BRUTE_MAX_P, e.g. the 32-cell pose grid) the
numba kernel evaluates every candidate instead, branch-free and vectorized across rows: O(P^2) per
row but ~2x faster there than the envelope, whose stack pops are data-dependent branches. All are
tested against the O(P^2) definition.

A 2-D message with a separable score  a_x dx - c_x dx^2 + a_y dy - c_y dy^2  is two 1-D transforms
(columns, then rows): O(HW) per message instead of O((HW)^2).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch

from ..devices import from_host, to_host

from ..errors import check


#: up to this many positions per row the compiled transform takes every candidate (O(P^2) per row,
#: vectorized across rows) instead of the lower envelope (O(P)): on 32 x 32 pose grids the envelope's
#: data-dependent branches cost more than the extra arithmetic (benchmarks/bench_dense.py, docs/results.md)
BRUTE_MAX_P = 40


@nb.njit(cache=True, fastmath={"nnan", "ninf", "nsz"})
def _nb_dt1d_all(f, a, c, shift, out, arg):
    """The transform by its definition, D(p) = max_q f(q) + a (q - t_p) - c (q - t_p)^2 over every q, the
    lowest q on ties; the inner loop runs across rows (contiguous in a q-major copy) without branches."""
    R, P = f.shape
    ft = np.empty((P, R))
    best = np.empty(R)
    bq = np.empty(R, np.int64)
    for r in range(R):
        for q in range(P):
            ft[q, r] = f[r, q]
    for p in range(P):
        t = p + shift
        for r in range(R):
            best[r] = -np.inf
            bq[r] = 0
        for q in range(P):
            d = q - t
            k = a * d - c * d * d
            for r in range(R):
                val = ft[q, r] + k
                gt = val > best[r]
                bq[r] = q if gt else bq[r]
                best[r] = val if gt else best[r]
        for r in range(R):
            out[r, p] = best[r]
            arg[r, p] = bq[r]


@nb.njit(cache=True)
def _nb_dt1d(f, a, c, shift, out, arg):
    R, P = f.shape
    if c > 0.0 and P <= BRUTE_MAX_P:
        _nb_dt1d_all(f, a, c, shift, out, arg)
        return
    v = np.empty(P, np.int64)
    z = np.empty(P + 1)
    h = np.empty(P)
    for r in range(R):
        if c <= 0.0:
            best, bq = -np.inf, 0
            for q in range(P):
                g = f[r, q] + a * q
                if g > best:
                    best, bq = g, q
            for p in range(P):
                out[r, p] = best - a * (p + shift)
                arg[r, p] = bq
            continue
        for q in range(P):
            h[q] = f[r, q] + a * q - c * q * q
        k = 0
        v[0] = 0
        z[0] = -np.inf
        z[1] = np.inf
        for q in range(1, P):
            s = (h[v[k]] - h[q]) / (2.0 * c * (q - v[k]))
            while s <= z[k]:
                k -= 1
                s = (h[v[k]] - h[q]) / (2.0 * c * (q - v[k]))
            k += 1
            v[k] = q
            z[k] = s
            z[k + 1] = np.inf
        k = 0
        for p in range(P):
            t = p + shift
            while z[k + 1] < t:
                k += 1
            q = v[k]
            out[r, p] = f[r, q] + a * (q - t) - c * (q - t) * (q - t)
            arg[r, p] = q


def torch_dt1d(f: torch.Tensor, a: float, c: float, shift: float):
    R, P = f.shape
    pos = torch.arange(P, device=f.device, dtype=f.dtype)
    t = pos + shift
    if c <= 0.0:
        best, bq = (f + a * pos).max(1)
        return best[:, None] - a * t[None, :], bq[:, None].expand(R, P).contiguous()
    h = f + a * pos - c * pos * pos
    rows = torch.arange(R, device=f.device)
    v = torch.zeros(R, P, dtype=torch.int64, device=f.device)
    z = torch.full((R, P + 1), float("inf"), dtype=f.dtype, device=f.device)
    z[:, 0] = float("-inf")
    k = torch.zeros(R, dtype=torch.int64, device=f.device)
    for q in range(1, P):
        while True:
            vk = v[rows, k]
            s = (h[rows, vk] - h[:, q]) / (2.0 * c * (q - vk).to(f.dtype))
            pop = s <= z[rows, k]
            if not bool(pop.any()):
                break
            k = k - pop.long()
        k = k + 1
        v[rows, k] = q
        z[rows, k] = s
    # entries past a row's last boundary are stale (popped): +inf keeps every row sorted
    z = torch.where(torch.arange(P + 1, device=f.device)[None, :] > k[:, None], float("inf"), z)
    j = torch.searchsorted(z, t.expand(R, P).contiguous(), right=True) - 1
    q = v.gather(1, j)
    d = q.to(f.dtype) - t
    return f.gather(1, q) + a * d - c * d * d, q


def dt1d(f: torch.Tensor, a: float, c: float, shift: float = 0.0):
    """(D, argmax) of the 1-D transform above for every row of ``f`` (R, P); c >= 0."""
    check(f.dim() == 2, "f", "a (rows, P) tensor", tuple(f.shape))
    check(c >= 0.0, "c", "a number >= 0 (a concave quadratic score)", c)
    check(bool(torch.isfinite(f).all()), "f", "finite values", "NaN or inf")
    if f.device.type == "cpu" and f.dtype == torch.float64:
        out, arg = np.empty(tuple(f.shape)), np.empty(tuple(f.shape), dtype=np.int64)
        _nb_dt1d(np.ascontiguousarray(to_host(f)), float(a), float(c), float(shift), out, arg)
        return from_host(out, f.device), from_host(arg, f.device)
    return torch_dt1d(f, float(a), float(c), float(shift))


def dt1d_brute(f: torch.Tensor, a: float, c: float, shift: float = 0.0):
    """The O(P^2) definition of :func:`dt1d` (reference for tests)."""
    P = f.shape[1]
    pos = torch.arange(P, device=f.device, dtype=f.dtype)
    d = pos[None, :] - (pos[:, None] + shift)                 # (p, q): q - t_p
    scores = f[:, None, :] + a * d - c * d * d                  # (R, p, q)
    return scores.max(2)


def dt2d(b: torch.Tensor, w: tuple, shift: tuple, scale: float, dt=dt1d):
    """Message m(p) = max_q b(q) + w1 dx - w2 dx^2 + w3 dy - w4 dy^2 with dx = (q_col - p_col -
    shift_x) / scale, dy = (q_row - p_row - shift_y) / scale, for b (B, H, W); w2, w4 >= 0.
    Returns m (B, H, W) and the argmax q as (row (B, H, W), col (B, H, W))."""
    B, H, W = b.shape
    w1, w2, w3, w4 = (float(x) for x in w)
    # columns: T[b, qr, pc] = max_qc b[b, qr, qc] + ...
    T, arg_c = dt(b.reshape(B * H, W), w1 / scale, w2 / scale ** 2, float(shift[0]))
    T, arg_c = T.reshape(B, H, W), arg_c.reshape(B, H, W)
    # rows: m[b, pr, pc] = max_qr T[b, qr, pc] + ...
    Tt = T.transpose(1, 2).reshape(B * W, H)
    m, arg_r = dt(Tt, w3 / scale, w4 / scale ** 2, float(shift[1]))
    m = m.reshape(B, W, H).transpose(1, 2)
    arg_r = arg_r.reshape(B, W, H).transpose(1, 2)                       # (B, pr, pc) -> qr
    col = arg_c.gather(1, arg_r)                                          # arg_c[b, qr, pc]
    return m.contiguous(), arg_r.contiguous(), col.contiguous()


def tree_max_sum(unary: torch.Tensor, parents, w_pair: torch.Tensor, rest: torch.Tensor, scale: float, dt=dt1d):
    """Max-sum on a tree of parts with quadratic deformation scores, batched over examples.

    unary (B, J, H, W): per-part location scores (already loss-augmented if wanted); parents: list of
    J ints, parents[0] = -1 (root), parents[j] < j; w_pair (J, 4): (w1, w2, w3, w4) of the edge
    (j, parents[j]) (row 0 unused), w2, w4 >= 0; rest (J, 2): (shift_x, shift_y) rest offsets of
    child minus parent in grid cells. Returns (locations (B, J, 2) as (row, col), best score (B,)).
    """
    B, J, H, W = unary.shape
    check(len(parents) == J and parents[0] == -1 and all(0 <= parents[j] < j for j in range(1, J)),
          "parents", "parents[0] = -1 and 0 <= parents[j] < j (topological order)", list(parents))
    belief = [unary[:, j].clone() for j in range(J)]
    args = [None] * J
    for j in range(J - 1, 0, -1):             # leaves first: children have larger indices
        m, ar, ac = dt2d(belief[j], w_pair[j], (rest[j, 0], rest[j, 1]), scale, dt)
        belief[parents[j]] += m
        args[j] = (ar, ac)
    root = belief[0].reshape(B, H * W)
    best, flat = root.max(1)
    loc = torch.empty(B, J, 2, dtype=torch.int64, device=unary.device)
    loc[:, 0, 0], loc[:, 0, 1] = flat // W, flat % W
    rows = torch.arange(B, device=unary.device)
    for j in range(1, J):
        pr, pc = loc[:, parents[j], 0], loc[:, parents[j], 1]
        loc[:, j, 0] = args[j][0][rows, pr, pc]
        loc[:, j, 1] = args[j][1][rows, pr, pc]
    return loc, best


def tree_split(parents) -> tuple[np.ndarray, np.ndarray]:
    """The parts below the root in two groups of whole root subtrees (greedy, largest first), each in
    descending index order (children before parents): (groups, starts) for
    :func:`_nb_tree_max_sum_one`, whose two threads pass the messages of one group each."""
    J = len(parents)
    subtrees: dict = {}
    for j in range(1, J):
        top = j
        while parents[top] != 0:
            top = parents[top]
        subtrees.setdefault(top, []).append(j)
    halves: list = [[], []]
    for root_child in sorted(subtrees, key=lambda c: (-len(subtrees[c]), c)):
        halves[0 if len(halves[0]) <= len(halves[1]) else 1].extend(subtrees[root_child])
    groups = np.array(sorted(halves[0], reverse=True) + sorted(halves[1], reverse=True), dtype=np.int64)
    return groups, np.array([0, len(halves[0]), J - 1], dtype=np.int64)


def tree_workspace(J: int, H: int, W: int) -> tuple:
    """The scratch arrays of :func:`_nb_tree_max_sum_one`, allocated once per store (a fresh ~300 kB per
    call would cost page faults): backtracking tables, root messages, one set of transform buffers
    per thread."""
    return (np.empty((J, H, W), np.int64), np.empty((J, H, W), np.int64), np.empty((J, H, W)),
            np.empty((2, H, W)), np.empty((2, H, W), np.int64), np.empty((2, W, H)), np.empty((2, W, H)),
            np.empty((2, W, H), np.int64))


@nb.njit(parallel=True, cache=True)
def _nb_tree_max_sum_one(belief, parents, w_pair, rest, scale, groups, starts, loc,
                         arg_r, col, msg, T, arg_c, Tt, mt, art):
    """:func:`tree_max_sum` of one example in one compiled call (the batch-1 block step): ``belief``
    (J, H, W) holds the unaries and is overwritten by the beliefs; ``loc`` (J, 2) receives the argmax
    cells; ``groups``/``starts`` from :func:`tree_split`, the rest is :func:`tree_workspace`. The two
    halves of the root's subtrees run on two threads; messages into the root are added afterwards in
    the order of the batched version (children in descending index), so every addition, tie and
    result is the same as :func:`tree_max_sum`'s."""
    J, H, W = belief.shape
    s2 = scale ** 2
    for g in nb.prange(2):
        for gi in range(starts[g], starts[g + 1]):
            j = groups[gi]
            _nb_dt1d(belief[j], w_pair[j, 0] / scale, w_pair[j, 1] / s2, rest[j, 0], T[g], arg_c[g])
            for r in range(H):
                for c in range(W):
                    Tt[g, c, r] = T[g, r, c]
            _nb_dt1d(Tt[g], w_pair[j, 2] / scale, w_pair[j, 3] / s2, rest[j, 1], mt[g], art[g])
            p = parents[j]
            for r in range(H):
                for c in range(W):
                    qr = art[g, c, r]
                    arg_r[j, r, c] = qr
                    col[j, r, c] = arg_c[g, qr, c]
                    if p == 0:
                        msg[j, r, c] = mt[g, c, r]
                    else:
                        belief[p, r, c] += mt[g, c, r]
    for j in range(J - 1, 0, -1):
        if parents[j] == 0:
            for r in range(H):
                for c in range(W):
                    belief[0, r, c] += msg[j, r, c]
    best = -np.inf
    flat = 0
    for r in range(H):
        for c in range(W):
            if belief[0, r, c] > best:
                best = belief[0, r, c]
                flat = r * W + c
    loc[0, 0] = flat // W
    loc[0, 1] = flat % W
    for j in range(1, J):
        pr, pc = loc[parents[j], 0], loc[parents[j], 1]
        loc[j, 0] = arg_r[j, pr, pc]
        loc[j, 1] = col[j, pr, pc]
    return best
