"""The second-order (adjacent-sibling) projective recursions in pure torch: any device, batched, the reference
of the compiled and Triton kernels (:mod:`ssvm_torch.trees.numba_sibling`, :mod:`ssvm_torch.trees.triton_sibling`)
and what runs where neither kernel does (CUDA without Triton, tracing).

The items of :mod:`ssvm_torch.trees.numba_sibling` kept by [width, start] for a padded batch as in
:mod:`ssvm_torch.trees.torch_eisner` (flat index w * N + i of a (B, N * N) chart), one Python iteration per
span width:

    X[w, i]  = (+)_{0 <= d < w} CR[d, i] (x) CL[w-1-d, i+d+1]
    IR[w, i] = SR[w, i] (x) ( CL[w-1, i+1] (+) (+)_{0 < k < w} IR[k, i] (x) X[w-k, i+k] (x) SB[i+w, i, i+k] )
    IL[w, i] = SL[w, i] (x) ( CR[w-1, i]   (+) (+)_{0 < k < w} X[k, i] (x) IL[w-k, i+k] (x) SB[i, i+w, i+k] )
    CR[w, i] = (+)_{0 < d <= w} IR[d, i] (x) CR[w-d, i+d],    CL[w, i] = (+)_{0 <= d < w} CL[d, i] (x) IL[w-d, i+d]

in the log semiring ((+) = logsumexp: log Z, differentiable by autograd, its gradients the arc and sibling
marginals) or max-plus ((+) = max: the best tree, read off as the gradient of its score, the 0/1 arcs of the
derivation that ``max`` routes it through; ``max`` keeps the first candidate, in the order nearest dependent,
then the siblings k ascending, then the split points left to right: the compiled kernel's tie rule).
Absent arcs and siblings (-inf) and padding take the finite :data:`~ssvm_torch.trees.torch_eisner.NEG`.
"""
from __future__ import annotations

import torch

from ..grad_mode import records_autograd
from .torch_eisner import NEG, _index, arc_tables, root_alone, root_terms


def _sibling_rows(SB_flat: torch.Tensor, w: int, i: torch.Tensor, N: int, right: bool) -> torch.Tensor:
    """(B, w-1, L) sibling scores of the width-w spans starting at ``i``: SB[b, i+w, i, i+k] (arc i -> i+w,
    previous sibling i+k) or SB[b, i, i+w, i+k] (arc i+w -> i), k = 1..w-1; -inf as NEG. A flat gather: its
    backward is a scatter-add."""
    k = torch.arange(1, w, device=i.device)[:, None]
    if right:
        idx = ((i + w) * N + i)[None, :] * N + i[None, :] + k
    else:
        idx = (i * N + i + w)[None, :] * N + i[None, :] + k
    B = SB_flat.shape[0]
    out = SB_flat.gather(1, idx.reshape(1, -1).expand(B, -1)).view(B, w - 1, i.shape[0])     # B may be 0
    return torch.where(torch.isfinite(out), out, torch.full((), NEG, dtype=out.dtype, device=out.device))


def _reduce(x: torch.Tensor, maxplus: bool) -> torch.Tensor:
    return x.max(1).values if maxplus else torch.logsumexp(x, 1)


def _root(S, SB, lengths, multiroot: bool, maxplus: bool) -> torch.Tensor:
    """The root's value (B,) of the inside pass in the chosen semiring: log Z or the best tree's score (NEG /
    2 or below where no tree exists, 0 for an empty row); differentiable in S and SB."""
    if S.shape[1] == 1:
        return root_alone(S, SB)
    return inside_charts(S, SB, lengths, multiroot, maxplus)[-1]


def sibling_terms(SB_flat, CR, CL, IR, IL, X, w: int, i, right, left, cols: slice, N: int):
    """The terms (B, w, L) of the width-w incomplete items IR and IL starting at ``i`` (their arc scores not
    added): the nearest dependent's term first, then the previous sibling k = 1..w-1 (module docstring); ``right``
    and ``left`` are :func:`~ssvm_torch.trees.torch_eisner._index`'s tables of width w, ``cols`` their columns of
    the starts ``i``."""
    near_r = CL[:, (w - 1) * N + i + 1][:, None]          # the nearest dependent: no sibling factor
    near_l = CR[:, (w - 1) * N + i][:, None]
    if w == 1:
        return near_r, near_l
    sib_r = IR[:, right[0][:w - 1, cols]] + X[:, right[1][:w - 1, cols]] + _sibling_rows(SB_flat, w, i, N, True)
    sib_l = X[:, left[0][1:, cols]] + IL[:, left[1][1:, cols]] + _sibling_rows(SB_flat, w, i, N, False)
    return torch.cat([near_r, sib_r], 1), torch.cat([near_l, sib_l], 1)


def inside_charts(S, SB, lengths, multiroot: bool, maxplus: bool = False):
    """(SR, SB_flat, CR, CL, IR, IL, X, value): the arc tables, the flat sibling scores, the five (B, N * N) charts
    of the inside pass in the chosen semiring (flat index w * N + i) and the root's value (B,) (:func:`_root`); N
    >= 2."""
    B, N, _ = S.shape
    start = 0 if multiroot else 1
    SR, SL = arc_tables(S, lengths)
    SB_flat = SB.reshape(B, N * N * N)
    neg = torch.full((), NEG, dtype=S.dtype, device=S.device)
    CR = torch.cat([torch.zeros(B, 1, N, dtype=S.dtype, device=S.device), neg.expand(B, N - 1, N)], 1)
    CR = CR.reshape(B, N * N).clone()
    CL = CR.clone()
    IR = torch.full((B, N * N), NEG, dtype=S.dtype, device=S.device)
    IL, X = IR.clone(), IR.clone()
    for w, (i, split, right, left) in enumerate(_index(N, S.device)[1:], start=1):
        if w >= N - start:
            break
        i = i[start:]
        cols = slice(start, None)
        flat = w * N + i
        X[:, flat] = _reduce(CR[:, split[0][:, cols]] + CL[:, split[1][:, cols]], maxplus)
        near_r, near_l = sibling_terms(SB_flat, CR, CL, IR, IL, X, w, i, right, left, cols, N)
        IR[:, flat] = SR[:, w, i] + _reduce(near_r, maxplus)
        IL[:, flat] = SL[:, w, i] + _reduce(near_l, maxplus)
        CR[:, flat] = _reduce(IR[:, right[0][:, cols]] + CR[:, right[1][:, cols]], maxplus)
        CL[:, flat] = _reduce(CL[:, left[0][:, cols]] + IL[:, left[1][:, cols]], maxplus)
    if multiroot:
        out = CR.view(B, N, N)[torch.arange(B, device=S.device), lengths, 0]
    else:
        out = _reduce(root_terms(SR, CL.view(B, N, N), CR.view(B, N, N), lengths, N), maxplus)
    return SR, SB_flat, CR, CL, IR, IL, X, torch.where(lengths > 0, out, torch.zeros_like(out))


def log_partition(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) of the second-order projective trees of every sentence of the padded scores S (B, N, N)
    [modifier, head] and SB (B, N, N, N) [modifier, head, sibling], differentiable by autograd (its
    gradients: the arc and sibling marginals); 0 for an empty row, below NEG / 2 where no tree exists."""
    return _root(S, SB, lengths, multiroot, maxplus=False)


@records_autograd
def best_tree(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor,
              multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, N) int64, -1 at 0 and beyond the length; scores (B,)): the best second-order projective tree
    of every sentence, the arcs that the max-plus pass routes the gradient of its score through (module
    docstring). A score below NEG / 2 means that no tree exists."""
    B, N, _ = S.shape
    with torch.enable_grad():
        leaf = S.detach().clone().requires_grad_(True)
        score = _root(leaf, SB.detach(), lengths, multiroot, maxplus=True)
        (arcs,) = torch.autograd.grad(score.sum(), leaf)
    pos = torch.arange(N, device=S.device)
    word = (pos[None] >= 1) & (pos[None] <= lengths[:, None])
    heads = torch.where(word, arcs.argmax(2), torch.full((B, N), -1, dtype=torch.int64, device=S.device))
    return heads, score.detach()
