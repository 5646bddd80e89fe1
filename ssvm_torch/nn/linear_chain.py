"""``LinearChain``: a linear-chain layer that loads pytorch-crf's weights and trains with the
structured hinge (max-margin) or the CRF likelihood.

Scores of a tag sequence y over the masked-on positions t_0 < ... < t_{L-1} of a row, exactly as
pytorch-crf's ``torchcrf.CRF`` (parameters of the same names, shapes and meaning):

    s(y) = start_transitions[y_0] + sum_s emissions[t_s, y_s]
           + sum_{s>=1} transitions[y_{s-1}, y_s] + end_transitions[y_{L-1}]

``transitions[i, j]`` is the score of moving from tag i to tag j. ``forward`` returns a loss to
minimise (pytorch-crf returns the log-likelihood, to maximise):

* ``loss="hinge"``: the structured hinge of the n-slack SSVM (Taskar et al. 2003; objective (1) of
  Osokin et al. 2016), H = max_y [Delta(y, y_i) + s(y)] - s(y_i) >= 0, with Delta the Hamming count
  (``token_loss="hamming"``), the Hamming count over the row's length (``"normalized"``), or a cost
  given per gold tag (a (K,) vector: Delta = sum_t v[y_i,t] [y_t != y_i,t]) or per pair (a (K, K)
  matrix C[gold, predicted] with a zero diagonal). Its gradient is the subgradient
  S(y*) - S(y_i), the statistics of the loss-augmented labeling y* minus the gold ones;
* ``loss="crf"``: the negative log-likelihood log Z - s(y_i) = -pytorch-crf's ``forward``;
* ``loss="softmax_margin"``: log sum_y exp(s(y) + Delta(y, y_i)) - s(y_i) (Gimpel & Smith 2010), the
  CRF likelihood of the cost-augmented scores, with the hinge's Delta; its gradient is the
  cost-augmented marginals minus the gold statistics. It bounds the hinge from above and the CRF's
  NLL from above (docs/nn.md compares the three).

Masks may be arbitrary: a row's result equals that of the row with its masked-off positions
removed; a row with none on has loss 0 and decodes to all -1.

**Partial annotation.** A negative tag at a masked-on position is unobserved (SuPar's convention for heads):
the losses then compare the model with C, the labelings that agree with every observed tag (the constraints
too) -- the CRF's negative marginal likelihood log Z - log Z_C, the latent structured hinge
max_y [s(y) + Delta_O(y)] - max_{y in C} s(y) and the softmax-margin log sum_y exp(s(y) + Delta_O(y)) - log Z_C,
Delta_O counting the observed positions only (:mod:`ssvm_torch.chain.partial`). A row with every tag observed
gives the full-annotation loss bit for bit, a row with none observed 0. Tag constraints
(:func:`ssvm_torch.constraints.allowed_transitions`) are applied at every call as -inf scores,
never written into the parameters, and are not in the ``state_dict``.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from ..constraints import check_constraints, first_violation, penalties
from ..errors import SSVMInputError, check, check_choice
from ..chain import ops
from ..chain.checks import LAYER_KERNELS, check_draws, fail_no_path
from ..chain.mbr import mbr_decode
from ..chain.partial import partial_loss
from .reduction import REDUCTIONS, reduce_rows

LOSSES = ("hinge", "crf", "softmax_margin")
TOKEN_LOSSES = ("hamming", "normalized")


class LinearChain(nn.Module):
    """A linear-chain layer with pytorch-crf's parameters (module docstring).

    num_tags: K. batch_first: emissions (B, T, K) and mask/tags (B, T) if True, else (T, B, K) and
    (T, B), as pytorch-crf. loss: "hinge", "crf" or "softmax_margin". constraints: None or a dict of bool tensors
    {"start": (K,), "transitions": (K, K), "end": (K,)} (True = allowed, ``transitions[i, j]``: tag
    i may be followed by tag j). token_loss: "hamming", "normalized", or a (K,) / (K, K) cost tensor
    (the Delta of the hinge and the softmax-margin loss). kernels: "auto" (compiled numba kernels for CPU
    float32/float64, fused Triton kernels on CUDA where K <= 64, the torch path elsewhere), "numba",
    "triton" (also CPU tensors under TRITON_INTERPRET=1) or "torch" (the pure-torch path, any device).
    """

    def __init__(self, num_tags: int, batch_first: bool = False, loss: str = "hinge", constraints=None,
                 token_loss="hamming", kernels: str = "auto"):
        super().__init__()
        check(isinstance(num_tags, int) and not isinstance(num_tags, bool) and num_tags >= 1, "num_tags",
              "an int >= 1", repr(num_tags))
        K = num_tags
        self.num_tags = K
        self.batch_first = bool(batch_first)
        self.loss = check_choice(loss, "loss", LOSSES)
        check(loss != "crf" or (isinstance(token_loss, str) and token_loss == "hamming"), "token_loss",
              "the default with loss='crf' (the CRF's likelihood has no task cost; use loss='hinge' or "
              "'softmax_margin' to train with one)",
              repr(token_loss) if isinstance(token_loss, str) else f"a {tuple(token_loss.shape)} cost tensor"
              if torch.is_tensor(token_loss) else type(token_loss).__name__)
        self.kernels = check_choice(kernels, "kernels", LAYER_KERNELS)
        self.start_transitions = nn.Parameter(torch.empty(K))
        self.end_transitions = nn.Parameter(torch.empty(K))
        self.transitions = nn.Parameter(torch.empty(K, K))
        self.reset_parameters()
        self.register_buffer("token_cost", self._cost(token_loss), persistent=False)
        self.normalized = isinstance(token_loss, str) and token_loss == "normalized"
        self.set_constraints(constraints)

    def reset_parameters(self) -> None:
        """pytorch-crf's initialisation: every score uniform in [-0.1, 0.1]."""
        for p in (self.start_transitions, self.end_transitions, self.transitions):
            nn.init.uniform_(p, -0.1, 0.1)

    def _cost(self, token_loss) -> torch.Tensor:
        K = self.num_tags
        if isinstance(token_loss, str):
            check_choice(token_loss, "token_loss", TOKEN_LOSSES)
            return 1.0 - torch.eye(K, dtype=torch.float64)
        check(torch.is_tensor(token_loss) and token_loss.is_floating_point() and tuple(token_loss.shape) in ((K,), (K, K)),
              "token_loss", f"'hamming', 'normalized' or a float tensor of shape ({K},) or ({K}, {K})",
              repr(token_loss) if not torch.is_tensor(token_loss) else (token_loss.dtype, tuple(token_loss.shape)))
        c = token_loss.detach().to(torch.float64).cpu()
        check(bool(torch.isfinite(c).all()) and bool((c >= 0).all()), "token_loss", "finite values >= 0",
              "negative or non-finite entries")
        if c.dim() == 1:
            return c[:, None] * (1.0 - torch.eye(K, dtype=torch.float64))
        check(bool((c.diagonal() == 0).all()), "token_loss", "a cost matrix with a zero diagonal "
              "(predicting the gold tag costs nothing)", "nonzero diagonal entries")
        return c

    def set_constraints(self, constraints) -> None:
        """Replace the tag constraints (None removes them); kept as non-persistent buffers."""
        if constraints is None:
            self.constraint_masks = None
            for name in ("penalty_start", "penalty_end", "penalty_trans"):
                self.register_buffer(name, None, persistent=False)
            return
        masks = check_constraints(constraints, self.num_tags)
        self.constraint_masks = {k: v.clone() for k, v in masks.items()}
        for name, pen in zip(("penalty_start", "penalty_end", "penalty_trans"), penalties(masks)):
            self.register_buffer(name, pen.to(self.transitions.device), persistent=False)

    def extra_repr(self) -> str:
        return (f"num_tags={self.num_tags}, batch_first={self.batch_first}, loss={self.loss!r}, "
                f"constraints={self.constraint_masks is not None}, kernels={self.kernels!r}")

    def __prepare_scriptable__(self):
        raise SSVMInputError("LinearChain cannot be compiled by torch.jit.script (its CPU kernels are numba "
                             "functions); use torch.export or torch.compile, which take its pure-torch path")

    # ------------------------------------------------------------------------- the internal form

    def _penalty(self, E):
        """The constraints' (start, end, trans) 0 / -inf scores in the dtype E is computed in, or None."""
        if self.penalty_trans is None:
            return None
        return tuple(p.to(ops.computed_dtype(E)) for p in (self.penalty_start, self.penalty_end, self.penalty_trans))

    def _scores(self, E):
        """(start, end, trans[next, prev]) in the dtype the emissions E are computed in: the one place where
        pytorch-crf's orientation ``transitions[prev, next]`` becomes the project's internal one, and where
        float64 emissions meet float32 parameters (or the reverse): every backend computes in the emissions'
        dtype, differentiable w.r.t. the parameters in theirs (the torch recursion refused mixed dtypes)."""
        dtype = ops.computed_dtype(E)
        return tuple(p.to(dtype) for p in (self.start_transitions, self.end_transitions, self.transitions.t()))

    def _inputs(self, emissions, mask, tags=None):
        """Batch-first emissions, bool mask and tags after the checks (every field named)."""
        check(torch.is_tensor(emissions) and emissions.is_floating_point(), "emissions", "a float tensor",
              getattr(emissions, "dtype", type(emissions).__name__))
        check(emissions.dim() == 3, "emissions", "a float tensor of 3 dimensions", tuple(emissions.shape))
        layout = "(B, T)" if self.batch_first else "(T, B)"
        check(emissions.shape[2] == self.num_tags, "emissions", f"a last dimension of num_tags = {self.num_tags}",
              tuple(emissions.shape))
        # an empty batch (B = 0) gives empty results, as every structured layer's does; a chain needs a position
        check(emissions.shape[1 if self.batch_first else 0] >= 1, "emissions", f"{layout} with T >= 1",
              tuple(emissions.shape))
        check(emissions.device == self.transitions.device, "emissions", f"a tensor on {self.transitions.device} "
              "like the layer's parameters", emissions.device)
        traced = ops.tracing()
        ops.refuse_bad_scores(emissions.detach(), "emissions", allow_neg_inf=False)   # no host sync on CUDA
        if mask is None:
            mask = torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        check(torch.is_tensor(mask) and mask.shape == emissions.shape[:2] and mask.device == emissions.device,
              "mask", f"a tensor {layout} = {tuple(emissions.shape[:2])} on {emissions.device}",
              (getattr(mask, "shape", type(mask)), getattr(mask, "device", None)))
        if mask.dtype != torch.bool:
            check(not mask.is_floating_point() and not mask.is_complex(), "mask", "a bool tensor (or integers 0/1)",
                  mask.dtype)
            if not traced and not bool(((mask == 0) | (mask == 1)).all()):
                bad = mask[(mask != 0) & (mask != 1)]
                check(False, "mask", "values 0 or 1 (a bool tensor, or integers 0/1)",
                      f"{int(bad[0])} ({int(bad.numel())} such entries)")
            mask = mask.bool()
        if not self.batch_first:
            emissions, mask = emissions.transpose(0, 1), mask.transpose(0, 1)
        if tags is None:
            return emissions, mask, None
        check(torch.is_tensor(tags) and not tags.is_floating_point() and tags.dtype != torch.bool, "tags",
              f"an integer tensor {layout}", getattr(tags, "dtype", type(tags)))
        check(tags.shape == (emissions.shape[:2] if self.batch_first else emissions.shape[1::-1]), "tags",
              f"shape {layout} like the mask", tuple(tags.shape))
        tags = (tags if self.batch_first else tags.transpose(0, 1)).long()
        above = tags >= self.num_tags                        # negative: unobserved (partial annotation)
        if bool((above & mask).any()):
            b, t = (int(v) for v in torch.nonzero(above & mask)[0])
            raise SSVMInputError(f"tags: expected values in [0, {self.num_tags - 1}] (or negative: unobserved) where "
                                 f"the mask is on, got {int(tags[b, t])} at row {b}, position {t}")
        tags = torch.where(mask, tags, torch.zeros_like(tags))
        if self.constraint_masks is not None:
            # rows with unobserved tags: C's emptiness is found by its decoding (chain/partial.py)
            whole = ~((tags < 0) & mask).any(1)
            bad = first_violation(self.constraint_masks, tags, mask & whole[:, None])
            if bad is not None:
                raise SSVMInputError(f"tags: row {bad[0]}, position {bad[1]}: the gold tag sequence breaks the "
                                     f"constraints (tag {int(tags[bad])} is not allowed there)")
        return emissions, mask, tags

    # ------------------------------------------------------------------------- the public calls

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None,
                reduction: str = "sum") -> torch.Tensor:
        """The loss to minimise (module docstring): per row with ``reduction="none"`` (B,), else
        its sum, mean over rows, or sum over the number of masked-on tokens ("token_mean")."""
        check_choice(reduction, "reduction", REDUCTIONS)
        E, mask, tags = self._inputs(emissions, mask, tags)
        start, end, trans = self._scores(E)
        lengths = mask.sum(1)
        rowc = (1.0 / lengths.clamp(min=1).to(torch.float64) if self.normalized
                else torch.ones(E.shape[0], dtype=torch.float64, device=E.device))
        per_row = partial_loss(self.loss, E, mask, start, end, trans, tags, rowc, self.token_cost, self._penalty(E),
                               self.kernels)
        return reduce_rows(per_row, reduction, mask)

    def score(self, emissions, tags, mask=None) -> torch.Tensor:
        """s(tags) per row (B,): pytorch-crf's numerator, differentiable. Every masked-on tag must be given."""
        E, mask, tags = self._inputs(emissions, mask, tags)
        if not ops.tracing() and bool(((tags < 0) & mask).any()):
            b, t = (int(v) for v in torch.nonzero((tags < 0) & mask)[0])
            raise SSVMInputError(f"tags: a score needs every masked-on tag; row {b}, position {t} is unobserved "
                                 f"({int(tags[b, t])})")
        return ops.score(E, mask, *self._scores(E), tags)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None, as_lists: bool = False, *,
               nbest: int = 1, mbr: bool = False):
        """The best tag sequence of every row: a LongTensor (B, T) (batch-first) on the emissions'
        device, -1 where the mask is off; ``as_lists=True`` gives pytorch-crf's list of lists (the
        tags of each row's masked-on positions).

        ``nbest=k > 1``: the k highest-scoring tag sequences of every row, in non-increasing score
        order (ties in any order), constraints respected: a LongTensor (B, k, T), -1 where the mask is
        off and for the ranks of a row with fewer than k allowed sequences; as lists, a list of up to k
        lists per row. The score of ``paths[:, j]`` is ``self.score(emissions, paths[:, j], mask)``.
        Batch-first whatever ``batch_first`` says, as the 1-best tensor (pytorch-crf's unreleased
        ``nbest`` returns (k, B, T) instead).

        ``mbr=True``: minimum-Bayes-risk (posterior) decoding instead, the labeling (or k labelings) of least
        expected ``token_loss`` under the CRF of the scores, among those the constraints allow: one Viterbi pass
        over the tag marginals' expected gains (:mod:`ssvm_torch.chain.mbr`; with the Hamming loss, the most
        expected correct tags). For a model trained as a CRF (or with softmax-margin) it trades the single best
        labeling for the best expected accuracy."""
        check(isinstance(nbest, int) and not isinstance(nbest, bool) and nbest >= 1, "nbest", "an int >= 1",
              repr(nbest))
        check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
        E, mask, _ = self._inputs(emissions, mask)
        if nbest > 1:
            self._check_nbest(E, mask, nbest)
        with torch.no_grad():
            if mbr:
                labels, scores = mbr_decode(E, mask, *self._scores(E), self.token_cost, self._penalty(E), self.kernels,
                                            nbest)
            elif nbest == 1:
                labels, _ = ops.decode(E, mask, *self._scores(E), self._penalty(E), self.kernels)
            else:
                labels, scores = ops.nbest(E, mask, *self._scores(E), nbest, self._penalty(E), self.kernels)
            if nbest > 1 and not ops.tracing():
                fail_no_path(scores[:, 0], mask)   # a row no labeling satisfies: refused as by nbest=1
        if not as_lists:
            return labels
        if nbest == 1:
            return [row[row >= 0].tolist() for row in labels.cpu()]
        found = torch.isfinite(scores).cpu()
        return [[path[path >= 0].tolist() for path, ok in zip(paths, oks) if ok]
                for paths, oks in zip(labels.cpu(), found)]

    def _check_nbest(self, E, mask, k: int) -> None:
        """k at most the number of labelings of the longest row (K^L), and the (B, k, T) result and the
        recursion's O(T K k) scores and pointers per row within the machine's memory."""
        B, T, K = E.shape
        if ops.tracing() or B == 0:                          # an empty batch: (0, k, T), any k
            return
        longest = int(mask.sum(1).max())
        check(k <= K ** longest, "nbest", f"at most {K ** longest if longest <= 6 else f'{K}^{longest}'} (every "
              f"labeling of the longest row: {K} tags, {longest} positions)", k)
        need = B * k * T * 8 + B * T * K * k * 16
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
        check(have is None or need <= have, "nbest",
              f"a k whose n-best tables fit this machine's {have / 2 ** 30 if have else 0:.0f} GB of memory "
              f"(k = {k} at B {B}, T {T}, K {K} needs about {need / 2 ** 30:.0f} GB)", k)

    def log_partition(self, emissions, mask=None) -> torch.Tensor:
        """log Z per row (B,), differentiable (the CRF's normaliser; 0 for an empty row)."""
        E, mask, _ = self._inputs(emissions, mask)
        return ops.log_partition(E, mask, *self._scores(E), self._penalty(E), self.kernels)

    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Posterior tag marginals p(y_t = k | x) of the CRF of these scores: (B, T, K) batch-first,
        0 where the mask is off (forbidden tags get 0). No gradient."""
        E, mask, _ = self._inputs(emissions, mask)
        return ops.marginals(E, mask, *self._scores(E), self._penalty(E), self.kernels)

    # ------------------------------------------------------------------------- information and samples

    def entropy(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """H(p) = -sum_y p(y) log p(y) per row (B,) of the CRF of these scores (constraints applied; 0 for an
        empty row), differentiable w.r.t. the emissions and the parameters (an entropy regularizer or an
        uncertainty score): compiled on the CPU (:mod:`ssvm_torch.chain.numba_entropy`), elsewhere one forward
        recursion in log space differentiated by autograd (:mod:`ssvm_torch.chain.information`)."""
        E, mask, _ = self._inputs(emissions, mask)
        return ops.information(E, mask, *self._scores(E), self._penalty(E), kernels=self.kernels)[0]

    def kl(self, emissions: torch.Tensor, other_emissions: torch.Tensor, mask: torch.Tensor | None = None,
           other: "LinearChain | None" = None) -> torch.Tensor:
        """KL(p || q) = sum_y p(y) log (p(y) / q(y)) per row (B,): p the CRF of ``emissions`` under this layer, q
        that of ``other_emissions`` (this layer's layout and shape) under ``other`` (a LinearChain of as many
        tags, its own parameters and constraints; None: this layer). Differentiable w.r.t. both; +inf where p
        gives weight to a tag sequence q forbids. Structured distillation: a teacher's p, a student's q."""
        E, mask, _ = self._inputs(emissions, mask)
        q, Q = self._other(other, other_emissions, emissions)
        return ops.information(E, mask, *self._scores(E), self._penalty(E), (Q, *q._scores(E), q._penalty(E)),
                               self.kernels, entropy=False)[1]

    def cross_entropy(self, emissions: torch.Tensor, other_emissions: torch.Tensor,
                      mask: torch.Tensor | None = None, other: "LinearChain | None" = None) -> torch.Tensor:
        """H(p, q) = -sum_y p(y) log q(y) = H(p) + KL(p || q) per row (B,), with p and q as in :meth:`kl`."""
        E, mask, _ = self._inputs(emissions, mask)
        q, Q = self._other(other, other_emissions, emissions)
        H, D = ops.information(E, mask, *self._scores(E), self._penalty(E), (Q, *q._scores(E), q._penalty(E)),
                               self.kernels)
        return H + D

    def _other(self, other, other_emissions, emissions):
        """(the layer of q, its emissions batch-first) after the checks, every field named."""
        q = self if other is None else other
        check(isinstance(q, LinearChain), "other", "a LinearChain (or None: this layer)", type(other).__name__)
        check(q.num_tags == self.num_tags, "other", f"a LinearChain of num_tags = {self.num_tags}", q.num_tags)
        check(q.transitions.device == self.transitions.device, "other", f"a layer on {self.transitions.device}",
              q.transitions.device)
        check(torch.is_tensor(other_emissions) and other_emissions.is_floating_point(), "other_emissions",
              "a float tensor", getattr(other_emissions, "dtype", type(other_emissions).__name__))
        check(other_emissions.shape == emissions.shape and other_emissions.device == emissions.device,
              "other_emissions", f"a tensor of the emissions' shape {tuple(emissions.shape)} on {emissions.device}",
              (tuple(other_emissions.shape), other_emissions.device))
        ops.refuse_bad_scores(other_emissions.detach(), "other_emissions", allow_neg_inf=False)
        Q = other_emissions.to(ops.computed_dtype(emissions))             # q computed in p's dtype
        return q, Q if self.batch_first else Q.transpose(0, 1)

    def sample(self, emissions: torch.Tensor, mask: torch.Tensor | None = None, n: int = 1,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """n exact samples y ~ p(y) of every row's CRF (constraints respected): a LongTensor (B, n, T),
        batch-first as :meth:`decode`'s n best, -1 where the mask is off. Forward filtering, backward sampling
        (:func:`ssvm_torch.chain.information.sample_rows`); ``generator`` (on the emissions' device) makes the
        draws reproducible. No gradient (a score-function estimator uses :meth:`score` of the samples)."""
        E, mask, _ = self._inputs(emissions, mask)
        check_draws(n, generator, E.device)
        return ops.sample(E, mask, *self._scores(E), n, self._penalty(E), generator)
