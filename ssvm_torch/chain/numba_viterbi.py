"""The numba Viterbi recursion of the chain package (CPU, float64): the one max-sum recursion that
every compiled chain kernel runs (the masked layer kernels of :mod:`ssvm_torch.chain.numba_masked`,
the BCFW store kernels of :mod:`ssvm_torch.oracles.chain_kernels` and
:mod:`ssvm_torch.oracles.edge_kernels`), in the package's convention (:mod:`ssvm_torch.chain`):

    s(y) = first[y_0] + sum_t U[t, y_t] + sum_{t>=1} trans[y_t, y_{t-1}] + last[y_{T-1}],

optionally loss-augmented on the fly by the Hamming loss lw [k != gt_t] (the max oracle of the
structured hinge, objective (1) of Osokin et al. 2016).

Tag constraints (:mod:`ssvm_torch.constraints`) enter as a penalty array ``pen`` (K+2, K): rows
0..K-1 the additive transition scores [next, prev], row K the first-tag and row K+1 the last-tag
scores, each 0 (allowed) or -inf (forbidden); an array with no rows (:data:`NO_PEN`) means
unconstrained. Penalties are read by the recursion only, never added into the weights.
"""
from __future__ import annotations

from contextlib import contextmanager

import numba as nb
import numpy as np

from ..devices import to_host

NO_PEN = np.zeros((0, 1))          # the unconstrained penalty array of the numba kernels

# The loop order of the max-sum step with one transition matrix (``order`` of the kernels): AUTO picks
# by the label count, ROWWISE is the per-next-label argmax scan (:func:`_step_rowwise`), COLUMNWISE
# the compare-and-select over next labels (:func:`_steps_columnwise`). Both give the same labels and
# scores bit for bit; which is faster depends on K (benchmarks/bench_viterbi_order.py,
# benchmarks/results/viterbi_order.json): the scan wins on small tag sets, the vectorized update on
# large ones.
AUTO, ROWWISE, COLUMNWISE = 0, 1, 2
COLUMNWISE_MIN_K = 32              # the crossover measured by benchmarks/bench_viterbi_order.py
BLOCKED_MIN_K = 8                  # from here the free row-wise step scans four next labels at a time
LOOP_ORDERS = {"auto": AUTO, "rowwise": ROWWISE, "columnwise": COLUMNWISE}
_forced = [AUTO]


def loop_order() -> int:
    """The loop order the layer kernels pass down (AUTO unless :func:`forced_loop_order` is active)."""
    return _forced[0]


@contextmanager
def forced_loop_order(name: str):
    """Run the chain layer's Viterbi with one loop order ("auto", "rowwise", "columnwise"): the switch
    benchmarks use to measure both orders side by side in one process (results are identical)."""
    if name not in LOOP_ORDERS:
        raise ValueError(f"loop order: expected one of {sorted(LOOP_ORDERS)}, got {name!r}")
    before = _forced[0]
    _forced[0] = LOOP_ORDERS[name]
    try:
        yield
    finally:
        _forced[0] = before


@nb.njit(cache=True, nogil=True, inline="always")
def uses_columnwise(K, order):
    """Whether the step with one transition matrix runs column-wise for K labels under ``order``."""
    return order == COLUMNWISE or (order == AUTO and K >= COLUMNWISE_MIN_K)


def penalty_array(start, end, trans) -> np.ndarray:
    """The (K+2, K) ``pen`` array of the numba kernels from additive (start, end, trans[next, prev])."""
    return np.ascontiguousarray(np.concatenate([to_host(trans), to_host(start)[None], to_host(end)[None]]),
                                dtype=np.float64)


@nb.njit(cache=True, nogil=True, inline="always")
def _row_loss(gt, r, lw):
    """(gold label at row r, the loss of a wrong label there): ``lw``, or 0 where the gold label is
    unobserved (negative); ``gt`` is read only when ``lw`` != 0 (plain decoding passes a dummy). Read
    once per row so that the label loops keep the shape of plain loss augmentation."""
    if lw == 0.0:
        return 0, 0.0
    g = gt[r]
    return g, (lw if g >= 0 else 0.0)


@nb.njit(cache=True, nogil=True)
def viterbi_segment(U, start, T, first, last, trans, gt, lw, out, delta, newd, bp, pen, order=AUTO):
    """Decode one sequence (rows start..start+T of U) into out[start:start+T]; returns its score.

    ``delta``/``newd`` (K,) and ``bp`` (>=T, K) are work buffers. If ``lw`` != 0, the Hamming loss
    lw [k != gt_t] against gt[start:start+T] is added to the unaries (lw = 1/T: normalized); a negative
    gt_t is an unobserved label that costs nothing (the latent SSVM's loss, ssvm_torch/latent.py).
    ``pen``: the constraint penalties (module docstring) or :data:`NO_PEN`; ``order`` the loop order
    (:data:`AUTO`: by K).
    """
    K = trans.shape[0]
    return viterbi_segment_tt(U, start, T, first, last, trans.reshape((1, K, K)), False, gt, lw, out, delta,
                              newd, bp, pen, order)


@nb.njit(cache=True, nogil=True)
def viterbi_segment_tt(U, start, T, first, last, trans3, per_position, gt, lw, out, delta, newd, bp, pen,
                       order=AUTO):
    """:func:`viterbi_segment` with the transition into position t read from ``trans3[t]`` (T, K, K)
    when ``per_position`` (edge-observation features, models/chain_edges.py), else ``trans3[0]``;
    one matrix runs the loop order ``order`` picks (:func:`uses_columnwise`), per-position ones the
    row-wise step. Compiled callers pass ``start`` as an int64 (``np.int64(0)``, not ``0``): numba compiles a
    call with a literal argument as another overload, a second copy of the recursion and its loop orders."""
    K = U.shape[1]
    cons = pen.shape[0] > 0
    g, lwr = _row_loss(gt, start, lw)
    for k in range(K):
        v = U[start, k] + first[k]
        if cons:
            v += pen[K, k]
        if lwr != 0.0 and k != g:
            v += lwr
        delta[k] = v
    if per_position:
        for t in range(1, T):
            _step_rowwise(U, start + t, trans3[t], cons, pen, gt, lw, delta, newd, bp[t])
    elif uses_columnwise(K, order):
        _steps_columnwise(U, start, T, trans3[0], cons, pen, gt, lw, delta, newd, bp)
    elif cons:
        trans = trans3[0]
        for t in range(1, T):
            _step_rowwise(U, start + t, trans, cons, pen, gt, lw, delta, newd, bp[t])
    else:
        _steps_rowwise_free(U, start, T, trans3[0], gt, lw, delta, newd, bp)
    best = delta[0] + last[0] + (pen[K + 1, 0] if cons else 0.0)
    arg = 0
    for k in range(1, K):
        c = delta[k] + last[k] + (pen[K + 1, k] if cons else 0.0)
        if c > best:
            best = c
            arg = k
    out[start + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = bp[t, arg]
        out[start + t - 1] = arg
    return best


@nb.njit(cache=True, nogil=True)
def _step_rowwise(U, r, trans, cons, pen, gt, lw, delta, newd, bp_t):
    """One max-sum step into row r with its own transition matrix (per-position transitions): for
    each next label k, the first best previous label (strict >, so ties keep the lowest index)."""
    K = U.shape[1]
    g, lwr = _row_loss(gt, r, lw)
    for k in range(K):
        best = delta[0] + trans[k, 0]
        if cons:
            best += pen[k, 0]
        arg = 0
        if cons:
            for j in range(1, K):
                c = delta[j] + trans[k, j] + pen[k, j]
                if c > best:
                    best = c
                    arg = j
        else:
            for j in range(1, K):
                c = delta[j] + trans[k, j]
                if c > best:
                    best = c
                    arg = j
        v = best + U[r, k]
        if lwr != 0.0 and k != g:
            v += lwr
        newd[k] = v
        bp_t[k] = arg
    for k in range(K):
        delta[k] = newd[k]


@nb.njit(cache=True, nogil=True)
def _steps_rowwise_free(U, start, T, trans, gt, lw, delta, newd, bp):
    """The row-wise steps of rows start+1 .. start+T-1 with one transition matrix and no tag
    penalties: :func:`_step_rowwise`'s scan (the same sums and tie rule), from :data:`BLOCKED_MIN_K` labels
    for four next labels at a time, in one loop nest so that nothing is re-dispatched per position. The four scans over the previous
    label j are independent chains of compare-and-select (one scan's chain bound its speed), and for each
    j they read four adjacent entries of a transposed copy of ``trans``."""
    K = U.shape[1]
    if K < BLOCKED_MIN_K:                   # a handful of labels: the plain scan, no transposed copy
        for t in range(1, T):
            r = start + t
            g, lwr = _row_loss(gt, r, lw)
            for k in range(K):
                best = delta[0] + trans[k, 0]
                arg = 0
                for j in range(1, K):
                    c = delta[j] + trans[k, j]
                    if c > best:
                        best = c
                        arg = j
                v = best + U[r, k]
                if lwr != 0.0 and k != g:
                    v += lwr
                newd[k] = v
                bp[t, k] = arg
            for k in range(K):
                delta[k] = newd[k]
        return
    transT = np.empty((K, K))              # transT[j, k] = trans[k, j]
    for j in range(K):
        for k in range(K):
            transT[j, k] = trans[k, j]
    for t in range(1, T):
        r = start + t
        k0 = 0
        while k0 + 4 <= K:
            d0, row = delta[0], transT[0]
            b0, b1, b2, b3 = d0 + row[k0], d0 + row[k0 + 1], d0 + row[k0 + 2], d0 + row[k0 + 3]
            a0 = a1 = a2 = a3 = 0
            for j in range(1, K):
                dj, row = delta[j], transT[j]
                c0, c1, c2, c3 = dj + row[k0], dj + row[k0 + 1], dj + row[k0 + 2], dj + row[k0 + 3]
                if c0 > b0:
                    b0, a0 = c0, j
                if c1 > b1:
                    b1, a1 = c1, j
                if c2 > b2:
                    b2, a2 = c2, j
                if c3 > b3:
                    b3, a3 = c3, j
            newd[k0], newd[k0 + 1], newd[k0 + 2], newd[k0 + 3] = b0, b1, b2, b3
            bp[t, k0], bp[t, k0 + 1], bp[t, k0 + 2], bp[t, k0 + 3] = a0, a1, a2, a3
            k0 += 4
        for k in range(k0, K):
            best = delta[0] + transT[0, k]
            arg = 0
            for j in range(1, K):
                c = delta[j] + transT[j, k]
                if c > best:
                    best = c
                    arg = j
            newd[k] = best
            bp[t, k] = arg
        g, lwr = _row_loss(gt, r, lw)
        for k in range(K):
            v = newd[k] + U[r, k]
            if lwr != 0.0 and k != g:
                v += lwr
            delta[k] = v


@nb.njit(cache=True, nogil=True, inline="always")
def _relax_columns(dj, tj, pj, cons, vi, ai, vo, ao, j, K):
    """One previous label j of the column-wise step: vo[k] = max(vi[k], dj + tj[k] (+ pj[k])) and ao[k] = j
    where that sum is strictly larger, else ai[k]. Written as max and integer arithmetic into other buffers
    than it reads: numba lowers a conditional expression to branches, which LLVM vectorizes into masked
    vector stores (in place, or one per branch), and AMD Zen cores run those an order of magnitude slower
    than a max, a blend and a plain store."""
    if cons:
        for k in range(K):
            c = dj + tj[k] + pj[k]
            better = np.int64(c > vi[k])
            vo[k] = max(vi[k], c)
            ao[k] = ai[k] + better * (j - ai[k])
    else:
        for k in range(K):
            c = dj + tj[k]
            better = np.int64(c > vi[k])
            vo[k] = max(vi[k], c)
            ao[k] = ai[k] + better * (j - ai[k])


@nb.njit(cache=True, nogil=True, inline="always")
def _columnwise_body(U, start, T, transT, penT, cons, gt, lw, delta, bp, vals, args):
    """The column-wise steps over the transposed matrices (:func:`_steps_columnwise`); ``cons`` a compile-time
    constant in each caller, so the unconstrained loops carry no penalty reads."""
    K = U.shape[1]
    for t in range(1, T):
        r = start + t
        d0 = delta[0]
        v0, a0 = vals[0], args[0]
        for k in range(K):
            c = d0 + transT[0, k]
            if cons:
                c += penT[0, k]
            v0[k] = c
            a0[k] = 0
        src = 0
        for j in range(1, K):
            _relax_columns(delta[j], transT[j], penT[j] if cons else transT[j], cons, vals[src], args[src],
                           vals[1 - src], args[1 - src], j, K)
            src = 1 - src
        vf, af = vals[src], args[src]
        g, lwr = _row_loss(gt, r, lw)
        for k in range(K):
            v = vf[k] + U[r, k]
            if lwr != 0.0 and k != g:
                v += lwr
            delta[k] = v
            bp[t, k] = af[k]


@nb.njit(cache=True, nogil=True)
def _steps_columnwise(U, start, T, trans, cons, pen, gt, lw, delta, newd, bp):
    """The max-sum steps of rows start+1 .. start+T-1 with one transition matrix, the loop over
    previous labels outermost: for each previous label j every next label k is updated at once
    (a compare-and-select over k that vectorizes, where the row-wise argmax of :func:`_step_rowwise`
    is a scalar scan). The same sums in the same association ((delta + trans) + pen) and the same tie
    rule (strict >: the lowest best j), so the same scores and labels bit for bit. The running best
    and its argument alternate between two buffer pairs, read from one and written to the other every
    j (:func:`_relax_columns` says why); the constrained and the free loops are compiled apart (a
    runtime flag inside them cost the free loops their vectorization)."""
    K = U.shape[1]
    transT = np.empty((K, K))              # transT[j, k] = trans[k, j]: the updates over k read a row
    for j in range(K):
        for k in range(K):
            transT[j, k] = trans[k, j]
    vals = np.empty((2, K))
    args = np.empty((2, K), dtype=np.int64)
    if cons:
        penT = np.empty((K, K))
        for j in range(K):
            for k in range(K):
                penT[j, k] = pen[k, j]
        _columnwise_body(U, start, T, transT, penT, True, gt, lw, delta, bp, vals, args)
    else:
        _columnwise_body(U, start, T, transT, transT, False, gt, lw, delta, bp, vals, args)


@nb.njit(cache=True, nogil=True)
def viterbi_all(U, offsets, first, last, trans, gt, lw, out, scores, pen):
    """Every sequence; ``lw`` (n,) the loss of one wrong position of each (zeros: plain decoding)."""
    K = U.shape[1]
    n = offsets.shape[0] - 1
    tmax = 1
    for i in range(n):
        tmax = max(tmax, offsets[i + 1] - offsets[i])
    delta = np.empty(K)
    newd = np.empty(K)
    bp = np.empty((tmax, K), dtype=np.int64)
    for i in range(n):
        scores[i] = viterbi_segment(U, offsets[i], offsets[i + 1] - offsets[i], first, last, trans, gt,
                                    lw[i], out, delta, newd, bp, pen)


def viterbi_ragged(unary: np.ndarray, offsets: np.ndarray, first: np.ndarray, last: np.ndarray,
                   trans: np.ndarray, gt: np.ndarray | None = None, token_loss: np.ndarray | None = None,
                   pen: np.ndarray = NO_PEN):
    """Viterbi over ragged sequences on CPU (numpy arrays or CPU tensors viewed as numpy).

    unary (N, K) float64 rows of all sequences; offsets (n+1,) int64; with ``gt`` (N,) loss-augmented,
    ``token_loss`` (n,) the loss of one wrong position (default 1 / length). Returns (labels (N,),
    scores (n,))."""
    U = np.ascontiguousarray(unary, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    out = np.empty(U.shape[0], dtype=np.int64)
    scores = np.empty(offsets.shape[0] - 1)
    if gt is None:
        gt_arr, lw = np.zeros(1, dtype=np.int64), np.zeros(len(scores))
    else:
        gt_arr = np.ascontiguousarray(gt, dtype=np.int64)
        lw = 1.0 / np.diff(offsets) if token_loss is None else np.ascontiguousarray(token_loss, dtype=np.float64)
    viterbi_all(U, offsets, np.ascontiguousarray(first, dtype=np.float64),
                np.ascontiguousarray(last, dtype=np.float64), np.ascontiguousarray(trans, dtype=np.float64),
                gt_arr, lw, out, scores, pen)
    return out, scores
