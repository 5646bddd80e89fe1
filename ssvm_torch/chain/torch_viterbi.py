"""The torch Viterbi recursion of the chain package: a padded batch, any device (the reference of the
numba and Triton backends; conventions in :mod:`ssvm_torch.chain`)."""
from __future__ import annotations

import torch


def viterbi_loop(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                 trans: torch.Tensor, gt: torch.Tensor | None = None, token_loss: torch.Tensor | None = None,
                 penalty=None):
    """Batched Viterbi on padded input, a loop over positions of batched torch ops (any device).

    unary (B, T, K); lengths (B,) with 1 <= lengths <= T; first, last (K,); trans (K, K) [next, prev];
    gt (B, T) ground-truth labels for loss augmentation, or None; token_loss (B,) the loss of one
    wrong position of each sequence (default 1 / length: normalized Hamming).
    Returns (labels (B, T) int64 with -1 at padded positions, scores (B,)) where the score includes
    the loss term when ``gt`` is given. ``penalty``: None or additive (first, last, trans) constraint
    scores (0 / -inf), tensors on unary's device. Under ``torch.export`` (ONNX export included) the
    same recursion runs as :func:`viterbi_scan`, so the graph keeps B and T dynamic.
    """
    if penalty is not None:
        first, last, trans = first + penalty[0], last + penalty[1], trans + penalty[2]
    B, T, K = unary.shape
    steps = torch.arange(T, device=unary.device)
    valid = steps[None, :] < lengths[:, None]
    if gt is not None:
        c = 1.0 / lengths.to(unary.dtype) if token_loss is None else token_loss.to(unary.dtype)
        inv_len = c[:, None, None]
        unary = unary + inv_len * (1.0 - torch.nn.functional.one_hot(gt.clamp(min=0), K).to(unary.dtype))
    if trans.dim() == 2 and first.dim() == 1 and torch.compiler.is_exporting():
        return viterbi_scan(unary, lengths, first, last, trans)
    delta = unary[:, 0] + first
    backptr = []
    for t in range(1, T):
        cand = delta[:, None, :] + trans[None]          # (B, next, prev)
        best, arg = cand.max(dim=2)
        backptr.append(arg)
        delta = torch.where(valid[:, t, None], best + unary[:, t], delta)
    final = delta + last
    scores, end = final.max(dim=1)
    labels = torch.full((B, T), -1, dtype=torch.int64, device=unary.device)
    cur = end
    for t in range(T - 1, -1, -1):
        if t < T - 1:
            prev = backptr[t].gather(1, cur[:, None]).squeeze(1)    # backptr[t] maps y_{t+1} -> y_t
            cur = torch.where(t == lengths - 1, end, prev)
        else:
            cur = end
        labels[:, t] = torch.where(valid[:, t], cur, labels[:, t])
    return labels, scores


def viterbi_scan(unary: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                 trans: torch.Tensor):
    """:func:`viterbi_loop`'s recursion (same sums, same argmax ties, so the same labels and scores)
    as two ``torch.scan`` loops over positions, forward then backward, for graphs whose length T is
    dynamic: a Python loop over range(T) fixes T in an exported graph, a scan exports as one loop
    node (ONNX Scan). Both scans run over all T positions (a scan of length 0, T = 1, is refused):
    the forward one starts position 0 from ``first`` instead of a transition, the backward one reads
    at position t the pointer stored at t + 1. Shared (K,) / (K, K) scores only; the score tensors
    travel in the carry (a scan body cannot close over tensors)."""
    from torch._higher_order_ops.scan import scan
    B, T, K = unary.shape
    steps = torch.arange(T, device=unary.device)
    valid = steps[None, :] < lengths[:, None]

    def forward_step(carry, x):
        delta, tr, fi = carry
        u, on, t = x
        best, arg = (delta[:, None, :] + tr[None]).max(dim=2)
        new = torch.where(t == 0, u + fi, torch.where(on[:, None], best + u, delta))
        return (new, tr.clone(), fi.clone()), arg

    (delta, _, _), backptr = scan(forward_step, (unary.new_zeros(B, K), trans, first),
                                  (unary.transpose(0, 1), valid.transpose(0, 1), steps))
    scores, end = (delta + last).max(dim=1)
    following = torch.cat([backptr[1:], backptr[:1]], dim=0)   # position t reads backptr[t + 1] (y_{t+1} -> y_t)

    def backward_step(carry, x):
        cur, last_label, lens = carry
        bp, t = x
        label = torch.where(t == lens - 1, last_label, bp.gather(1, cur[:, None]).squeeze(1))
        return (label, last_label.clone(), lens.clone()), label.clone()

    _, labels = scan(backward_step, (end, end.clone(), lengths), (following, steps), reverse=True)
    labels = labels.transpose(0, 1)
    return torch.where(valid, labels, torch.full_like(labels, -1)), scores
