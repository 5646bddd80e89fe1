"""Second-order (adjacent-sibling) dependency trees: the convention, the gold siblings of given trees and
their score.

**Convention (SuPar's ``Dependency2oCRF``).** Besides the arc scores ``arc_scores[b, m, h]`` of
:mod:`ssvm_torch.trees`, ``sib_scores`` (B, N, N, N) holds ``sib_scores[b, m, h, s]``, the score of m and s
being *adjacent* dependents of h on the same side, s the one between h and m (so h < s < m or m < s < h). A
tree's score is

    s(y) = sum_m arc_scores[m, y_m] + sum_{m with an adjacent sibling s_m} sib_scores[m, y_m, s_m],

where s_m is the dependent of y_m on m's side nearest to m between y_m and m; the dependent nearest its
head on each side has no sibling term (McDonald & Pereira 2006; Zhang et al. 2020). Only projective trees
are parsed (exact second-order non-projective parsing is NP-hard, McDonald & Pereira 2006). Single-root
(the UD default): the root's one child has no sibling term; multi-root: the root's children are adjacent
siblings of each other like any head's right dependents. Entries with s not strictly between h and m are
never read; -inf forbids a sibling pair.

**First-child parts** (McDonald & Pereira 2006's s(h, -, m), absent from SuPar's model): the nearest dependent
m of h on each side (the root's child too) scores ``sib_scores[m, h, h]`` instead of nothing. Every tree keeps
its score when that part is folded into the others (:func:`fold_first_child`): S'[m, h] = S[m, h] + SB[m, h, h]
and SB'[m, h, s] = SB[m, h, s] - SB[m, h, h], so each operation of the adjacent model serves the first-child
one (``DependencyTree(first_child=True)`` folds; the SSVM's ``mcdonald-pereira`` template too).

**Worked example.** "She quickly read the long book" (words 1..6) with heads [3, 3, 0, 6, 6, 3]: read (3)
has the left dependents quickly (2), nearest, and She (1), whose adjacent sibling is quickly; book (6) has
long (5), nearest, and the (4), whose sibling is long; read's one right dependent, book, and the root's one
child, read, have none. So s(y) = sum_m arc_scores[m, y_m] + sib_scores[1, 3, 2] + sib_scores[4, 6, 5], and
:func:`adjacent_siblings` gives s_m = [2, 0, 0, 5, 0, 0] for m = 1..6 (0: no sibling; SuPar's
``CoNLL.get_sibs(heads)[m - 1][heads[m]]``).
"""
from __future__ import annotations

import torch

from ..chain.checks import refuse_bad_scores
from ..errors import SSVMInputError, check
from .checks import tracing, word_mask


def check_sib_scores(sib_scores, S: torch.Tensor, field: str = "sib_scores") -> torch.Tensor:
    """``sib_scores`` as a (B, N, N, N) float tensor on the arc scores' device in their dtype (half precision
    computed in float32 like them); NaN and +inf refused, -inf allowed (a sibling pair that may not occur)."""
    B, N = S.shape[0], S.shape[1]
    check(torch.is_tensor(sib_scores) and sib_scores.is_floating_point(), field, "a float tensor (B, N, N, N)",
          getattr(sib_scores, "dtype", type(sib_scores).__name__))
    check(tuple(sib_scores.shape) == (B, N, N, N), field,
          f"shape (B, N, N, N) = ({B}, {N}, {N}, {N}): [batch, modifier, head, sibling] like arc_scores",
          tuple(sib_scores.shape))
    check(sib_scores.device == S.device, field, f"a tensor on {S.device} like arc_scores", sib_scores.device)
    check(sib_scores.device.type != "meta", field, "a tensor with data (on the CPU or a GPU)", "a meta tensor")
    refuse_bad_scores(sib_scores.detach(), field)
    return sib_scores.to(S.dtype)


def adjacent_siblings(heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, N) int64: the adjacent sibling s_m of every word m of the trees ``heads`` (B, N) (module docstring),
    0 where m is the dependent nearest its head on its side, -1 off the words. O(B N^2), on the heads' device."""
    B, N = heads.shape
    word = word_mask(lengths, N)
    h = torch.where(word, heads, torch.full_like(heads, -1))
    pos = torch.arange(N, device=heads.device)
    hm, k = h[:, :, None], pos[None, None, :]                           # [b, m, k]
    lo = torch.minimum(hm, pos[None, :, None])
    hi = torch.maximum(hm, pos[None, :, None])
    same = (h[:, None, :] == hm) & word[:, :, None] & word[:, None, :] & (lo < k) & (k < hi)
    right = torch.where(same, k, torch.zeros_like(k)).amax(2)           # h < k < m: the largest k
    left = torch.where(same, k, torch.full_like(k, N)).amin(2)          # m < k < h: the smallest k
    sib = torch.where(h < pos[None, :], right, torch.where(left < N, left, torch.zeros_like(left)))
    return torch.where(word, sib, torch.full_like(sib, -1))


def sibling_score(S: torch.Tensor, SB: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """s(heads) (B,) = the arc scores of the words' heads plus the sibling scores of their adjacent siblings
    (module docstring); differentiable in S and SB. ``heads`` must be trees (checked by the callers)."""
    B, N, _ = S.shape
    word = word_mask(lengths, N)
    h = heads.clamp(min=0)
    arcs = S.gather(2, h[:, :, None])[:, :, 0]
    sib = adjacent_siblings(heads, lengths)
    pos = torch.arange(N, device=S.device)
    idx = (pos[None, :] * N + h) * N + sib.clamp(min=0)
    picked = SB.reshape(B, N * N * N).gather(1, idx)
    total = torch.where(word, arcs, torch.zeros_like(arcs)) + torch.where(word & (sib > 0), picked, torch.zeros_like(picked))
    return total.sum(1)


def fold_first_child(S: torch.Tensor, SB: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Arc and sibling scores without first-child parts that give every tree the score it has with them
    (module docstring): a word m with head h scores c = SB[m, h, h] if it is h's nearest dependent on its side
    and SB[m, h, s] otherwise, so S'[m, h] = S[m, h] + c and SB'[m, h, s] = SB[m, h, s] - c (c = 0 where
    SB[m, h, h] is not finite: no arc). Differentiable in S and SB."""
    c = SB.diagonal(dim1=2, dim2=3)
    c = torch.where(torch.isfinite(c), c, torch.zeros((), dtype=c.dtype, device=c.device))
    return S + c, SB - c[..., None]


def refuse_open_first_child(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor,
                            field: str = "sib_scores") -> None:
    """First-child scores SB[m, h, h] must be finite wherever the arc h -> m may be taken (m a word, h the
    root or another word, S[m, h] finite): -inf there would forbid m being h's nearest dependent, which the
    fold cannot express. Skipped under tracing."""
    if tracing():
        return
    B, N, _ = S.shape
    word = word_mask(lengths, N)
    pos = torch.arange(N, device=S.device)
    heads = (pos[None, None, :] <= lengths[:, None, None]) & (pos[:, None] != pos[None, :])
    bad = word[:, :, None] & heads & torch.isfinite(S) & ~torch.isfinite(SB.diagonal(dim1=2, dim2=3))
    if bool(bad.any()):
        b, m, h = (int(v) for v in bad.nonzero()[0])
        raise SSVMInputError(f"{field}: expected finite first-child scores {field}[b, m, h, h] wherever the arc "
                             f"h -> m may be taken (first_child=True), got {float(SB[b, m, h, h])} at b={b}, "
                             f"m={m}, h={h}")


def first_child_marginals(M: torch.Tensor, MS: torch.Tensor) -> torch.Tensor:
    """The sibling marginals of the first-child model from the folded model's (arc M (B, N, N), sibling MS
    (B, N, N, N)): P(m is h's nearest dependent) = P(h -> m) - sum_s P(m, h, s), written at [m, h, h]."""
    MS = MS.clone()
    diag = MS.diagonal(dim1=2, dim2=3)
    diag.copy_(M.to(MS.dtype) - (MS.sum(3) - diag))
    return MS
