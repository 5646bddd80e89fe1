"""The compiled (numba) check of gold charts on the CPU (ssvm_torch/spans/checks.py's ``chart_faults``, one pass
per row with no (B, N+1, N+1) temporaries): the same fault codes as the torch check, which other devices run."""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched


@launched
@nb.njit(cache=True, parallel=True)
def chart_fault_codes(chart, lengths, out):
    """out[b] = the first fault of row b of the bool chart (B, M, M) (checks.FAULTS: 1 a span off the row, 2 a
    one-word span or the whole sentence missing, 3 crossing spans, 4 not 2n - 1 spans), 0 for a binary tree.
    Crossings by one stack over the spans in preorder (start ascending, end descending): a span that starts inside
    the span on top of the stack must end inside it too."""
    B, M = chart.shape[0], chart.shape[1]
    for b in nb.prange(B):
        n = lengths[b]
        out[b] = 0
        count = 0
        for i in range(M):
            for j in range(M):
                if chart[b, i, j]:
                    if not (i < j <= n):
                        out[b] = 1
                    count += 1
        if out[b] != 0:
            continue
        if n > 0:
            missing = not chart[b, 0, n]
            for t in range(n):
                if not chart[b, t, t + 1]:
                    missing = True
            if missing:
                out[b] = 2
                continue
        stack = np.empty(M + 1, dtype=np.int64)           # the ends of the open spans, innermost last
        top = 0
        crossing = False
        for i in range(M):
            for j in range(M - 1, i, -1):
                if not chart[b, i, j]:
                    continue
                while top > 0 and stack[top - 1] <= i:
                    top -= 1
                if top > 0 and stack[top - 1] < j:
                    crossing = True
                stack[top] = j
                top += 1
        if crossing:
            out[b] = 3
        elif count != max(2 * n - 1, 0):
            out[b] = 4
