"""Minimum-Bayes-risk (posterior) decoding of the chain CRF: the labeling of least expected task loss.

For a CRF p(y) over the labelings of a row and a token cost C[gold, predicted] (zero diagonal; the Hamming
loss is C = 1 - I), the expected loss of predicting y' is

    E_p[Delta(y, y')] = sum_t sum_g p(y_t = g) C[g, y'_t],

a sum over positions of the tag marginals' expected cost, so its minimiser over the labelings the
constraints allow is one Viterbi pass over the "emissions" -E_p[C[., k]] at every position with zero
transition scores where a move is allowed and -inf where it is not (Kall et al. 2005's posterior-Viterbi for
HMMs; with the Hamming cost and no constraints it is each position's most probable tag, the maximum expected
accuracy of Goodman 1996 at the level of tags). Forbidden moves are those of the constraint penalties and the
transition parameters equal to -inf; a finite score, however low, leaves its move allowed. A per-row factor on
Delta (``token_loss="normalized"``) does not change the minimiser. The n best: the n labelings of least expected
loss, by the n-best Viterbi over the same scores.
"""
from __future__ import annotations

import torch

from . import ops


def expected_gain(marginals: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """-E_p[C[y_t, k]] (B, T, K): minus the expected cost of predicting tag k at position t, from the tag marginals
    (B, T, K) and the cost C (K, K) [gold, predicted]; the labeling of largest summed gain is the MBR labeling."""
    with torch.autocast(marginals.device.type, enabled=False):   # under AMP too, in the marginals' dtype
        return -(marginals @ cost.to(marginals.device, marginals.dtype))


def allowed_moves(start, end, trans, dtype):
    """(start, end, trans) in ``dtype``: 0 where the parameters allow a first tag / last tag / move and -inf where
    they are -inf (the constraint penalties are added by the decoders): the MBR pass keeps the CRF's support and
    scores nothing else."""
    return tuple(torch.zeros_like(x, dtype=dtype).masked_fill(torch.isneginf(x.detach()), float("-inf"))
                 for x in (start, end, trans))


def mbr_decode(E, mask, start, end, trans, cost, penalty=None, kernels: str = "auto", nbest: int = 1):
    """(labels, scores): the MBR labeling (B, T) of every row and its summed gain (B,) (minus its expected loss), or
    with ``nbest`` > 1 the n labelings of least expected loss (B, n, T) and theirs (B, n) in non-increasing gain
    order (module docstring); -1 where the mask is off. E (B, T, K) batch-first, trans [next, prev]
    (:mod:`ssvm_torch.chain.ops`). A row no labeling satisfies is refused as by Viterbi decoding. No gradient."""
    with torch.no_grad():
        mu = ops.marginals(E, mask, start, end, trans, penalty, kernels)
        gain = expected_gain(mu, cost)
        s, e, t = allowed_moves(start, end, trans, gain.dtype)
        if nbest > 1:
            return ops.nbest(gain, mask, s, e, t, nbest, penalty, kernels)
        return ops.decode(gain, mask, s, e, t, penalty, kernels)
