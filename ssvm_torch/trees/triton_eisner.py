"""The projective first-order recursions (Eisner 1996) as two Triton kernels for CUDA: one program per
sentence walks every span width inside one launch, where the torch recursions
(:mod:`ssvm_torch.trees.torch_eisner`) launch ~25 kernels per width and, on CUDA, sort the indices of
every accumulating scatter (their backward and backtrack).

* :func:`inside`: the charts of the inside pass, kept by [width, start] as in the torch recursions
  (flat index w * N + i of a (B, N * N) chart per sentence): the incomplete spans
  X[w, i] = (+) over d < w of CR[d, i] (x) CL[w-1-d, i+d+1], IR = X + SR, IL = X + SL, and the complete
  spans CR[w, i] = (+)_{1 <= d <= w} IR[d, i] (x) CR[w-d, i+d], CL[w, i] = (+)_{d < w} CL[d, i] (x)
  IL[w-d, i+d], in the log semiring ((+) = logsumexp, for log Z) or max-plus ((+) = max, the split point
  of every item kept: the first that attains the max, the numba kernel's tie rule).
* :func:`outside`: the adjoints of every chart item from the adjoints of the root's items, widest spans
  first: a parent's adjoint goes to the children of each split in proportion to
  exp(children - parent) (log semiring: the outside pass, so the adjoints of IR / IL are d log Z / d SR,
  SL, the arc marginals) or entirely to the kept split (max-plus: the adjoints are the 0/1 items of the
  best derivation, the backtrack).

Within a width every child is written by one parent, so each phase reads, adds and stores without
atomics; a barrier separates the phases (a program's global writes are visible to its threads after
it), and the kernels launch with one pipeline stage so that no load is issued before the barrier that
orders it. Scores are float32 or float64 (the charts' dtype); absent arcs carry the finite sentinel
:data:`~ssvm_torch.trees.torch_eisner.NEG` as in the torch recursions.
"""
from __future__ import annotations


import torch

from ..chain.triton_viterbi import interpreting, triton
from ..errors import env_choice
from .torch_eisner import NEG, arc_tables, root_alone, root_terms

#: span starts and split points per tile of the kernels (a (BLOCK_I, BLOCK_D) tile per step)
BLOCK_I, BLOCK_D = 64, 32
DTYPES = (torch.float32, torch.float64)

if triton is not None:                     # without Triton (the package's own dependencies) these names do not exist
    import triton.language as tl

    @triton.jit
    def _split_reduce(A, C, base, N, i, im, w, lo, c1, rd, MAXPLUS: tl.constexpr, BLOCK_I: tl.constexpr,
                      BLOCK_D: tl.constexpr):
        """(+) over the splits d in [lo, lo + w) of A[d, i] (x) C[w - d - c1, i + d + c1] for the starts i:
        (value, first split attaining it) in max-plus, (logsumexp, 0) in the log semiring."""
        m = tl.full((BLOCK_I,), float("-inf"), A.dtype.element_ty)
        s = tl.zeros((BLOCK_I,), A.dtype.element_ty)
        arg = tl.zeros((BLOCK_I,), tl.int32)
        for d0 in range(lo, lo + w, BLOCK_D):
            d = d0 + rd
            m2 = im[:, None] & (d[None, :] < lo + w)
            a = tl.load(A + base + d[None, :] * N + i[:, None], mask=m2, other=0.0)
            c = tl.load(C + base + (w - d[None, :] - c1) * N + i[:, None] + d[None, :] + c1, mask=m2, other=0.0)
            v = tl.where(m2, a + c, float("-inf"))
            cm = tl.max(v, axis=1)
            if MAXPLUS:
                better = cm > m                                  # strict: an earlier chunk keeps its tie
                arg = tl.where(better, d0 + tl.argmax(v, axis=1), arg)
                m = tl.where(better, cm, m)
            else:
                nm = tl.maximum(m, cm)
                safe = tl.where(nm > float("-inf"), nm, 0.0)
                s = s * tl.exp(m - safe) + tl.sum(tl.exp(v - safe[:, None]), axis=1)
                m = nm
        if not MAXPLUS:
            m = m + tl.log(s)
        return m, arg

    @triton.jit
    def _complete_items(CR, CL, IR, IL, AR, AL, base, N, START, w, ri, rd, MAXPLUS: tl.constexpr,
                        BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The complete items of width w, CR[w, i] = (+)_{0<d<=w} IR[d, i] (x) CR[w-d, i+d] and
        CL[w, i] = (+)_{0<=d<w} CL[d, i] (x) IL[w-d, i+d], and in max-plus their kept splits AR, AL: the
        second phase of a width in the inside kernels of both orders (:mod:`ssvm_torch.trees.triton_sibling`)."""
        for i0 in range(START, N - w, BLOCK_I):
            i = i0 + ri
            im = i < N - w
            at = base + w * N + i
            cr, ar = _split_reduce(IR, CR, base, N, i, im, w, 1, 0, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            cl, al = _split_reduce(CL, IL, base, N, i, im, w, 0, 0, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.store(CR + at, cr, mask=im)
            tl.store(CL + at, cl, mask=im)
            if MAXPLUS:
                tl.store(AR + at, ar, mask=im)
                tl.store(AL + at, al, mask=im)

    @triton.jit
    def _inside_kernel(SR, SL, CR, CL, IR, IL, X, AX, AR, AL, N, START, MAXPLUS: tl.constexpr,
                       BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The inside charts of one sentence (module docstring), widths 1..N-1-START; width 0 and the
        spans never built keep the values the caller initialised."""
        base = tl.program_id(0).to(tl.int64) * N * N
        ri = tl.arange(0, BLOCK_I)
        rd = tl.arange(0, BLOCK_D)
        for w in range(1, N - START):
            for i0 in range(START, N - w, BLOCK_I):              # incomplete spans: the split, then the arc
                i = i0 + ri
                im = i < N - w
                x, ax = _split_reduce(CR, CL, base, N, i, im, w, 0, 1, rd, MAXPLUS, BLOCK_I, BLOCK_D)
                at = base + w * N + i
                tl.store(X + at, x, mask=im)
                tl.store(IR + at, x + tl.load(SR + at, mask=im, other=0.0), mask=im)
                tl.store(IL + at, x + tl.load(SL + at, mask=im, other=0.0), mask=im)
                if MAXPLUS:
                    tl.store(AX + at, ax, mask=im)
            tl.debug_barrier()
            _complete_items(CR, CL, IR, IL, AR, AL, base, N, START, w, ri, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()

    @triton.jit
    def _spread(A, C, GA, GC, P, g, ARG, base, N, i, im, w, lo, c1, rd, MAXPLUS: tl.constexpr,
                BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The adjoints ``g`` of the parents P[w, i] = (+)_d A[d, i] (x) C[w-d-c1, i+d+c1] added to the
        children's adjoints GA, GC: weight exp(A + C - P) (log semiring) or [d == ARG] (max-plus)."""
        at = base + w * N + i
        if MAXPLUS:
            arg = tl.load(ARG + at, mask=im, other=-1)
        else:
            p = tl.load(P + at, mask=im, other=0.0)
        for d0 in range(lo, lo + w, BLOCK_D):
            d = d0 + rd
            m2 = im[:, None] & (d[None, :] < lo + w)
            ia = base + d[None, :] * N + i[:, None]
            ic = base + (w - d[None, :] - c1) * N + i[:, None] + d[None, :] + c1
            if MAXPLUS:
                wt = tl.where(d[None, :] == arg[:, None], 1.0, 0.0)
            else:
                a = tl.load(A + ia, mask=m2, other=0.0)
                c = tl.load(C + ic, mask=m2, other=0.0)
                wt = tl.exp(a + c - p[:, None])
            add = tl.where(m2, g[:, None] * wt, 0.0)
            tl.store(GA + ia, tl.load(GA + ia, mask=m2, other=0.0) + add, mask=m2)
            tl.store(GC + ic, tl.load(GC + ic, mask=m2, other=0.0) + add, mask=m2)

    @triton.jit
    def _complete_adjoints(CR, CL, IR, IL, AR, AL, GCR, GCL, GIR, GIL, base, N, START, w, ri, rd,
                           MAXPLUS: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The adjoints of the complete items of width w spread to their children (the reverse of
        :func:`_complete_items`; the first phase of a width in both orders' outside kernels)."""
        for i0 in range(START, N - w, BLOCK_I):
            i = i0 + ri
            im = i < N - w
            at = base + w * N + i
            g_r = tl.load(GCR + at, mask=im, other=0.0)
            g_l = tl.load(GCL + at, mask=im, other=0.0)
            _spread(IR, CR, GIR, GCR, CR, g_r, AR, base, N, i, im, w, 1, 0, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            _spread(CL, IL, GCL, GIL, CL, g_l, AL, base, N, i, im, w, 0, 0, rd, MAXPLUS, BLOCK_I, BLOCK_D)

    @triton.jit
    def _outside_kernel(CR, CL, IR, IL, X, AX, AR, AL, GCR, GCL, GIR, GIL, N, START, MAXPLUS: tl.constexpr,
                        BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The adjoints of one sentence's chart items from those of its widest items down (module
        docstring): complete parents of width w first (their children include the incomplete spans of
        width w), then the incomplete ones, whose adjoint GIR + GIL is that of X."""
        base = tl.program_id(0).to(tl.int64) * N * N
        ri = tl.arange(0, BLOCK_I)
        rd = tl.arange(0, BLOCK_D)
        for k in range(0, N - 1 - START):
            w = N - 1 - START - k
            _complete_adjoints(CR, CL, IR, IL, AR, AL, GCR, GCL, GIR, GIL, base, N, START, w, ri, rd, MAXPLUS,
                               BLOCK_I, BLOCK_D)
            tl.debug_barrier()
            for i0 in range(START, N - w, BLOCK_I):
                i = i0 + ri
                im = i < N - w
                at = base + w * N + i
                gx = tl.load(GIR + at, mask=im, other=0.0) + tl.load(GIL + at, mask=im, other=0.0)
                # the split X[w, i] = (+)_d CR[d, i] (x) CL[w-1-d, i+d+1]
                _spread(CR, CL, GCR, GCL, X, gx, AX, base, N, i, im, w, 0, 1, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()


def available(S: torch.Tensor) -> bool:
    """True where these kernels serve the projective recursions: Triton importable, float32 / float64
    scores on CUDA (or on any device under ``TRITON_INTERPRET=1`` when called directly), and
    ``SSVM_CUDA_EISNER`` not ``loop`` (which keeps the torch recursions, for comparison)."""
    choice = env_choice("SSVM_CUDA_EISNER", ("fused", "loop"), "fused")
    return triton is not None and choice == "fused" and S.dtype in DTYPES and S.is_cuda


def _charts(SR: torch.Tensor, start: int):
    """Fresh charts for a batch of N positions: width 0 of the complete spans 0, everything else NEG."""
    B, N, _ = SR.shape
    CR = torch.full((B, N * N), NEG, dtype=SR.dtype, device=SR.device)
    CR[:, :N] = 0.0
    return CR, CR.clone(), torch.full_like(CR, NEG), torch.full_like(CR, NEG), torch.full_like(CR, NEG)


def inside(SR: torch.Tensor, SL: torch.Tensor, start: int, maxplus: bool):
    """The inside charts (CR, CL, IR, IL, X), each (B, N * N), and in max-plus the kept splits (AX, AR, AL)
    (int32, else None), of the arc tables SR / SL (B, N, N) [width, start] of
    :func:`ssvm_torch.trees.torch_eisner.arc_tables`; ``start`` 1 leaves the spans that start at the root
    out (single root)."""
    if triton is None:
        raise RuntimeError("the Triton kernels need Triton, which is not installed")
    B, N, _ = SR.shape
    SR, SL = SR.contiguous(), SL.contiguous()
    CR, CL, IR, IL, X = _charts(SR, start)
    args = [torch.zeros_like(CR, dtype=torch.int32) for _ in range(3)] if maxplus else [CR] * 3
    if B and N > 1:
        _inside_kernel[(B,)](SR, SL, CR, CL, IR, IL, X, *args, N, start, MAXPLUS=maxplus, BLOCK_I=BLOCK_I,
                             BLOCK_D=BLOCK_D, num_stages=1)
    return (CR, CL, IR, IL, X), (tuple(args) if maxplus else None)


def outside(charts, splits, gCR: torch.Tensor, gCL: torch.Tensor, start: int):
    """The adjoints (gIR, gIL) (B, N * N) of the incomplete spans, i.e. of the arcs SR / SL, given the
    adjoints gCR / gCL (B, N * N) of the complete spans that the root's terms read (not modified).
    ``splits`` None: the log semiring's outside pass; else the max-plus charts' kept splits (the 0/1
    items of the best derivation)."""
    CR, CL, IR, IL, X = charts
    B, NN = CR.shape
    N = int(round(NN ** 0.5))
    gCR, gCL = gCR.to(CR.dtype).contiguous().clone(), gCL.to(CR.dtype).contiguous().clone()
    gIR, gIL = torch.zeros_like(CR), torch.zeros_like(CR)
    maxplus = splits is not None
    args = splits if maxplus else (CR, CR, CR)
    if B and N > 1:
        _outside_kernel[(B,)](CR, CL, IR, IL, X, *args, gCR, gCL, gIR, gIL, N, start, MAXPLUS=maxplus,
                              BLOCK_I=BLOCK_I, BLOCK_D=BLOCK_D, num_stages=1)
    return gIR, gIL


class InsideCharts(torch.autograd.Function):
    """(CR, CL) (B, N, N) [width, start] of the log-semiring inside pass of SR / SL; the backward is the
    outside kernel (no graph through the recursion)."""

    @staticmethod
    def forward(ctx, SR, SL, start):
        charts, _ = inside(SR.detach(), SL.detach(), start, maxplus=False)
        ctx.save_for_backward(*charts)
        ctx.start = start
        B, N, _ = SR.shape
        return charts[0].view(B, N, N), charts[1].view(B, N, N)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gCR, gCL):
        charts = ctx.saved_tensors
        B, NN = charts[0].shape
        zero = torch.zeros_like(charts[0])
        gCR = zero if gCR is None else gCR.reshape(B, NN)
        gCL = zero if gCL is None else gCL.reshape(B, NN)
        gIR, gIL = outside(charts, None, gCR, gCL, ctx.start)
        N = int(round(NN ** 0.5))
        return gIR.view(B, N, N), gIL.view(B, N, N), None


def interpreter_ready() -> bool:
    """True where the kernels can run on CPU tensors (Triton's interpreter, ``TRITON_INTERPRET=1``)."""
    return triton is not None and interpreting()


def log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) as :func:`ssvm_torch.trees.torch_eisner.log_partition` computes it (same arc tables and
    root terms), the recursion in the inside kernel and its gradient (the arc marginals) by the outside
    kernel."""
    B, N, _ = S.shape
    if N == 1:
        return root_alone(S)
    start = 0 if multiroot else 1
    SR, SL = arc_tables(S, lengths)
    CR, CL = InsideCharts.apply(SR, SL, start)
    if multiroot:
        out = CR.reshape(B, N * N).gather(1, (lengths * N)[:, None])[:, 0]
    else:
        out = torch.logsumexp(root_terms(SR, CL, CR, lengths, N), 1)
    return torch.where(lengths > 0, out, torch.zeros_like(out))


def root_adjoints(SR: torch.Tensor, CR: torch.Tensor, CL: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """The max-plus root of the inside charts CR / CL (B, N * N): (gCR, gCL) (B, N * N), 1 at the complete items
    of the root's best term (0 for an empty row), the best scores (B,) and the single root's child (B,) (0 for
    multi-root). Ties: the leftmost root child."""
    B, NN = CR.shape
    N = int(round(NN ** 0.5))
    gCR, gCL = torch.zeros_like(CR), torch.zeros_like(CR)
    has = (lengths > 0).to(CR.dtype)
    root_child = torch.zeros(B, dtype=torch.int64, device=CR.device)
    if multiroot:
        score = CR.gather(1, (lengths * N)[:, None])[:, 0]
        gCR.scatter_(1, (lengths * N)[:, None], has[:, None])
    else:
        score, r = root_terms(SR, CL.view(B, N, N), CR.view(B, N, N), lengths, N).max(1)
        root_child = r + 1
        gCL.scatter_(1, (root_child - 1)[:, None] * N + 1, has[:, None])
        gCR.scatter_(1, ((lengths - root_child).clamp(min=0) * N + root_child)[:, None], has[:, None])
    return gCR, gCL, torch.where(lengths > 0, score, torch.zeros_like(score)), root_child


def heads_of_arcs(on_r: torch.Tensor, on_l: torch.Tensor, root_child: torch.Tensor, lengths: torch.Tensor,
                  multiroot: bool) -> torch.Tensor:
    """heads (B, N) int64 (-1 at 0 and beyond the length) from the 0/1 incomplete items of a best derivation,
    on_r / on_l (B, N * N) [width, start] (the arc of [i, i+w]: head i of word i+w, or head i+w of word i),
    plus the single root's child."""
    B, NN = on_r.shape
    N = int(round(NN ** 0.5))
    dev, dtype = on_r.device, on_r.dtype
    pos = torch.arange(N, device=dev)
    w, i = pos[:, None], pos[None, :]
    inside_n = (w + i < N) & (w > 0)
    head_plus = torch.zeros(B, N, dtype=dtype, device=dev)
    on_r, on_l = on_r.view(B, N, N) * inside_n, on_l.view(B, N, N) * inside_n
    head_plus.scatter_add_(1, (w + i).clamp(max=N - 1).reshape(1, -1).expand(B, -1),
                           (on_r * (i + 1).to(dtype)).reshape(B, -1))
    head_plus.scatter_add_(1, i.expand(N, N).reshape(1, -1).expand(B, -1),
                           (on_l * (w + i + 1).to(dtype)).reshape(B, -1))
    if not multiroot:                                   # the root child's arc from 0: head + 1 = 1
        head_plus.scatter_add_(1, root_child[:, None], (lengths > 0).to(dtype)[:, None])
    heads = head_plus.round().to(torch.int64) - 1
    return torch.where((pos[None] >= 1) & (pos[None] <= lengths[:, None]), heads, torch.full_like(heads, -1))


def best_tree(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, N) int64, -1 at 0 and beyond the length; scores (B,)) as
    :func:`ssvm_torch.trees.torch_eisner.best_tree` returns them, ties broken the same way (the first
    split point, the leftmost root child): the max-plus inside kernel, then the outside kernel over the
    kept splits marks the best derivation's arcs."""
    B, N, _ = S.shape
    dev = S.device
    if N == 1:
        return torch.full((B, 1), -1, dtype=torch.int64, device=dev), torch.zeros(B, dtype=S.dtype, device=dev)
    start = 0 if multiroot else 1
    S = S.detach()
    SR, SL = arc_tables(S, lengths)
    charts, splits = inside(SR, SL, start, maxplus=True)
    gCR, gCL, score, root_child = root_adjoints(SR, charts[0], charts[1], lengths, multiroot)
    on_r, on_l = outside(charts, splits, gCR, gCL, start)
    return heads_of_arcs(on_r, on_l, root_child, lengths, multiroot), score
