"""Compiled maximum spanning arborescence (non-projective first-order decoding, McDonald et al. 2005):
Chu-Liu-Edmonds (Chu & Liu 1965, Edmonds 1967) with the single-root constraint handled exactly in one run.

Convention of :mod:`ssvm_torch.trees`: ``S[m, h]`` scores word m taking head h, position 0 is the root.

**Single root without one rerun per root.** Every arborescence gives the root at least one child. Weigh
each arc by the pair (p, s) with p = -1 for a root arc and 0 otherwise, s its score, and compare pairs
lexicographically: the best arborescence then has the fewest root children (exactly one) and, among
those, the highest score; when even it has two root children, no single-root tree exists (-inf). This is
the limit M -> inf of subtracting M from every root arc (Gabow & Tarjan 1984's reduction; Zmigrod, Vieira
& Cotterell 2020 discuss it), done in integer arithmetic on p so that no finite M costs precision.
Chu-Liu-Edmonds only adds, subtracts and compares arc weights, so it runs unchanged on the pairs;
multi-root trees take p = 0 everywhere.

**The contraction.** Each node takes its best incoming arc; a cycle C among those is contracted into one
node c (reusing the id of one member) whose incoming arc from u weighs max_{v in C} w(u -> v) -
w(best(v) -> v) and whose outgoing arc to u weighs max_{v in C} w(v -> u); every matrix entry remembers
the original arc it stands for, and each contraction records its cycle (members, their cycle arcs and
which member holds each original node). When no cycle is left, the chosen arcs are expanded in reverse
order of the contractions: the member of C that holds the head-taking end of c's chosen arc takes it,
the others keep their cycle arcs. O(n^2) per contraction, O(n^3) in the worst case.

Ties go to the lowest head index where the best incoming arc is picked. -inf scores are absent arcs.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched

ABSENT = -(1 << 40)          # p of an absent arc: below every real p (a tree has at most n root arcs)
NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def _better(p1, s1, p2, s2):
    return p1 > p2 or (p1 == p2 and s1 > s2)


@nb.njit(cache=True, nogil=True)
def _best_in(v, N, alive, P, W):
    """The best incoming neighbour of node v among the alive nodes (-1: none)."""
    bu, bp, bs = -1, ABSENT, NEG_INF
    for u in range(N):
        if u != v and alive[u] and P[v, u] > ABSENT and _better(P[v, u], W[v, u], bp, bs):
            bu, bp, bs = u, P[v, u], W[v, u]
    return bu


@nb.njit(cache=True, nogil=True)
def mst_best(S, n, multiroot, heads):
    """The best arborescence (non-projective tree) of one sentence: heads[m] for m = 1..n (heads[0] = -1)
    and its score; -inf (heads undefined) when no tree exists (module docstring)."""
    heads[0] = -1
    if n == 0:
        return 0.0
    N = n + 1
    W = np.empty((N, N))
    P = np.empty((N, N), dtype=np.int64)
    OM = np.empty((N, N), dtype=np.int64)       # the original (modifier, head) of entry [v, u]
    OH = np.empty((N, N), dtype=np.int64)
    for v in range(N):
        for u in range(N):
            s = S[v, u]
            if v == 0 or u == v or not s > NEG_INF:     # the root takes no head; NaN counts as absent
                W[v, u] = NEG_INF
                P[v, u] = ABSENT
            else:
                W[v, u] = s
                P[v, u] = -1 if (u == 0 and not multiroot) else 0
            OM[v, u] = v
            OH[v, u] = u
    alive = np.ones(N, dtype=np.bool_)
    best = np.full(N, -1, dtype=np.int64)
    for v in range(1, N):
        best[v] = _best_in(v, N, alive, P, W)
        if best[v] < 0:
            return NEG_INF
    comp = np.arange(N)                          # the current node holding each original node
    # contraction records (at most n - 1 contractions, each a cycle of >= 2 current nodes)
    rec_c = np.empty(N, dtype=np.int64)
    rec_ptr = np.zeros(N + 1, dtype=np.int64)
    rec_members = np.empty(2 * N, dtype=np.int64)
    rec_em = np.empty(2 * N, dtype=np.int64)
    rec_eh = np.empty(2 * N, dtype=np.int64)
    rec_owner = np.empty((N, N), dtype=np.int64)
    in_cycle = np.zeros(N, dtype=np.bool_)
    color = np.zeros(N, dtype=np.int64)
    new_w_in = np.empty(N)
    new_p_in = np.empty(N, dtype=np.int64)
    new_om_in = np.empty(N, dtype=np.int64)
    new_oh_in = np.empty(N, dtype=np.int64)
    new_w_out = np.empty(N)
    new_p_out = np.empty(N, dtype=np.int64)
    new_om_out = np.empty(N, dtype=np.int64)
    new_oh_out = np.empty(N, dtype=np.int64)
    n_rec = 0
    while True:
        # a cycle among the best incoming arcs of the alive nodes
        for v in range(N):
            color[v] = 0
        found = -1
        for s0 in range(1, N):
            if not alive[s0] or color[s0] != 0:
                continue
            v = s0
            while v != 0 and color[v] == 0:
                color[v] = s0 + 1
                v = best[v]
            if v != 0 and color[v] == s0 + 1:
                found = v
                break
        if found < 0:
            break
        # the cycle's members and their cycle arcs (original arcs)
        base = rec_ptr[n_rec]
        size = 0
        v = found
        while True:
            rec_members[base + size] = v
            rec_em[base + size] = OM[v, best[v]]
            rec_eh[base + size] = OH[v, best[v]]
            in_cycle[v] = True
            size += 1
            v = best[v]
            if v == found:
                break
        rec_ptr[n_rec + 1] = base + size
        c = found
        rec_c[n_rec] = c
        for o in range(N):
            rec_owner[n_rec, o] = comp[o] if in_cycle[comp[o]] else -1
        # arcs into and out of the contracted node
        for u in range(N):
            new_p_in[u] = ABSENT
            new_w_in[u] = NEG_INF
            new_p_out[u] = ABSENT
            new_w_out[u] = NEG_INF
            if not alive[u] or in_cycle[u]:
                continue
            for t in range(size):
                m = rec_members[base + t]
                if P[m, u] > ABSENT:                     # u -> m, reweighed by m's cycle arc
                    bm = best[m]
                    p = P[m, u] - P[m, bm]
                    s = W[m, u] - W[m, bm]
                    if _better(p, s, new_p_in[u], new_w_in[u]):
                        new_p_in[u], new_w_in[u], new_om_in[u], new_oh_in[u] = p, s, OM[m, u], OH[m, u]
                if u != 0 and P[u, m] > ABSENT:          # m -> u
                    if _better(P[u, m], W[u, m], new_p_out[u], new_w_out[u]):
                        new_p_out[u], new_w_out[u], new_om_out[u], new_oh_out[u] = P[u, m], W[u, m], OM[u, m], OH[u, m]
        for t in range(size):
            m = rec_members[base + t]
            if m != c:
                alive[m] = False
        for u in range(N):
            if not alive[u] or in_cycle[u]:
                continue
            P[c, u], W[c, u], OM[c, u], OH[c, u] = new_p_in[u], new_w_in[u], new_om_in[u], new_oh_in[u]
            P[u, c], W[u, c], OM[u, c], OH[u, c] = new_p_out[u], new_w_out[u], new_om_out[u], new_oh_out[u]
        P[c, c] = ABSENT
        W[c, c] = NEG_INF
        for o in range(N):
            if in_cycle[comp[o]]:
                comp[o] = c
        for u in range(1, N):
            if alive[u] and not in_cycle[u] and in_cycle[best[u]]:
                best[u] = c                              # the same weight: max over the members
        for t in range(size):
            in_cycle[rec_members[base + t]] = False
        best[c] = _best_in(c, N, alive, P, W)
        if best[c] < 0:
            return NEG_INF
        n_rec += 1
    # expansion: every current node's chosen incoming arc, as an original arc
    in_m = np.full(N, -1, dtype=np.int64)
    in_h = np.full(N, -1, dtype=np.int64)
    for v in range(1, N):
        if alive[v]:
            in_m[v] = OM[v, best[v]]
            in_h[v] = OH[v, best[v]]
    for r in range(n_rec - 1, -1, -1):
        c = rec_c[r]
        mstar, hstar = in_m[c], in_h[c]
        v0 = rec_owner[r, mstar]
        for t in range(rec_ptr[r], rec_ptr[r + 1]):
            v = rec_members[t]
            if v == v0:
                in_m[v], in_h[v] = mstar, hstar
            else:
                in_m[v], in_h[v] = rec_em[t], rec_eh[t]
    score = 0.0
    root_children = 0
    for m in range(1, N):
        heads[m] = in_h[m]
        score += S[m, in_h[m]]
        root_children += in_h[m] == 0
    if root_children > 1 and not multiroot:      # the fewest root children any arborescence has: no single-root tree
        return NEG_INF
    return score


@nb.njit(cache=True, nogil=True)
def mst_batch(S, lengths, multiroot, heads, scores):
    """:func:`mst_best` of every sentence of a padded batch S (B, N, N): heads (B, N) (-1 at 0 and beyond
    the length), scores (B,)."""
    for b in range(S.shape[0]):
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = mst_best(S[b], lengths[b], multiroot, heads[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def mst_batch_parallel(S, lengths, multiroot, heads, scores):
    """:func:`mst_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        for m in range(heads.shape[1]):
            heads[b, m] = -1
        scores[b] = mst_best(S[b], lengths[b], multiroot, heads[b])
