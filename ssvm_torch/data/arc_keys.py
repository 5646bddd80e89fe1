"""The compiled half of the arc featurization (:mod:`ssvm_torch.data.arc_features`): every item's mixed-radix
int64 key for an arc from the integer-coded columns, the dictionary lookup by binary search, and the construction
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
def _lookup(sorted_keys, lo, hi, key):
    """Index of ``key`` in sorted_keys[lo:hi] (absolute), or -1."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) >> 1
        if sorted_keys[mid] < key:
            a = mid + 1
        else:
            b = mid
    if a < hi and sorted_keys[a] == key:
        return a
    return -1


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
def arc_design(codes, offsets, parts, part_ptr, mult, between, max_between, radix_max, dict_keys, dict_ptr,
               dict_ids, arc_off, head_only):
    """(ptr (A + 1,) int64, ids (nnz,) int32): the CSR design of every arc, each arc's known feature ids in
    ids[ptr[a]:ptr[a + 1]], in one pass (the arcs are visited in order of their number, so ptr is written as ids
    grow; ids doubles when full). Arc (m, h) of sentence s is arc_off[s] + (m - 1) n + (h if h < m else h - 1).
    The items of the head alone (``head_only``) go to the token design instead (:func:`token_design`)."""
    T = part_ptr.shape[0] - 1
    stamp = np.zeros(1, dtype=np.int64)
    seen = np.zeros(radix_max, dtype=np.int64)
    oi = np.empty(T + max_between, dtype=np.int64)
    ok = np.empty(T + max_between, dtype=np.int64)
    ptr = np.zeros(arc_off[-1] + 1, dtype=np.int64)
    ids = np.empty(max(16, 4 * arc_off[-1]), dtype=np.int32)
    nnz = 0
    for s in range(offsets.shape[0] - 1):
        start, n = offsets[s], offsets[s + 1] - offsets[s]
        for m in range(1, n + 1):
            for h in range(n + 1):
                if h == m:
                    continue
                a = arc_off[s] + (m - 1) * n + (h if h < m else h - 1)
                c = _arc_keys(codes, start, n, h, m, parts, part_ptr, mult, between, stamp, seen, oi, ok)
                if nnz + c > ids.shape[0]:
                    grown = np.empty(max(2 * ids.shape[0], nnz + c), dtype=np.int32)
                    grown[:nnz] = ids[:nnz]
                    ids = grown
                for j in range(c):
                    t = oi[j]
                    if head_only[t]:
                        continue
                    at = _lookup(dict_keys, dict_ptr[t], dict_ptr[t + 1], ok[j])
                    if at >= 0:
                        ids[nnz] = dict_ids[at]
                        nnz += 1
                ptr[a + 1] = nnz
    return ptr, ids[:nnz].copy()


@nb.njit(cache=True, nogil=True)
def token_design(codes, offsets, parts, part_ptr, mult, head_only, dict_keys, dict_ptr, dict_ids, fill, tptr, tids):
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
                at = _lookup(dict_keys, dict_ptr[t], dict_ptr[t + 1], key)
                if at >= 0:
                    if fill:
                        tids[p + cnt] = dict_ids[at]
                    cnt += 1
            if not fill:
                tptr[t_num + 1] = cnt


