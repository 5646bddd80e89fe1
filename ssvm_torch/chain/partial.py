"""Training from partial annotation on chains: at a masked-on position a tag >= 0 is observed, a negative
tag unobserved; C = the labelings that agree with every observed tag (and the tag constraints). The losses
of a row, to minimise, each 0 for a row with nothing observed:

* ``"crf"``: log Z - log Z_C, the negative marginal likelihood of the observed tags (Tsuboi et al. 2008);
* ``"hinge"``: max_y [s(y) + Delta_O(y)] - max_{y in C} s(y), the latent structured hinge (Yu & Joachims
  2009) with Delta_O the task cost at the observed positions only; its subgradient is the statistics of the
  loss-augmented labeling minus those of C's best labeling;
* ``"softmax_margin"``: log sum_y exp(s(y) + Delta_O(y)) - log Z_C (Gimpel & Smith 2010's loss with the
  gold labeling's score replaced by C's log-sum).

Each is the plain loss of the chain operations (:mod:`ssvm_torch.chain.ops`) on restricted emissions: C's terms
read E_C = E with -inf at every tag but the observed one of an observed position (the tag constraints still
apply as penalties), Delta_O enters as offsets rowc_b cost[y_t, k] at the observed positions. A row with every
position observed takes the full-annotation path of :mod:`ssvm_torch.chain.ops` unchanged (its loss bit for
bit); the others go through the restricted operations, and the two sets of rows are joined differentiably.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from . import ops


def restricted(E: torch.Tensor, tags: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """E_C: the emissions with -inf at every tag other than the observed one of each observed position."""
    K = E.shape[2]
    other = torch.arange(K, device=E.device)[None, None, :] != tags.clamp(min=0)[..., None]
    return E.masked_fill(observed[..., None] & other, float("-inf"))


def cost_offsets(E: torch.Tensor, tags: torch.Tensor, observed: torch.Tensor, rowc: torch.Tensor,
                 cost: torch.Tensor) -> torch.Tensor:
    """rowc_b cost[y_t, k] at the observed positions, 0 elsewhere (B, T, K): the offsets whose Viterbi / log Z
    add Delta_O, the cost of the observed positions only."""
    c = cost.to(device=E.device, dtype=E.dtype)[tags.clamp(min=0)]
    return rowc.to(E.dtype)[:, None, None] * c * observed[..., None].to(E.dtype)


def _check_c(E_C, mask, start, end, trans, penalty, kernels, rows):
    """C's best labeling per row (no gradient); a row whose observed tags admit no labeling under the
    constraints is refused naming its row of the batch (``rows``: the rows' indices there)."""
    with torch.no_grad():
        labels, scores = ops.decode(E_C.detach(), mask, start, end, trans, penalty, kernels, refuse=False)
    if not ops.tracing():
        bad = ~torch.isfinite(scores) & mask.any(1)
        if bool(bad.any()):
            raise SSVMInputError(f"tags: row {int(rows[int(bad.nonzero()[0, 0])])}: the observed tags admit no tag "
                                 "sequence under the constraints (C, the labelings that agree with them, is empty)")
    return labels


def _partial_rows(loss: str, E, mask, start, end, trans, tags, observed, rowc, cost, penalty, kernels, rows):
    """The loss of rows with unobserved positions (module docstring), differentiable."""
    E_C = restricted(E, tags, observed)
    y_c = _check_c(E_C, mask, start, end, trans, penalty, kernels, rows)
    if loss == "crf":
        return (ops.log_partition(E, mask, start, end, trans, penalty, kernels)
                - ops.log_partition(E_C, mask, start, end, trans, penalty, kernels))
    aug = E + cost_offsets(E, tags, observed, rowc, cost)
    if loss == "softmax_margin":
        return (ops.log_partition(aug, mask, start, end, trans, penalty, kernels)
                - ops.log_partition(E_C, mask, start, end, trans, penalty, kernels))
    with torch.no_grad():
        y_star, _ = ops.decode(aug.detach(), mask, start, end, trans, penalty, kernels)
    delta = (cost_offsets(E, tags, observed, rowc, cost).gather(2, y_star.clamp(min=0)[..., None])[..., 0]
             * mask).sum(1)
    return (ops.score(E, mask, start, end, trans, y_star) + delta
            - ops.score(E, mask, start, end, trans, y_c))


def partial_loss(loss: str, E, mask, start, end, trans, tags, rowc, cost, penalty=None, kernels="auto"):
    """The per-row loss (B,) of ``tags`` (B, T) with negative entries unobserved (module docstring):
    ``loss`` "crf", "hinge" or "softmax_margin"; ``rowc`` (B,) and ``cost`` (K, K) the task cost (hinge and
    softmax-margin). Rows with every masked-on tag observed take the full-annotation operations."""
    observed = (tags >= 0) & mask
    full = (observed | ~mask).all(1)
    gold = torch.where(mask, tags.clamp(min=0), torch.zeros_like(tags))

    def plain(idx):
        take = (lambda x: x) if idx is None else (lambda x: x[idx])
        if loss == "crf":
            return ops.nll(take(E), take(mask), start, end, trans, take(gold), penalty, kernels)
        fn = ops.hinge if loss == "hinge" else ops.softmax_margin
        return fn(take(E), take(mask), start, end, trans, take(gold), take(rowc), cost, penalty, kernels)
    if ops.tracing():           # no data-dependent split of the rows inside a graph: every row by the C formula
        return _partial_rows(loss, E, mask, start, end, trans, tags, observed, rowc, cost, penalty, kernels,
                             torch.arange(E.shape[0], device=E.device))
    if bool(full.all()):
        return plain(None)
    part = (~full).nonzero()[:, 0]
    out = E.new_zeros(E.shape[0])
    out = out.index_put((part,), _partial_rows(loss, E[part], mask[part], start, end, trans, tags[part],
                                               observed[part], rowc[part], cost, penalty, kernels, part))
    if bool(full.any()):
        whole = full.nonzero()[:, 0]
        out = out.index_put((whole,), plain(whole))
    return out
