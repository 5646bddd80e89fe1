"""One-to-one matching with NULL as an assignment problem (scipy's ``linear_sum_assignment``)."""
from __future__ import annotations

import numpy as np


def assign(S_edge: np.ndarray, s_null_e: np.ndarray, s_null_f: np.ndarray) -> np.ndarray:
    """argmax over one-to-one alignments with NULL of the sum of chosen edge / NULL scores; a (m,)
    with a_i = j or -1 (NULL). Solved exactly as a perfect assignment on the (m + n) x (n + m)
    matrix [[S_edge, diag(S_nullE)], [diag(S_nullF), 0]] with -inf off the two diagonals."""
    m, n = S_edge.shape
    M = np.full((m + n, n + m), -np.inf)
    M[:m, :n] = S_edge
    M[np.arange(m), n + np.arange(m)] = s_null_e
    M[m + np.arange(n), np.arange(n)] = s_null_f
    M[m:, n:] = 0.0
    from scipy.optimize import linear_sum_assignment     # scipy on first use: `import ssvm_torch` stays light
    rows, cols = linear_sum_assignment(M, maximize=True)
    a = np.full(m, -1, dtype=np.int64)
    real = (rows < m) & (cols < n)
    a[rows[real]] = cols[real]
    return a
