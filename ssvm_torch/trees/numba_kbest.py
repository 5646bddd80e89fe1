"""Compiled k best projective trees (first order): Huang & Chiang 2005's lazy k-best ("Better k-best parsing",
Algorithm 3) on Eisner's chart items, after the max-plus pass of
:func:`ssvm_torch.trees.numba_eisner.eisner_best`.

Items by [width, start] as in :mod:`~ssvm_torch.trees.numba_eisner`: X[w, i] = CR[d, i] + CL[w-1-d, i+d+1]
(the split between i's right and i+w's left dependents), IR[w, i] = X[w, i] + s(i -> i+w), IL[w, i] = X[w, i]
+ s(i+w -> i), CR[w, i] = IR[d+1, i] + CR[w-1-d, i+d+1], CL[w, i] = CL[d, i] + IL[w-d, i+d], and single-root
ROOT = max over the root's child r = d+1 of s(0 -> r) + CL[d, 1] + CR[n-1-d, d+1]. A derivation of an item is
a split d and a rank a of its left operand's list and b of its right one.

The max-plus pass gives every item its best derivation (split d*, ranks 0, 0). An item's j-th best is made only
when asked for (:func:`_ensure`): the first time, a candidate heap is seeded with the best (0, 0) of the k best
other splits (only they can hold one of the k best: each of k better splits has a better candidate); then each
request pushes the successors of the item's last derivation -- (a, b+1), and (a+1, 0) when b = 0, so every pair
enters once -- asking the operands for their next entries in turn, and pops the best. Only the items under the k
best trees grow lists. Eisner's derivations are unambiguous (one per projective tree), so the k best derivations
are k different trees. IR / IL lists are X's shifted by the arc score.

Storage: rank 0 of every item in dense (item, cell) arrays; the heap and ranks 1..k-1 of an item in one slot of
a pool, given out when the item is first asked for rank 1 (allocated uninitialised, so the pages of slots never
given out are never touched; a run that needs more slots than the first pool holds restarts its lazy part with
a slot for every item). O(n^3) for the first pass and about O(k n log k) lazy work per sentence, against
Lawler's O(k n) best-tree calls (:mod:`~ssvm_torch.trees.lawler`).
"""
from __future__ import annotations

from collections import namedtuple

import numba as nb
import numpy as np

from ..devices import launched

NEG_INF = -np.inf
#: max-reductions vectorize once NaN is ruled out (the scores are checked first), as in numba_eisner
MAXES = {"nnan", "nsz"}
CR, CL, IR, IL, X, ROOT = 0, 1, 2, 3, 4, 5

#: one sentence's lazy state: rank 0 dense (V0 scores, D0 best splits); per item the ranks
#: made (C), whether no more exist (done), its pool slot (-1: none) and heap size; the pool's heaps (H*) and
#: ranks 1.. (L*), its next free slot (free[0]); scratch for seeding and the request stack
Lazy = namedtuple("Lazy", "V0 D0 C done slot hsize HS HD HA HB LV LD LA LB free top_v top_d stack")


@nb.njit(cache=True, nogil=True, inline="always")
def _operands(item, w, i, d, N1):
    """(left item, left cell, right item, right cell) of split d of item (w, i); ROOT has w = n, i = 0."""
    if item == X:
        return CR, d * N1 + i, CL, (w - 1 - d) * N1 + i + d + 1
    if item == CR:
        return IR, (d + 1) * N1 + i, CR, (w - d - 1) * N1 + i + d + 1
    if item == CL:
        return CL, d * N1 + i, IL, (w - d) * N1 + i + d
    return CL, d * N1 + 1, CR, (w - d - 1) * N1 + d + 1


@nb.njit(cache=True, nogil=True, inline="always")
def _const(S, item, d):
    """The score a derivation of split d adds beyond its operands: the root arc of ROOT's child, else 0."""
    return S[d + 1, 0] if item == ROOT else 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def _arc(S, item, cell, N1):
    """The arc score that IR / IL add to the X list of the same cell (the root takes no head)."""
    w, i = cell // N1, cell % N1
    if item == IR:
        return S[i + w, i]
    return S[i, i + w] if i > 0 else NEG_INF


@nb.njit(cache=True, nogil=True, inline="always")
def _value(S, N1, k, V0, LV, slot, item, r, cell):
    """The r-th best score of an item's list (IR / IL: X's plus the arc)."""
    shift, own = 0.0, item
    if item == IR or item == IL:
        shift, own = _arc(S, item, cell, N1), X
    if r == 0:
        return V0[own, cell] + shift
    return LV[slot[own, cell] * (k - 1) + r - 1] + shift


@nb.njit(cache=True, nogil=True, inline="always")
def heap_push(HS, HD, HA, HB, base, size, s, d, a, b):
    """Push (s; d, a, b) on the max-heap H*[base:base+size]; the new size."""
    i = size
    while i > 0:
        p = (i - 1) // 2
        if HS[base + p] >= s:
            break
        HS[base + i], HD[base + i], HA[base + i], HB[base + i] = HS[base + p], HD[base + p], HA[base + p], HB[base + p]
        i = p
    HS[base + i], HD[base + i], HA[base + i], HB[base + i] = s, d, a, b
    return size + 1


@nb.njit(cache=True, nogil=True, inline="always")
def heap_pop(HS, HD, HA, HB, base, size):
    """Drop the top of the max-heap H*[base:base+size] (read it first); the new size."""
    size -= 1
    s, d, a, b = HS[base + size], HD[base + size], HA[base + size], HB[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and HS[base + c + 1] > HS[base + c]:
            c += 1
        if HS[base + c] <= s:
            break
        HS[base + i], HD[base + i], HA[base + i], HB[base + i] = HS[base + c], HD[base + c], HA[base + c], HB[base + c]
        i = c
    if size > 0:
        HS[base + i], HD[base + i], HA[base + i], HB[base + i] = s, d, a, b
    return size


@nb.njit(cache=True, nogil=True, inline="always")
def _derivation(k, D0, LD, LA, LB, slot, item, cell, r):
    """(d, a, b) of an item's r-th best derivation."""
    if r == 0:
        return D0[item, cell], 0, 0
    at = slot[item, cell] * (k - 1) + r - 1
    return LD[at], LA[at], LB[at]


@nb.njit(cache=True, nogil=True, inline="always")
def keep_best(vals, keys, m, k, v, key):
    """Insert (v, key) into vals[:m] / keys[:m], the k largest values so far in descending order (v not above the
    k-th when they are full: left out); the new count. The seeding of a lazy item's k best splits (here and in
    :mod:`ssvm_torch.spans.numba_kbest`) and the label merge (:mod:`ssvm_torch.trees.labelings`)."""
    if m == k and not v > vals[m - 1]:
        return m
    t = m if m < k else k - 1
    while t > 0 and vals[t - 1] < v:
        vals[t], keys[t] = vals[t - 1], keys[t - 1]
        t -= 1
    vals[t], keys[t] = v, key
    return m + 1 if m < k else m


@nb.njit(cache=True, nogil=True, inline="always")
def _seed(S, N1, k, V0, D0, LV, slot, free, hsize, HS, HD, HA, HB, top_v, top_d, item, w, i, cell):
    """An item's pool slot and candidate heap: the (0, 0) derivations of its k best splits other than the best
    one (module docstring). False when the pool is full."""
    s = free[0]
    if (s + 1) * (2 * k + 2) > HS.shape[0]:
        return False
    free[0] = s + 1
    slot[item, cell] = s
    base = s * (2 * k + 2)
    best = D0[item, cell]
    m = 0
    for d in range(w):
        if d == best:
            continue
        lt, lc, rt, rc = _operands(item, w, i, d, N1)
        v = _const(S, item, d) + _value(S, N1, k, V0, LV, slot, lt, 0, lc) + _value(S, N1, k, V0, LV, slot, rt, 0, rc)
        if v > NEG_INF:
            m = keep_best(top_v, top_d, m, k, v, d)
    for t in range(m):                                 # descending: already a max-heap
        HS[base + t], HD[base + t], HA[base + t], HB[base + t] = top_v[t], top_d[t], 0, 0
    hsize[item, cell] = m
    return True


@nb.njit(cache=True, nogil=True)
def _ensure(S, N1, k, z, item0, cell0, j0):
    """1 when item (item0, cell0) has a j0-th best derivation, making the lists up to it as needed (module
    docstring), 0 when it has none, -1 when the pool is full (the caller retries with a larger one). The
    requests an item makes of its operands run on an explicit stack of (item, cell, rank, phase): phase 0 asks
    the right operand for the successor (a, b+1) of the item's last derivation, 1 takes its answer and (when
    b = 0) asks the left one for (a+1, 0), 2 takes that answer; then the best candidate is popped."""
    V0, D0, C, done, slot, hsize, HS, HD, HA, HB, LV, LD, LA, LB, free, top_v, top_d, stack = z   # one reference each
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = item0, cell0, j0, 0
    sp, result = 1, 0
    while sp > 0:
        item, cell, j, phase = stack[sp - 1, 0], stack[sp - 1, 1], stack[sp - 1, 2], stack[sp - 1, 3]
        w, i = (N1 - 1, 0) if item == ROOT else (cell // N1, cell % N1)
        if phase == 0:
            if item == IR or item == IL:               # the X list of the same cell, shifted
                if _arc(S, item, cell, N1) == NEG_INF:
                    result, sp = 0, sp - 1
                    continue
                item = stack[sp - 1, 0] = X
            if C[item, cell] > j:
                result, sp = 1, sp - 1
                continue
            if done[item, cell]:
                result, sp = 0, sp - 1
                continue
            if slot[item, cell] < 0 and not _seed(S, N1, k, V0, D0, LV, slot, free, hsize, HS, HD, HA, HB, top_v,
                                                  top_d, item, w, i, cell):
                return -1
        d, a, b = _derivation(k, D0, LD, LA, LB, slot, item, cell, C[item, cell] - 1)   # the last one made
        lt, lc, rt, rc = _operands(item, w, i, d, N1)
        if phase == 0:
            stack[sp - 1, 3] = 1
            stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3] = rt, rc, b + 1, 0
            sp += 1
            continue
        if result < 0:
            return -1
        base, c0 = slot[item, cell] * (2 * k + 2), _const(S, item, d)
        if phase == 1:
            if result:
                v = c0 + _value(S, N1, k, V0, LV, slot, lt, a, lc) + _value(S, N1, k, V0, LV, slot, rt, b + 1, rc)
                hsize[item, cell] = heap_push(HS, HD, HA, HB, base, hsize[item, cell], v, d, a, b + 1)
            if b == 0:
                stack[sp - 1, 3] = 2
                stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3] = lt, lc, a + 1, 0
                sp += 1
                continue
        elif result:
            v = c0 + _value(S, N1, k, V0, LV, slot, lt, a + 1, lc) + _value(S, N1, k, V0, LV, slot, rt, 0, rc)
            hsize[item, cell] = heap_push(HS, HD, HA, HB, base, hsize[item, cell], v, d, a + 1, 0)
        if hsize[item, cell] == 0:                   # no derivation left
            done[item, cell] = True
            result, sp = 0, sp - 1
            continue
        r = C[item, cell]
        at = slot[item, cell] * (k - 1) + r - 1
        LV[at], LD[at], LA[at], LB[at] = HS[base], HD[base], HA[base], HB[base]
        hsize[item, cell] = heap_pop(HS, HD, HA, HB, base, hsize[item, cell])
        C[item, cell] = r + 1
        if r + 1 == k:
            done[item, cell] = True                  # no rank past k is ever asked for
        stack[sp - 1, 3] = 0                           # and again, until rank j exists
    return result


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def _best_pass(S, n, multiroot, N1, V0, D0):
    """The max-plus pass of :func:`~ssvm_torch.trees.numba_eisner.eisner_best` on rank 0: every item's best
    score and split (the first of the best, as eisner_best's read-back), the loops over a width's starts
    innermost on contiguous rows (they vectorize)."""
    start = 0 if multiroot else 1
    for i in range(N1):
        V0[CR, i] = V0[CL, i] = 0.0                    # width 0: the empty derivation, no other
    for w in range(1, n + 1 - start):
        hi, base = n + 1 - w, w * N1
        xw, irw, ilw, xd = V0[X, base:base + N1], V0[IR, base:base + N1], V0[IL, base:base + N1], D0[X, base:base + N1]
        for d in range(w):
            a, b = V0[CR, d * N1:], V0[CL, (w - 1 - d) * N1 + d + 1:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > xw[i]:
                    xw[i], xd[i] = v, d
        for i in range(start, hi):
            irw[i] = xw[i] + S[i + w, i]
            ilw[i] = xw[i] + S[i, i + w] if i > 0 else NEG_INF
        c, cd = V0[CR, base:base + N1], D0[CR, base:base + N1]
        for d in range(w):
            a, b = V0[IR, (d + 1) * N1:], V0[CR, (w - d - 1) * N1 + d + 1:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > c[i]:
                    c[i], cd[i] = v, d
        c, cd = V0[CL, base:base + N1], D0[CL, base:base + N1]
        for d in range(w):
            a, b = V0[CL, d * N1:], V0[IL, (w - d) * N1 + d:]
            for i in range(start, hi):
                v = a[i] + b[i]
                if v > c[i]:
                    c[i], cd[i] = v, d
    if not multiroot:
        best, arg = NEG_INF, 0
        for d in range(n):
            lt, lc, rt, rc = _operands(ROOT, n, 0, d, N1)
            v = S[d + 1, 0] + V0[lt, lc] + V0[rt, rc]
            if v > best:
                best, arg = v, d
        V0[ROOT, 0], D0[ROOT, 0] = best, arg


@nb.njit(cache=True, nogil=True)
def _lazy(V0, D0, N1, k, slots):
    """A fresh lazy state over the max-plus pass's rank 0, with ``slots`` pool slots."""
    C = np.zeros((6, N1 * N1), dtype=np.int64)
    done = np.zeros((6, N1 * N1), dtype=np.bool_)
    for it in range(6):
        for c in range(N1 * N1):
            if V0[it, c] > NEG_INF:
                C[it, c] = 1
            else:
                done[it, c] = True
    for i in range(N1):
        done[CR, i] = done[CL, i] = True               # width 0 has its one derivation
    h, r = slots * (2 * k + 2), slots * (k - 1)
    return Lazy(V0, D0, C, done, np.full((6, N1 * N1), -1, dtype=np.int64), np.zeros((6, N1 * N1), dtype=np.int64),
                np.empty(h), np.empty(h, dtype=np.int64), np.empty(h, dtype=np.int64), np.empty(h, dtype=np.int64),
                np.empty(r), np.empty(r, dtype=np.int64), np.empty(r, dtype=np.int64), np.empty(r, dtype=np.int64),
                np.zeros(1, dtype=np.int64), np.empty(k), np.empty(k, dtype=np.int64),
                np.empty((8 * N1 + 16, 4), dtype=np.int64))


@nb.njit(cache=True, nogil=True)
def _read_tree(S, N1, n, k, multiroot, z, q, h):
    """heads h of the q-th best tree by its derivation's back pointers."""
    D0, LD, LA, LB, slot, stack = z.D0, z.LD, z.LA, z.LB, z.slot, z.stack
    if multiroot:
        stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = CR, n, 0, q
        sp = 1
    else:
        d, a, b = _derivation(k, D0, LD, LA, LB, slot, ROOT, 0, q)
        h[d + 1] = 0
        stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = CL, d, 1, a
        stack[1, 0], stack[1, 1], stack[1, 2], stack[1, 3] = CR, n - d - 1, d + 1, b
        sp = 2
    while sp > 0:
        sp -= 1
        item, w, i, rank = stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3]
        if w == 0:
            continue
        if item == IR or item == IL:
            if item == IR:
                h[i + w] = i
            else:
                h[i] = i + w
            stack[sp, 0] = X                           # the same rank of the X list it shifts
            sp += 1
            continue
        d, a, b = _derivation(k, D0, LD, LA, LB, slot, item, w * N1 + i, rank)
        lt, lc, rt, rc = _operands(item, w, i, d, N1)
        stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3] = lt, lc // N1, lc % N1, a
        stack[sp + 1, 0], stack[sp + 1, 1], stack[sp + 1, 2], stack[sp + 1, 3] = rt, rc // N1, rc % N1, b
        sp += 2


@nb.njit(cache=True, nogil=True)
def eisner_kbest(S, n, multiroot, k, heads, scores, slots=0):
    """The k best projective trees of one sentence: heads[r, m] for ranks r < k and m = 1..n (heads[r, 0] = -1),
    scores[r]; ranks past the sentence's number of trees of finite score keep heads -1 and score -inf. Returns
    how many ranks were filled. ``slots``: the pool slots to allocate first (0: 64 k (n + 1) + 16, at most one
    per item); a run that needs more restarts its lazy part with one per item."""
    for r in range(k):
        scores[r] = NEG_INF
        for m in range(heads.shape[1]):
            heads[r, m] = -1
    if n == 0:
        scores[0] = 0.0
        return 1
    N1 = n + 1
    V0 = np.full((6, N1 * N1), NEG_INF)
    D0 = np.full((6, N1 * N1), -1, dtype=np.int64)
    _best_pass(S, n, multiroot, N1, V0, D0)
    top, cell = (CR, n * N1) if multiroot else (ROOT, 0)
    every = 3 * N1 * N1 + 1                            # X, CR, CL and ROOT: the items that take slots
    slots = min(every, 64 * k * N1 + 16) if slots <= 0 else slots
    while True:
        z = _lazy(V0, D0, N1, k, slots)
        got, full = 0, False
        for q in range(k):
            ok = _ensure(S, N1, k, z, top, cell, q)
            if ok < 0:
                full = True
                break
            if ok == 0:
                break
            got = q + 1
        if not full:
            break
        slots = every
    for q in range(got):
        scores[q] = _value(S, N1, k, z.V0, z.LV, z.slot, top, q, cell)
        _read_tree(S, N1, n, k, multiroot, z, q, heads[q])
    return got


@nb.njit(cache=True, nogil=True)
def eisner_kbest_batch(S, lengths, multiroot, k, heads, scores):
    """:func:`eisner_kbest` of every sentence of a padded batch S (B, N, N): heads (B, k, N), scores (B, k)."""
    for b in range(S.shape[0]):
        eisner_kbest(S[b], lengths[b], multiroot, k, heads[b], scores[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def eisner_kbest_batch_parallel(S, lengths, multiroot, k, heads, scores):
    """:func:`eisner_kbest_batch` with the sentences spread over numba's threads."""
    for b in nb.prange(S.shape[0]):
        eisner_kbest(S[b], lengths[b], multiroot, k, heads[b], scores[b])
