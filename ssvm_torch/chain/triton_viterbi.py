"""Fused batched Viterbi for CUDA: one Triton kernel decodes a block of sequences end to end.

The padded torch recursion (:func:`ssvm_torch.chain.torch_viterbi.viterbi_loop`) launches a handful of
kernels per position and materializes the (B, K, K) candidate scores of every position in memory;
on a GPU it is bound by launches at small B and by that memory traffic at large B. Here each program
holds ``BLOCK_B`` sequences' max-marginals delta (BLOCK_B, K) in registers, walks the positions with
the same recursion (the convention of :mod:`ssvm_torch.chain`: delta_t[k] = U[t, k] + max_j delta_{t-1}[j]
+ trans[k, j], with the loss rowc_b cost[gt_t, k] added on the fly), writes only the back-pointers,
then follows them back within the same program. One launch for the whole batch.

A row's chain is given either by its length (the stores' layout, :func:`viterbi_fused`) or by a
bool mask with gaps (the layer's, :func:`decode_masked`): the kernels read one "on" rule per
position, so a masked-off position keeps delta as it is and the back-pointers skip it; the score of
the gold labeling can be accumulated in the same walk (the hinge's s(y_i)).

:func:`fused_available` says whether the kernels apply (CUDA tensors, Triton importable, K <=
:data:`MAX_K`). ``TRITON_INTERPRET=1`` runs the same kernels on CPU tensors (how the tests check them
without a GPU). Ties between equal candidates go to the lowest index, as in the numba kernel.
"""
from __future__ import annotations

import os

import torch

try:                                       # an optional dependency: the CUDA image ships it with torch
    import triton
    import triton.language as tl
except ImportError:                        # pragma: no cover - exercised where Triton is absent
    triton = None

MAX_K = 64          # the (BLOCK_B, K, K) register tiles: beyond 64 tags the torch path is used
VARIANTS = ("auto", "tile", "rows", "transposed")
MODES = {"tile": 0, "rows": 1, "transposed": 2}      # the kernel's MODE of each variant
# The rule of variant="auto", from the launch-shape sweeps of bench_gpu.py (benchmarks/results/gpu.json; the
# figures in docs/devices.md, "Measured on a GPU"): the rows variant with 16 sequences and 4 warps per program
# from 2,048 sequences on (it won at 6,251 and above on the H100 and the H200, the tile's programs at 1,024);
# below, the transposed tile for K <= TRANSPOSED_MAX_K (it beat the tile at 1,024 on the H200; larger K were
# not measured) and the tile beyond.
ROWS_FROM_B = 2048
ROWS_BLOCK_B, ROWS_WARPS = 16, 4
TRANSPOSED_MAX_K = 32
# A decode call sorts its chains by length (so that each program walks about its own chains' length instead
# of the longest of BLOCK_B random ones; on OCR's lengths 1.9x fewer positions at B = 2^20) from SORT_FROM_B
# chains on: the argsort is paid on every call, and on the H200 it lost at 6,251 chains and won at 2^16 and
# 2^20 (docs/devices.md). A store's chains never change, so its one sort is kept and taken from
# STORE_SORT_FROM_B chains on.
SORT_FROM_B = 65536
STORE_SORT_FROM_B = ROWS_FROM_B


def length_order(lengths: torch.Tensor, sort: bool | None, kept: bool = False) -> torch.Tensor | None:
    """The chains' order by decreasing length (int32), or None: ``sort`` None sorts from SORT_FROM_B chains
    on (STORE_SORT_FROM_B for an order ``kept`` across calls). Longest first, so that the slowest programs
    start first."""
    if sort is None:
        sort = lengths.shape[0] >= (STORE_SORT_FROM_B if kept else SORT_FROM_B)
    return torch.argsort(lengths, descending=True).to(torch.int32) if sort else None


def mask_ends(mask: torch.Tensor) -> torch.Tensor:
    """Each row's last masked-on position + 1 (0 for an empty row), int32 (B,): how far the kernels walk."""
    B, T = mask.shape
    if T == 0:
        return torch.zeros(B, dtype=torch.int32, device=mask.device)
    return (mask * torch.arange(1, T + 1, device=mask.device, dtype=torch.int32)).amax(1).contiguous()


def choose_variant(B: int, K: int) -> str:
    """The measured rule of ``variant="auto"``: ``rows`` from B = ROWS_FROM_B sequences on, else
    ``transposed`` for K <= TRANSPOSED_MAX_K tags and ``tile`` for more."""
    if B >= ROWS_FROM_B:
        return "rows"
    return "transposed" if K <= TRANSPOSED_MAX_K else "tile"


def interpreting() -> bool:
    """Triton's interpreter runs the kernels on CPU tensors (``TRITON_INTERPRET=1``, read when a
    kernel is defined, i.e. at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def fused_available(unary: torch.Tensor) -> bool:
    """True where the Triton kernels run: Triton importable, K <= MAX_K, and CUDA tensors (or any
    tensors under ``TRITON_INTERPRET=1``)."""
    if triton is None or unary.shape[-1] > MAX_K:
        return False
    return unary.is_cuda or interpreting()


def block_sizes(K: int, tile_elems: int = 8192):
    """(BLOCK_B, BLOCK_K): K padded to a power of two, and as many sequences per program as keep a
    (BLOCK_B, BLOCK_K, BLOCK_K) tile within ``tile_elems`` registers' worth of values."""
    block_k = max(2, triton.next_power_of_2(K))
    return max(1, min(64, tile_elems // (block_k * block_k))), block_k


if triton is not None:
    @triton.jit
    def on_at(MASK, LEN, rb, t, T, bmask, HAS_MASK: tl.constexpr):
        """Whether position t belongs to each sequence's chain: mask[b, t] (uint8) or t < length[b]."""
        if HAS_MASK:
            on = tl.load(MASK + rb.to(tl.int64) * T + t, mask=bmask, other=0) != 0
        else:
            on = (t < tl.load(LEN + rb, mask=bmask, other=0)) & bmask
        return on

    @triton.jit
    def program_block(B, T, K, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        """This program's sequences rb and (padded) tags rk, their masks, the (sequence, tag) mask and
        each sequence's offset into (B, T, K) tensors."""
        rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        rk = tl.arange(0, BLOCK_K)
        bmask, kmask = rb < B, rk < K
        return rb, rk, bmask, kmask, bmask[:, None] & kmask[None, :], rb.to(tl.int64) * T * K

    @triton.jit
    def load_trans(TRANS, rk, kmask, K):
        """trans [next, prev] as a (BLOCK_K, BLOCK_K) tile, -inf on the padding tags."""
        return tl.load(TRANS + rk[:, None] * K + rk[None, :], mask=kmask[:, None] & kmask[None, :], other=float("-inf"))

    @triton.jit
    def relax_from(SCRATCH, TRANS, srow, rk, j, K, best, arg, bmask, kmask):
        """The rows variant's step for previous tag j: delta[j] (the scratch row) + trans[next, j] against
        the best so far; ties keep the lowest j. The masks say which sequences and next tags take part."""
        dj = tl.load(SCRATCH + srow + j, mask=bmask, other=float("-inf"))
        tj = tl.load(TRANS + rk * K + j, mask=kmask, other=float("-inf"))            # trans[next, j]
        cand = dj[:, None] + tj[None, :]
        better = cand > best
        return tl.where(better, cand, best), tl.where(better, j, arg)

    @triton.jit
    def gold_unary(u, g, rk):
        """u[b, g_b] of a (BLOCK_B, BLOCK_K) tile."""
        return tl.sum(tl.where(rk[None, :] == g[:, None], u, 0.0), axis=1)

    @triton.jit
    def _viterbi_kernel(U, MASK, LEN, OFF, ORDER, FIRST, LAST, TRANS, GT, ROWC, COST, MU, BP, SCRATCH, LABELS, SCORES,
                        GOLD_SCORES, MTHETA, WRONG, B, T, K, HAS_MASK: tl.constexpr, RAGGED: tl.constexpr,
                        SORTED: tl.constexpr,
                        HAS_GT: tl.constexpr, GOLD_SCORE: tl.constexpr, GAP_TERMS: tl.constexpr, MODE: tl.constexpr,
                        UNROLL: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
        """Viterbi of BLOCK_B chains. The max over the previous tag (``MODE``, :data:`MODES`): 0 (the tile
        variant), a (BLOCK_B, next, prev) register tile reduced along its last axis, which the default
        layout spreads across a warp's lanes; 2 (transposed), the (BLOCK_B, prev, next) tile reduced along
        its middle axis, which the layout keeps in each thread's registers (delta changes layout once per
        position instead); 1 (rows), a loop over the previous tag inside each thread, delta going through
        a scratch row per sequence (``UNROLL``: the loop unrolled over BLOCK_K tags, the padding masked).
        ``RAGGED``: the scores U (and GT, MU, LABELS) are ragged rows stacked at offsets OFF (the
        stores' layout: position t of row b at OFF[b] + t) instead of padded (B, T, ...).
        ``GAP_TERMS``: also <M_b, U_b> + M_b[first]·first + M_b[last]·last from the stacked marginals
        MU, and the count of positions where the decoded label differs from GT (the block gap's
        terms, eq. (6) of Osokin et al. 2016).
        Each program walks only up to its chains' longest end (t_end; LEN holds each chain's length, or with
        a mask the last masked-on position + 1), not to T; ``SORTED``: program slot i takes chain ORDER[i]
        (the chains sorted by that end), so that a program's chains end together and the walk does no
        padding steps."""
        neg = float("-inf")
        rb, rk, bmask, kmask, m2, row = program_block(B, T, K, BLOCK_B, BLOCK_K)
        if SORTED:
            rb = tl.load(ORDER + rb, mask=bmask, other=0)
            row = rb.to(tl.int64) * T * K
        t_end = tl.max(tl.load(LEN + rb, mask=bmask, other=0), axis=0)
        first = tl.load(FIRST + rk, mask=kmask, other=neg)
        if MODE == 2:                                # trans^T [prev, next]
            trans = tl.load(TRANS + rk[None, :] * K + rk[:, None], mask=kmask[:, None] & kmask[None, :], other=neg)
        else:
            trans = load_trans(TRANS, rk, kmask, K)
        rowc = tl.load(ROWC + rb, mask=bmask, other=0.0)
        delta = tl.full((BLOCK_B, BLOCK_K), neg, U.dtype.element_ty)
        started = tl.zeros((BLOCK_B,), tl.int32)
        first_on = tl.zeros((BLOCK_B,), tl.int32)
        gprev = tl.zeros((BLOCK_B,), tl.int32)
        gold_s = tl.zeros((BLOCK_B,), U.dtype.element_ty)
        srow = rb.to(tl.int64) * BLOCK_K
        if RAGGED:
            base = tl.load(OFF + rb, mask=bmask, other=0).to(tl.int64)    # row b's first position in the stack
        else:
            base = rb.to(tl.int64) * T
        m_theta = tl.zeros((BLOCK_B,), U.dtype.element_ty)
        mu_prev = tl.zeros((BLOCK_B, BLOCK_K), U.dtype.element_ty)
        for t in range(0, t_end):
            on = on_at(MASK, LEN, rb, t, T, bmask, HAS_MASK)
            mon = m2 & on[:, None]
            at = (base + t) * K                                               # U's offset of (b, t)
            u = tl.load(U + at[:, None] + rk[None, :], mask=mon, other=0.0)
            ua = u
            g = tl.zeros((BLOCK_B,), tl.int32)
            if HAS_GT:
                g = tl.load(GT + base + t, mask=bmask & on, other=0).to(tl.int32)
                ua = u + rowc[:, None] * tl.load(COST + g[:, None] * K + rk[None, :], mask=mon, other=0.0)
            if MODE == 1:
                tl.store(SCRATCH + srow[:, None] + rk[None, :], delta, mask=bmask[:, None])
                tl.debug_barrier()                   # the row is read by the threads of other tags
                best = tl.full((BLOCK_B, BLOCK_K), neg, U.dtype.element_ty)
                arg = tl.zeros((BLOCK_B, BLOCK_K), tl.int32)
                if UNROLL:
                    for j in tl.static_range(0, BLOCK_K):               # the padding tags j >= K masked
                        best, arg = relax_from(SCRATCH, TRANS, srow, rk, j, K, best, arg,
                                               bmask & ((tl.zeros((BLOCK_B,), tl.int32) + j) < K),
                                               kmask & ((rk * 0 + j) < K))
                else:
                    for j in range(0, K):
                        best, arg = relax_from(SCRATCH, TRANS, srow, rk, j, K, best, arg, bmask, kmask)
                tl.debug_barrier()                   # all reads done before the next position's store
            elif MODE == 2:
                cand = delta[:, :, None] + trans[None, :, :]                     # (BLOCK_B, prev, next)
                best = tl.max(cand, axis=1)
                arg = tl.argmax(cand, axis=1).to(tl.int32)                       # ties: the lowest prev
            else:
                cand = delta[:, None, :] + trans[None, :, :]                     # (BLOCK_B, next, prev)
                best = tl.max(cand, axis=2)
                arg = tl.argmax(cand, axis=2).to(tl.int32)
            was = started > 0
            new = tl.where(was[:, None], best + ua, first[None, :] + ua)
            delta = tl.where(on[:, None] & kmask[None, :], new, delta)
            tl.store(BP + row[:, None] + t * K + rk[None, :], arg.to(BP.dtype.element_ty), mask=mon & was[:, None])
            if GOLD_SCORE:
                step = tl.where(was, tl.load(TRANS + g * K + gprev, mask=bmask & on & was, other=0.0),
                                tl.load(FIRST + g, mask=bmask & on, other=0.0))
                gold_s += tl.where(on, gold_unary(u, g, rk) + step, 0.0)
                gprev = tl.where(on, g, gprev)
            if GAP_TERMS:
                mu = tl.load(MU + at[:, None] + rk[None, :], mask=mon, other=0.0)
                # a forbidden first / last tag scores -inf where M is 0: 0 there, not nan
                m_theta += tl.sum(tl.where(mu != 0, mu * tl.where(was[:, None], u, u + first[None, :]), 0.0), axis=1)
                mu_prev = tl.where(on[:, None], mu, mu_prev)
            first_on = tl.where(on & (started == 0), t, first_on)
            started = tl.where(on, 1, started)
        last = tl.load(LAST + rk, mask=kmask, other=neg)
        final = tl.where(kmask[None, :], delta + last[None, :], neg)
        tl.store(SCORES + rb, tl.where(started > 0, tl.max(final, axis=1), 0.0), mask=bmask)
        if GOLD_SCORE:
            gold_s += tl.load(LAST + gprev, mask=bmask & (started > 0), other=0.0)
            tl.store(GOLD_SCORES + rb, gold_s, mask=bmask)
        if GAP_TERMS:
            m_theta += tl.sum(tl.where(kmask[None, :] & (mu_prev != 0), mu_prev * last[None, :], 0.0), axis=1)
            tl.store(MTHETA + rb, m_theta, mask=bmask)
        cur = tl.argmax(final, axis=1).to(tl.int32)
        wrong = tl.zeros((BLOCK_B,), tl.int32)
        tl.debug_barrier()                           # back-pointers written by other threads of this program
        if not RAGGED:
            for t in range(t_end, T):                # padded rows: -1 past every chain of the program
                tl.store(LABELS + base + t, tl.full((BLOCK_B,), -1, tl.int64), mask=bmask)
        for s in range(0, t_end):
            t = t_end - 1 - s
            on = on_at(MASK, LEN, rb, t, T, bmask, HAS_MASK)
            if RAGGED:                               # ragged labels: only the row's own positions exist
                tl.store(LABELS + base + t, cur.to(tl.int64), mask=bmask & on)
            else:
                tl.store(LABELS + base + t, tl.where(on, cur, -1).to(tl.int64), mask=bmask)
            if GAP_TERMS:
                g = tl.load(GT + base + t, mask=bmask & on, other=0).to(tl.int32)
                wrong += (on & (cur != g)).to(tl.int32)
            follow = on & (t > first_on)
            prev = tl.load(BP + row + t * K + cur, mask=bmask & follow, other=0).to(tl.int32)
            cur = tl.where(follow, prev, cur)
        if GAP_TERMS:
            tl.store(WRONG + rb, wrong, mask=bmask)


_HAMMING: dict = {}


def hamming_cost(K: int, dtype, device) -> torch.Tensor:
    """1 - I (K, K): the Hamming cost matrix of the stores' loss-augmented calls (cached)."""
    key = (K, dtype, str(device))
    if key not in _HAMMING:
        _HAMMING[key] = 1.0 - torch.eye(K, dtype=dtype, device=device)
    return _HAMMING[key]


def launch_viterbi(U, first, last, trans, *, mask=None, lengths=None, gt=None, rowc=None, cost=None,
                   gold_score: bool = False, variant: str = "auto", block_b: int | None = None,
                   num_warps: int | None = None, unroll: bool = False, sort: bool | None = None):
    """(labels (B, T) int64 -1 off the chain, scores (B,) with the loss term when ``gt`` is given (0 for
    an empty row), gold scores (B,) or None): the kernel on ``mask`` (bool (B, T)) or ``lengths``;
    ``first``/``last``/``trans`` the effective scores (constraint penalties included) in U's dtype;
    the loss rowc_b cost[gt_t, k] (``gt`` int, ``rowc`` (B,), ``cost`` (K, K)). ``block_b`` /
    ``num_warps``: sequences per program and warps (None: the defaults; benchmarks/bench_gpu.py sweeps them);
    ``unroll``: the rows variant's loop over the previous tag unrolled (measured there too); ``sort``: chains
    taken in order of length, or of the last masked-on position (:func:`length_order`)."""
    if triton is None:
        raise RuntimeError("the Triton kernels need Triton, which is not installed")
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    if (mask is None) == (lengths is None):
        raise ValueError("launch_viterbi: expected the chains as exactly one of mask and lengths")
    B, T, K = U.shape
    dtype, dev = U.dtype, U.device
    auto = variant == "auto"
    if auto:
        variant = choose_variant(B, K)
    U = U.contiguous()
    first, last, trans = (x.to(dtype).contiguous() for x in (first, last, trans))
    dummy = torch.zeros(1, dtype=torch.int32, device=dev)
    mask_arg = dummy if mask is None else mask.contiguous().view(torch.uint8)
    if mask is not None:                       # where each row's chain ends: the kernel walks no further
        lengths = mask_ends(mask)
    len_arg = lengths.to(torch.int32).contiguous()
    has_gt = gt is not None
    gt_arg = gt.contiguous() if has_gt else dummy
    rowc_arg = rowc.to(dtype).contiguous() if has_gt else torch.zeros(1, dtype=dtype, device=dev)
    cost_arg = cost.to(dtype).contiguous() if has_gt else rowc_arg
    bp = torch.empty((B, T, K), dtype=torch.int8 if K <= 127 else torch.int16, device=dev)
    labels = torch.empty((B, T), dtype=torch.int64, device=dev)
    scores = torch.empty((B,), dtype=dtype, device=dev)
    gold_scores = torch.empty((B,), dtype=dtype, device=dev) if gold_score else scores
    rows = variant == "rows"
    default_b, block_k = block_sizes(K)
    if block_b is None:
        block_b = (ROWS_BLOCK_B if auto else max(1, min(64, 2048 // block_k))) if rows else default_b
    if num_warps is None:
        num_warps = (ROWS_WARPS if auto else 4) if rows else (4 if block_k <= 32 else 8)
    if unroll and not rows:
        raise ValueError(f"unroll: only the rows variant has a loop to unroll, got variant {variant!r}")
    grid = (triton.cdiv(B, block_b),)
    scratch = torch.empty((grid[0] * block_b, block_k) if rows else (1,), dtype=dtype, device=dev)
    order = length_order(len_arg, sort)
    _viterbi_kernel[grid](U, mask_arg, len_arg, dummy, dummy if order is None else order, first, last, trans, gt_arg, rowc_arg, cost_arg, rowc_arg, bp,
                          scratch, labels, scores, gold_scores, scores, dummy, B, T, K, HAS_MASK=mask is not None,
                          RAGGED=False, SORTED=order is not None, HAS_GT=has_gt, GOLD_SCORE=gold_score,
                          GAP_TERMS=False, MODE=MODES[variant], UNROLL=unroll, BLOCK_B=block_b, BLOCK_K=block_k, num_warps=num_warps)
    return labels, scores, (gold_scores if gold_score else None)


def ragged_gap_terms(U, offsets, T: int, Y, Mu, first, last, trans, rowc, cost, variant: str = "auto",
                     sort: bool | None = None, order: torch.Tensor | None = None):
    """One kernel for the stores' exact gap pass on ragged chains (U, Y, Mu stacked (N, ...) at
    ``offsets`` (n + 1,), T = the longest chain): (labels (N,) of the loss-augmented Viterbi with the
    loss rowc_b cost[Y_t, k], aug scores (n,), s(Y) (n,), <M_b, U_b> + M_b[first]·first +
    M_b[last]·last (n,), wrong positions (n,) int32). ``first``/``last``/``trans`` effective (penalties
    included), in U's dtype; the <M_t, trans> term is the caller's (one reduction). ``variant``, ``sort``: as
    :func:`launch_viterbi`'s; ``order``: :func:`length_order`'s result, given by a caller whose chains never
    change (then ``sort`` is not read)."""
    if triton is None:
        raise RuntimeError("the Triton kernels need Triton, which is not installed")
    n, K = offsets.shape[0] - 1, U.shape[1]
    dtype, dev = U.dtype, U.device
    first, last, trans = (x.to(dtype).contiguous() for x in (first, last, trans))
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int32).contiguous()
    variant = choose_variant(n, K) if variant == "auto" else variant
    block_b, block_k = block_sizes(K)
    if variant == "rows":
        block_b = ROWS_BLOCK_B
    grid = (triton.cdiv(n, block_b),)
    labels = torch.empty(U.shape[0], dtype=torch.int64, device=dev)
    aug, gold, m_theta = (torch.empty(n, dtype=dtype, device=dev) for _ in range(3))
    wrong = torch.empty(n, dtype=torch.int32, device=dev)
    bp = torch.empty((n, T, K), dtype=torch.int8 if K <= 127 else torch.int16, device=dev)
    scratch = torch.empty((grid[0] * block_b, block_k) if variant == "rows" else (1,), dtype=dtype, device=dev)
    order = length_order(lengths, sort) if order is None else order
    _viterbi_kernel[grid](U.contiguous(), lengths, lengths, offsets.contiguous(), lengths if order is None else order,
                          first, last, trans, Y.contiguous(), rowc.to(dtype).contiguous(), cost.to(dtype).contiguous(),
                          Mu.contiguous(), bp, scratch, labels, aug, gold, m_theta, wrong, n, T, K, HAS_MASK=False,
                          RAGGED=True, SORTED=order is not None, HAS_GT=True,
                          GOLD_SCORE=True, GAP_TERMS=True, MODE=MODES[variant], UNROLL=False, BLOCK_B=block_b,
                          BLOCK_K=block_k,
                          num_warps=ROWS_WARPS if variant == "rows" else (4 if block_k <= 32 else 8))
    return labels, aug, gold, m_theta, wrong


def viterbi_fused(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                  trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
                  penalty=None, variant: str = "auto", block_b: int | None = None, num_warps: int | None = None,
                  unroll: bool = False, sort: bool | None = None):
    """:func:`ssvm_torch.chain.padded.viterbi` as one Triton kernel (same arguments, same result:
    labels (B, T) int64 padded with -1, scores (B,) including the loss term when ``gt`` is given:
    the Hamming loss weighted by ``token_loss`` per sequence, 1 / length by default).
    ``variant``: ``tile`` (the max over the previous tag as a (BLOCK_B, K, K) register tile reduced across
    lanes), ``transposed`` (the same tile reduced within each thread), ``rows`` (a loop over the previous
    tag inside each thread) or ``auto`` (:func:`choose_variant`); ``sort``: see :func:`length_order`."""
    if penalty is not None:
        first, last, trans = first + penalty[0], last + penalty[1], trans + penalty[2]
    rowc = cost = None
    if gt is not None:
        rowc = 1.0 / lengths.to(unary.dtype) if token_loss is None else token_loss
        cost = hamming_cost(unary.shape[2], unary.dtype, unary.device)
    labels, scores, _ = launch_viterbi(unary, first, last, trans, lengths=lengths, gt=gt, rowc=rowc, cost=cost,
                                       variant=variant, block_b=block_b, num_warps=num_warps, unroll=unroll,
                                       sort=sort)
    return labels, scores


def decode_masked(E, mask, first, last, trans, gold=None, rowc=None, cost=None, gold_score: bool = False,
                  variant: str = "auto"):
    """(labels (B, T) -1 where masked off, scores (B,), gold scores (B,) or None) of chains given by a
    bool mask with gaps (row b's chain = its masked-on positions; an empty row scores 0 and decodes
    to all -1): :func:`launch_viterbi` with the layer's loss rowc_b cost[gold_t, k]."""
    return launch_viterbi(E, first, last, trans, mask=mask, gt=gold, rowc=rowc, cost=cost, gold_score=gold_score,
                          variant=variant)
