"""The compiled half of the sibling featurization (:mod:`ssvm_torch.data.sibling_features`): the adjacent siblings
of a tree, every item's mixed-radix key for a sibling part (h, s, m), the dictionary lookup (a dense table or a
binary search), the scores of every sibling part of a sentence and the feature ids of one part. ``design`` is
:meth:`SiblingDesign.host`'s tuple (codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr,
offset); parts are rows (item, kind, column) with kind 0 head, 1 sibling, 2 modifier, 3 dir, 4 sdist."""
from __future__ import annotations

import numba as nb
import numpy as np

from .arc_keys import ROOT, _att, _lookup


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


@nb.njit(cache=True, nogil=True)
def item_entry(t, key, keys, key_ptr, table, table_ptr):
    """The dictionary entry of an item's key (an index into ``keys``), or -1."""
    if table_ptr[t + 1] > table_ptr[t]:
        return table[table_ptr[t] + key]
    return _lookup(keys, key_ptr[t], key_ptr[t + 1], key)


@nb.njit(cache=True, nogil=True)
def gold_sibling_keys(codes, offsets, heads, parts, part_ptr, mult):
    """(item, key) of every feature of every gold sibling part: the dictionary's raw material."""
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
            if sib[m] == 0:
                continue
            for t in range(T):
                items[k] = t
                keys[k] = item_key(codes, start, hd[m], sib[m], m, parts, part_ptr[t], part_ptr[t + 1], mult)
                k += 1
    return items[:k], keys[:k]


@nb.njit(cache=True, nogil=True)
def fill_sibling_scores(codes, parts, part_ptr, mult, has_head, keys, key_ptr, table, table_ptr, offset, start, n, w,
                        SB):
    """SB[m, h, s] = <w, f(h, s, m)> for every sibling part of the sentence of n words starting at ``start``
    (s strictly between h and m; other entries untouched: the decoders never read them). The items without a
    head part are summed once per (s, m) pair (module docstring of sibling_features.py)."""
    T = part_ptr.shape[0] - 1
    pair = np.zeros((n + 1, n + 1))
    for s in range(1, n + 1):
        for m in range(1, n + 1):
            if s == m:
                continue
            hh = 0 if s < m else n + 1            # any head on m's side: the items read its side only
            v = 0.0
            for t in range(T):
                if has_head[t]:
                    continue
                e = item_entry(t, item_key(codes, start, hh, s, m, parts, part_ptr[t], part_ptr[t + 1], mult),
                               keys, key_ptr, table, table_ptr)
                if e >= 0:
                    v += w[offset + e]
            pair[s, m] = v
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            lo, hi = (h, m) if h < m else (m, h)
            for s in range(lo + 1, hi):
                v = pair[s, m]
                for t in range(T):
                    if not has_head[t]:
                        continue
                    e = item_entry(t, item_key(codes, start, h, s, m, parts, part_ptr[t], part_ptr[t + 1], mult),
                                   keys, key_ptr, table, table_ptr)
                    if e >= 0:
                        v += w[offset + e]
                SB[m, h, s] = v


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
