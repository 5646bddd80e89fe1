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

Partial annotation: a negative head at a word is unobserved; the losses then compare with C, the trees that
agree with every observed head (:mod:`ssvm_torch.trees.partial`: log Z - log Z_C, the latent hinge, the
softmax-margin with log Z_C); a row with every head observed gives the full-annotation loss bit for bit.

Every call takes second-order scores through ``sib_scores`` (B, N, N, N) (adjacent siblings, SuPar's layout,
:mod:`ssvm_torch.trees.sibling`), projective trees only: s(y) then adds the sibling scores of the tree's
adjacent siblings, and the losses, decoding, log Z and marginals are those of the second-order model.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from . import ops, sibling_ops
from .checks import (KERNELS, check_heads, check_partial_heads, check_scores, resolve_lengths, tracing, tree_faults,
                     use_numba, word_mask)
from .kbest import dependency_kbest
from .lawler import check_nbest
from .partial import join_rows, observed_heads, partial_loss
from .sibling import check_sib_scores, sibling_score


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


def _flags(projective, multiroot) -> tuple[bool, bool]:
    """``projective`` and ``multiroot`` as bools, refused by name unless they are (a string such as "False" is
    truthy and would silently choose the other structure)."""
    for name, value in (("projective", projective), ("multiroot", multiroot)):
        check(isinstance(value, bool), name, "True or False", repr(value))
    return projective, multiroot


def _prepare(arc_scores, mask, lengths, sib_scores=None, projective: bool = True):
    """(S, lengths, SB or None) after the checks; second-order scores only with projective trees."""
    S = check_scores(arc_scores)
    lengths = resolve_lengths(S, mask, lengths)
    if sib_scores is None:
        return S, lengths, None
    check(projective, "sib_scores", "projective=True with second-order (sibling) scores: only projective trees "
          "are parsed exactly with them (second-order non-projective parsing is NP-hard, McDonald & Pereira 2006)",
          "projective=False")
    return S, lengths, check_sib_scores(sib_scores, S)


def dependency_decode(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                      kernels: str = "auto", return_scores: bool = False, sib_scores=None, *, nbest: int = 1):
    """The best tree of every row: heads (B, N) int64 (heads[b, m] the head of word m, 0 = the root), -1 at
    position 0 and off the words; with ``return_scores`` also s(heads) (B,). With ``sib_scores`` (B, N, N, N)
    the best second-order projective tree (:mod:`ssvm_torch.trees.sibling`). ``nbest=k > 1``: the k best trees
    of every row, heads (B, k, N) and scores (B, k) in non-increasing score order, -1 (score -inf) at the ranks
    past a row's number of trees (:mod:`ssvm_torch.trees.kbest`). No gradient."""
    projective, multiroot = _flags(projective, multiroot)
    check_nbest(nbest)
    S, lengths, SB = _prepare(arc_scores, mask, lengths, sib_scores, projective)
    with torch.no_grad():
        if nbest > 1:
            heads, _, scores = dependency_kbest(S, lengths, nbest, projective, multiroot, _kernels(kernels), SB)
        elif SB is None:
            heads, scores = ops.best(S, lengths, projective, multiroot, _kernels(kernels))
        else:
            heads, scores = sibling_ops.best(S, SB, lengths, multiroot, _kernels(kernels))
    return (heads, scores) if return_scores else heads


def dependency_log_partition(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                             kernels: str = "auto", sib_scores=None) -> torch.Tensor:
    """log Z (B,) = log sum over the trees of exp s(y), differentiable (its gradient: the arc marginals, and
    with ``sib_scores`` the sibling marginals)."""
    projective, multiroot = _flags(projective, multiroot)
    S, lengths, SB = _prepare(arc_scores, mask, lengths, sib_scores, projective)
    if SB is None:
        return ops.log_partition(S, lengths, projective, multiroot, _kernels(kernels))
    return sibling_ops.log_partition(S, SB, lengths, multiroot, _kernels(kernels))


def dependency_marginals(arc_scores, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                         kernels: str = "auto", sib_scores=None):
    """P(h -> m) (B, N, N) [modifier, head] under p(y) = exp s(y) / Z, zero off the words; with ``sib_scores``
    the pair (arc marginals, sibling marginals (B, N, N, N) [modifier, head, sibling]). No gradient."""
    projective, multiroot = _flags(projective, multiroot)
    S, lengths, SB = _prepare(arc_scores, mask, lengths, sib_scores, projective)
    if SB is None:
        return ops.marginals(S, lengths, projective, multiroot, _kernels(kernels))
    return sibling_ops.marginals(S, SB, lengths, multiroot, _kernels(kernels))


def dependency_score(arc_scores, heads, mask=None, lengths=None, sib_scores=None) -> torch.Tensor:
    """s(heads) (B,) = sum over the words of arc_scores[b, m, heads[b, m]] (plus, with ``sib_scores``, the
    sibling scores of the words' adjacent siblings), differentiable. The heads must form a (multi-root,
    possibly non-projective) tree."""
    S, lengths, SB = _prepare(arc_scores, mask, lengths, sib_scores, True)
    heads = check_heads(heads, lengths, S.shape[1], multiroot=True, projective=False)
    return ops.score(S, heads, lengths) if SB is None else sibling_score(S, SB, heads, lengths)


def _loss_inputs(arc_scores, heads, mask, lengths, projective, multiroot, cost, kernels, sib_scores):
    projective, multiroot = _flags(projective, multiroot)
    S, lengths, SB = _prepare(arc_scores, mask, lengths, sib_scores, projective)
    gold = check_partial_heads(heads, lengths, S.shape[1], multiroot, projective,
                               compiled=use_numba(S, _kernels(kernels)))
    c = row_cost("hamming" if cost is None else cost, lengths, S.dtype)
    return S, SB, gold, lengths, c, projective, multiroot, _kernels(kernels)


def _loss(loss: str, S, SB, gold, lengths, c, projective, multiroot, k):
    """The per-row loss: rows with every head observed by the full-annotation operations (bit for bit), the
    others by :func:`ssvm_torch.trees.partial.partial_loss` (negative heads unobserved)."""
    def whole(idx):
        take = (lambda x: x) if idx is None else (lambda x: x if x is None else x[idx])
        args = (take(S), take(SB), take(gold), take(lengths))
        if SB is not None:
            fn = {"hinge": sibling_ops.hinge, "softmax_margin": sibling_ops.softmax_margin}.get(loss)
            return (fn(*args, take(c), multiroot, k) if fn is not None
                    else sibling_ops.nll(*args, multiroot, k))
        fn = {"hinge": ops.hinge, "softmax_margin": ops.softmax_margin}.get(loss)
        return (fn(args[0], args[2], args[3], take(c), projective, multiroot, k) if fn is not None
                else ops.nll(args[0], args[2], args[3], projective, multiroot, k))
    full = ~(observed_heads(gold, lengths) ^ word_mask(lengths, S.shape[1])).any(1)
    if tracing() or bool(full.all()):
        return whole(None)

    def partial(idx):
        sb = None if SB is None else SB[idx]
        return partial_loss(loss, S[idx], S[idx], sb, gold[idx], lengths[idx], c[idx], projective, multiroot, k, idx)
    return join_rows(full, whole, partial, S)


def dependency_hinge(arc_scores, heads, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                     cost="hamming", kernels: str = "auto", sib_scores=None) -> torch.Tensor:
    """The structured hinge per row (module docstring). The gold ``heads`` must be a tree of the chosen kind;
    negative heads at words are unobserved (the latent hinge against C, :mod:`ssvm_torch.trees.partial`)."""
    S, SB, gold, lengths, c, projective, multiroot, k = _loss_inputs(arc_scores, heads, mask, lengths, projective,
                                                                     multiroot, cost, kernels, sib_scores)
    return _loss("hinge", S, SB, gold, lengths, c, projective, multiroot, k)


def dependency_softmax_margin(arc_scores, heads, mask=None, lengths=None, projective: bool = True,
                              multiroot: bool = False, cost="hamming", kernels: str = "auto",
                              sib_scores=None) -> torch.Tensor:
    """The softmax-margin loss per row (module docstring; negative heads unobserved)."""
    S, SB, gold, lengths, c, projective, multiroot, k = _loss_inputs(arc_scores, heads, mask, lengths, projective,
                                                                     multiroot, cost, kernels, sib_scores)
    return _loss("softmax_margin", S, SB, gold, lengths, c, projective, multiroot, k)


def dependency_crf_nll(arc_scores, heads, mask=None, lengths=None, projective: bool = True, multiroot: bool = False,
                       kernels: str = "auto", sib_scores=None) -> torch.Tensor:
    """The CRF's negative log-likelihood log Z - s(gold) per row (module docstring); with negative (unobserved)
    heads the negative marginal likelihood log Z - log Z_C."""
    S, SB, gold, lengths, c, projective, multiroot, k = _loss_inputs(arc_scores, heads, mask, lengths, projective,
                                                                     multiroot, None, kernels, sib_scores)
    return _loss("crf", S, SB, gold, lengths, c, projective, multiroot, k)


def is_tree(heads, lengths, multiroot: bool = True, projective: bool = False) -> torch.Tensor:
    """(B,) bool: whether each row of ``heads`` (B, N) is a tree of the given kind over its lengths[b] words."""
    check(torch.is_tensor(heads) and heads.dim() == 2, "heads", "an integer tensor (B, N)", getattr(heads, "shape", None))
    lengths = torch.as_tensor(lengths, device=heads.device).to(torch.int64)
    multiroot, projective = _flags(projective, multiroot)[::-1]
    if lengths.shape != heads.shape[:1]:
        raise SSVMInputError(f"lengths: expected shape ({heads.shape[0]},), got {tuple(lengths.shape)}")
    N = heads.shape[1]
    bad = (lengths < 0) | (lengths > N - 1)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"lengths: expected values in [0, {N - 1}] (words after the root position of heads "
                             f"(B, N)), got {int(lengths[b])} at row {b}")
    return tree_faults(heads, lengths, multiroot, projective) == 0
