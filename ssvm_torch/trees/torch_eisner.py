"""The projective first-order recursions (Eisner) in pure torch: any device, batched, the reference of the
compiled kernels (:mod:`ssvm_torch.trees.numba_eisner`, :mod:`ssvm_torch.trees.triton_eisner`) and what
runs where neither does (CUDA without Triton, tracing).

The same charts as the numba kernels, kept by [width, start] for a padded batch (B, N, N): one Python
iteration per span width, each a few gathers over every (split, start) pair of that width at once. log Z is
the log-semiring inside pass, differentiable by autograd (its gradient is the arc marginals); the best
tree is the max-plus pass with its split points kept, read back top-down width by width with
accumulating scatters (no host synchronisation, no per-sentence loop).

Absent arcs (-inf scores) and padding take the finite value :data:`NEG` so that no logsumexp or its
gradient sees -inf - (-inf); a result below NEG / 2 means that no tree exists.
"""
from __future__ import annotations

import torch

#: the score of an absent arc in the torch recursions: exp(NEG - anything finite) is 0 in every float dtype
NEG = -1e30


def _index(N: int, device):
    """For each width w: (starts (L,), flat indices of CR[d, i], CL[w-1-d, i+d+1] (w, L), of IR[d, i],
    CR[w-d, i+d] (w, L) and of CL[d, i], IL[w-d, i+d] (w, L)) into the flattened (N*N) chart, L = N - w."""
    out = [None]
    for w in range(1, N):
        i = torch.arange(0, N - w, device=device)
        d = torch.arange(w, device=device)[:, None]
        split = (d * N + i, (w - 1 - d) * N + i + d + 1)
        dc = d + 1
        right = (dc * N + i, (w - dc) * N + i + dc)
        left = (d * N + i, (w - d) * N + i + d)
        out.append((i, split, right, left))
    return out


def arc_tables(S, lengths):
    """SR[b, w, i] = S[b, i+w, i] (arc i -> i+w) and SL[b, w, i] = S[b, i, i+w] (arc i+w -> i), with NEG
    for absent arcs, arcs beyond a sentence's length, and arcs into the root."""
    B, N, _ = S.shape
    pos = torch.arange(N, device=S.device)
    w = pos[:, None]
    start = pos[None, :]
    end = w + start                                                  # (N, N): the span's right end
    inside = end < N
    endc = end.clamp(max=N - 1)
    valid = inside[None] & (end[None] <= lengths[:, None, None]) & (w[None] > 0)
    # flat gathers: their backward is a scatter-add (advanced indexing's would sort its indices on CUDA)
    flat = S.reshape(B, N * N)
    SR = flat.gather(1, (endc * N + start).reshape(1, -1).expand(B, -1)).view(B, N, N)     # S[b, i+w, i]
    SL = flat.gather(1, (start * N + endc).reshape(1, -1).expand(B, -1)).view(B, N, N)     # S[b, i, i+w]
    neg = torch.full((), NEG, dtype=S.dtype, device=S.device)
    SR = torch.where(valid & torch.isfinite(SR), SR, neg)
    SL = torch.where(valid & (start[None] > 0) & torch.isfinite(SL), SL, neg)
    return SR, SL


def root_terms(SR, CL, CR, lengths, N):
    """Single root: SR[b, r, 0] + CL[b, r-1, 1] + CR[b, n_b - r, r] for r = 1..N-1 (NEG beyond n_b)."""
    B = SR.shape[0]
    r = torch.arange(1, N, device=SR.device)
    rest = (lengths[:, None] - r[None, :]).clamp(min=0)             # (B, N-1): width of CR[r, n_b]
    cr = CR.reshape(B, N * N).gather(1, rest * N + r[None, :])                  # B may be 0
    terms = SR[:, r, 0] + CL[:, r - 1, 1] + cr
    return torch.where(r[None, :] <= lengths[:, None], terms, torch.full_like(terms, NEG))


def inside_charts(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """(SR, SL, CR, CL, IR, IL): the arc tables of :func:`arc_tables` (B, N, N) and the log-semiring inside charts
    of Eisner's algorithm by [width, start], flattened (B, N * N): CR / CL the complete spans headed at their left
    / right end, IR / IL the incomplete ones (the arc start -> end / end -> start). With a single root the spans
    that start at the root are left at NEG (the root's one child is chosen by :func:`root_terms`).
    Differentiable by autograd; the sampler of :mod:`ssvm_torch.trees.sampling` reads them top-down."""
    B, N, _ = S.shape
    start = 0 if multiroot else 1
    SR, SL = arc_tables(S, lengths)
    neg = torch.full((), NEG, dtype=S.dtype, device=S.device)
    zero_w = torch.zeros(B, 1, N, dtype=S.dtype, device=S.device)
    rest = neg.expand(B, N - 1, N)
    CR = torch.cat([zero_w, rest], 1).reshape(B, N * N).clone()
    CL = CR.clone()
    IR = torch.full((B, N * N), NEG, dtype=S.dtype, device=S.device)
    IL = IR.clone()
    for w, (i, split, right, left) in enumerate(_index(N, S.device)[1:], start=1):
        if w >= N - start:
            break
        i = i[start:]
        cols = slice(start, None)
        x = torch.logsumexp(CR[:, split[0][:, cols]] + CL[:, split[1][:, cols]], 1)
        flat = w * N + i
        IR[:, flat] = x + SR[:, w, i]
        IL[:, flat] = x + SL[:, w, i]
        CR[:, flat] = torch.logsumexp(IR[:, right[0][:, cols]] + CR[:, right[1][:, cols]], 1)
        CL[:, flat] = torch.logsumexp(CL[:, left[0][:, cols]] + IL[:, left[1][:, cols]], 1)
    return SR, SL, CR, CL, IR, IL


def root_alone(*scores: torch.Tensor) -> torch.Tensor:
    """Zeros (B,) joined to the graph of every tensor of ``scores`` (B, ...): log Z and the best score where N = 1
    (the root alone, one empty tree), with zero gradients. -inf entries (forbidden arcs) are read as 0 first:
    -inf x 0 would be nan, and an empty row has no arc to forbid."""
    return sum(torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device)).flatten(1).sum(1)
               * 0.0 for x in scores)


def log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) of the projective trees of every sentence of the padded scores S (B, N, N) [modifier,
    head], differentiable by autograd (d log Z / d S = the arc marginals); -0.0 for a sentence of length 0
    and a value below NEG / 2 where no tree exists."""
    B, N, _ = S.shape
    if N == 1:
        return root_alone(S)
    SR, _, CR, CL, _, _ = inside_charts(S, lengths, multiroot)
    CR, CL = CR.view(B, N, N), CL.view(B, N, N)
    if multiroot:
        out = CR[torch.arange(B, device=S.device), lengths, 0]
    else:
        out = torch.logsumexp(root_terms(SR, CL, CR, lengths, N), 1)
    return torch.where(lengths > 0, out, torch.zeros_like(out))


def best_tree(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, N) int64, -1 at 0 and beyond the length; scores (B,)): the best projective tree of every
    sentence (max-plus), ties to the first split point and, single-root, the leftmost root child (the
    numba kernel's rule). A score below NEG / 2 means that no tree exists."""
    B, N, _ = S.shape
    dev = S.device
    if N == 1:
        return torch.full((B, 1), -1, dtype=torch.int64, device=dev), torch.zeros(B, dtype=S.dtype, device=dev)
    start = 0 if multiroot else 1
    S = S.detach()
    SR, SL = arc_tables(S, lengths)
    CR = torch.full((B, N * N), NEG, dtype=S.dtype, device=dev)
    CR[:, :N] = 0.0
    CL = CR.clone()
    IR = torch.full((B, N * N), NEG, dtype=S.dtype, device=dev)
    IL = IR.clone()
    arg_x = torch.zeros(B, N * N, dtype=torch.int64, device=dev)
    arg_r = torch.zeros_like(arg_x)
    arg_l = torch.zeros_like(arg_x)
    index = _index(N, dev)
    for w in range(1, N - start):
        i, split, right, left = index[w]
        i = i[start:]
        cols = slice(start, None)
        x, ax = (CR[:, split[0][:, cols]] + CL[:, split[1][:, cols]]).max(1)
        flat = w * N + i
        IR[:, flat] = x + SR[:, w, i]
        IL[:, flat] = x + SL[:, w, i]
        CR[:, flat], ar = (IR[:, right[0][:, cols]] + CR[:, right[1][:, cols]]).max(1)
        CL[:, flat], al = (CL[:, left[0][:, cols]] + IL[:, left[1][:, cols]]).max(1)
        arg_x[:, flat], arg_r[:, flat], arg_l[:, flat] = ax, ar + 1, al
    bi = torch.arange(B, device=dev)
    CRv, CLv = CR.view(B, N, N), CL.view(B, N, N)
    # which items are on the best derivation: counts (0/1) per chart entry, filled from the widest down
    on_cr = torch.zeros(B, N * N, dtype=torch.int64, device=dev)
    on_cl, on_ir, on_il = torch.zeros_like(on_cr), torch.zeros_like(on_cr), torch.zeros_like(on_cr)
    head_plus = torch.zeros(B, N, dtype=torch.int64, device=dev)        # head + 1 of every word (0: none)
    if multiroot:
        score = CRv[bi, lengths, 0]
        on_cr.index_put_((bi, lengths * N), torch.ones_like(bi), accumulate=True)
    else:
        terms = root_terms(SR, CLv, CRv, lengths, N)
        score, r = terms.max(1)
        r = r + 1
        head_plus.index_put_((bi, r), torch.ones_like(r), accumulate=True)     # head 0: head + 1 = 1
        has = lengths > 0
        on_cl.index_put_((bi, (r - 1) * N + 1), has.long(), accumulate=True)
        on_cr.index_put_((bi, (lengths - r).clamp(min=0) * N + r), has.long(), accumulate=True)
    for w in range(N - 1 - start, 0, -1):
        i = index[w][0][start:]
        flat = w * N + i
        rows = bi[:, None].expand(B, len(i))
        act = on_cr[:, flat]                                            # complete, head left
        d = arg_r[:, flat]
        on_ir.index_put_((rows, d * N + i), act, accumulate=True)
        on_cr.index_put_((rows, (w - d) * N + i + d), act, accumulate=True)
        act = on_cl[:, flat]                                            # complete, head right
        d = arg_l[:, flat]
        on_cl.index_put_((rows, d * N + i), act, accumulate=True)
        on_il.index_put_((rows, (w - d) * N + i + d), act, accumulate=True)
        act = on_ir[:, flat] + on_il[:, flat]                           # incomplete: split and the arc
        d = arg_x[:, flat]
        on_cr.index_put_((rows, d * N + i), act, accumulate=True)
        on_cl.index_put_((rows, (w - 1 - d) * N + i + d + 1), act, accumulate=True)
        head_plus.index_put_((rows, (i + w).expand(B, -1)), on_ir[:, flat] * (i + 1), accumulate=True)
        head_plus.index_put_((rows, i.expand(B, -1)), on_il[:, flat] * (i + w + 1), accumulate=True)
    heads = head_plus - 1
    pos = torch.arange(N, device=dev)
    heads = torch.where((pos[None] >= 1) & (pos[None] <= lengths[:, None]), heads, torch.full_like(heads, -1))
    score = torch.where(lengths > 0, score, torch.zeros_like(score))
    return heads, score
