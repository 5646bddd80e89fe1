"""The compiled (numba) check of head arrays on the CPU (ssvm_torch/trees/checks.py's ``tree_faults``, one pass per
row with no (B, N, N) temporaries): the same fault codes as the torch check, which other devices run."""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def tree_fault_codes(heads, lengths, multiroot, projective, out):
    """out[b] = the first fault of row b of heads (B, N) over its words 1..n (checks.FAULTS: 1 a head out of
    [0, n] or a word heading itself, 2 a cycle, 3 not exactly one word on the root (single-root, n > 0), 4 crossing
    arcs (projective)), 0 for a tree of the kind. Cycles by one walk up from each word, marking the words known to
    reach the root (O(n)); crossings over the pairs of arcs (O(n^2), as the torch check's pairwise test)."""
    B = heads.shape[0]
    state = np.zeros(heads.shape[1], dtype=np.int8)      # 0 not seen, 1 on the walk, 2 reaches the root
    lo, hi = np.zeros(heads.shape[1], dtype=np.int64), np.zeros(heads.shape[1], dtype=np.int64)   # each arc's ends
    for b in range(B):
        n = lengths[b]
        out[b] = 0
        roots = 0
        for m in range(1, n + 1):
            h = heads[b, m]
            if h < 0 or h > n or h == m:
                out[b] = 1
                break
            if h == 0:
                roots += 1
        if out[b] != 0:
            continue
        state[0] = 2
        for m in range(1, n + 1):
            state[m] = 0
        cycle = False
        for m in range(1, n + 1):
            v = m
            while state[v] == 0:
                state[v] = 1
                v = heads[b, v]
            if state[v] == 1:
                cycle = True
                break
            v = m
            while state[v] == 1:
                state[v] = 2
                v = heads[b, v]
        if cycle:
            out[b] = 2
            continue
        if not multiroot and n > 0 and roots != 1:
            out[b] = 3
            continue
        if projective:
            for m in range(1, n + 1):
                lo[m], hi[m] = min(heads[b, m], m), max(heads[b, m], m)
            for a in range(1, n + 1):
                crossed = False
                for c in range(1, n + 1):           # no branch in the loop: the compiler vectorizes it
                    crossed |= (lo[a] < lo[c]) & (lo[c] < hi[a]) & (hi[a] < hi[c])
                if crossed:
                    out[b] = 4
                    break
