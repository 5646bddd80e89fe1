"""The tree package's public calls on padded batches: each checks its arguments (every error names the
argument and the row) and runs the operation of :mod:`ssvm_torch.trees.ops` (one dispatch over the
backends). Losses are per row (B,) and differentiable w.r.t. the arc scores:

* hinge (the n-slack SSVM's structured hinge, Taskar et al. 2003; McDonald et al. 2005 trained this
  structure with MIRA): max_y [s(y) + Delta(y, y_b)] - s(y_b) >= 0, its gradient the arcs of the
  loss-augmented tree minus the gold arcs;
* softmax-margin (Gimpel & Smith 2010): log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b), gradient the
  loss-augmented arc marginals minus the gold arcs;
* CRF (Koo et al. 2007 for non-projective trees): log Z - s(y_b), gradient the arc marginals minus the gold arcs.

Delta(y, y_b) = c_b x (the number of words whose head differs), c_b = 1 (``cost="hamming"``), 1 / n_b
(``"normalized"``) or a given per-row tensor (B,).
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from . import ops
from .checks import KERNELS, check_heads, check_scores, resolve_lengths, tree_faults


def _kernels(kernels: str) -> str:
    check(kernels in KERNELS, "kernels", f"one of {list(KERNELS)}", repr(kernels))
    return kernels


def row_cost(cost, lengths: torch.Tensor, dtype) -> torch.Tensor:
    """The loss c_b of one wrong head per row (B,) from ``cost`` (module docstring), checked."""
    B = lengths.shape[0]
    if isinstance(cost, str):
        check(cost in ("hamming", "normalized"), "cost", "'hamming', 'normalized' or a tensor (B,) of costs >= 0",
              repr(cost))
        if cost == "hamming":
            return torch.ones(B, dtype=dtype, device=lengths.device)
        return 1.0 / lengths.clamp(min=1).to(dtype)
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        check(cost >= 0 and cost < float("inf"), "cost", "a finite number >= 0", cost)
        return torch.full((B,), float(cost), dtype=dtype, device=lengths.device)
    check(torch.is_tensor(cost) and cost.is_floating_point() and tuple(cost.shape) == (B,), "cost",
          f"'hamming', 'normalized', a number or a float tensor of shape ({B},)",
          getattr(cost, "shape", type(cost).__name__))
    cost = cost.detach().to(lengths.device, dtype)
    check(bool(torch.isfinite(cost).all()) and bool((cost >= 0).all()), "cost", "finite values >= 0",
          "negative or non-finite entries")
    return cost


def _prepare(arc_scores, mask, lengths):
    S = check_scores(arc_scores)
    return S, resolve_lengths(S, mask, lengths)


def dependency_decode(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                      kernels: str = "auto", return_scores: bool = False):
    """The best tree of every row: heads (B, N) int64 (heads[b, m] the head of word m, 0 = the root), -1 at
    position 0 and off the words; with ``return_scores`` also s(heads) (B,). No gradient."""
    S, lengths = _prepare(arc_scores, mask, lengths)
    with torch.no_grad():
        heads, scores = ops.best(S, lengths, bool(projective), bool(multiroot), _kernels(kernels))
    return (heads, scores) if return_scores else heads


def dependency_log_partition(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                             kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) = log sum over the trees of exp s(y), differentiable (its gradient: the arc marginals)."""
    S, lengths = _prepare(arc_scores, mask, lengths)
    return ops.log_partition(S, lengths, bool(projective), bool(multiroot), _kernels(kernels))


def dependency_marginals(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                         kernels: str = "auto") -> torch.Tensor:
    """P(h -> m) (B, N, N) [modifier, head] under p(y) = exp s(y) / Z, zero off the words. No gradient."""
    S, lengths = _prepare(arc_scores, mask, lengths)
    return ops.marginals(S, lengths, bool(projective), bool(multiroot), _kernels(kernels))


def dependency_score(arc_scores, heads, mask=None, lengths=None) -> torch.Tensor:
    """s(heads) (B,) = sum over the words of arc_scores[b, m, heads[b, m]], differentiable. The heads must
    form a (multi-root, possibly non-projective) tree."""
    S, lengths = _prepare(arc_scores, mask, lengths)
    heads = check_heads(heads, lengths, S.shape[1], multiroot=True, projective=False)
    return ops.score(S, heads, lengths)


def _loss_inputs(arc_scores, heads, mask, lengths, projective, multiroot, cost, kernels):
    S, lengths = _prepare(arc_scores, mask, lengths)
    gold = check_heads(heads, lengths, S.shape[1], bool(multiroot), bool(projective))
    return S, gold, lengths, (None if cost is None else row_cost(cost, lengths, S.dtype)), _kernels(kernels)


def dependency_hinge(arc_scores, heads, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                     cost="hamming", kernels: str = "auto") -> torch.Tensor:
    """The structured hinge per row (module docstring). The gold ``heads`` must be a tree of the chosen kind."""
    S, gold, lengths, c, k = _loss_inputs(arc_scores, heads, mask, lengths, projective, multiroot, cost, kernels)
    return ops.hinge(S, gold, lengths, c, bool(projective), bool(multiroot), k)


def dependency_softmax_margin(arc_scores, heads, mask=None, lengths=None, projective: bool = True,
                              multiroot: bool = False, cost="hamming", kernels: str = "auto") -> torch.Tensor:
    """The softmax-margin loss per row (module docstring)."""
    S, gold, lengths, c, k = _loss_inputs(arc_scores, heads, mask, lengths, projective, multiroot, cost, kernels)
    return ops.softmax_margin(S, gold, lengths, c, bool(projective), bool(multiroot), k)


def dependency_crf_nll(arc_scores, heads, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                       kernels: str = "auto") -> torch.Tensor:
    """The CRF's negative log-likelihood log Z - s(gold) per row (module docstring)."""
    S, gold, lengths, _, k = _loss_inputs(arc_scores, heads, mask, lengths, projective, multiroot, None, kernels)
    return ops.nll(S, gold, lengths, bool(projective), bool(multiroot), k)


def is_tree(heads, lengths, multiroot: bool = True, projective: bool = False) -> torch.Tensor:
    """(B,) bool: whether each row of ``heads`` (B, N) is a tree of the given kind over its lengths[b] words."""
    check(torch.is_tensor(heads) and heads.dim() == 2, "heads", "an integer tensor (B, N)", getattr(heads, "shape", None))
    lengths = torch.as_tensor(lengths, device=heads.device).to(torch.int64)
    if lengths.shape != heads.shape[:1]:
        raise SSVMInputError(f"lengths: expected shape ({heads.shape[0]},), got {tuple(lengths.shape)}")
    return tree_faults(heads, lengths, multiroot, projective) == 0
