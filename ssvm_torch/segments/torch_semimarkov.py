"""The torch backend of the segment package (any device, no host round trip in the recursions; the reference the
compiled kernels are tested against): the semi-Markov forward recursion of Sarawagi & Cohen (2004) in
the log semiring (log Z, differentiated by autograd for the marginals) and in the max-plus semiring with back
pointers (the best segmentation). Conventions in :mod:`ssvm_torch.segments`.

With enter[0, k] = first[k] and, for s >= 1, enter[s, k] = (+)_{k'} alpha[s, k'] (x) trans[k, k'], the score of
the best (or the log-sum over all) segmentations of positions 0..e-1 whose last segment has label k is

    alpha[e, k] = (+)_{l = 0}^{min(L, e) - 1} enter[e-l-1, k] (x) S[e-l-1, l, k],

and the row's result is (+)_k alpha[n, k] (x) last[k]: T sequential steps of O(B (L K + K^2)) work."""
from __future__ import annotations

import torch

NEG = float("-inf")


def logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """log sum exp over ``dim`` whose gradient is exactly 0 (not NaN) into a group that is all -inf: the
    segments and transitions that -inf scores forbid."""
    m = x.detach().amax(dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.exp(x - m).sum(dim)
    pos = s > 0
    return torch.where(pos, torch.log(torch.where(pos, s, torch.ones_like(s))) + m.squeeze(dim),
                       torch.full_like(s, NEG))


def end_indexed(S: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, T, L, K): E[b, e, l, k] = S[b, e-l, l, k], the segment of length l+1 that ends at position e; 0 (a finite
    placeholder the rows' results never read) where it would start before 0 or end beyond the row."""
    B, T, L, K = S.shape
    e = torch.arange(T, device=S.device)[:, None]
    l = torch.arange(L, device=S.device)[None, :]
    start = e - l                                                    # (T, L)
    E = S[:, start.clamp(min=0), l.expand(T, L), :]                  # (B, T, L, K)
    ok = (start >= 0)[None] & (e[None] < lengths[:, None, None])     # (B, T, L)
    return torch.where(ok[..., None], E, E.new_zeros(()))


def _reduce(x: torch.Tensor, dim: int, maxplus: bool):
    """(max, argmax) over ``dim`` in the max-plus semiring, (log-sum-exp, None) in the log semiring."""
    return tuple(x.max(dim)) if maxplus else (logsumexp(x, dim), None)


def _steps(S, first, trans, lengths, maxplus: bool):
    """alpha (B, T, K) for ends 1..T and, in the max-plus semiring, the back pointers: the argmax length (B, T, K)
    and the argmax previous label entering at each position (B, T, K) (None, None in the log semiring)."""
    B, T, L, K = S.shape
    E = end_indexed(S, lengths)
    enters = [first.expand(B, K)]
    alphas, lens, prevs = [], [], [torch.zeros(B, K, dtype=torch.int64, device=S.device)]
    for e in range(1, T + 1):
        m = min(L, e)
        a, best_l = _reduce(torch.stack(enters[e - 1::-1][:m], 1) + E[:, e - 1, :m], 1, maxplus)   # (B, m, K)
        alphas.append(a)
        lens.append(best_l)
        if e < T:
            nxt, best_k = _reduce(a[:, None, :] + trans[None], 2, maxplus)                   # [b, next, prev]
            enters.append(nxt)
            prevs.append(best_k)
    alpha = torch.stack(alphas, 1)
    if not maxplus:
        return alpha, None, None
    return alpha, torch.stack(lens, 1), torch.stack(prevs, 1)


def _final(alpha, last, lengths):
    B, T, K = alpha.shape
    idx = (lengths - 1).clamp(min=0)[:, None, None].expand(B, 1, K)
    return alpha.gather(1, idx)[:, 0] + last


def log_partition(S, first, last, trans, lengths) -> torch.Tensor:
    """log Z (B,) (0 for an empty row), differentiable: its gradient w.r.t. S is the segment marginals."""
    B, T = S.shape[0], S.shape[1]
    if T == 0:
        return S.new_zeros(B)
    alpha, _, _ = _steps(S, first, trans, lengths, False)
    Z = logsumexp(_final(alpha, last, lengths), 1)
    return torch.where(lengths > 0, Z, torch.zeros_like(Z))


@torch.no_grad()
def best(S, first, last, trans, lengths):
    """(segments (B, T) -1 inside segments and beyond the row, scores (B,) -inf where a non-empty row has no
    allowed segmentation, 0 for an empty row): the max-plus recursion and its back pointers, followed back from
    each row's end for max(n_b) steps at most, every row at once."""
    B, T, L, K = S.shape
    dev = S.device
    segments = torch.full((B, T + 1), -1, dtype=torch.int64, device=dev)   # column T takes inactive rows' writes
    if T == 0:
        return segments[:, :T], S.new_zeros(B)
    if torch.compiler.is_exporting():           # a graph whose T is dynamic: the same recursion as scans
        return best_scan(S, first, last, trans, lengths)
    alpha, lens, prevs = _steps(S, first, trans, lengths, True)
    scores, k = _final(alpha, last, lengths).max(1)
    rows = torch.arange(B, device=dev)
    pos = lengths.clone()
    active = lengths > 0
    for _ in range(int(lengths.max()) if B else 0):              # an empty batch reads nothing
        l = lens[rows, (pos - 1).clamp(min=0), k]
        start = (pos - l - 1).clamp(min=0)
        segments[rows, torch.where(active, start, T)] = torch.where(active, k, -1)
        k = prevs[rows, start, k]
        active = active & (start > 0)
        pos = start
    return segments[:, :T], torch.where(lengths > 0, scores, torch.zeros_like(scores))


def best_scan(S, first, last, trans, lengths):
    """:func:`best` as two ``torch.scan`` loops over positions (as the chain's ``viterbi_scan``), for exported
    graphs whose T is dynamic (a Python loop over range(T) fixes T; a scan exports as one ONNX Scan node).

    Forward: the carry holds the last L enter vectors, newest first (the start state's ``first`` in slot 0 before
    position 0, -inf behind it); at end position e it takes the best length and label into alpha and the best
    previous label entering at e + 1. Backward, from the last position down: the carry holds the current
    segment's start and label; a row's last position takes the best final label, the position before a segment's
    start takes the label that entered that start, and each start writes its label. Shared (K,) / (K, K) scores;
    tensors a body needs travel in the carry."""
    from torch._higher_order_ops.scan import scan
    S, first, last, trans = (x.detach() for x in (S, first, last, trans))     # no autograd through the scans
    B, T, L, K = S.shape
    steps = torch.arange(T, device=S.device)
    E = end_indexed(S, lengths)
    too_early = (steps[:, None] - torch.arange(L, device=S.device)[None, :]) < 0                  # (T, L)
    E = E.masked_fill(too_early[None, :, :, None], NEG)
    enters0 = torch.cat([first.expand(B, 1, K), S.new_full((B, L - 1, K), NEG)], 1)

    def forward_step(carry, x):
        enters, tr = carry
        (seg,) = x                                                                    # (B, L, K)
        a, best_l = (enters + seg).max(1)                                             # (B, K)
        nxt, best_k = (a[:, None, :] + tr[None]).max(2)
        return (torch.cat([nxt[:, None], enters[:, :-1]], 1), tr.clone()), (a, best_l, best_k)

    _, (alpha, lens, prevs) = scan(forward_step, (enters0, trans), (E.transpose(0, 1),))
    alpha, lens, prevs = alpha.transpose(0, 1), lens.transpose(0, 1), prevs.transpose(0, 1)       # (B, T, K)
    scores, k_end = _final(alpha, last, lengths).max(1)

    def backward_step(carry, x):
        start, k, k_last, lens_b = carry
        t, ln, prev = x                                      # at position t: best lengths, entering labels (B, K)
        at_end = t == lens_b - 1
        before = t == start - 1                              # the segment before the current one ends here
        k_new = torch.where(at_end, k_last, torch.where(before, prev.gather(1, k[:, None])[:, 0], k))
        start_new = torch.where(at_end | before, t - ln.gather(1, k_new[:, None])[:, 0], start)
        label = torch.where((t == start_new) & (t < lens_b), k_new, torch.full_like(k_new, -1))
        return (start_new, k_new, k_last.clone(), lens_b.clone()), label

    carry0 = (lengths.clone(), k_end.clone(), k_end.clone(), lengths.clone())
    _, labels = scan(backward_step, carry0, (steps, lens.transpose(0, 1), prevs.transpose(0, 1)), reverse=True)
    return labels.transpose(0, 1), torch.where(lengths > 0, scores, torch.zeros_like(scores))
