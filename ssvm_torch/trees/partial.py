"""Training from partial annotation on dependency trees: at a word, a head >= 0 is observed, a negative head
unobserved (SuPar's ``DependencyCRF.score(partial=True)`` convention); C = the trees of the chosen kind that
agree with every observed head. The losses of a row, each 0 for a row with nothing observed, first or second
order:

* ``"crf"``: log Z - log Z_C, the negative marginal likelihood of the observed heads;
* ``"hinge"``: max_y [s(y) + Delta_O(y)] - max_{y in C} s(y), the latent structured hinge (Yu & Joachims 2009),
  Delta_O = c_b x (the observed words whose head is wrong);
* ``"softmax_margin"``: log sum_y exp(s(y) + Delta_O(y)) - log Z_C.

C's terms read the arc scores with -inf at every head but the observed one of an observed word; Delta_O enters
as the offsets c_b [h != y_m] of the observed words. The callers (:mod:`ssvm_torch.trees.losses`,
:class:`ssvm_torch.nn.DependencyTree`) send rows with every head observed to the full-annotation operations
(bit for bit) and the others here; with relations (the layer), the effective arc scores of the two terms
differ (``S_all`` / ``S_C``), which is why both are arguments.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from . import ops, sibling_ops
from .checks import tracing, word_mask
from .sibling import sibling_score


def observed_heads(heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, N) bool: the words whose head is given (>= 0)."""
    return word_mask(lengths, heads.shape[1]) & (heads >= 0)


def restrict(S: torch.Tensor, heads: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """The arc scores of C: -inf at every head but the observed one of each observed word."""
    N = S.shape[2]
    other = torch.arange(N, device=S.device)[None, None, :] != heads.clamp(min=0)[..., None]
    return S.masked_fill(observed[..., None] & other, float("-inf"))


def augment_observed(S: torch.Tensor, heads: torch.Tensor, observed: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """S + cost_b [h != heads[b, m]] at the observed words m only: the scores whose best tree adds Delta_O."""
    N = S.shape[2]
    wrong = torch.arange(N, device=S.device)[None, None, :] != heads.clamp(min=0)[..., None]
    return S + (cost.to(S.dtype)[:, None, None] * (wrong & observed[..., None]).to(S.dtype))


def _best(S, SB, lengths, projective, multiroot, kernels):
    if SB is None:
        return ops.best(S, lengths, projective, multiroot, kernels, refuse=False)
    return sibling_ops.best(S, SB, lengths, multiroot, kernels, refuse=False)


def _log_partition(S, SB, lengths, projective, multiroot, kernels):
    if SB is None:
        return ops.log_partition(S, lengths, projective, multiroot, kernels)
    return sibling_ops.log_partition(S, SB, lengths, multiroot, kernels)


def _score(S, SB, heads, lengths):
    return ops.score(S, heads, lengths) if SB is None else sibling_score(S, SB, heads, lengths)


def partial_loss(loss: str, S_all, S_C, SB, heads, lengths, cost, projective: bool, multiroot: bool,
                 kernels: str = "auto", rows=None) -> torch.Tensor:
    """The per-row loss (B,) of rows with unobserved heads (module docstring): ``S_all`` the arc scores of the
    first term, ``S_C`` those of C's term before the restriction (both (B, N, N); the same tensor without
    relations), ``SB`` (B, N, N, N) or None, ``heads`` (B, N) with negatives unobserved, ``cost`` (B,) the loss
    of one wrong observed head; ``rows`` the rows' indices in the caller's batch (for the refusal of a row
    whose observed heads admit no tree). Differentiable in S_all, S_C and SB."""
    observed = observed_heads(heads, lengths)
    S_C = restrict(S_C, heads, observed)
    with torch.no_grad():
        y_c, best_c = _best(S_C.detach(), None if SB is None else SB.detach(), lengths, projective, multiroot,
                            kernels)
    if not tracing():
        bad = ~(best_c > -1e29) & (lengths > 0)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            kind = f"{'projective ' if projective else ''}{'multi' if multiroot else 'single'}-root"
            raise SSVMInputError(f"heads: row {int(rows[b]) if rows is not None else b}: the observed heads admit no "
                                 f"{kind} dependency tree with a finite score (C, the trees that agree with them, is "
                                 "empty: a cycle among them, two root children, crossing arcs or -inf arcs)")
    first = S_all if loss == "crf" else augment_observed(S_all, heads, observed, cost)
    if loss == "hinge":
        with torch.no_grad():
            y_star, _ = _best(first.detach(), None if SB is None else SB.detach(), lengths, projective, multiroot,
                              kernels)
        return _score(first, SB, y_star, lengths) - _score(S_C, SB, y_c, lengths)
    return (_log_partition(first, SB, lengths, projective, multiroot, kernels)
            - _log_partition(S_C, SB, lengths, projective, multiroot, kernels))


def join_rows(full: torch.Tensor, whole_fn, partial_fn, like: torch.Tensor) -> torch.Tensor:
    """Per-row values (B,) from ``whole_fn(idx)`` on the rows ``full`` marks and ``partial_fn(idx)`` on the
    others, joined differentiably (``like`` gives the dtype and device)."""
    out = like.new_zeros(full.shape[0])
    part = (~full).nonzero()[:, 0]
    if len(part):
        out = out.index_put((part,), partial_fn(part))
    whole = full.nonzero()[:, 0]
    if len(whole):
        out = out.index_put((whole,), whole_fn(whole))
    return out
