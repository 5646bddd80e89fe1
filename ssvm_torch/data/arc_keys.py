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
def _part_value(codes, start, n, h, m, kind, col, off):
    """The value of one part (not a between part) of the arc h -> m."""
    if kind == 0:
        return _token(codes, start, n, h + off, col)
    if kind == 1:
        return _token(codes, start, n, m + off, col)
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
def _fixed_key(codes, start, n, h, m, parts, p0, p1, mult):
    """The key of an item without a between part (-1 never: every part has a value)."""
    key = 0
    for q in range(p0, p1):
        key += _part_value(codes, start, n, h, m, parts[q, 1], parts[q, 2], parts[q, 3]) * mult[q]
    return key


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
    """(keys (S,) int64, -1 = empty; items (S,) int32; ids (S,) int32): the dictionary (item t's sorted keys in
    dict_keys[dict_ptr[t]:dict_ptr[t + 1]], their ids in dict_ids) as one open-addressing table with linear
    probing, S the power of two >= 3 x its size (a third full: a lookup reads one or two slots where the binary
    search of each item's sorted keys read about log2 of its size)."""
    n = dict_keys.shape[0]
    size = 4
    while size < 3 * n:
        size *= 2
    mask = size - 1
    keys = np.full(size, -1, dtype=np.int64)
    items = np.zeros(size, dtype=np.int32)
    ids = np.zeros(size, dtype=np.int32)
    for t in range(dict_ptr.shape[0] - 1):
        for i in range(dict_ptr[t], dict_ptr[t + 1]):
            s = _slot(t, dict_keys[i], mask)
            while keys[s] != -1:
                s = (s + 1) & mask
            keys[s] = dict_keys[i]
            items[s] = t
            ids[s] = dict_ids[i]
    return keys, items, ids


@nb.njit(cache=True, nogil=True)
def _lookup(keys, items, ids, t, key):
    """The id of (item t, key) in a :func:`dictionary_table`, or -1 (keys are >= 0: -1 marks an empty slot)."""
    mask = keys.shape[0] - 1
    s = _slot(t, key, mask)
    while True:
        k = keys[s]
        if k == -1:
            return -1
        if k == key and items[s] == t:
            return ids[s]
        s = (s + 1) & mask


@nb.njit(cache=True, nogil=True)
def _arc_keys(codes, start, n, h, m, parts, part_ptr, mult, between, stamp, seen, out_item, out_key):
    """Every (item, key) of the arc h -> m into out_*; returns how many. ``seen`` / ``stamp`` mark the
    distinct between values (one feature per distinct value)."""
    k = 0
    lo, hi = (h, m) if h < m else (m, h)
    for t in range(part_ptr.shape[0] - 1):
        p0, p1 = part_ptr[t], part_ptr[t + 1]
        b = between[t]
        if b < 0:
            out_item[k] = t
            out_key[k] = _fixed_key(codes, start, n, h, m, parts, p0, p1, mult)
            k += 1
            continue
        base = 0
        for q in range(p0, p1):
            if q != b:
                base += _part_value(codes, start, n, h, m, parts[q, 1], parts[q, 2], parts[q, 3]) * mult[q]
        stamp[0] += 1
        col = parts[b, 2]
        for pos in range(lo + 1, hi):
            v = codes[start + pos - 1, col]
            if seen[v] != stamp[0]:
                seen[v] = stamp[0]
                out_item[k] = t
                out_key[k] = base + v * mult[b]
                k += 1
    return k


@nb.njit(cache=True, nogil=True)
def gold_keys(codes, offsets, heads, parts, part_ptr, mult, between, max_between, radix_max):
    """(item, key) of every feature of every gold arc: the training dictionary's raw material."""
    T = part_ptr.shape[0] - 1
    n_words = heads.shape[0]
    cap = n_words * (T + max_between)
    items = np.empty(cap, dtype=np.int64)
    keys = np.empty(cap, dtype=np.int64)
    stamp = np.zeros(1, dtype=np.int64)
    seen = np.zeros(radix_max, dtype=np.int64)
    oi = np.empty(T + max_between, dtype=np.int64)
    ok = np.empty(T + max_between, dtype=np.int64)
    k = 0
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        for m in range(1, n + 1):
            h = heads[start + m - 1]
            c = _arc_keys(codes, start, n, h, m, parts, part_ptr, mult, between, stamp, seen, oi, ok)
            items[k:k + c] = oi[:c]
            keys[k:k + c] = ok[:c]
            k += c
    return items[:k], keys[:k]


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
def arc_design(codes, offsets, parts, part_ptr, mult, between, radix_max, table_keys, table_items, table_ids, arc_off,
               head_only):
    """(ptr (A + 1,) int64, ids (nnz,) int32): the CSR design of every arc, each arc's known feature ids in
    ids[ptr[a]:ptr[a + 1]] in the order of :func:`_arc_keys` (items in order, a between item's distinct values in
    position order), in one pass: the arcs are visited in order of their number, so ptr is written as ids grow
    (doubled when full). Arc (m, h) of sentence s is arc_off[s] + (m - 1) n + (h if h < m else h - 1). The head
    and modifier parts come from :func:`_token_sums`; the items of the head alone (``head_only``) go to the token
    design instead (:func:`token_design`)."""
    T = part_ptr.shape[0] - 1
    arc_parts = np.zeros(T + 1, dtype=np.int64)       # per item, its att / dir / near parts: arc_q[arc_parts[t]:...]
    arc_q = np.empty(parts.shape[0], dtype=np.int64)
    for t in range(T):
        arc_parts[t + 1] = arc_parts[t]
        for q in range(part_ptr[t], part_ptr[t + 1]):
            if parts[q, 1] >= 3:
                arc_q[arc_parts[t + 1]] = q
                arc_parts[t + 1] += 1
    longest = 0
    for s in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[s + 1] - offsets[s])
    HK = np.empty((longest + 1, T), dtype=np.int64)
    MK = np.empty((longest + 1, T), dtype=np.int64)
    stamp = 0
    seen = np.zeros(radix_max, dtype=np.int64)
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
                lo, hi = (h, m) if h < m else (m, h)
                if nnz + T + hi - lo > ids.shape[0]:          # at most one id per item and per word between
                    grown = np.empty(2 * ids.shape[0] + T + hi - lo, dtype=np.int32)
                    grown[:nnz] = ids[:nnz]
                    ids = grown
                for t in range(T):
                    if head_only[t]:
                        continue
                    key = HK[h, t] + MK[m, t]
                    for r in range(arc_parts[t], arc_parts[t + 1]):
                        q = arc_q[r]
                        key += _part_value(codes, start, n, h, m, parts[q, 1], parts[q, 2], parts[q, 3]) * mult[q]
                    b = between[t]
                    if b < 0:
                        at = _lookup(table_keys, table_items, table_ids, t, key)
                        if at >= 0:
                            ids[nnz] = at
                            nnz += 1
                        continue
                    stamp += 1                              # one feature per distinct value between
                    col = parts[b, 2]
                    for pos in range(lo + 1, hi):
                        v = codes[start + pos - 1, col]
                        if seen[v] != stamp:
                            seen[v] = stamp
                            at = _lookup(table_keys, table_items, table_ids, t, key + v * mult[b])
                            if at >= 0:
                                ids[nnz] = at
                                nnz += 1
                ptr[a + 1] = nnz
    return ptr, ids[:nnz].copy()


@nb.njit(cache=True, nogil=True)
def token_design(codes, offsets, parts, part_ptr, mult, head_only, table_keys, table_items, table_ids, fill, tptr,
                 tids):
    """The features of the items of the head alone, once per token instead of once per arc: token h of
    sentence s (h = 0 the root) is number offsets[s] + s + h; pass 1 (``fill`` False) counts, pass 2 writes
    (a token has few items: the second pass costs little)."""
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        for h in range(n + 1):
            t_num = start + s + h
            cnt = 0
            p = tptr[t_num] if fill else 0
            for t in range(part_ptr.shape[0] - 1):
                if not head_only[t]:
                    continue
                key = _fixed_key(codes, start, n, h, 1, parts, part_ptr[t], part_ptr[t + 1], mult)
                at = _lookup(table_keys, table_items, table_ids, t, key)
                if at >= 0:
                    if fill:
                        tids[p + cnt] = at
                    cnt += 1
            if not fill:
                tptr[t_num + 1] = cnt


