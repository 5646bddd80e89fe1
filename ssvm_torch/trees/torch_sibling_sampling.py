"""Exact samples of the second-order (adjacent-sibling) projective tree CRF in pure torch: any device, batched, no
host copy (the compiled sampler of :mod:`ssvm_torch.trees.numba_sibling_sampling` serves CPU scores).

One log-space inside pass of :mod:`ssvm_torch.trees.torch_sibling` keeps its five charts (CR, CL, IR, IL and the
sibling item X, flat index w * N + i), then every sample's derivation is read top-down width by width, as the
first-order sampler of :func:`ssvm_torch.trees.sampling.projective_samples` reads Eisner's chart: an item on the
derivation (an "on" count of 1) draws one of its terms with probability term / item,

    CR[w, i] -> IR[d, i] CR[w-d, i+d],    CL[w, i] -> CL[d, i] IL[w-d, i+d],    X[w, i] -> CR[d, i] CL[w-1-d, i+d+1],
    IR[w, i] -> CL[w-1, i+1] (i+w the dependent nearest i)  or  IR[k, i] X[w-k, i+k] sib(i+w, i, i+k),
    IL[w, i] -> CR[w-1, i]   (i the dependent nearest i+w)  or  X[k, i] IL[w-k, i+k] sib(i, i+w, i+k),

an incomplete item fixing its arc's head. Within a width the complete items go first (their terms include the
incomplete items of the same width); every other term is narrower. All draws of a width are one batched inverse-CDF
call (:func:`ssvm_torch.trees.draws.draw_categorical`) over the n samples of every row; draws of items off the
derivation are made and discarded, so the work does not depend on the samples (no host synchronisation).
"""
from __future__ import annotations

import torch

from .draws import draw_categorical
from .torch_eisner import _index, root_terms
from .torch_sibling import inside_charts, sibling_terms


def second_order_torch_samples(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int,
                               generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, n, N) int64, -1 at the root position and past each row's length; log Z (B,) float64, below
    :data:`~ssvm_torch.trees.torch_eisner.NEG` / 2 where no tree exists): n exact samples of every row's
    second-order projective CRF (module docstring), drawn in float64."""
    B, N, _ = S.shape
    dev = S.device
    if N == 1:
        return torch.full((B, n, 1), -1, dtype=torch.int64, device=dev), torch.zeros(B, dtype=torch.float64, device=dev)
    start = 0 if multiroot else 1
    SR, SB_flat, CR, CL, IR, IL, X, logz = inside_charts(S.detach().to(torch.float64),
                                                         SB.detach().to(torch.float64), lengths, multiroot)
    R = B * n
    rows = torch.arange(R, device=dev)
    on = {k: torch.zeros(R, N * N, dtype=torch.int64, device=dev) for k in ("cr", "cl", "ir", "il", "x")}
    head_plus = torch.zeros(R, N, dtype=torch.int64, device=dev)        # head + 1 of every word (0: none yet)
    L = lengths.repeat_interleave(n)
    if multiroot:
        on["cr"].index_put_((rows, L * N), torch.ones_like(rows), accumulate=True)
    else:
        terms = root_terms(SR, CL.view(B, N, N), CR.view(B, N, N), lengths, N)           # (B, N - 1)
        r = draw_categorical(terms, n, generator).reshape(R) + 1
        has = (L > 0).long()
        head_plus.index_put_((rows, r), has, accumulate=True)                          # head 0: head + 1 = 1
        on["cl"].index_put_((rows, (r - 1) * N + 1), has, accumulate=True)
        on["cr"].index_put_((rows, (L - r).clamp(min=0) * N + r), has, accumulate=True)

    def draw(logits):                       # (B, K, L) terms of every item -> (R, L) one term per sample
        return draw_categorical(logits.transpose(1, 2), n, generator).reshape(R, logits.shape[2])

    def put(item, at, flat, act):
        on[item].index_put_((at, flat), act, accumulate=True)

    index = _index(N, dev)
    for w in range(N - 1 - start, 0, -1):
        i, split, right, left = index[w]
        i, cols = i[start:], slice(start, None)
        flat = w * N + i
        at = rows[:, None].expand(R, len(i))
        act = on["cr"][:, flat]                                         # complete, head left: IR + CR
        d = draw(IR[:, right[0][:, cols]] + CR[:, right[1][:, cols]]) + 1
        put("ir", at, d * N + i, act)
        put("cr", at, (w - d) * N + i + d, act)
        act = on["cl"][:, flat]                                         # complete, head right: CL + IL
        d = draw(CL[:, left[0][:, cols]] + IL[:, left[1][:, cols]])
        put("cl", at, d * N + i, act)
        put("il", at, (w - d) * N + i + d, act)
        near_r, near_l = sibling_terms(SB_flat, CR, CL, IR, IL, X, w, i, right, left, cols, N)
        act = on["ir"][:, flat]                                         # arc i -> i+w
        c = draw(near_r)
        k = c.clamp(min=1)
        put("cl", at, (w - 1) * N + i + 1, act * (c == 0))
        put("ir", at, k * N + i, act * (c > 0))
        put("x", at, (w - k) * N + i + k, act * (c > 0))
        head_plus.index_put_((at, (i + w).expand(R, -1)), act * (i + 1), accumulate=True)
        act = on["il"][:, flat]                                         # arc i+w -> i
        c = draw(near_l)
        k = c.clamp(min=1)
        put("cr", at, (w - 1) * N + i, act * (c == 0))
        put("x", at, k * N + i, act * (c > 0))
        put("il", at, (w - k) * N + i + k, act * (c > 0))
        head_plus.index_put_((at, i.expand(R, -1)), act * (i + w + 1), accumulate=True)
        act = on["x"][:, flat]                                          # sibling item: CR + CL
        d = draw(CR[:, split[0][:, cols]] + CL[:, split[1][:, cols]])
        put("cr", at, d * N + i, act)
        put("cl", at, (w - 1 - d) * N + i + d + 1, act)
    pos = torch.arange(N, device=dev)
    word = (pos[None] >= 1) & (pos[None] <= L[:, None])
    return torch.where(word, head_plus - 1, torch.full_like(head_plus, -1)).view(B, n, N), logz


__all__ = ["second_order_torch_samples"]
