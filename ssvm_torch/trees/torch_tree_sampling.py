"""Exact samples of the projective tree CRFs in pure torch, first order (Eisner's chart) and second order (the
adjacent-sibling chart): any device, batched over rows and samples, no host synchronisation. The compiled samplers
(:mod:`ssvm_torch.trees.numba_sampling`, :mod:`ssvm_torch.trees.numba_sibling_sampling`) serve CPU scores.

One log-space inside pass keeps its charts (flat index w * N + i: :mod:`ssvm_torch.trees.torch_eisner`,
:mod:`ssvm_torch.trees.torch_sibling`), then every sample's derivation is read top-down width by width from the
widest span (forward filtering, backward sampling over the grammar, as torch-struct samples through its semiring's
backward): an item on the derivation (an "on" count of 1) draws one of its terms with probability term / item,

    CR[w, i] -> IR[d, i] CR[w-d, i+d],    CL[w, i] -> CL[d, i] IL[w-d, i+d]        (both orders)
    IR[w, i], IL[w, i] -> CR[d, i] CL[w-1-d, i+d+1]                                  (first order)
    IR[w, i] -> CL[w-1, i+1]  or  IR[k, i] X[w-k, i+k] sib(i+w, i, i+k)             (second order; the first: i+w
    IL[w, i] -> CR[w-1, i]    or  X[k, i] IL[w-k, i+k] sib(i, i+w, i+k)              the dependent nearest its head)
    X[w, i]  -> CR[d, i] CL[w-1-d, i+d+1]                                            (the sibling item)

an incomplete item fixing its arc's head. Within a width the complete items go first (their terms include the
incomplete items of the same width); every other term is narrower. All draws of a width are one batched inverse-CDF
call (:func:`ssvm_torch.trees.draws.draw_categorical`) over the n samples of every row; draws of items off the
derivation are made and discarded, so the work does not depend on the samples: O(N^3) batched tensor work per
sample in both orders (a width's items times their terms).
"""
from __future__ import annotations

import torch

from .draws import draw_categorical
from .torch_eisner import _index, inside_charts, root_terms
from .torch_sibling import inside_charts as sibling_charts, sibling_terms


class _Derivations:
    """The n derivations of every row being read top-down: per chart item kind an "on" count (R, N * N), R = B n,
    and each word's head + 1 (0 while undrawn), started at the root (single root: its child drawn from
    ``root_terms``)."""

    def __init__(self, kinds, SR, CR, CL, lengths, multiroot: bool, n: int, generator):
        B, N = SR.shape[0], SR.shape[1]
        dev = SR.device
        self.N, self.n, self.R, self.generator = N, n, B * n, generator
        self.rows = torch.arange(self.R, device=dev)
        self.on = {k: torch.zeros(self.R, N * N, dtype=torch.int64, device=dev) for k in kinds}
        self.head_plus = torch.zeros(self.R, N, dtype=torch.int64, device=dev)
        self.L = lengths.repeat_interleave(n)
        if multiroot:
            self.logz = CR.view(B, N, N)[torch.arange(B, device=dev), lengths, 0]
            self.put("cr", self.rows, self.L * N, torch.ones_like(self.rows))
            return
        terms = root_terms(SR, CL.view(B, N, N), CR.view(B, N, N), lengths, N)           # (B, N - 1)
        self.logz = torch.logsumexp(terms, 1)
        r = draw_categorical(terms, n, generator).reshape(self.R) + 1
        has = (self.L > 0).long()
        self.head_plus.index_put_((self.rows, r), has, accumulate=True)                  # head 0: head + 1 = 1
        self.put("cl", self.rows, (r - 1) * N + 1, has)
        self.put("cr", self.rows, (self.L - r).clamp(min=0) * N + r, has)

    def put(self, item, at, flat, act):
        self.on[item].index_put_((at, flat), act, accumulate=True)

    def draw(self, logits):
        """(B, K, L) terms of every item -> (R, L): one term per item and sample."""
        return draw_categorical(logits.transpose(1, 2), self.n, self.generator).reshape(self.R, logits.shape[2])

    def complete(self, CR, CL, IR, IL, w, i, right, left, cols, at):
        """The width-w complete items' draws: CR -> IR CR, CL -> CL IL."""
        N = self.N
        act = self.on["cr"][:, w * N + i]
        d = self.draw(IR[:, right[0][:, cols]] + CR[:, right[1][:, cols]]) + 1
        self.put("ir", at, d * N + i, act)
        self.put("cr", at, (w - d) * N + i + d, act)
        act = self.on["cl"][:, w * N + i]
        d = self.draw(CL[:, left[0][:, cols]] + IL[:, left[1][:, cols]])
        self.put("cl", at, d * N + i, act)
        self.put("il", at, (w - d) * N + i + d, act)

    def split(self, act, CR, CL, w, i, split, cols, at):
        """Items spanning [i, i+w] whose two halves meet between words (first-order incomplete, sibling X)."""
        d = self.draw(CR[:, split[0][:, cols]] + CL[:, split[1][:, cols]])
        self.put("cr", at, d * self.N + i, act)
        self.put("cl", at, (w - 1 - d) * self.N + i + d + 1, act)

    def heads(self, lengths):
        """(heads (B, n, N), -1 at the root position and past each row's length; log Z (B,), 0 for empty rows)."""
        N = self.N
        pos = torch.arange(N, device=self.L.device)
        word = (pos[None] >= 1) & (pos[None] <= self.L[:, None])
        heads = torch.where(word, self.head_plus - 1, torch.full_like(self.head_plus, -1)).view(-1, self.n, N)
        return heads, torch.where(lengths > 0, self.logz, torch.zeros_like(self.logz))


def _widths(N: int, multiroot: bool, R: int, device):
    start = 0 if multiroot else 1
    index = _index(N, device)
    rows = torch.arange(R, device=device)
    for w in range(N - 1 - start, 0, -1):
        i, split, right, left = index[w]
        yield w, i[start:], split, right, left, slice(start, None), rows[:, None].expand(R, len(i) - start)


def _trivial(B: int, n: int, device):
    return torch.full((B, n, 1), -1, dtype=torch.int64, device=device), torch.zeros(B, dtype=torch.float64,
                                                                                     device=device)


def projective_samples(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int, generator=None):
    """(heads (B, n, N) int64, -1 at the root position and past each row's length; log Z (B,) float64, below
    NEG / 2 where no tree exists): n exact samples of every row's first-order projective tree CRF, drawn in
    float64 from Eisner's inside charts (module docstring)."""
    B, N, _ = S.shape
    if N == 1:
        return _trivial(B, n, S.device)
    SR, _, CR, CL, IR, IL = inside_charts(S.detach().to(torch.float64), lengths, multiroot)
    walk = _Derivations(("cr", "cl", "ir", "il"), SR, CR, CL, lengths, multiroot, n, generator)
    for w, i, split, right, left, cols, at in _widths(N, multiroot, walk.R, S.device):
        walk.complete(CR, CL, IR, IL, w, i, right, left, cols, at)
        flat = w * N + i
        walk.split(walk.on["ir"][:, flat] + walk.on["il"][:, flat], CR, CL, w, i, split, cols, at)
        walk.head_plus.index_put_((at, (i + w).expand(walk.R, -1)), walk.on["ir"][:, flat] * (i + 1), accumulate=True)
        walk.head_plus.index_put_((at, i.expand(walk.R, -1)), walk.on["il"][:, flat] * (i + w + 1), accumulate=True)
    return walk.heads(lengths)


def second_order_torch_samples(S: torch.Tensor, SB: torch.Tensor, lengths: torch.Tensor, multiroot: bool, n: int,
                               generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(heads (B, n, N) int64, -1 at the root position and past each row's length; log Z (B,) float64, below
    NEG / 2 where no tree exists): n exact samples of every row's second-order (adjacent-sibling) projective CRF,
    drawn in float64 from the torch second-order inside charts (module docstring)."""
    B, N, _ = S.shape
    if N == 1:
        return _trivial(B, n, S.device)
    SR, SB_flat, CR, CL, IR, IL, X, _ = sibling_charts(S.detach().to(torch.float64), SB.detach().to(torch.float64),
                                                       lengths, multiroot)
    walk = _Derivations(("cr", "cl", "ir", "il", "x"), SR, CR, CL, lengths, multiroot, n, generator)
    put = walk.put
    for w, i, split, right, left, cols, at in _widths(N, multiroot, walk.R, S.device):
        walk.complete(CR, CL, IR, IL, w, i, right, left, cols, at)
        flat = w * N + i
        near_r, near_l = sibling_terms(SB_flat, CR, CL, IR, IL, X, w, i, right, left, cols, N)
        act = walk.on["ir"][:, flat]                                    # arc i -> i+w
        c = walk.draw(near_r)
        k = c.clamp(min=1)
        put("cl", at, (w - 1) * N + i + 1, act * (c == 0))
        put("ir", at, k * N + i, act * (c > 0))
        put("x", at, (w - k) * N + i + k, act * (c > 0))
        walk.head_plus.index_put_((at, (i + w).expand(walk.R, -1)), act * (i + 1), accumulate=True)
        act = walk.on["il"][:, flat]                                    # arc i+w -> i
        c = walk.draw(near_l)
        k = c.clamp(min=1)
        put("cr", at, (w - 1) * N + i, act * (c == 0))
        put("x", at, k * N + i, act * (c > 0))
        put("il", at, (w - k) * N + i + k, act * (c > 0))
        walk.head_plus.index_put_((at, i.expand(walk.R, -1)), act * (i + w + 1), accumulate=True)
        walk.split(walk.on["x"][:, flat], CR, CL, w, i, split, cols, at)    # the sibling item: CR + CL
    return walk.heads(lengths)


__all__ = ["projective_samples", "second_order_torch_samples"]
