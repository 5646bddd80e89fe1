"""Compiled kernels of the second-order dependency-tree store (:mod:`ssvm_torch.stores.sibling_tree`), CPU float64.

A block's dual point is a sparse vector over its sentence's parts, sorted by part key: the arc h -> m is key m N1 +
h and the sibling part (h, s, m) is N1^2 + (m N1 + h) N1 + s, N1 = n + 1 (a tree's parts, its n arcs then its
sibling parts, come out sorted); with the design's ``first_child`` a head's nearest dependent m on each side has the
part (h, h, m) (:mod:`ssvm_torch.data.sibling_keys`), keyed like a sibling part with s = h. ``ades`` = (offsets,
arc_off, ptr, ids, tptr, tids), the arc design of :class:`~ssvm_torch.data.trees.DependencyData`; ``sdes`` the
sibling design's host tuple (:meth:`~ssvm_torch.data.sibling_features.SiblingDesign.host`). Images of a difference
of points go through the first-order store's hash table of touched features
(:func:`ssvm_torch.oracles.tree_kernels.nb_image`'s)."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..data.sibling_keys import adjacent_siblings, block_scores, has_first_child, sibling_part_ids
from ..devices import launched
from ..oracles.tree_kernels import _insert, arc_index
from ..trees.numba_sibling_best import sibling_best

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True)
def tree_parts(heads, n, first_child, out):
    """The sorted part keys of the tree heads[1..n] (heads[0] = -1) into out (at most 2 n); returns how many."""
    N1 = n + 1
    sib = np.empty(N1, dtype=np.int64)
    adjacent_siblings(heads, n, sib)
    k = 0
    for m in range(1, n + 1):
        out[k] = m * N1 + heads[m]
        k += 1
    for m in range(1, n + 1):
        if sib[m] > 0 or first_child:
            out[k] = N1 * N1 + (m * N1 + heads[m]) * N1 + (sib[m] if sib[m] > 0 else heads[m])
            k += 1
    return k


@nb.njit(cache=True, nogil=True)
def parts_dot(keys, vals, lo, cnt, N1, S, SB):
    """sum_j vals[j] (the score of part keys[j]) over keys[lo:lo + cnt] (vals None-like: pass ones)."""
    total = 0.0
    A = N1 * N1
    for j in range(lo, lo + cnt):
        k = keys[j]
        if k < A:
            total += vals[j] * S[k // N1, k % N1]
        else:
            r = k - A
            mh = r // N1
            total += vals[j] * SB[mh // N1, mh % N1, r % N1]
    return total


@nb.njit(cache=True, nogil=True)
def merge(ak, av, alo, na, bk, bv, blo, nb_, beta, ok, ov):
    """out = a + beta b over sorted sparse vectors (entries that come out exactly 0 dropped); returns the count."""
    i, j, k = alo, blo, 0
    ae, be = alo + na, blo + nb_
    while i < ae or j < be:
        if j >= be or (i < ae and ak[i] < bk[j]):
            key, v = ak[i], av[i]
            i += 1
        elif i >= ae or bk[j] < ak[i]:
            key, v = bk[j], beta * bv[j]
            j += 1
        else:
            key, v = ak[i], av[i] + beta * bv[j]
            i += 1
            j += 1
        if v != 0.0:
            ok[k] = key
            ov[k] = v
            k += 1
    return k


@nb.njit(cache=True, nogil=True)
def block_corner(i, ades, sdes, w, gold, lgold, cost, multiroot, gold_ok, S, SB, heads, parts):
    """Loss-augmented second-order decoding of block i at w (S, SB hold its plain scores afterwards; heads[0..n]
    the tree, its parts in parts[:k]): (k, <S(y*), theta>, wrong observed heads, <G_i, theta>). A gold tree
    outside the projective space is the corner when the decoder's best falls below it (models/dependency.py)."""
    offsets = ades[0]
    start = offsets[i]
    n = offsets[i + 1] - start
    N1 = n + 1
    block_scores(i, ades, sdes, w, S, SB)
    Saug = S[:N1, :N1].copy()
    if cost != 0.0:
        for m in range(1, N1):
            g = lgold[start + m - 1]
            if g >= 0:
                for h in range(N1):
                    if h != m and h != g:
                        Saug[m, h] += cost
    sibling_best(Saug, SB, n, multiroot, heads, has_first_child(sdes))
    gh = np.empty(N1, dtype=np.int64)
    gh[0] = -1
    gh[1:] = gold[start:start + n]
    ones = np.ones(2 * N1)
    gk = np.empty(2 * N1, dtype=np.int64)
    kg = tree_parts(gh, n, has_first_child(sdes), gk)
    gold_score = parts_dot(gk, ones, 0, kg, N1, S, SB)
    k = tree_parts(heads, n, has_first_child(sdes), parts)
    score = parts_dot(parts, ones, 0, k, N1, S, SB)
    wrong = 0
    for m in range(1, N1):
        g = lgold[start + m - 1]
        if g >= 0 and heads[m] != g:
            wrong += 1
    if not gold_ok[i] and score + cost * wrong < gold_score:
        heads[:N1] = gh
        parts[:kg] = gk[:kg]
        return kg, gold_score, 0, gold_score
    return k, score, wrong, gold_score


@nb.njit(cache=True, nogil=True)
def parts_image(i, keys, vals, lo, cnt, coef, ades, sdes, hkeys, hvals, used, nu):
    """v += coef sum_j vals[j] g_j over the parts keys[lo:lo + cnt] of block i (g_j a part's binary features: an
    arc's own and its head token's, a sibling part's items) into the hash table; returns the new nu."""
    offsets, arc_off, ptr, ids, tptr, tids = ades
    codes, parts, part_ptr, mult, has_head, skeys, key_ptr, table, table_ptr, offset, first_child = sdes
    start = offsets[i]
    n = offsets[i + 1] - start
    N1 = n + 1
    A = N1 * N1
    base, t0 = arc_off[i], start + i
    mask = hkeys.shape[0] - 1
    buf = np.empty(part_ptr.shape[0], dtype=np.int64)
    for j in range(lo, lo + cnt):
        c = coef * vals[j]
        key = keys[j]
        if key < A:
            m, h = key // N1, key % N1
            a = base + arc_index(m, h, n)
            for q in range(ptr[a], ptr[a + 1]):
                nu = _insert(ids[q], c, hkeys, hvals, used, nu, mask)
            for q in range(tptr[t0 + h], tptr[t0 + h + 1]):
                nu = _insert(tids[q], c, hkeys, hvals, used, nu, mask)
        else:
            r = key - A
            mh = r // N1
            f = sibling_part_ids(codes, parts, part_ptr, mult, skeys, key_ptr, table, table_ptr, offset, start,
                                 mh % N1, r % N1, mh // N1, buf)
            for q in range(f):
                nu = _insert(buf[q], c, hkeys, hvals, used, nu, mask)
    return nu


@nb.njit(cache=True, nogil=True)
def parts_features_bound(i, keys, lo, cnt, ades, T):
    """An upper bound on the features the parts keys[lo:lo + cnt] of block i touch (the hash table's size)."""
    offsets, arc_off, ptr, ids, tptr, tids = ades
    start = offsets[i]
    n = offsets[i + 1] - start
    N1 = n + 1
    total = 0
    for j in range(lo, lo + cnt):
        key = keys[j]
        if key < N1 * N1:
            m, h = key // N1, key % N1
            a = arc_off[i] + arc_index(m, h, n)
            total += ptr[a + 1] - ptr[a] + tptr[start + i + h + 1] - tptr[start + i + h]
        else:
            total += T
    return total


@nb.njit(cache=True, nogil=True)
def _gap_block(i, ades, sdes, w, gold, lgold, costs, multiroot, gold_ok, pstart, pcount, pkeys, pvals, S, SB, heads,
               parts, labels, aug, gold_scores, m_theta, wrong):
    offsets = ades[0]
    start = offsets[i]
    n = offsets[i + 1] - start
    k, score, wr, gs = block_corner(i, ades, sdes, w, gold, lgold, costs[i], multiroot, gold_ok, S, SB, heads, parts)
    labels[start:start + n] = heads[1:n + 1]
    aug[i] = score + costs[i] * wr
    gold_scores[i] = gs
    m_theta[i] = parts_dot(pkeys, pvals, pstart[i], pcount[i], n + 1, S, SB)
    wrong[i] = wr


@nb.njit(cache=True, nogil=True)
def nb_sib_gap_pass(ades, sdes, w, gold, lgold, costs, multiroot, gold_ok, pstart, pcount, pkeys, pvals, Nmax, labels,
                    aug, gold_scores, m_theta, wrong):
    """Every block's loss-augmented tree (labels, flat (W,)) and the terms of its gap: aug = <S(y*), theta> +
    c_i wrong, <G_i, theta>, <M_i, theta>."""
    S, SB = np.empty((Nmax, Nmax)), np.empty((Nmax, Nmax, Nmax))
    heads, parts = np.empty(Nmax, dtype=np.int64), np.empty(2 * Nmax, dtype=np.int64)
    for i in range(ades[0].shape[0] - 1):
        _gap_block(i, ades, sdes, w, gold, lgold, costs, multiroot, gold_ok, pstart, pcount, pkeys, pvals, S, SB,
                   heads, parts, labels, aug, gold_scores, m_theta, wrong)


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_sib_gap_pass_parallel(ades, sdes, w, gold, lgold, costs, multiroot, gold_ok, pstart, pcount, pkeys, pvals,
                             Nmax, chunks, labels, aug, gold_scores, m_theta, wrong):
    """:func:`nb_sib_gap_pass` over numba's threads: ``chunks`` interleaved shares of the blocks (i = c, c +
    chunks, ...), each with its own scratch (the blocks write disjoint outputs)."""
    n = ades[0].shape[0] - 1
    for c in nb.prange(chunks):
        S, SB = np.empty((Nmax, Nmax)), np.empty((Nmax, Nmax, Nmax))
        heads, parts = np.empty(Nmax, dtype=np.int64), np.empty(2 * Nmax, dtype=np.int64)
        for i in range(c, n, chunks):
            _gap_block(i, ades, sdes, w, gold, lgold, costs, multiroot, gold_ok, pstart, pcount, pkeys, pvals, S,
                       SB, heads, parts, labels, aug, gold_scores, m_theta, wrong)


@nb.njit(cache=True, nogil=True)
def nb_dense_image(i, keys, vals, lo, cnt, coef, ades, sdes, out):
    """out += coef sum_j vals[j] g_j (:func:`parts_image` into a dense vector: whole passes)."""
    offsets, arc_off, ptr, ids, tptr, tids = ades
    codes, parts, part_ptr, mult, has_head, skeys, key_ptr, table, table_ptr, offset, first_child = sdes
    start = offsets[i]
    n = offsets[i + 1] - start
    N1 = n + 1
    buf = np.empty(part_ptr.shape[0], dtype=np.int64)
    for j in range(lo, lo + cnt):
        c = coef * vals[j]
        key = keys[j]
        if key < N1 * N1:
            m, h = key // N1, key % N1
            a = arc_off[i] + arc_index(m, h, n)
            for q in range(ptr[a], ptr[a + 1]):
                out[ids[q]] += c
            for q in range(tptr[start + i + h], tptr[start + i + h + 1]):
                out[tids[q]] += c
        else:
            r = key - N1 * N1
            mh = r // N1
            f = sibling_part_ids(codes, parts, part_ptr, mult, skeys, key_ptr, table, table_ptr, offset, start,
                                 mh % N1, r % N1, mh // N1, buf)
            for q in range(f):
                out[buf[q]] += c


@nb.njit(cache=True, nogil=True)
def nb_labels_image(ades, sdes, gold, labels, use_labels, pstart, pcount, pkeys, pvals, coef, out):
    """out += coef sum_i (G_i - X_i) g over every block, X_i the parts of labels' tree (use_labels) or the
    block's point M_i: w of a set of corners (batch FW) or of the store's points (recompute)."""
    offsets = ades[0]
    Nmax = 1
    for i in range(offsets.shape[0] - 1):
        Nmax = max(Nmax, offsets[i + 1] - offsets[i] + 1)
    hd = np.empty(Nmax, dtype=np.int64)
    pk = np.empty(2 * Nmax, dtype=np.int64)
    ones = np.ones(2 * Nmax)
    for i in range(offsets.shape[0] - 1):
        start = offsets[i]
        n = offsets[i + 1] - start
        hd[0] = -1
        hd[1:n + 1] = gold[start:start + n]
        k = tree_parts(hd, n, has_first_child(sdes), pk)
        nb_dense_image(i, pk, ones, 0, k, coef, ades, sdes, out)
        if use_labels:
            hd[1:n + 1] = labels[start:start + n]
            k = tree_parts(hd, n, has_first_child(sdes), pk)
            nb_dense_image(i, pk, ones, 0, k, -coef, ades, sdes, out)
        else:
            nb_dense_image(i, pkeys, pvals, pstart[i], pcount[i], -coef, ades, sdes, out)
