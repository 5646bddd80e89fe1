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
    scores (0 / -inf), tensors on unary's device.
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
