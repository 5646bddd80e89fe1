"""``MonotonicAlignment``: a layer over monotone alignments of two sequences (dynamic time warping,
Needleman-Wunsch, Smith-Waterman; ssvm_torch/align/), trained with the structured hinge, the softmax-margin or the
CRF likelihood over alignment paths.

The network supplies ``scores`` (B, N, M, 3), the score of entering cell (i, j) (x_i aligned with y_j) by a move
right, diagonal or down (torch-struct's ``AlignmentCRF`` layout; :func:`from_similarity` builds them from an (N, M)
similarity). A path's score s(P) is the sum of its moves' scores; paths are (B, N, M) int64 tensors holding the
move that enters each visited cell and -1 elsewhere (:func:`~ssvm_torch.align.paths.path_from_pairs` reads lists of
aligned pairs). ``forward`` returns a loss to minimise: ``"hinge"`` max_P [s(P) + Delta(P, P_b)] - s(P_b),
``"softmax_margin"`` log sum_P exp(s(P) + Delta(P, P_b)) - s(P_b), or ``"crf"`` log Z - s(P_b), with Delta the
number of cells in one path and not the other (times ``cost``), which decomposes over the cells:
Delta(P, P*) = sum_{c in P} (1 - 2 [c in P*]) + |P*|. ``local=True``: Smith-Waterman's local paths (start and end
anywhere, or none).
"""
from __future__ import annotations

import torch
from torch import nn

from ..align import ops
from ..align.kbest import kbest
from ..align.partial import allowed_moves, check_partial_path, is_partial, observed_cells
from ..align.paths import check_path
from ..errors import SSVMInputError, check, check_choice
from .reduction import REDUCTIONS, reduce_rows

LOSSES = ("hinge", "crf", "softmax_margin")


def from_similarity(similarity: torch.Tensor, gap: float | None = None) -> torch.Tensor:
    """Move scores (B, N, M, 3) from a similarity (B, N, M): ``gap=None`` is dynamic time warping (every move into
    a cell scores its similarity: soft-DTW's -cost), a number g is Needleman-Wunsch's linear gap (a diagonal move
    scores the similarity, a right or down move -g)."""
    check(torch.is_tensor(similarity) and similarity.dtype in ops.FLOATS and similarity.dim() == 3, "similarity",
          "a float tensor (B, N, M)", f"{getattr(similarity, 'dtype', type(similarity).__name__)} "
          f"{tuple(getattr(similarity, 'shape', ()))}")
    similarity = ops.as_computed(similarity)    # before the expansion: the scores stay a stride-0 view
    if similarity.numel():
        top = similarity.max()
        check(not bool(torch.isnan(top) | (top == float("inf"))), "similarity",
              "finite values or -inf (a forbidden cell)", "NaN or +inf")
    if gap is None:
        return _EveryMove.apply(similarity)
    check(isinstance(gap, (int, float)) and not isinstance(gap, bool) and abs(gap) < float("inf"), "gap",
          "a finite number or None (dynamic time warping)", repr(gap))
    g = similarity.new_full(similarity.shape, -float(gap))
    return torch.stack([g, similarity, g], -1)


class _EveryMove(torch.autograd.Function):
    """similarity (B, N, M) -> its view (B, N, M, 3), the three moves into a cell scoring the cell's value; the
    backward sums each cell's three move gradients as two elementwise additions (autograd's own reduction of an
    expanded axis of length 3, ``sum(-1)``, took 6x as long in float64: benchmarks/bench_alignment_commits.py)."""

    @staticmethod
    def forward(ctx, similarity):
        return similarity[..., None].expand(*similarity.shape, 3)

    @staticmethod
    def backward(ctx, grad):
        return grad[..., 0] + grad[..., 1] + grad[..., 2]


class MonotonicAlignment(nn.Module):
    """An alignment layer (module docstring). loss: "hinge", "crf" or "softmax_margin"; local: Smith-Waterman's
    local paths; cost: the loss of one cell in one path and not the other (> 0); kernels: "auto" (compiled numba
    kernels for CPU tensors, the torch wavefront elsewhere), "numba" or "torch"."""

    def __init__(self, loss: str = "hinge", local: bool = False, cost: float = 1.0, kernels: str = "auto"):
        super().__init__()
        self.loss = check_choice(loss, "loss", LOSSES)
        self.kernels = check_choice(kernels, "kernels", ops.KERNELS)
        check(isinstance(local, bool), "local", "True or False", repr(local))
        check(isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 < cost < float("inf"), "cost",
              "a finite number > 0", repr(cost))
        self.local, self.cost = local, float(cost)

    def extra_repr(self) -> str:
        return f"loss={self.loss!r}, local={self.local}, cost={self.cost}, kernels={self.kernels!r}"

    def score(self, scores: torch.Tensor, path: torch.Tensor, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """s(P) (B,) of given paths, differentiable in ``scores``; a path through a -inf move is refused."""
        scores, n, m = ops.check_scores(scores, x_lengths, y_lengths)
        gold = check_path(path, n, m, scores.shape[:3], self.local,
                          compiled=ops.use_compiled(scores, self.kernels))
        return self._score(scores, gold)

    @staticmethod
    def _score(scores, gold):
        """s(P) (B,): each visited cell's score of the move entering it, read by one gather (its backward one
        scatter into the (B, N, M, 3) gradient)."""
        on = gold >= 0
        taken = scores.gather(3, gold.clamp(min=0)[..., None])[..., 0]
        if bool((on & (taken == float("-inf"))).any()):
            raise SSVMInputError("path: expected paths whose every move has a finite score, got one through a -inf "
                                 "(forbidden) move")
        return torch.where(on, taken, taken.new_zeros(())).sum((1, 2))

    def forward(self, scores: torch.Tensor, path: torch.Tensor, x_lengths: torch.Tensor | None = None,
                y_lengths: torch.Tensor | None = None, reduction: str = "sum") -> torch.Tensor:
        """The loss to minimise (module docstring): per row with ``reduction="none"`` (B,), else its sum, mean over
        rows, or sum over the number of x positions ("token_mean"). ``path``: the gold paths (B, N, M)."""
        check_choice(reduction, "reduction", REDUCTIONS)
        scores, n, m = ops.check_scores(scores, x_lengths, y_lengths)
        if is_partial(path):
            return reduce_rows(self._partial_loss(scores, path, n, m), reduction, n)
        gold = check_path(path, n, m, scores.shape[:3], self.local,
                          compiled=ops.use_compiled(scores, self.kernels))
        s_gold = self._score(scores, gold)
        if self.loss == "crf":
            per_row = ops.log_partition(scores, n, m, self.local, self.kernels) - s_gold
        else:
            on = (gold >= 0).to(scores.dtype)
            augmented = scores + (self.cost * (1.0 - 2.0 * on))[..., None]
            best = (ops.max_score if self.loss == "hinge" else ops.log_partition)(augmented, n, m, self.local,
                                                                                   self.kernels)
            per_row = best + self.cost * on.sum((1, 2)) - s_gold
        return reduce_rows(per_row, reduction, n)

    def _partial_loss(self, scores, path, n, m) -> torch.Tensor:
        """The loss per row against a partial path (:mod:`ssvm_torch.align.partial`), C the paths that agree with
        it: ``crf`` log Z - log Z_C, ``hinge`` max_P [s(P) + Delta_O(P)] - max_{P in C} s(P) (the latent hinge),
        ``softmax_margin`` log sum_P exp(s(P) + Delta_O(P)) - log Z_C, with Delta_O the cells of P whose observed
        status P breaks (times ``cost``), as the other layers' partial annotation. An empty C is refused by name."""
        part = check_partial_path(path, n, m, scores.shape[:3], self.local)
        restricted = scores.masked_fill(~allowed_moves(part), float("-inf"))
        value = ops.max_score if self.loss == "hinge" else ops.log_partition
        in_c = value(restricted, n, m, False, self.kernels, field="path")
        if self.loss == "crf":
            return ops.log_partition(scores, n, m, False, self.kernels) - in_c
        observed, on = observed_cells(part)
        # Delta_O(P) = sum_{c in P, c observed} (1 - 2 [c on]) + the observed cells on the path
        flips = (observed.to(scores.dtype) - 2.0 * on.to(scores.dtype))
        best = value(scores + (self.cost * flips)[..., None], n, m, False, self.kernels)
        return best + self.cost * on.sum((1, 2)).to(scores.dtype) - in_c

    def decode(self, scores, x_lengths=None, y_lengths=None, *, nbest: int = 1, mbr: bool = False,
               observed=None) -> torch.Tensor:
        """The best path of each row (B, N, M) int64 (:func:`~ssvm_torch.align.ops.decode`); ``nbest=k > 1``: the k
        best paths (B, k, N, M) in non-increasing score order, the first the best path, -1 at the ranks a row lacks
        (:func:`~ssvm_torch.align.kbest.kbest`; the score of ``paths[:, j]`` is ``self.score(scores,
        paths[:, j], ...)``). ``mbr=True``: minimum-Bayes-risk decoding instead, the path (or k paths) of least
        expected loss E_p[Delta(P, P*)] under the CRF of the scores (:meth:`expected_gains`), as the other layers'
        ``mbr``. ``observed``: a partial path (:mod:`ssvm_torch.align.partial`) the result must agree with:
        decoding over C (the posterior given it, for ``mbr``); a row C leaves empty is refused by name."""
        check(isinstance(nbest, int) and not isinstance(nbest, bool) and nbest >= 1, "nbest", "an int >= 1",
              repr(nbest))
        check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
        if observed is not None:
            scores, n, m = ops.check_scores(scores, x_lengths, y_lengths)
            part = check_partial_path(observed, n, m, scores.shape[:3], self.local, "observed")
            scores = scores.detach().masked_fill(~allowed_moves(part), float("-inf"))
            ops.max_score(scores, n, m, False, self.kernels, field="observed")      # C not empty
        if mbr:
            scores = self.expected_gains(scores, x_lengths, y_lengths)
        if nbest > 1:
            return kbest(scores, nbest, x_lengths, y_lengths, self.local)[0]
        return ops.decode(scores, x_lengths, y_lengths, self.local, self.kernels)

    def expected_gains(self, scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """Move scores (B, N, M, 3) whose best path is the minimum-Bayes-risk path: with mu(c) = P(the path visits
        cell c) (the marginals summed over the moves into c), E_p[Delta(P, P*)] = sum_{c in P} (1 - 2 mu(c)) +
        E_p|P*| (Delta decomposes over cells, module docstring), so the path of least expected loss maximises
        sum_{c in P} (2 mu(c) - 1): every move into c scores 2 mu(c) - 1, a forbidden move stays -inf (the path
        keeps the model's support; a local path keeps the empty path's 0). No gradient."""
        with torch.no_grad():
            mu = ops.marginals(scores, x_lengths, y_lengths, self.local, self.kernels)
            gains = (2.0 * mu.sum(-1, keepdim=True) - 1.0).expand_as(mu)
            computed = ops.as_computed(scores.detach())
            return torch.where(computed == float("-inf"), computed, gains)

    def log_partition(self, scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        return ops.log_partition(scores, x_lengths, y_lengths, self.local, self.kernels)

    def marginals(self, scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """P(the path enters (i, j) by each move) (B, N, M, 3)."""
        return ops.marginals(scores, x_lengths, y_lengths, self.local, self.kernels)

    def entropy(self, scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """The entropy of the path distribution (B,) (:func:`~ssvm_torch.align.ops.entropy`, differentiable)."""
        return ops.entropy(scores, x_lengths, y_lengths, self.local, self.kernels)

    def kl(self, scores, other_scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """KL(p || q) (B,) of the path distributions of ``scores`` and ``other_scores`` (the same shape;
        :func:`~ssvm_torch.align.ops.kl`, differentiable w.r.t. both; +inf where q forbids a move p takes)."""
        return ops.kl(scores, other_scores, x_lengths, y_lengths, self.local, self.kernels)

    def cross_entropy(self, scores, other_scores, x_lengths=None, y_lengths=None) -> torch.Tensor:
        """H(p, q) = H(p) + KL(p || q) (B,), p and q as in :meth:`kl`."""
        return ops.cross_entropy(scores, other_scores, x_lengths, y_lengths, self.local, self.kernels)

    def sample(self, scores, x_lengths=None, y_lengths=None, n: int = 1, generator=None) -> torch.Tensor:
        """``n`` exact samples of the path distribution per row, (B, n, N, M), batch-first as ``decode``'s n best
        and the other layers' samples (:func:`~ssvm_torch.align.ops.sample`; ``generator`` on the scores'
        device). No gradient."""
        return ops.sample(scores, x_lengths, y_lengths, self.local, n, generator, self.kernels)
