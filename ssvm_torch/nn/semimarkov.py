"""``SemiMarkovChain``: a semi-Markov (segmental) layer, trained with the structured hinge, the softmax-margin
or the semi-Markov CRF likelihood over segmentations (Sarawagi & Cohen 2004; Kong et al. 2016's segmental
networks put a network's span scores under the same recursions).

A row of n positions is cut into segments of 1..``max_length`` positions, each with one of K labels. The layer
holds pytorch-crf's parameters of the segments' label sequence (``start_transitions`` (K,),
``end_transitions`` (K,), ``transitions`` (K, K) with ``transitions[i, j]`` the score of a segment of label i
followed by one of label j) and, with ``length_scores=True``, a (max_length, K) table of per-(length, label)
scores (the segment-length features of Sarawagi & Cohen). The network supplies the segment scores:

    s(y) = start[k_1] + sum_j (seg_scores[t_j, l_j - 1, k_j] + length[l_j - 1, k_j]) + sum_j trans[k_{j-1}, k_j]
           + end[k_J],

``seg_scores`` (B, T, max_length, K) given directly, or built from per-position emissions (B, T, K) as the sum
over each segment's positions (:meth:`from_emissions`). Segmentations are (B, T) int64 tensors, the label at each
segment's first position and -1 elsewhere (:mod:`ssvm_torch.segments`; ``segments_from_tags`` reads BIO / BIOES).
``forward`` returns a loss to minimise: ``"hinge"`` max_y [s(y) + Delta(y, y_b)] - s(y_b), ``"softmax_margin"``
log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b), or ``"crf"`` log Z - s(y_b); Delta counts the positions whose BIO tag
differs (``seg_loss="tokens"``) or the false positive plus false negative segments (``"segments"``), times 1
(``cost="hamming"``) or 1 / n (``"normalized"``).

**Partial annotation.** ``forward`` also takes a :class:`~ssvm_torch.segments.PartialSegmentation` (each
position's segment label, whether a segment begins there, whether one ends there, each possibly unobserved;
``partial_from_tags`` reads chunk tags with unknown positions): the losses then compare the model with C, the
segmentations that agree with what is observed -- the CRF's log Z - log Z_C, the latent hinge
max_y [s(y) + Delta_O(y)] - max_{y in C} s(y) and the softmax-margin's log-sum with - log Z_C, Delta_O counting
the observed positions (:mod:`ssvm_torch.segments.objectives`). A row that observes every label and begin flag
gives the full-annotation loss bit for bit, a row with nothing observed 0."""
from __future__ import annotations

import torch
from torch import nn

from ..chain.checks import check_draws
from ..errors import check, check_choice
from ..segments import objectives, ops, scoring
from ..segments.checks import KERNELS, check_seg_scores, check_segments, check_transitions, resolve_lengths
from ..segments.mbr import mbr_decode
from ..segments.partial import check_annotation, check_partial, constraints
from ..trees.losses import row_cost
from .reduction import REDUCTIONS, reduce_rows

LOSSES = ("hinge", "crf", "softmax_margin")
COSTS = ("hamming", "normalized")


def span_sums(emissions: torch.Tensor, max_length: int) -> torch.Tensor:
    """(B, T, max_length, K): the sum of ``emissions`` (B, T, K) over positions t..t+l (0 where the span passes the
    last position), by one cumulative sum: differentiable, any device."""
    check(torch.is_tensor(emissions) and emissions.is_floating_point() and emissions.dim() == 3, "emissions",
          "a float tensor (B, T, K)", getattr(emissions, "shape", type(emissions).__name__))
    B, T, K = emissions.shape
    prefix = torch.cat([emissions.new_zeros(B, 1, K), emissions.cumsum(1)], 1)            # (B, T+1, K)
    t = torch.arange(T, device=emissions.device)[:, None]
    l = torch.arange(max_length, device=emissions.device)[None, :]
    end = t + l + 1
    sums = prefix[:, end.clamp(max=T)] - prefix[:, t.expand(T, max_length)]
    return torch.where((end <= T)[None, :, :, None], sums, sums.new_zeros(()))


class SemiMarkovChain(nn.Module):
    """A semi-Markov layer (module docstring). num_labels: K; max_length: L, the longest segment; loss: "hinge",
    "crf" or "softmax_margin"; seg_loss: "tokens" or "segments"; cost: "hamming" or "normalized"; length_scores:
    learn a (L, K) table of per-(length, label) scores; kernels: "auto" (compiled numba kernels for CPU
    float32 / float64, torch elsewhere), "numba" or "torch"."""

    def __init__(self, num_labels: int, max_length: int, loss: str = "hinge", seg_loss: str = "tokens",
                 cost: str = "hamming", length_scores: bool = False, kernels: str = "auto"):
        super().__init__()
        for name, value in (("num_labels", num_labels), ("max_length", max_length)):
            check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name, "an int >= 1",
                  repr(value))
        self.num_labels, self.max_length = num_labels, max_length
        self.loss = check_choice(loss, "loss", LOSSES)
        self.seg_loss = check_choice(seg_loss, "seg_loss", scoring.LOSSES)
        self.cost = check_choice(cost, "cost", COSTS)
        self.kernels = check_choice(kernels, "kernels", KERNELS)
        check(isinstance(length_scores, bool), "length_scores", "True or False", repr(length_scores))
        K = num_labels
        self.start_transitions = nn.Parameter(torch.empty(K).uniform_(-0.1, 0.1))
        self.end_transitions = nn.Parameter(torch.empty(K).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(K, K).uniform_(-0.1, 0.1))
        self.length_scores = nn.Parameter(torch.zeros(max_length, K)) if length_scores else None

    def extra_repr(self) -> str:
        return (f"num_labels={self.num_labels}, max_length={self.max_length}, loss={self.loss!r}, "
                f"seg_loss={self.seg_loss!r}, cost={self.cost!r}, kernels={self.kernels!r}")

    def from_emissions(self, emissions: torch.Tensor) -> torch.Tensor:
        """Segment scores (B, T, L, K) from per-position emissions (B, T, K): each segment scores the sum of its
        positions' emissions for its label (:func:`span_sums`)."""
        check(emissions.dim() == 3 and emissions.shape[2] == self.num_labels, "emissions",
              f"shape (B, T, K) with K = num_labels = {self.num_labels}", tuple(emissions.shape))
        return span_sums(emissions, self.max_length)

    def _scores(self, seg_scores, mask, lengths):
        """(S with the length table added, first, last, trans [next, prev], lengths) in the package's convention."""
        S = check_seg_scores(seg_scores)
        check(tuple(S.shape[2:]) == (self.max_length, self.num_labels), "seg_scores",
              f"shape (B, T, max_length, num_labels) = (B, T, {self.max_length}, {self.num_labels})", tuple(S.shape))
        lengths = resolve_lengths(S, mask, lengths)
        params = [p.to(S.device, S.dtype) for p in (self.start_transitions, self.end_transitions, self.transitions)]
        first, last, trans = check_transitions(S, params[0], params[1], params[2].t())
        if self.length_scores is not None:
            S = S + self.length_scores.to(S.device, S.dtype)
        return S, first, last, trans, lengths

    def forward(self, seg_scores: torch.Tensor, segments, mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None, reduction: str = "sum") -> torch.Tensor:
        """The loss to minimise (module docstring): per row with ``reduction="none"`` (B,), else its sum, mean over
        rows, or sum over the number of positions ("token_mean"). ``segments``: the gold segmentations (B, T), or
        a :class:`~ssvm_torch.segments.PartialSegmentation` (partial annotation, module docstring)."""
        check_choice(reduction, "reduction", REDUCTIONS)
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        c = row_cost(self.cost, lengths, S.dtype)
        gold = check_annotation(segments, lengths, self.num_labels, self.max_length, S.shape[1])
        per_row = objectives.training_loss(self.loss, S, first, last, trans, gold, lengths, self.seg_loss, c,
                                           self.kernels)
        return reduce_rows(per_row, reduction, lengths)

    def score(self, seg_scores: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor | None = None,
              lengths: torch.Tensor | None = None) -> torch.Tensor:
        """s(y) (B,) of given segmentations (B, T) (:meth:`decode`'s layout) under the layer: their segments' scores
        (length scores included), the first, last and transition scores (:func:`ssvm_torch.segments.scoring.score`);
        differentiable w.r.t. the segment scores and the parameters; 0 for an empty row."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        segments = check_segments(segments, lengths, self.num_labels, self.max_length, "segments", S.shape[1])
        return scoring.score(S, first, last, trans, segments, lengths)

    @torch.no_grad()
    def decode(self, seg_scores: torch.Tensor, mask: torch.Tensor | None = None,
               lengths: torch.Tensor | None = None, *, nbest: int = 1, observed=None,
               mbr: bool = False) -> torch.Tensor:
        """The best segmentation of every row (B, T): the label at each segment's first position, -1 elsewhere;
        ``nbest=n > 1``: the n best (B, n, T) in non-increasing score order, all -1 for the ranks of a row with
        fewer than n segmentations (:func:`ssvm_torch.segments.segment_decode`). ``observed``: a
        :class:`~ssvm_torch.segments.PartialSegmentation` the result must agree with (constrained decoding over C;
        a row with no such segmentation is refused by name). ``mbr=True``: minimum-Bayes-risk decoding instead, the
        segmentation (or n) of least expected ``seg_loss`` under the semi-Markov CRF (given ``observed``, the CRF
        conditioned on it): one semi-Markov Viterbi pass over the segments' expected gains
        (:mod:`ssvm_torch.segments.mbr`)."""
        check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        what = "the best segmentation's score"
        if observed is not None:
            known = check_partial(observed, lengths, self.num_labels, S.shape[1], field="observed")
            S = S.masked_fill(~constraints(known, self.max_length, self.num_labels)[1], float("-inf"))
            what += " (over the segmentations that agree with observed)"
        if mbr:
            return mbr_decode(S, first, last, trans, lengths, self.seg_loss, self.kernels, nbest, what)[0]
        return objectives.decode(S, first, last, trans, lengths, self.kernels, nbest, what)[0]

    def log_partition(self, seg_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None) -> torch.Tensor:
        """log Z per row (B,) of the layer's semi-Markov CRF (0 for an empty row), differentiable w.r.t. the segment
        scores and the parameters (the gradient: the marginals). A non-empty row without a segmentation of finite
        score is refused by name."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        return ops.log_partition(S, first, last, trans, lengths, self.kernels)

    @torch.no_grad()
    def marginals(self, seg_scores: torch.Tensor, mask: torch.Tensor | None = None,
                  lengths: torch.Tensor | None = None) -> torch.Tensor:
        """P(segment (t, l+1, k)) (B, T, L, K) under the layer's semi-Markov CRF. A non-empty row without a
        segmentation of finite score is refused by name."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        return ops.marginals(S, first, last, trans, lengths, self.kernels)

    # -- information and samples ------------------------------------------------------------------------------
    def entropy(self, seg_scores: torch.Tensor, mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
        """H(p) per row (B,) of the layer's semi-Markov CRF (0 for an empty row), differentiable w.r.t. the
        segment scores and the parameters: one forward recursion of the normalized entropy semiring in torch
        (:mod:`ssvm_torch.segments.information`, every device)."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        return ops.information(S, first, last, trans, lengths)[0]

    def kl(self, seg_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
           lengths: torch.Tensor | None = None, other: "SemiMarkovChain | None" = None) -> torch.Tensor:
        """KL(p || q) per row (B,): p the CRF of ``seg_scores`` under this layer, q that of ``other_scores`` (the same
        shape) under ``other`` (a SemiMarkovChain of as many labels and the same max_length, its own parameters;
        None: this layer). Differentiable w.r.t. both; +inf where p gives weight to what q forbids."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        return ops.information(S, first, last, trans, lengths, self._other(other, other_scores, S, lengths))[1]

    def cross_entropy(self, seg_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None, other: "SemiMarkovChain | None" = None) -> torch.Tensor:
        """H(p, q) = H(p) + KL(p || q) per row (B,), p and q as in :meth:`kl`."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        H, D = ops.information(S, first, last, trans, lengths, self._other(other, other_scores, S, lengths))
        return H + D

    def _other(self, other, other_scores, S, lengths):
        """q's (S, first, last, trans) on p's rows, every field named."""
        q = self if other is None else other
        check(isinstance(q, SemiMarkovChain) and (q.num_labels, q.max_length) == (self.num_labels, self.max_length),
              "other", f"a SemiMarkovChain of num_labels = {self.num_labels}, max_length = {self.max_length}",
              (getattr(q, "num_labels", type(q).__name__), getattr(q, "max_length", None)))
        other_scores = check_seg_scores(other_scores, "other_scores")
        check(other_scores.shape == S.shape and other_scores.device == S.device, "other_scores",
              f"a tensor of the segment scores' shape {tuple(S.shape)} on {S.device}",
              (tuple(other_scores.shape), other_scores.device))
        Sq, first, last, trans, _ = q._scores(other_scores.to(S.dtype), None, lengths)
        return Sq, first, last, trans

    def sample(self, seg_scores: torch.Tensor, mask: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
               n: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
        """n exact samples of every row's semi-Markov CRF (B, n, T): the label at each drawn segment's first
        position, -1 elsewhere (:meth:`decode`'s layout), drawn backwards from each row's end
        (:func:`ssvm_torch.segments.information.sample_rows`); ``generator`` on the scores' device. No gradient."""
        S, first, last, trans, lengths = self._scores(seg_scores, mask, lengths)
        check_draws(n, generator, S.device)
        return ops.sample(S, first, last, trans, lengths, n, generator)
