"""The compiled half of the sibling featurization (:mod:`ssvm_torch.data.sibling_features`): the adjacent siblings
of a tree, every item's mixed-radix key for a sibling part (h, s, m), the dictionary lookup (a dense table or a
hash), the scores of every sibling part of a sentence and the feature ids of one part; a sentence's arc and
sibling scores together (:func:`block_scores`) and the best second-order tree of every sentence of a split
(:func:`nb_sib_decode_all`: the model's CPU decode). ``design`` is
:meth:`SiblingDesign.host`'s tuple (codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr,
offset, first_child); parts are rows (item, kind, column) with kind 0 head, 1 sibling, 2 modifier, 3 dir, 4 sdist.
With ``first_child``, the dependent m nearest its head h on its side has the part (h, h, m) (McDonald & Pereira
2006's s(h, -, m)): its sibling columns read the code BOS, its sdist the side and distance of h and m."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched
from ..oracles.tree_kernels import nb_theta
from ..trees.numba_sibling_best import sibling_best
from .arc_keys import BOS, ROOT, _att

NEG_INF = -np.inf


@nb.njit(cache=True, nogil=True, inline="always")
def has_first_child(sdes):
    """The ``first_child`` flag of a design's host tuple (:meth:`SiblingDesign.host`'s last entry)."""
    return sdes[10]


@nb.njit(cache=True, nogil=True)
def adjacent_siblings(heads, n, sib):
    """sib[m] = the adjacent sibling of word m in the tree heads[1..n] (0: m is its head's nearest dependent on
    its side; :mod:`ssvm_torch.trees.sibling`'s convention), for any tree (projective or not)."""
    last = np.zeros(n + 1, dtype=np.int64)
    for m in range(1, n + 1):                    # right dependents, left to right: the previous one is the sibling
        h = heads[m]
        sib[m] = 0
        if h < m:
            sib[m] = last[h]
            last[h] = m
    last[:] = 0
    for m in range(n, 0, -1):                    # left dependents, right to left
        h = heads[m]
        if h > m:
            sib[m] = last[h]
            last[h] = m
    sib[0] = 0


@nb.njit(cache=True, nogil=True)
def _value(codes, start, h, s, m, kind, col):
    if kind == 3:
        return 0 if h < m else 1
    if kind == 4:
        return _att(s, m)
    if kind == 1 and s == h:                    # a first-child part: no sibling
        return BOS
    pos = h if kind == 0 else (s if kind == 1 else m)
    if pos == 0:
        return ROOT
    return codes[start + pos - 1, col]


@nb.njit(cache=True, nogil=True)
def item_key(codes, start, h, s, m, parts, p0, p1, mult):
    key = 0
    for q in range(p0, p1):
        key += _value(codes, start, h, s, m, parts[q, 1], parts[q, 2]) * mult[q]
    return key


@nb.njit(cache=True, nogil=True, inline="always")
def _slot(key, shift):
    """Fibonacci hashing: the top bits of key x 2^64 / phi (the key's high digits reach them too)."""
    return np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


@nb.njit(cache=True, nogil=True)
def item_entry(t, key, keys, key_ptr, table, table_ptr):
    """The dictionary entry of an item's key (an index into ``keys``), or -1: the item's lookup segment of
    ``table`` opens with (mode, shift); mode 0 a dense table over the key space, mode 1 an open-addressing
    hash of 2^(64 - shift) (key, entry) slots (key -1: empty)."""
    base = table_ptr[t]
    if table[base] == 0:
        return table[base + 2 + key]
    shift = table[base + 1]
    mask = (1 << (64 - shift)) - 1
    j = _slot(key, shift)
    while True:
        k = table[base + 2 + 2 * j]
        if k == key:
            return table[base + 3 + 2 * j]
        if k == -1:
            return -1
        j = (j + 1) & mask


@nb.njit(cache=True, nogil=True)
def build_hash(item_keys, first, bits, out):
    """The hash segment (mode 1) of an item's sorted dictionary keys (entries first, first + 1, ...) into out
    (2 + 2^(bits + 1) int64: a table at most half full)."""
    out[0], out[1] = 1, 64 - bits
    out[2:] = -1
    mask = (1 << bits) - 1
    for r in range(item_keys.shape[0]):
        j = _slot(item_keys[r], 64 - bits)
        while out[2 + 2 * j] != -1:
            j = (j + 1) & mask
        out[2 + 2 * j] = item_keys[r]
        out[3 + 2 * j] = first + r


@nb.njit(cache=True, nogil=True)
def gold_sibling_keys(codes, offsets, heads, parts, part_ptr, mult, first_child):
    """(item, key) of every feature of every gold sibling part (and first-child part): the dictionary's raw
    material."""
    T = part_ptr.shape[0] - 1
    W = heads.shape[0]
    items = np.empty(W * T, dtype=np.int64)
    keys = np.empty(W * T, dtype=np.int64)
    k = 0
    for i in range(offsets.shape[0] - 1):
        start, n = offsets[i], offsets[i + 1] - offsets[i]
        hd = np.empty(n + 1, dtype=np.int64)
        hd[0] = -1
        hd[1:] = heads[start:start + n]
        sib = np.empty(n + 1, dtype=np.int64)
        adjacent_siblings(hd, n, sib)
        for m in range(1, n + 1):
            s = sib[m] if sib[m] > 0 else hd[m]
            if sib[m] == 0 and not first_child:
                continue
            for t in range(T):
                items[k] = t
                keys[k] = item_key(codes, start, hd[m], s, m, parts, part_ptr[t], part_ptr[t + 1], mult)
                k += 1
    return items[:k], keys[:k]


@nb.njit(cache=True, nogil=True)
def _contributions(codes, parts, part_ptr, mult, start, n):
    """Each item's key as a sum of terms: C[t, role, pos] the key's share from position pos in the role (0 head,
    1 sibling, 2 modifier; pos 0 the root), and the multipliers of its dir / sdist parts (0: none)."""
    T = part_ptr.shape[0] - 1
    C = np.zeros((T, 3, n + 1), dtype=np.int64)
    dir_mult = np.zeros(T, dtype=np.int64)
    sdist_mult = np.zeros(T, dtype=np.int64)
    for t in range(T):
        for q in range(part_ptr[t], part_ptr[t + 1]):
            kind, col, mu = parts[q, 1], parts[q, 2], mult[q]
            if kind == 3:
                dir_mult[t] = mu
            elif kind == 4:
                sdist_mult[t] = mu
            else:
                C[t, kind, 0] += ROOT * mu
                for pos in range(1, n + 1):
                    C[t, kind, pos] += codes[start + pos - 1, col] * mu
    return C, dir_mult, sdist_mult


@nb.njit(cache=True, nogil=True)
def fill_sibling_scores(codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr, offset, first_child,
                        start, n, w, SB):
    """SB[m, h, s] = <w, f(h, s, m)> for every sibling part of the sentence of n words starting at ``start``
    (s strictly between h and m) and, with ``first_child``, for every first-child part (s = h); other entries
    untouched: the decoders never read them. The items without a
    head part are summed once per (s, m) pair (module docstring of sibling_features.py); an item's key is a sum
    of per-position terms (:func:`_contributions`), so the inner loop over s adds three integers per item."""
    T = part_ptr.shape[0] - 1
    C, dir_mult, sdist_mult = _contributions(codes, parts, part_ptr, mult, start, n)
    pair = np.zeros((n + 1, n + 1))
    for s in range(1, n + 1):
        for m in range(1, n + 1):
            if s == m:
                continue
            side = 0 if s < m else 1                 # s lies between h and m: h is on s's side of m
            att = _att(s, m)
            v = 0.0
            for t in range(T):
                if has_head[t]:
                    continue
                key = C[t, 1, s] + C[t, 2, m] + side * dir_mult[t] + att * sdist_mult[t]
                e = item_entry(t, key, keys, key_ptr, table, table_ptr)
                if e >= 0:
                    v += w[offset + e]
            pair[s, m] = v
    triples = 0
    for m in range(1, n + 1):                       # the items without a head, once per (s, m)
        for h in range(n + 1):
            if h != m:
                lo, hi = (h, m) if h < m else (m, h)
                for s in range(lo + 1, hi):
                    SB[m, h, s] = pair[s, m]
                triples += max(hi - lo - 1, 0)
    for t in range(T):
        if has_head[t]:
            _add_head_item(t, C, dir_mult, sdist_mult, keys, key_ptr, table, table_ptr, offset, n, w, triples, SB)
    if first_child:
        _add_first_child(C, dir_mult, sdist_mult, has_head, parts, part_ptr, mult, keys, key_ptr, table, table_ptr,
                         offset, n, w, SB)


@nb.njit(cache=True, nogil=True)
def _add_first_child(C, dir_mult, sdist_mult, has_head, parts, part_ptr, mult, keys, key_ptr, table, table_ptr,
                     offset, n, w, SB):
    """SB[m, h, h] = <w, f(h, h, m)> for every first-child part (the sibling columns read BOS). The sdist of a
    first-child part is that of h and m and its side is h's, so an item without a head part depends on (m, side)
    or, with an sdist part, on (m, sdist code) alone: the weights of those items are summed once per such pair
    (on its first visit) and the n^2 parts read the sums."""
    T = part_ptr.shape[0] - 1
    bos = np.zeros(T, dtype=np.int64)                # the sibling parts' share of a key: BOS in every column
    for t in range(T):
        for q in range(part_ptr[t], part_ptr[t + 1]):
            if parts[q, 1] == 1:
                bos[t] += BOS * mult[q]
    by_side = np.full((n + 1, 2), np.nan)           # the items without head and sdist parts
    by_att = np.full((n + 1, 14), np.nan)           # the items without a head part, with an sdist part
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            side = 0 if h < m else 1
            att = _att(h, m)
            if by_side[m, side] != by_side[m, side]:
                v = 0.0
                for t in range(T):
                    if not has_head[t] and sdist_mult[t] == 0:
                        e = item_entry(t, bos[t] + C[t, 2, m] + side * dir_mult[t], keys, key_ptr, table, table_ptr)
                        if e >= 0:
                            v += w[offset + e]
                by_side[m, side] = v
            if by_att[m, att] != by_att[m, att]:
                v = 0.0
                for t in range(T):
                    if not has_head[t] and sdist_mult[t] != 0:
                        e = item_entry(t, bos[t] + C[t, 2, m] + side * dir_mult[t] + att * sdist_mult[t], keys,
                                       key_ptr, table, table_ptr)
                        if e >= 0:
                            v += w[offset + e]
                by_att[m, att] = v
            v = by_side[m, side] + by_att[m, att]
            for t in range(T):
                if has_head[t]:
                    e = item_entry(t, C[t, 0, h] + bos[t] + C[t, 2, m] + side * dir_mult[t] + att * sdist_mult[t],
                                   keys, key_ptr, table, table_ptr)
                    if e >= 0:
                        v += w[offset + e]
            SB[m, h, h] = v


@nb.njit(cache=True, nogil=True)
def _add_head_item(t, C, dir_mult, sdist_mult, keys, key_ptr, table, table_ptr, offset, n, w, triples, SB):
    """SB[m, h, s] += the weight of item t's feature at every sibling part. Where the item's distinct (head,
    sibling, modifier, side) values are fewer than half the parts (long sentences: few distinct tags, n^3 / 3
    parts), their weights are gathered once into a small cube that the parts then read (it stays in cache,
    where the dictionary and w would not)."""
    uh = np.unique(C[t, 0, :])
    us = np.unique(C[t, 1, 1:])
    um = np.unique(C[t, 2, 1:])
    size = uh.shape[0] * us.shape[0] * um.shape[0] * 2
    use_cube = sdist_mult[t] == 0 and 2 * size < triples
    cube = np.zeros((uh.shape[0], us.shape[0], um.shape[0], 2) if use_cube else (1, 1, 1, 1))
    ih = np.searchsorted(uh, C[t, 0, :])
    is_ = np.searchsorted(us, C[t, 1, :])
    im = np.searchsorted(um, C[t, 2, :])
    if use_cube:
        for a in range(uh.shape[0]):
            for b in range(us.shape[0]):
                for c in range(um.shape[0]):
                    for side in range(2):
                        e = item_entry(t, uh[a] + us[b] + um[c] + side * dir_mult[t], keys, key_ptr, table, table_ptr)
                        if e >= 0:
                            cube[a, b, c, side] = w[offset + e]
    cs = C[t, 1, :].copy()
    tab = table[table_ptr[t] + 2:table_ptr[t + 1]]
    dense = table[table_ptr[t]] == 0 and sdist_mult[t] == 0
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            side = 0 if h < m else 1
            lo, hi = (h, m) if h < m else (m, h)
            if use_cube:
                for s in range(lo + 1, hi):
                    SB[m, h, s] += cube[ih[h], is_[s], im[m], side]
                continue
            base = C[t, 0, h] + C[t, 2, m] + side * dir_mult[t]
            if dense:                                 # the item's own table, no distance part: one read per part
                for s in range(lo + 1, hi):
                    e = tab[base + cs[s]]
                    if e >= 0:
                        SB[m, h, s] += w[offset + e]
                continue
            for s in range(lo + 1, hi):
                e = item_entry(t, base + cs[s] + _att(s, m) * sdist_mult[t], keys, key_ptr, table, table_ptr)
                if e >= 0:
                    SB[m, h, s] += w[offset + e]


@nb.njit(cache=True, nogil=True)
def sibling_part_ids(codes, parts, part_ptr, mult, keys, key_ptr, table, table_ptr, offset, start, h, s, m, out):
    """The feature ids of the sibling part (h, s, m) into out[:k]; returns k."""
    k = 0
    for t in range(part_ptr.shape[0] - 1):
        e = item_entry(t, item_key(codes, start, h, s, m, parts, part_ptr[t], part_ptr[t + 1], mult),
                       keys, key_ptr, table, table_ptr)
        if e >= 0:
            out[k] = offset + e
            k += 1
    return k


@nb.njit(cache=True, nogil=True)
def block_scores(i, ades, sdes, w, S, SB):
    """The arc scores S[m, h] (-inf on the diagonal) and the sibling scores SB[m, h, s] of block i at w."""
    offsets, arc_off, ptr, ids, tptr, tids = ades
    codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr, offset, first_child = sdes
    start = offsets[i]
    n = offsets[i + 1] - start
    theta = np.empty(n * n)
    nb_theta(arc_off[i], n, ptr, ids, start + i, tptr, tids, w, theta)
    a = 0
    for h in range(n + 1):
        S[0, h] = NEG_INF
    for m in range(1, n + 1):
        S[m, m] = NEG_INF
        for h in range(n + 1):
            if h != m:
                S[m, h] = theta[a]
                a += 1
    fill_sibling_scores(codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr, offset, first_child,
                        start, n, w, SB)


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def nb_sib_decode_all(ades, sdes, w, multiroot, Nmax, chunks, labels):
    """The best second-order tree of every sentence at w (no loss), flat heads (W,), over ``chunks`` interleaved
    shares in numba's threads (1: serial)."""
    offsets = ades[0]
    n_sent = offsets.shape[0] - 1
    for c in nb.prange(chunks):
        S, SB = np.empty((Nmax, Nmax)), np.empty((Nmax, Nmax, Nmax))
        heads = np.empty(Nmax, dtype=np.int64)
        for i in range(c, n_sent, chunks):
            start = offsets[i]
            n = offsets[i + 1] - start
            block_scores(i, ades, sdes, w, S, SB)
            sibling_best(S[:n + 1, :n + 1].copy(), SB, n, multiroot, heads, has_first_child(sdes))
            labels[start:start + n] = heads[1:n + 1]
