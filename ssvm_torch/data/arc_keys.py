"""The compiled half of the arc featurization (:mod:`ssvm_torch.data.arc_features`): every item's mixed-radix
int64 key for an arc from the integer-coded columns, the dictionary lookup in a hash table, and the construction
of the arc design (one pass) and the head-token design (two passes). Parts are rows (item, kind, column, offset)
with kind 0 head, 1 modifier, 2 between, 3 att, 4 dir, 5 near (arc_features.py's grammar)."""
from __future__ import annotations

import numba as nb
import numpy as np

ROOT, BOS, EOS = 0, 1, 2            # the special codes of every column; real values start at 3


@nb.njit(cache=True, nogil=True)
def _att(h, m):
    d = h - m if h > m else m - h
    b = d - 1 if d <= 5 else (5 if d <= 10 else 6)
    return (0 if h < m else 7) + b


@nb.njit(cache=True, nogil=True)
def _token(codes, start, n, pos, col):
    """The code of column ``col`` at sentence position ``pos`` (0 = the root, 1..n the words)."""
    if pos == 0:
        return ROOT
    if pos < 0:
        return BOS
    if pos > n:
        return EOS
    return codes[start + pos - 1, col]


@nb.njit(cache=True, nogil=True)
def _arc_part_value(codes, start, n, h, m, kind, col):
    """The value of one part of the arc itself (att, dir or near) of the arc h -> m."""
    if kind == 3:
        return _att(h, m)
    if kind == 4:
        return 0 if h < m else 1
    head = _token(codes, start, n, h, col)                  # kind 5: same-valued words between, capped at 2
    same = 0
    for pos in range(min(h, m) + 1, max(h, m)):
        if codes[start + pos - 1, col] == head:
            same += 1
            if same == 2:
                break
    return same


@nb.njit(cache=True, nogil=True)
def _slot(t, key, mask):
    """The home slot of (item t, key) in a table of mask + 1 slots: splitmix64's finalizer of key + t x the golden
    ratio (every bit of both reaches the low bits the mask keeps; uint64 arithmetic wraps)."""
    z = np.uint64(key) + np.uint64(t) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.int64((z ^ (z >> np.uint64(31))) & np.uint64(mask))


@nb.njit(cache=True, nogil=True)
def dictionary_table(dict_keys, dict_ptr, dict_ids):
    """(S, 2) int64: the dictionary (item t's sorted keys in dict_keys[dict_ptr[t]:dict_ptr[t + 1]], their ids in
    dict_ids) as one open-addressing table with linear probing, S the power of two >= 3 x its size (a third full: a
    lookup reads one or two slots where the binary search of each item's sorted keys read about log2 of its size).
    Slot s is [key (-1 = empty), item << 32 | id]: a lookup's key, item and id share one cache line (the table is
    far larger than the caches, so each line read is a trip to memory; three arrays made a hit three trips)."""
    n = dict_keys.shape[0]
    size = 4
    while size < 3 * n:
        size *= 2
    mask = size - 1
    table = np.empty((size, 2), dtype=np.int64)
    table[:, 0] = -1
    table[:, 1] = 0
    for t in range(dict_ptr.shape[0] - 1):
        for i in range(dict_ptr[t], dict_ptr[t + 1]):
            s = _slot(t, dict_keys[i], mask)
            while table[s, 0] != -1:
                s = (s + 1) & mask
            table[s, 0] = dict_keys[i]
            table[s, 1] = (np.int64(t) << 32) | np.int64(dict_ids[i])
    return table


@nb.njit(cache=True, nogil=True)
def _lookup(table, t, key):
    """The id of (item t, key) in a :func:`dictionary_table`, or -1 (keys are >= 0: -1 marks an empty slot)."""
    mask = table.shape[0] - 1
    s = _slot(t, key, mask)
    while True:
        k = table[s, 0]
        if k == -1:
            return -1
        if k == key and (table[s, 1] >> 32) == t:
            return table[s, 1] & 0xFFFFFFFF
        s = (s + 1) & mask


@nb.njit(cache=True, nogil=True)
def count_ids(ids, d):
    """(d,) int64: how many times each id in [0, d) occurs in ``ids`` (np.bincount without its int32 -> intp copy
    of the ids and its extra pass for their range: the training design holds some 10^8 of them)."""
    counts = np.zeros(d, dtype=np.int64)
    for i in range(ids.shape[0]):
        counts[ids[i]] += 1
    return counts


@nb.njit(cache=True, nogil=True)
def _token_sums(codes, start, n, parts, part_ptr, mult, HK, MK):
    """HK[p, t] / MK[p, t]: item t's parts of the head (kind 0) / of the modifier (kind 1), summed into its
    mixed-radix key as if the head / the modifier were word p (p in [0, n], 0 the root) of the sentence: an arc
    h -> m's key is HK[h, t] + MK[m, t] plus its att, dir, near and between parts, so a token's values are read
    once per sentence instead of once per arc."""
    for p in range(n + 1):
        for t in range(part_ptr.shape[0] - 1):
            hk, mk = 0, 0
            for q in range(part_ptr[t], part_ptr[t + 1]):
                kind = parts[q, 1]
                if kind == 0:
                    hk += _token(codes, start, n, p + parts[q, 3], parts[q, 2]) * mult[q]
                elif kind == 1:
                    mk += _token(codes, start, n, p + parts[q, 3], parts[q, 2]) * mult[q]
            HK[p, t] = hk
            MK[p, t] = mk


@nb.njit(cache=True, nogil=True)
def _arc_part_index(parts, part_ptr):
    """(arc_ptr (T + 1,), arc_q): item t's parts of the arc itself (att, dir, near) are arc_q[arc_ptr[t]:...]."""
    T = part_ptr.shape[0] - 1
    arc_ptr = np.zeros(T + 1, dtype=np.int64)
    arc_q = np.empty(parts.shape[0], dtype=np.int64)
    for t in range(T):
        arc_ptr[t + 1] = arc_ptr[t]
        for q in range(part_ptr[t], part_ptr[t + 1]):
            if parts[q, 1] >= 3:
                arc_q[arc_ptr[t + 1]] = q
                arc_ptr[t + 1] += 1
    return arc_ptr, arc_q


@nb.njit(cache=True, nogil=True)
def _arc_item_keys(codes, start, n, h, m, parts, mult, between, HK, MK, arc_ptr, arc_q, skip, seen, stamp,
                   out_item, out_key):
    """(count, stamp): every (item, key) of the arc h -> m into out_item / out_key, items in order and a between
    item's distinct values in position order (one feature per distinct value between: ``seen`` holds the stamp
    of the values met, ``stamp`` the last one used), the items with ``skip`` set left out. HK / MK are the
    sentence's :func:`_token_sums`."""
    k = 0
    lo, hi = (h, m) if h < m else (m, h)
    for t in range(HK.shape[1]):
        if skip[t]:
            continue
        key = HK[h, t] + MK[m, t]
        for r in range(arc_ptr[t], arc_ptr[t + 1]):
            q = arc_q[r]
            key += _arc_part_value(codes, start, n, h, m, parts[q, 1], parts[q, 2]) * mult[q]
        b = between[t]
        if b < 0:
            out_item[k] = t
            out_key[k] = key
            k += 1
            continue
        stamp += 1
        col = parts[b, 2]
        for pos in range(lo + 1, hi):
            v = codes[start + pos - 1, col]
            if seen[v] != stamp:
                seen[v] = stamp
                out_item[k] = t
                out_key[k] = key + v * mult[b]
                k += 1
    return k, stamp


@nb.njit(cache=True, nogil=True)
def _token_sum_buffers(offsets, T):
    """(HK, MK): :func:`_token_sums`' buffers for the longest sentence of ``offsets``."""
    longest = 0
    for s in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[s + 1] - offsets[s])
    return np.empty((longest + 1, T), dtype=np.int64), np.empty((longest + 1, T), dtype=np.int64)


@nb.njit(cache=True, nogil=True)
def gold_keys(codes, offsets, heads, parts, part_ptr, mult, between, per_arc, radix_max):
    """(item, key) of every feature of every gold arc (:func:`_arc_item_keys`, every item): the training
    dictionary's raw material. ``per_arc``: a bound on one arc's keys."""
    T = part_ptr.shape[0] - 1
    arc_ptr, arc_q = _arc_part_index(parts, part_ptr)
    HK, MK = _token_sum_buffers(offsets, T)
    skip = np.zeros(T, dtype=np.bool_)
    cap = heads.shape[0] * per_arc
    items = np.empty(cap, dtype=np.int64)
    keys = np.empty(cap, dtype=np.int64)
    seen = np.zeros(radix_max, dtype=np.int64)
    stamp = 0
    k = 0
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        _token_sums(codes, start, n, parts, part_ptr, mult, HK, MK)
        for m in range(1, n + 1):
            c, stamp = _arc_item_keys(codes, start, n, heads[start + m - 1], m, parts, mult, between, HK, MK,
                                      arc_ptr, arc_q, skip, seen, stamp, items[k:], keys[k:])
            k += c
    return items[:k], keys[:k]


@nb.njit(cache=True, nogil=True)
def arc_design(codes, offsets, parts, part_ptr, mult, between, per_arc, radix_max, table, arc_off, head_only):
    """(ptr (A + 1,) int64, ids (nnz,) int32): the CSR design of every arc, each arc's known feature ids in
    ids[ptr[a]:ptr[a + 1]] in the order of :func:`_arc_item_keys`, in one pass: the arcs are visited in order of
    their number, so ptr is written as ids grow (doubled when full). Arc (m, h) of sentence s is
    arc_off[s] + (m - 1) n + (h if h < m else h - 1). The items of the head alone (``head_only``) go to the token
    design instead (:func:`token_design`); ``per_arc``: a bound on one arc's keys."""
    T = part_ptr.shape[0] - 1
    arc_ptr, arc_q = _arc_part_index(parts, part_ptr)
    HK, MK = _token_sum_buffers(offsets, T)
    out_item = np.empty(per_arc, dtype=np.int64)
    out_key = np.empty(per_arc, dtype=np.int64)
    seen = np.zeros(radix_max, dtype=np.int64)
    stamp = 0
    ptr = np.zeros(arc_off[-1] + 1, dtype=np.int64)
    ids = np.empty(max(16, 4 * arc_off[-1]), dtype=np.int32)
    nnz = 0
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        _token_sums(codes, start, n, parts, part_ptr, mult, HK, MK)
        for m in range(1, n + 1):
            for h in range(n + 1):
                if h == m:
                    continue
                a = arc_off[s] + (m - 1) * n + (h if h < m else h - 1)
                c, stamp = _arc_item_keys(codes, start, n, h, m, parts, mult, between, HK, MK, arc_ptr, arc_q,
                                          head_only, seen, stamp, out_item, out_key)
                if nnz + c > ids.shape[0]:
                    grown = np.empty(2 * ids.shape[0] + c, dtype=np.int32)
                    grown[:nnz] = ids[:nnz]
                    ids = grown
                for i in range(c):
                    at = _lookup(table, out_item[i], out_key[i])
                    if at >= 0:
                        ids[nnz] = at
                        nnz += 1
                ptr[a + 1] = nnz
    return ptr, ids[:nnz].copy()


@nb.njit(cache=True, nogil=True)
def token_design(codes, offsets, parts, part_ptr, mult, head_only, table, fill, tptr, tids):
    """The features of the items of the head alone (key HK[h, t] of :func:`_token_sums`), once per token instead
    of once per arc: token h of sentence s (h = 0 the root) is number offsets[s] + s + h; pass 1 (``fill`` False)
    counts, pass 2 writes (a token has few items: the second pass costs little)."""
    T = part_ptr.shape[0] - 1
    HK, MK = _token_sum_buffers(offsets, T)
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        _token_sums(codes, start, n, parts, part_ptr, mult, HK, MK)
        for h in range(n + 1):
            t_num = start + s + h
            cnt = 0
            p = tptr[t_num] if fill else 0
            for t in range(T):
                if not head_only[t]:
                    continue
                at = _lookup(table, t, HK[h, t])
                if at >= 0:
                    if fill:
                        tids[p + cnt] = at
                    cnt += 1
            if not fill:
                tptr[t_num + 1] = cnt
