"""The PCFG's Viterbi CKY compiled for the CPU (:mod:`ssvm_torch.spans.pcfg`'s grammars, the masked inputs of
:func:`~ssvm_torch.spans.torch_pcfg.masked`), one sentence at a time, rows over numba's threads: the max-plus pass of
:mod:`~ssvm_torch.spans.torch_pcfg` without its (B, n, NT, S^2) temporaries. For each span (i, j) the children's
pairs first, P[B, C] = max over the splits k of beta(i, k, B) + beta(k, j, C) (a one-word child's symbols are the
preterminals NT..S-1, a longer one's the nonterminals), then beta(i, j, A) = span[i, j, A] + max_{B, C}
rules[A, B, C] + P[B, C] over the blocks of (B, C) that the span's splits fill; the best split and children of
every (span, A) are kept and the tree read top-down from the best root. Ties go to the first maximum in the loops'
order (the torch pass may break a tie otherwise: both trees then score the same).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..devices import launched

NEG_INF = -np.inf
#: max-reductions vectorize once NaN is ruled out (the scores are checked for NaN before any kernel runs)
MAXES = {"nnan", "nsz"}


@nb.njit(cache=True, nogil=True, inline="always")
def _child(terms, V, NT, i, width, sym):
    """The inside value of the span (i, i + width) as symbol ``sym`` (S numbering)."""
    return terms[i, sym - NT] if width == 1 else V[width, i, sym]


@nb.njit(cache=True, nogil=True, fastmath=MAXES)
def _row(terms, rules, roots, span, has_span, n, chart):
    """The best tree of one row of n >= 2 words into ``chart`` (M, M) int64 (-1 on entry); returns its score.
    The maxima are plain reductions (they vectorize); the argmax is recovered after them: the best row of (B, C) by
    its maximum, the column within it by a scan, the split by the splits of that pair."""
    T = terms.shape[1]
    NT = roots.shape[0]
    S = NT + T
    V = np.full((n + 1, n, NT), NEG_INF, dtype=terms.dtype)
    BU = np.zeros((n + 1, n, NT), dtype=np.int64)
    BL = np.zeros((n + 1, n, NT), dtype=np.int64)
    BR = np.zeros((n + 1, n, NT), dtype=np.int64)
    P = np.empty((S, S), dtype=terms.dtype)
    for w in range(2, n + 1):
        for i in range(n - w + 1):
            j = i + w
            P[:, :] = NEG_INF
            for u in range(1, w):
                lo_l = NT if u == 1 else 0
                lo_r = NT if w - u == 1 else 0
                for bb in range(T if u == 1 else NT):
                    lv = terms[i, bb] if u == 1 else V[u, i, bb]
                    row = P[lo_l + bb]
                    if w - u == 1:
                        for cc in range(T):
                            row[lo_r + cc] = max(row[lo_r + cc], lv + terms[j - 1, cc])
                    else:
                        right = V[w - u, i + u]
                        for cc in range(NT):
                            row[cc] = max(row[cc], lv + right[cc])
            for a in range(NT):
                best = NEG_INF
                bl = -1
                r0 = 0
                r1 = 0
                for blk in range(4):           # (B, C) kinds: PP at w = 2, PN and NP from w = 3, NN from w = 4
                    if (blk == 0 and w != 2) or ((blk == 1 or blk == 2) and w < 3) or (blk == 3 and w < 4):
                        continue
                    l0, l1 = (NT, S) if blk <= 1 else (0, NT)
                    c0, c1 = (NT, S) if blk == 0 or blk == 2 else (0, NT)
                    for bb in range(l0, l1):
                        m = NEG_INF
                        for cc in range(c0, c1):
                            m = max(m, rules[a, bb, cc] + P[bb, cc])
                        if m > best:
                            best = m
                            bl = bb
                            r0 = c0
                            r1 = c1
                br = r0
                for cc in range(r0, r1):
                    if rules[a, bl, cc] + P[bl, cc] == best:
                        br = cc
                        break
                target = P[bl, br]
                bu = 1
                for u in range(1, w):
                    if (bl >= NT) != (u == 1) or (br >= NT) != (w - u == 1):
                        continue
                    if _child(terms, V, NT, i, u, bl) + _child(terms, V, NT, i + u, w - u, br) == target:
                        bu = u
                        break
                V[w, i, a] = best + (span[i, j, a] if has_span else 0.0)
                BU[w, i, a] = bu
                BL[w, i, a] = bl
                BR[w, i, a] = br
    best = NEG_INF
    root = 0
    for a in range(NT):
        v = roots[a] + V[n, 0, a]
        if v > best:
            best = v
            root = a
    # top-down: a stack of (i, j, symbol in the S numbering)
    stack = np.empty((2 * n, 3), dtype=np.int64)
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, n, root
    top = 1
    while top > 0:
        top -= 1
        i, j, sym = stack[top, 0], stack[top, 1], stack[top, 2]
        if j - i == 1:
            chart[i, j] = sym - NT
            continue
        chart[i, j] = sym
        w = j - i
        k = i + BU[w, i, sym]
        stack[top, 0], stack[top, 1], stack[top, 2] = i, k, BL[w, i, sym]
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = k, j, BR[w, i, sym]
        top += 2
    return best


@nb.njit(cache=True, nogil=True)
def viterbi_batch(terms, rules, roots, span, has_span, lengths, charts, scores):
    """The best tree of every row: ``charts`` (B, N+1, N+1) int64, -1 on entry; ``scores`` (B,); ``span`` (B, M, M,
    NT), or (B, 1, 1, 1) unread when not ``has_span`` (one row per b: prange's unsigned index and a literal 0 would
    unify to a float index)."""
    for b in range(terms.shape[0]):
        scores[b] = _row(terms[b], rules[b], roots[b], span[b], has_span, lengths[b], charts[b])


@launched
@nb.njit(cache=True, nogil=True, parallel=True)
def viterbi_batch_parallel(terms, rules, roots, span, has_span, lengths, charts, scores):
    """:func:`viterbi_batch` with the rows spread over numba's threads."""
    for b in nb.prange(terms.shape[0]):
        scores[b] = _row(terms[b], rules[b], roots[b], span[b], has_span, lengths[b], charts[b])
