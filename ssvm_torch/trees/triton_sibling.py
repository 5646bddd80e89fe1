"""The second-order (adjacent-sibling) projective recursions as two Triton kernels for CUDA, one program per
sentence walking every span width in one launch, like the first order's (:mod:`ssvm_torch.trees.triton_eisner`,
whose split reduction, adjoint spreading and complete-item phases they reuse).

* :func:`inside`: the items of :mod:`ssvm_torch.trees.torch_sibling` by [width, start] (flat index w * N + i
  of a (B, N * N) chart per sentence). Per width, phase 1 builds the sibling items X[w] and the incomplete
  items, each as its inner value JR / JL (the nearest dependent (+) the siblings k) plus the arc score:
  JR[w, i] = CL[w-1, i+1] (+) (+)_{0<k<w} IR[k, i] (x) X[w-k, i+k] (x) SB[i+w, i, i+k], IR = JR + SR, and
  JL[w, i] = CR[w-1, i] (+) (+)_{0<k<w} X[k, i] (x) IL[w-k, i+k] (x) SB[i, i+w, i+k], IL = JL + SL; phase 2
  the complete items CR[w], CL[w]. Log semiring (log Z) or max-plus (the kept candidate of every item: the
  first attaining the max, nearest dependent first, the compiled kernel's tie rule).
* :func:`outside`: the adjoints from the root's items down, widths from the widest: phase A the complete
  items of width w (their children include IR / IL of width w), B the IR items (to the nearest CL, the
  previous sibling's IR, the sibling item X and the sibling score), C the IL items likewise, D the X items
  (to their complete halves). Within a phase every child has one parent, so each phase reads, adds and
  stores without atomics; a barrier separates the phases. The adjoints of IR / IL are d log Z / d SR, SL
  (the arc marginals), and the sibling scores' adjoints d log Z / d SB are written once each (the sibling
  marginals). In max-plus the adjoints are the 0/1 items of the best derivation (the backtrack).

Absent arcs carry the finite sentinel :data:`~ssvm_torch.trees.torch_eisner.NEG`; -inf sibling scores are
read as NEG.
"""
from __future__ import annotations

import torch

from ..chain.triton_viterbi import triton
from . import triton_eisner
from .torch_eisner import NEG, arc_tables, root_alone, root_terms

DTYPES = triton_eisner.DTYPES

if triton is not None:                     # without Triton (the package's own dependencies) these names do not exist
    import triton.language as tl

    from .triton_eisner import _complete_adjoints, _complete_items, _split_reduce, _spread

    _NEG = tl.constexpr(NEG)                # a global the kernels may read (Triton reads constexpr globals only)

    @triton.jit
    def _sib_index(sbase, N, i, k, w, LEFT: tl.constexpr):
        """Flat index of SB[b, i+w, i, i+k] (arc i -> i+w, IR) or SB[b, i, i+w, i+k] (arc i+w -> i, IL)."""
        i64 = i.to(tl.int64)[:, None]
        k64 = k.to(tl.int64)[None, :]
        if LEFT:
            return sbase + (i64 * N + i64 + w) * N + i64 + k64
        return sbase + ((i64 + w) * N + i64) * N + i64 + k64

    @triton.jit
    def _sib_reduce(A, C, SB, base, sbase, N, i, im, w, near, rd, LEFT: tl.constexpr, MAXPLUS: tl.constexpr,
                    BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """near (+) (+)_{0 < k < w} A[k, i] (x) C[w-k, i+k] (x) SB[...] for the starts i: (value, kept
        candidate: 0 for the nearest dependent, else k) in max-plus, (logsumexp, 0) in the log semiring."""
        m = near
        s = tl.full((BLOCK_I,), 1.0, near.dtype)
        arg = tl.zeros((BLOCK_I,), tl.int32)
        for k0 in range(1, w, BLOCK_D):
            k = k0 + rd
            m2 = im[:, None] & (k[None, :] < w)
            a = tl.load(A + base + k[None, :] * N + i[:, None], mask=m2, other=0.0)
            c = tl.load(C + base + (w - k[None, :]) * N + i[:, None] + k[None, :], mask=m2, other=0.0)
            sb = tl.load(SB + _sib_index(sbase, N, i, k, w, LEFT), mask=m2, other=0.0)
            sb = tl.where(sb == float("-inf"), _NEG, sb)
            v = tl.where(m2, a + c + sb, float("-inf"))
            cm = tl.max(v, axis=1)
            if MAXPLUS:
                better = cm > m                                  # strict: the nearest and earlier k keep ties
                arg = tl.where(better, k0 + tl.argmax(v, axis=1), arg)
                m = tl.where(better, cm, m)
            else:
                nm = tl.maximum(m, cm)
                s = s * tl.exp(m - nm) + tl.sum(tl.exp(v - nm[:, None]), axis=1)
                m = nm
        if not MAXPLUS:
            m = m + tl.log(s)
        return m, arg

    @triton.jit
    def _inside_kernel(SR, SL, SB, CR, CL, IR, IL, X, JR, JL, AX, AR, AL, KR, KL, N, START, MAXPLUS: tl.constexpr,
                       BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The inside charts of one sentence (module docstring), widths 1..N-1-START."""
        b = tl.program_id(0).to(tl.int64)
        base = b * N * N
        sbase = base * N
        ri = tl.arange(0, BLOCK_I)
        rd = tl.arange(0, BLOCK_D)
        for w in range(1, N - START):
            for i0 in range(START, N - w, BLOCK_I):              # sibling items, then the incomplete ones
                i = i0 + ri
                im = i < N - w
                at = base + w * N + i
                x, ax = _split_reduce(CR, CL, base, N, i, im, w, 0, 1, rd, MAXPLUS, BLOCK_I, BLOCK_D)
                tl.store(X + at, x, mask=im)
                near = tl.load(CL + base + (w - 1) * N + i + 1, mask=im, other=0.0)
                jr, kr = _sib_reduce(IR, X, SB, base, sbase, N, i, im, w, near, rd, False, MAXPLUS, BLOCK_I, BLOCK_D)
                near = tl.load(CR + base + (w - 1) * N + i, mask=im, other=0.0)
                jl, kl = _sib_reduce(X, IL, SB, base, sbase, N, i, im, w, near, rd, True, MAXPLUS, BLOCK_I, BLOCK_D)
                tl.store(JR + at, jr, mask=im)
                tl.store(JL + at, jl, mask=im)
                tl.store(IR + at, jr + tl.load(SR + at, mask=im, other=0.0), mask=im)
                tl.store(IL + at, jl + tl.load(SL + at, mask=im, other=0.0), mask=im)
                if MAXPLUS:
                    tl.store(AX + at, ax, mask=im)
                    tl.store(KR + at, kr, mask=im)
                    tl.store(KL + at, kl, mask=im)
            tl.debug_barrier()
            _complete_items(CR, CL, IR, IL, AR, AL, base, N, START, w, ri, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()

    @triton.jit
    def _sib_spread(A, C, SB, J, NEAR, GA, GC, GNEAR, GSB, KEPT, base, sbase, N, i, im, w, g, near_at, rd,
                    LEFT: tl.constexpr, MAXPLUS: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The adjoints ``g`` of the incomplete items (their inner values J = near (+) siblings) spread to the
        nearest item NEAR (adjoint GNEAR), the sibling terms' A[k, i] and C[w-k, i+k] (GA, GC) and the
        sibling scores (GSB, stored): weight exp(term - J) (log semiring) or [candidate == KEPT] (max-plus)."""
        at = base + w * N + i
        if MAXPLUS:
            kept = tl.load(KEPT + at, mask=im, other=-1)
            wn = tl.where(kept == 0, 1.0, 0.0)
        else:
            j = tl.load(J + at, mask=im, other=0.0)
            wn = tl.exp(tl.where(im, tl.load(NEAR + near_at, mask=im, other=0.0) - j, float("-inf")))
        tl.store(GNEAR + near_at, tl.load(GNEAR + near_at, mask=im, other=0.0) + g * wn, mask=im)
        for k0 in range(1, w, BLOCK_D):
            k = k0 + rd
            m2 = im[:, None] & (k[None, :] < w)
            ia = base + k[None, :] * N + i[:, None]
            ic = base + (w - k[None, :]) * N + i[:, None] + k[None, :]
            isb = _sib_index(sbase, N, i, k, w, LEFT)
            if MAXPLUS:
                wt = tl.where(k[None, :] == kept[:, None], 1.0, 0.0)
            else:
                a = tl.load(A + ia, mask=m2, other=0.0)
                c = tl.load(C + ic, mask=m2, other=0.0)
                sb = tl.load(SB + isb, mask=m2, other=0.0)
                sb = tl.where(sb == float("-inf"), _NEG, sb)
                wt = tl.exp(tl.where(m2, a + c + sb - j[:, None], float("-inf")))
            add = tl.where(m2, g[:, None] * wt, 0.0)
            tl.store(GA + ia, tl.load(GA + ia, mask=m2, other=0.0) + add, mask=m2)
            tl.store(GC + ic, tl.load(GC + ic, mask=m2, other=0.0) + add, mask=m2)
            tl.store(GSB + isb, add, mask=m2)

    @triton.jit
    def _outside_kernel(SB, CR, CL, IR, IL, X, JR, JL, AX, AR, AL, KR, KL, GCR, GCL, GIR, GIL, GX, GSB, N, START,
                        MAXPLUS: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
        """The adjoints of one sentence's items from those of its widest items down (module docstring)."""
        b = tl.program_id(0).to(tl.int64)
        base = b * N * N
        sbase = base * N
        ri = tl.arange(0, BLOCK_I)
        rd = tl.arange(0, BLOCK_D)
        for t in range(0, N - 1 - START):
            w = N - 1 - START - t
            # A: complete items
            _complete_adjoints(CR, CL, IR, IL, AR, AL, GCR, GCL, GIR, GIL, base, N, START, w, ri, rd, MAXPLUS,
                               BLOCK_I, BLOCK_D)
            tl.debug_barrier()
            for i0 in range(START, N - w, BLOCK_I):              # B: IR (arc i -> i+w)
                i = i0 + ri
                im = i < N - w
                g = tl.load(GIR + base + w * N + i, mask=im, other=0.0)
                _sib_spread(IR, X, SB, JR, CL, GIR, GX, GCL, GSB, KR, base, sbase, N, i, im, w, g,
                            base + (w - 1) * N + i + 1, rd, False, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()
            for i0 in range(START, N - w, BLOCK_I):              # C: IL (arc i+w -> i)
                i = i0 + ri
                im = i < N - w
                g = tl.load(GIL + base + w * N + i, mask=im, other=0.0)
                _sib_spread(X, IL, SB, JL, CR, GX, GIL, GCR, GSB, KL, base, sbase, N, i, im, w, g,
                            base + (w - 1) * N + i, rd, True, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()
            for i0 in range(START, N - w, BLOCK_I):              # D: sibling items
                i = i0 + ri
                im = i < N - w
                gx = tl.load(GX + base + w * N + i, mask=im, other=0.0)
                _spread(CR, CL, GCR, GCL, X, gx, AX, base, N, i, im, w, 0, 1, rd, MAXPLUS, BLOCK_I, BLOCK_D)
            tl.debug_barrier()


def available(S: torch.Tensor) -> bool:
    """True where these kernels serve the second-order recursions: the first order's rule
    (:func:`ssvm_torch.trees.triton_eisner.available`, ``SSVM_CUDA_EISNER=loop`` included)."""
    return triton_eisner.available(S)


def inside(SR: torch.Tensor, SL: torch.Tensor, SB: torch.Tensor, start: int, maxplus: bool):
    """The inside charts (CR, CL, IR, IL, X, JR, JL), each (B, N * N), and in max-plus the kept candidates
    (AX, AR, AL, KR, KL) (int32, else None), of the arc tables SR / SL (B, N, N) [width, start] of
    :func:`ssvm_torch.trees.torch_eisner.arc_tables` and the sibling scores SB (B, N, N, N)."""
    if triton is None:
        raise RuntimeError("the Triton kernels need Triton, which is not installed")
    B, N, _ = SR.shape
    SR, SL, SB = SR.contiguous(), SL.contiguous(), SB.contiguous()
    CR = torch.full((B, N * N), NEG, dtype=SR.dtype, device=SR.device)
    CR[:, :N] = 0.0
    charts = (CR, CR.clone()) + tuple(torch.full_like(CR, NEG) for _ in range(5))
    kept = [torch.zeros_like(CR, dtype=torch.int32) for _ in range(5)] if maxplus else [CR] * 5
    if B and N > 1:
        _inside_kernel[(B,)](SR, SL, SB, *charts, *kept, N, start, MAXPLUS=maxplus, BLOCK_I=triton_eisner.BLOCK_I,
                             BLOCK_D=triton_eisner.BLOCK_D, num_stages=1)
    return charts, (tuple(kept) if maxplus else None)


def outside(SB: torch.Tensor, charts, kept, gCR: torch.Tensor, gCL: torch.Tensor, start: int):
    """The adjoints (gIR, gIL) (B, N * N) of the incomplete items, i.e. of the arc tables SR / SL, and gSB
    (B, N, N, N) of the sibling scores, given the adjoints gCR / gCL (B, N * N) of the complete items that
    the root's terms read. ``kept`` None: the log semiring's outside pass; else max-plus (the 0/1 items of
    the best derivation)."""
    CR = charts[0]
    B, NN = CR.shape
    N = int(round(NN ** 0.5))
    gCR, gCL = gCR.to(CR.dtype).contiguous().clone(), gCL.to(CR.dtype).contiguous().clone()
    gIR, gIL, gX = torch.zeros_like(CR), torch.zeros_like(CR), torch.zeros_like(CR)
    gSB = torch.zeros(B, N, N, N, dtype=CR.dtype, device=CR.device)
    maxplus = kept is not None
    args = kept if maxplus else (CR,) * 5
    if B and N > 1:
        _outside_kernel[(B,)](SB.contiguous(), *charts, *args, gCR, gCL, gIR, gIL, gX, gSB, N, start, MAXPLUS=maxplus,
                              BLOCK_I=triton_eisner.BLOCK_I, BLOCK_D=triton_eisner.BLOCK_D, num_stages=1)
    return gIR, gIL, gSB


class InsideCharts(torch.autograd.Function):
    """(CR, CL) (B, N, N) [width, start] of the log-semiring inside pass of SR / SL and SB; the backward is
    the outside kernel (no graph through the recursion)."""

    @staticmethod
    def forward(ctx, SR, SL, SB, start):
        SB = SB.detach().contiguous()
        charts, _ = inside(SR.detach(), SL.detach(), SB, start, maxplus=False)
        ctx.save_for_backward(SB, *charts)
        ctx.start = start
        B, N, _ = SR.shape
        return charts[0].view(B, N, N), charts[1].view(B, N, N)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gCR, gCL):
        SB, *charts = ctx.saved_tensors
        B, NN = charts[0].shape
        zero = torch.zeros_like(charts[0])
        gCR = zero if gCR is None else gCR.reshape(B, NN)
        gCL = zero if gCL is None else gCL.reshape(B, NN)
        gIR, gIL, gSB = outside(SB, charts, None, gCR, gCL, ctx.start)
        N = int(round(NN ** 0.5))
        return gIR.view(B, N, N), gIL.view(B, N, N), gSB.to(SB.dtype), None


def log_partition(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) as :func:`ssvm_torch.trees.torch_sibling.log_partition` computes it, the recursion in the
    inside kernel and its gradients (the arc and sibling marginals) by the outside kernel."""
    B, N, _ = S.shape
    if N == 1:
        return root_alone(S, SB)
    start = 0 if multiroot else 1
    SR, SL = arc_tables(S, lengths)
    CR, CL = InsideCharts.apply(SR, SL, SB.to(S.dtype), start)
    if multiroot:
        out = CR.reshape(B, N * N).gather(1, (lengths * N)[:, None])[:, 0]
    else:
        out = torch.logsumexp(root_terms(SR, CL, CR, lengths, N), 1)
    return torch.where(lengths > 0, out, torch.zeros_like(out))


def best_tree(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor,
              multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, N) int64, -1 at 0 and beyond the length; scores (B,)) as
    :func:`ssvm_torch.trees.torch_sibling.best_tree` returns them, ties broken the same way: the max-plus
    inside kernel, then the outside kernel over the kept candidates marks the best derivation's arcs."""
    B, N, _ = S.shape
    dev = S.device
    if N == 1:
        return torch.full((B, 1), -1, dtype=torch.int64, device=dev), torch.zeros(B, dtype=S.dtype, device=dev)
    start = 0 if multiroot else 1
    S, SB = S.detach(), SB.detach().to(S.dtype)
    SR, SL = arc_tables(S, lengths)
    charts, kept = inside(SR, SL, SB, start, maxplus=True)
    gCR, gCL, score, root_child = triton_eisner.root_adjoints(SR, charts[0], charts[1], lengths, multiroot)
    on_r, on_l, _ = outside(SB, charts, kept, gCR, gCL, start)
    return triton_eisner.heads_of_arcs(on_r, on_l, root_child, lengths, multiroot), score
