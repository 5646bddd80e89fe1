"""Minimum-Bayes-risk decoding of the semi-Markov CRF: the segmentation of least expected task loss
(:mod:`ssvm_torch.segments.scoring`'s two losses), by one semi-Markov Viterbi pass over expected gains.

Both losses decompose over the predicted segments once the expectation is taken, so E_p[Delta(y, y')] =
constant - sum_{s in y'} gain(s) with, from the segment marginals mu (B, T, L, K):

* ``"segments"`` (false positives + false negatives): E|y| + |y'| - 2 sum_{s in y'} mu_s, so gain(s) = 2 mu_s - 1
  (a segment is worth predicting when it is more likely than not; the segment-level MBR behind expected F1);
* ``"tokens"`` (the Hamming loss of the (label, begins) pairs): n - sum_t P(y_t's pair = y'_t's pair), and a
  predicted segment (t, l, k) covers the pair (k, begins) at t and (k, inside) at t+1..t+l, so gain(s) =
  P_B[t, k] + sum_{u=t+1}^{t+l} P_I[u, k], with P_B[u, k] = P(a segment of label k begins at u) and P_I[u, k] =
  P(position u lies inside, not at the start of, a segment of label k).

The pass scores each segment by its gain, every allowed transition 0 and the forbidden ones (-inf scores of the
model) -inf, so the result is a segmentation the model allows. A per-row factor on Delta (``cost="normalized"``)
does not change the minimiser.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from . import objectives, ops


def token_gains(M: torch.Tensor) -> torch.Tensor:
    """gain(t, l, k) of the "tokens" loss (B, T, L, K) from the segment marginals M (module docstring): the
    coverage P(u inside a segment of label k) by a difference array over each segment's span and one cumulative sum,
    then prefix sums of P_I; 0 for segments that pass the last position."""
    B, T, L, K = M.shape
    begins = M.sum(2)                                                    # P_B (B, T, K)
    diff = M.new_zeros(B, T + L + 1, K)
    diff[:, :T] += begins
    for length in range(L):                                              # a segment (t, l) covers t..t+l
        diff[:, length + 1:length + 1 + T] -= M[:, :, length]
    inside = diff.cumsum(1)[:, :T] - begins                              # P_I (B, T, K)
    prefix = torch.cat([M.new_zeros(B, 1, K), inside.cumsum(1)], 1)      # prefix[u] = sum_{v < u} P_I[v]
    t = torch.arange(T, device=M.device)[:, None]
    end = (t + torch.arange(L, device=M.device)[None, :] + 1).clamp(max=T)  # (T, L): one past the segment
    gain = begins[:, :, None, :] + prefix[:, end] - prefix[:, (t + 1).clamp(max=T).expand(T, L)]
    return torch.where((t + torch.arange(L, device=M.device)[None, :] < T)[None, :, :, None], gain,
                       gain.new_zeros(()))


def expected_gains(M: torch.Tensor, seg_loss: str) -> torch.Tensor:
    """The segments' gains (B, T, L, K) under ``seg_loss`` ("tokens" or "segments", module docstring)."""
    return token_gains(M) if seg_loss == "tokens" else 2.0 * M - 1.0


def mbr_decode(S, first, last, trans, lengths, seg_loss: str, kernels: str, nbest: int,
               what: str = "the best segmentation's score"):
    """(segments, gains): the segmentation of least expected ``seg_loss`` loss (B, T) and its summed gain (B,), or
    with ``nbest`` > 1 the n of least expected loss (B, n, T) and theirs (B, n) (the decoders' layout). Checked
    scores (:mod:`ssvm_torch.segments.ops`); a non-empty row without a segmentation is refused by name (``what``)."""
    with torch.no_grad():
        M = ops.marginals(S, first, last, trans, lengths, kernels, refuse=False)     # the row named below, by what
        if not bool(torch.isfinite(M).all()):
            objectives.decode(S, first, last, trans, lengths, kernels, 1, what)     # names the row without one
            raise SSVMInputError("seg_scores: the segment marginals overflowed (scores out of the dtype's range)")
        gain = expected_gains(M, seg_loss).masked_fill(torch.isneginf(S), float("-inf"))
        zero = [torch.zeros_like(x).masked_fill(torch.isneginf(x), float("-inf")) for x in (first, last, trans)]
        return objectives.decode(gain, *zero, lengths, kernels, nbest, what)
