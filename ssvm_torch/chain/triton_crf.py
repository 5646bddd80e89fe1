"""Fused forward-backward and path statistics for CUDA: the CRF's log Z, marginals and gradient, and
the hinge's subgradient, each one Triton kernel over a block of chains given by a bool mask (gaps
allowed; conventions of :mod:`ssvm_torch.chain`).

* :func:`crf_forward`: log Z by the forward recursion in log space,
  alpha_t[k] = U[t, k] + logsumexp_j (alpha_{t'}[j] + trans[k, j]) over the chain's positions
  (t' the previous masked-on position), the alphas kept for the backward kernel, and s(y_i) of a
  gold labeling in the same walk.
* :func:`crf_backward`: the gradient of sum_b g_b (log Z_b - s(y_b)) written directly, as the numba
  kernel of :mod:`ssvm_torch.chain.numba_fb` does: the backward recursion beta_{t'}[j] =
  logsumexp_k (trans[k, j] + U[t, k] + beta_t[k]) gives the tag marginals alpha + beta - log Z
  (the gradient of U) and the pair marginals alpha_{t'}[j] + trans[k, j] + U[t, k] + beta_t[k] -
  log Z, summed in registers over the program's chains (the gradient of trans; no (B, T, K, K)
  tensor), minus the gold statistics.
* :func:`path_stats`: sum_b g_b (S(y*_b) - S(y_b)), the statistics of two labelings (the hinge's
  subgradient: loss-augmented minus gold), written without a (B, T, K, K) tensor.

Each program writes its (start, end, trans) sums to a row of a (programs, 2K + K^2) buffer that
torch sums: deterministic, no atomics. Each program walks only up to its rows' last masked-on position
(ENDS, :func:`ssvm_torch.chain.triton_viterbi.mask_ends`), so a padded batch costs its own rows' lengths.
"""
from __future__ import annotations

import torch

from .triton_viterbi import block_sizes, mask_ends, triton

if triton is not None:                     # without Triton (the package's own dependencies) these names do not exist
    import triton.language as tl

    from .triton_viterbi import gold_unary, load_trans, on_at, program_block

    @triton.jit
    def _lse_rows(x, axis: tl.constexpr):
        """logsumexp along ``axis`` of a tile, -inf where every entry is -inf (no nan)."""
        m = tl.max(x, axis=axis)
        safe = tl.where(m > float("-inf"), m, 0.0)
        return safe + tl.log(tl.sum(tl.exp(x - tl.expand_dims(safe, axis)), axis=axis))

    @triton.jit
    def _store_parts(PART, s_acc, e_acc, t_acc, rk, kmask, K):
        base = PART + tl.program_id(0).to(tl.int64) * (2 * K + K * K)
        tl.store(base + rk, s_acc, mask=kmask)
        tl.store(base + K + rk, e_acc, mask=kmask)
        tl.store(base + 2 * K + rk[:, None] * K + rk[None, :], t_acc, mask=kmask[:, None] & kmask[None, :])

    @triton.jit
    def _crf_forward_kernel(U, MASK, ENDS, FIRST, LAST, TRANS, GOLD, ALPHA, LOGZ, GOLD_SCORES, B, T, K,
                            HAS_GOLD: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        neg = float("-inf")
        rb, rk, bmask, kmask, m2, row = program_block(B, T, K, BLOCK_B, BLOCK_K)
        t_end = tl.max(tl.load(ENDS + rb, mask=bmask, other=0), axis=0)
        first = tl.load(FIRST + rk, mask=kmask, other=neg)
        trans = load_trans(TRANS, rk, kmask, K)
        alpha = tl.full((BLOCK_B, BLOCK_K), neg, U.dtype.element_ty)
        started = tl.zeros((BLOCK_B,), tl.int32)
        gprev = tl.zeros((BLOCK_B,), tl.int32)
        gold_s = tl.zeros((BLOCK_B,), U.dtype.element_ty)
        for t in range(0, t_end):
            on = on_at(MASK, MASK, rb, t, T, bmask, True)
            mon = m2 & on[:, None]
            u = tl.load(U + row[:, None] + t * K + rk[None, :], mask=mon, other=0.0)
            was = started > 0
            moved = _lse_rows(alpha[:, None, :] + trans[None, :, :], 2)                  # (BLOCK_B, next)
            new = tl.where(was[:, None], moved + u, first[None, :] + u)
            alpha = tl.where(on[:, None] & kmask[None, :], new, alpha)
            tl.store(ALPHA + row[:, None] + t * K + rk[None, :], alpha, mask=mon)
            if HAS_GOLD:
                g = tl.load(GOLD + rb.to(tl.int64) * T + t, mask=bmask & on, other=0).to(tl.int32)
                step = tl.where(was, tl.load(TRANS + g * K + gprev, mask=bmask & on & was, other=0.0),
                                tl.load(FIRST + g, mask=bmask & on, other=0.0))
                gold_s += tl.where(on, gold_unary(u, g, rk) + step, 0.0)
                gprev = tl.where(on, g, gprev)
            started = tl.where(on, 1, started)
        last = tl.load(LAST + rk, mask=kmask, other=neg)
        logz = _lse_rows(alpha + last[None, :], 1)
        tl.store(LOGZ + rb, tl.where(started > 0, logz, 0.0), mask=bmask)
        if HAS_GOLD:
            gold_s += tl.load(LAST + gprev, mask=bmask & (started > 0), other=0.0)
            tl.store(GOLD_SCORES + rb, gold_s, mask=bmask)

    @triton.jit
    def _crf_backward_kernel(U, MASK, ENDS, LAST, TRANS, GOLD, ALPHA, LOGZ, G, DE, PART, B, T, K,
                             HAS_GOLD: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        neg = float("-inf")
        rb, rk, bmask, kmask, m2, row = program_block(B, T, K, BLOCK_B, BLOCK_K)
        t_end = tl.max(tl.load(ENDS + rb, mask=bmask, other=0), axis=0)
        for t in range(t_end, T):                    # past every row's end: no gradient
            tl.store(DE + row[:, None] + t * K + rk[None, :], tl.zeros((BLOCK_B, BLOCK_K), DE.dtype.element_ty),
                     mask=m2)
        trans = load_trans(TRANS, rk, kmask, K)
        last = tl.load(LAST + rk, mask=kmask, other=neg)
        logz = tl.load(LOGZ + rb, mask=bmask, other=0.0)
        g = tl.load(G + rb, mask=bmask, other=0.0)
        w = tl.full((BLOCK_B, BLOCK_K), neg, U.dtype.element_ty)      # U + beta at the later masked-on position
        later = tl.zeros((BLOCK_B,), tl.int32)
        glater = tl.zeros((BLOCK_B,), tl.int32)
        gfirst = tl.zeros((BLOCK_B,), tl.int32)
        p_first = tl.zeros((BLOCK_B, BLOCK_K), U.dtype.element_ty)
        s_acc = tl.zeros((BLOCK_K,), U.dtype.element_ty)
        e_acc = tl.zeros((BLOCK_K,), U.dtype.element_ty)
        t_acc = tl.zeros((BLOCK_K, BLOCK_K), U.dtype.element_ty)
        for s in range(0, t_end):
            t = t_end - 1 - s
            on = on_at(MASK, MASK, rb, t, T, bmask, True)
            mon = m2 & on[:, None]
            has_later = later > 0
            a = tl.load(ALPHA + row[:, None] + t * K + rk[None, :], mask=mon, other=neg)
            u = tl.load(U + row[:, None] + t * K + rk[None, :], mask=mon, other=0.0)
            cand = trans[None, :, :] + w[:, :, None]                                  # (BLOCK_B, next, prev)
            beta = tl.where(has_later[:, None], _lse_rows(cand, 1), last[None, :])
            pair = tl.exp(a[:, None, :] + cand - logz[:, None, None])
            t_acc += tl.sum(tl.where((on & has_later)[:, None, None], pair * g[:, None, None], 0.0), axis=0)
            p = tl.where(mon, tl.exp(a + beta - logz[:, None]), 0.0)
            d = g[:, None] * p
            e_acc += tl.sum(tl.where((on & ~has_later)[:, None], d, 0.0), axis=0)
            if HAS_GOLD:
                gd = tl.load(GOLD + rb.to(tl.int64) * T + t, mask=bmask & on, other=0).to(tl.int32)
                hot = rk[None, :] == gd[:, None]
                minus = tl.where(on[:, None] & hot, g[:, None], 0.0)
                d = d - minus
                e_acc -= tl.sum(tl.where((on & ~has_later)[:, None], minus, 0.0), axis=0)
                pair_hot = ((rk[None, :, None] == glater[:, None, None]) & (rk[None, None, :] == gd[:, None, None])
                            & (on & has_later)[:, None, None])
                t_acc -= tl.sum(tl.where(pair_hot, g[:, None, None], 0.0), axis=0)
                glater = tl.where(on, gd, glater)
                gfirst = tl.where(on, gd, gfirst)
            tl.store(DE + row[:, None] + t * K + rk[None, :], d, mask=m2)
            p_first = tl.where(on[:, None], p, p_first)
            w = tl.where(on[:, None], u + beta, w)
            later = tl.where(on, 1, later)
        s_acc += tl.sum(g[:, None] * p_first, axis=0)
        if HAS_GOLD:
            s_acc -= tl.sum(tl.where((later > 0)[:, None] & (rk[None, :] == gfirst[:, None]), g[:, None], 0.0), axis=0)
        _store_parts(PART, s_acc, e_acc, t_acc, rk, kmask, K)

    @triton.jit
    def _path_stats_kernel(YS, GOLD, MASK, ENDS, G, DE, PART, B, T, K, BLOCK_B: tl.constexpr,
                           BLOCK_K: tl.constexpr):
        rb, rk, bmask, kmask, m2, row = program_block(B, T, K, BLOCK_B, BLOCK_K)
        t_end = tl.max(tl.load(ENDS + rb, mask=bmask, other=0), axis=0)
        for t in range(t_end, T):                    # past every row's end: no gradient
            tl.store(DE + row[:, None] + t * K + rk[None, :], tl.zeros((BLOCK_B, BLOCK_K), DE.dtype.element_ty),
                     mask=m2)
        g = tl.load(G + rb, mask=bmask, other=0.0)
        started = tl.zeros((BLOCK_B,), tl.int32)
        yprev = tl.zeros((BLOCK_B,), tl.int32)
        gprev = tl.zeros((BLOCK_B,), tl.int32)
        s_acc = tl.zeros((BLOCK_K,), DE.dtype.element_ty)
        e_acc = tl.zeros((BLOCK_K,), DE.dtype.element_ty)
        t_acc = tl.zeros((BLOCK_K, BLOCK_K), DE.dtype.element_ty)
        for t in range(0, t_end):
            on = on_at(MASK, MASK, rb, t, T, bmask, True)
            y = tl.load(YS + rb.to(tl.int64) * T + t, mask=bmask & on, other=0).to(tl.int32)
            gd = tl.load(GOLD + rb.to(tl.int64) * T + t, mask=bmask & on, other=0).to(tl.int32)
            hot = tl.where(on[:, None] & (rk[None, :] == y[:, None]), g[:, None], 0.0) - \
                tl.where(on[:, None] & (rk[None, :] == gd[:, None]), g[:, None], 0.0)
            tl.store(DE + row[:, None] + t * K + rk[None, :], hot, mask=m2)
            was = started > 0
            s_acc += tl.sum(tl.where((on & ~was)[:, None], hot, 0.0), axis=0)
            both = (on & was)[:, None, None]
            pair_y = both & (rk[None, :, None] == y[:, None, None]) & (rk[None, None, :] == yprev[:, None, None])
            pair_g = both & (rk[None, :, None] == gd[:, None, None]) & (rk[None, None, :] == gprev[:, None, None])
            t_acc += tl.sum(tl.where(pair_y, g[:, None, None], 0.0) - tl.where(pair_g, g[:, None, None], 0.0), axis=0)
            yprev = tl.where(on, y, yprev)
            gprev = tl.where(on, gd, gprev)
            started = tl.where(on, 1, started)
        was = (started > 0)[:, None]
        e_acc += tl.sum(tl.where(was & (rk[None, :] == yprev[:, None]), g[:, None], 0.0)
                        - tl.where(was & (rk[None, :] == gprev[:, None]), g[:, None], 0.0), axis=0)
        _store_parts(PART, s_acc, e_acc, t_acc, rk, kmask, K)


def _grid(B, K, tile_elems):
    block_b, block_k = block_sizes(K, tile_elems)
    return (triton.cdiv(B, block_b),), block_b, block_k


def _split_parts(part, K):
    total = part.sum(0)
    return total[:K], total[K:2 * K], total[2 * K:].view(K, K)


def crf_forward(E, mask, first, last, trans, gold=None):
    """(log Z (B,) (0 for an empty row), alphas (B, T, K) for :func:`crf_backward`, s(gold) (B,) or
    None) of chains given by a bool mask; scores in E's dtype, constraint penalties included."""
    B, T, K = E.shape
    E = E.contiguous()
    first, last, trans = (x.to(E.dtype).contiguous() for x in (first, last, trans))
    alpha = torch.empty_like(E)
    logz = torch.empty((B,), dtype=E.dtype, device=E.device)
    gold_s = torch.empty_like(logz) if gold is not None else logz
    grid, block_b, block_k = _grid(B, K, 8192)
    _crf_forward_kernel[grid](E, mask.contiguous().view(torch.uint8), mask_ends(mask), first, last, trans,
                              logz if gold is None else gold.contiguous(), alpha, logz, gold_s, B, T, K,
                              HAS_GOLD=gold is not None, BLOCK_B=block_b, BLOCK_K=block_k, num_warps=4)
    return logz, alpha, (gold_s if gold is not None else None)


def crf_backward(E, mask, last, trans, alpha, logz, g, gold=None):
    """Gradients of sum_b g_b (log Z_b - s(gold_b)) (the log Z part alone without ``gold``): (dE (B, T,
    K), dstart (K,), dend (K,), dtrans (K, K) [next, prev]) from :func:`crf_forward`'s alphas."""
    B, T, K = E.shape
    E = E.contiguous()
    last, trans = (x.to(E.dtype).contiguous() for x in (last, trans))
    grid, block_b, block_k = _grid(B, K, 4096)
    dE = torch.empty_like(E)
    part = torch.empty((grid[0], 2 * K + K * K), dtype=E.dtype, device=E.device)
    _crf_backward_kernel[grid](E, mask.contiguous().view(torch.uint8), mask_ends(mask), last, trans,
                               logz if gold is None else gold.contiguous(), alpha, logz, g.to(E.dtype).contiguous(),
                               dE, part, B, T, K, HAS_GOLD=gold is not None, BLOCK_B=block_b, BLOCK_K=block_k,
                               num_warps=4)
    return (dE, *_split_parts(part, K))


def path_stats(ystar, gold, mask, g, K: int, dtype):
    """sum_b g_b (S(ystar_b) - S(gold_b)) as (dE (B, T, K), dstart, dend, dtrans [next, prev]) in
    ``dtype``: the statistics of two labelings (B, T) over each row's masked-on positions."""
    B, T = ystar.shape
    grid, block_b, block_k = _grid(B, K, 4096)
    dE = torch.empty((B, T, K), dtype=dtype, device=ystar.device)
    part = torch.empty((grid[0], 2 * K + K * K), dtype=dtype, device=ystar.device)
    _path_stats_kernel[grid](ystar.contiguous(), gold.contiguous(), mask.contiguous().view(torch.uint8),
                             mask_ends(mask), g.to(dtype).contiguous(), dE, part, B, T, K, BLOCK_B=block_b, BLOCK_K=block_k, num_warps=4)
    return (dE, *_split_parts(part, K))
