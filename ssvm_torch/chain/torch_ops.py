"""The torch backend of the chain package (any device, CUDA included, no host round trip; the
reference the numba and Triton backends are tested against). Rows under an arbitrary mask are
compacted to the left (their masked-on positions first, in order), then the padded Viterbi
(:func:`ssvm_torch.chain.padded.viterbi`: the torch loop, or the fused Triton kernel on CUDA) and a
scaled forward recursion differentiated by autograd run on them. Conventions in
:mod:`ssvm_torch.chain`; ``penalty`` = additive (start, end, trans) constraint scores (0 / -inf) or None.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from .checks import effective, fail_no_path, tracing
from .padded import viterbi


def compact(mask: torch.Tensor):
    """(order (B, T), lengths (B,)): order lists each row's masked-on positions first, in order,
    then the others; lengths counts the masked-on positions. Built from cumulative sums and one
    scatter, not a sort (a stable sort has no ONNX export)."""
    on = mask.to(torch.int64)
    lengths = on.sum(1)
    dest = torch.where(mask, on.cumsum(1) - 1, lengths[:, None] + (1 - on).cumsum(1) - 1)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(dest)
    return torch.zeros_like(dest).scatter(1, dest, positions), lengths


def gather_rows(E, order):
    return E.gather(1, order[..., None].expand(-1, -1, E.shape[2]))


def padded_score(Ec, lengths, start, end, trans, labels):
    """s(y) of compacted rows (their first ``lengths[b]`` positions; 0 for an empty row) for labels
    (B, T) (read there only), differentiable w.r.t. the score tensors: the package's one path score."""
    B, T, _ = Ec.shape
    valid = torch.arange(T, device=Ec.device)[None, :] < lengths[:, None]
    lab = labels.clamp(min=0)
    s = torch.where(valid, Ec.gather(2, lab[..., None])[..., 0], Ec.new_zeros(())).sum(1)
    last = lab.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    s = s + torch.where(lengths > 0, start[lab[:, 0]] + end[last], Ec.new_zeros(()))
    if T > 1:
        s = s + torch.where(valid[:, 1:], trans[lab[:, 1:], lab[:, :-1]], Ec.new_zeros(())).sum(1)
    return s


def torch_decode(E, mask, start, end, trans, penalty, gold=None, rowc=None, cost=None):
    """(labels (B, T) -1 where masked off, scores (B,), compacted labels, order, lengths)."""
    s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
    order, lengths = compact(mask)
    U = gather_rows(E.detach(), order)
    if gold is not None:
        gc = gold.gather(1, order).clamp(min=0)
        U = U + rowc.to(U.dtype)[:, None, None] * cost.to(U.dtype)[gc]
    lab_c, scores = viterbi(U, lengths.clamp(min=1), s, e, t)
    empty = lengths == 0
    lab_c = torch.where(empty[:, None], torch.full_like(lab_c, -1), lab_c)
    scores = torch.where(empty, torch.zeros_like(scores), scores)
    labels = torch.full_like(lab_c, -1).scatter(1, order, lab_c)
    return labels, scores, lab_c, order, lengths


def torch_hinge(E, start, end, trans, mask, gold, rowc, cost, penalty):
    _, aug, ystar_c, order, lengths = torch_decode(E, mask, start, end, trans, penalty, gold, rowc, cost)
    fail_no_path(aug, mask)
    Ec = gather_rows(E, order)
    gold_c = gold.gather(1, order)
    valid = torch.arange(E.shape[1], device=E.device)[None, :] < lengths[:, None]
    delta = rowc.to(E.dtype) * torch.where(valid, cost.to(E.dtype)[gold_c.clamp(min=0), ystar_c.clamp(min=0)],
                                           E.new_zeros(())).sum(1)
    return delta + padded_score(Ec, lengths, start, end, trans, ystar_c) - padded_score(
        Ec, lengths, start, end, trans, gold_c)


def log_partition_rows(Ec, lengths, start, end, trans, penalty=None):
    """log Z of compacted rows (0 for an empty row) by the scaled forward recursion (the numba
    kernel's, :func:`ssvm_torch.chain.numba_fb.forward_row`), in Ec's dtype; differentiable by
    autograd; -inf penalties become exact zeros of exp(trans), so no nan arises. ``start``/``end``
    (K,) or per row (B, K), ``trans`` (K, K) or per row (B, K, K) [next, prev]. Rows whose
    normalizers fall below the dtype's range (spreads the scaling cannot hold, as in the numba kernel)
    are recomputed by the log-space recursion (:func:`_log_space_rows`): one host read per call."""
    s, e, t = with_penalty(start, end, trans, penalty)
    logz, lost = _scaled_rows(Ec, lengths, s, e, t)
    if tracing() or not bool(lost.any()):
        return logz
    # the lost rows' scaled graph holds 0 / 0 in its backward: both parts are computed apart
    pick = (lambda x, d, rows: x[rows] if x.dim() == d else x)
    out = logz.detach().new_zeros(logz.shape)
    for rows, fn in ((torch.nonzero(~lost)[:, 0], lambda *a: _scaled_rows(*a)[0]),
                     (torch.nonzero(lost)[:, 0], _log_space_rows)):
        if len(rows):
            out = out.index_put((rows,), fn(Ec[rows], lengths[rows], pick(s, 2, rows), pick(e, 2, rows),
                                            pick(t, 3, rows)))
    return out


def _scaled_rows(Ec, lengths, s, e, t):
    """(log Z of every row by the scaled recursion, the rows whose normalizers left the range)."""
    B, T, K = Ec.shape
    small = torch.finfo(Ec.dtype).tiny ** 0.8          # float64: ~1e-246, the numba kernel's rule
    per_row = t.dim() == 3
    td = t.detach().masked_fill(~torch.isfinite(t.detach()), float("-inf"))
    tm = td.amax((1, 2)) if per_row else td.max()
    tm = torch.where(torch.isfinite(tm), tm, torch.zeros_like(tm))     # all forbidden: any shift will do
    X = torch.exp(t - (tm[:, None, None] if per_row else tm))         # [next, prev]
    v = Ec[:, 0] + s
    m = v.detach().max(1, keepdim=True).values
    alpha = torch.exp(v - m)
    c = alpha.sum(1, keepdim=True)
    lost = c.detach()[:, 0] < small
    logz = torch.log(c[:, 0]) + m[:, 0]
    alpha = alpha / c
    for i in range(1, T):
        on = (i < lengths)[:, None]
        mi = Ec[:, i].detach().max(1, keepdim=True).values
        with torch.autocast(Ec.device.type, enabled=False):        # under AMP too, in Ec's dtype
            moved = torch.bmm(X, alpha[:, :, None])[:, :, 0] if per_row else alpha @ X.t()
        nxt = torch.exp(Ec[:, i] - mi) * moved
        ci = nxt.sum(1, keepdim=True)
        lost = lost | (on[:, 0] & (ci.detach()[:, 0] < small))
        ci_safe = torch.where(on, ci, torch.ones_like(ci))
        alpha = torch.where(on, nxt / ci_safe, alpha)
        logz = logz + torch.where(on[:, 0], torch.log(ci_safe[:, 0]) + mi[:, 0] + tm, logz.new_zeros(()))
    me = e.detach().amax(-1, keepdim=True)
    tail = (alpha * torch.exp(e - me)).sum(1)
    lost = (lost | (tail.detach() < small)) & (lengths > 0)
    logz = logz + torch.log(tail) + me[..., 0]
    return torch.where(lengths > 0, logz, torch.zeros_like(logz)), lost


def _log_space_rows(Ec, lengths, s, e, t):
    """log Z of compacted rows (lengths >= 1) by the forward recursion in log space (any spread;
    -inf where no labeling has a finite score), differentiable."""
    B, T, K = Ec.shape
    tb = t if t.dim() == 3 else t[None]
    alpha = Ec[:, 0] + s
    for i in range(1, T):
        nxt = torch.logsumexp(alpha[:, None, :] + tb, dim=2) + Ec[:, i]
        alpha = torch.where((i < lengths)[:, None], nxt, alpha)
    return torch.logsumexp(alpha + e, dim=1)


def torch_nll(E, start, end, trans, mask, gold, penalty):
    order, lengths = compact(mask)
    Ec = gather_rows(E, order)
    logz = log_partition_rows(Ec, lengths, start, end, trans, penalty)
    if not bool(torch.isfinite(logz).all()):
        _, scores, _, _, _ = torch_decode(E, mask, start, end, trans, penalty)
        fail_no_path(scores, mask)
        raise SSVMInputError("emissions: the scores' spread exceeds the dtype's range in the scaled forward "
                             "recursion; rescale them or use float64")
    gold_s = padded_score(Ec, lengths, *with_penalty(start, end, trans, penalty), gold.gather(1, order))
    return logz - gold_s


def with_penalty(start, end, trans, penalty):
    """Parameters plus penalties, keeping the graph (a gold labeling that breaks a constraint scores -inf)."""
    if penalty is None:
        return start, end, trans
    return tuple(x + p.to(x.device, x.dtype) for x, p in zip((start, end, trans), penalty))


def torch_nbest(E, mask, start, end, trans, penalty, n: int):
    """(labels (B, n, T) -1 where masked off or missing, scores (B, n) non-increasing, -inf where a row
    has fewer than n allowed labelings): the n-best recursion of :mod:`ssvm_torch.chain.numba_nbest`
    with ``topk`` over the (previous tag, rank) candidates (B, K, K n) of each position, on compacted
    rows (any device; ties in topk's order)."""
    s, e, t = effective(start, end, trans, penalty, E.dtype, E.device)
    order, lengths = compact(mask)
    U = gather_rows(E.detach(), order)
    B, T, K = U.shape
    D = U.new_full((B, K, n), float("-inf"))
    D[:, :, 0] = U[:, 0] + s
    backptr = []
    for i in range(1, T):
        cand = (D[:, None, :, :] + t[None, :, :, None]).reshape(B, K, K * n)     # (B, next, prev * n + rank)
        best, arg = cand.topk(n, dim=2)
        backptr.append(arg)
        D = torch.where((i < lengths)[:, None, None], best + U[:, i, :, None], D)
    scores, fin = (D + e[None, :, None]).reshape(B, K * n).topk(n, dim=1)
    labels = torch.full((B, n, T), -1, dtype=torch.int64, device=E.device)
    cur = fin
    for i in range(T - 1, -1, -1):
        if i < T - 1:
            prev = backptr[i].reshape(B, K * n).gather(1, cur)                      # position i+1 -> i
            cur = torch.where((i == lengths - 1)[:, None], fin, prev)
        on = (i < lengths)[:, None] & torch.isfinite(scores)
        labels[:, :, i] = torch.where(on, torch.div(cur, n, rounding_mode="floor"), labels[:, :, i])
    empty = lengths == 0
    first_rank = torch.arange(n, device=E.device)[None, :] == 0
    scores = torch.where(empty[:, None], torch.where(first_rank, 0.0, float("-inf")).to(scores.dtype), scores)
    labels = torch.full_like(labels, -1).scatter(2, order[:, None, :].expand(B, n, T), labels)
    return labels, scores
