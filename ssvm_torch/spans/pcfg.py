"""Probabilistic context-free grammars in Chomsky normal form: log Z (the sentence's marginal likelihood under a
normalized grammar), the expected counts of every rule, the best (Viterbi) parse, the score of given trees and the
three training losses, batched, differentiable, on any device: the structure of torch-struct's ``SentCFG`` and of
the neural and compound PCFGs of Kim et al. 2019, in its layout.

**Grammar.** NT nonterminals and T preterminals, S = NT + T symbols numbered nonterminals first (0..NT-1), then
preterminals (NT..S-1). ``terms`` (B, N, T): the score of preterminal P over word i (log p(word | P) for a PCFG);
``rules`` (B, NT, S, S) or one grammar (NT, S, S): the score of the binary rule A -> B C; ``roots`` (B, NT) or
(NT,): the score of A as the root. Optional ``span_scores`` (B, N+1, N+1, NT): a score added to every constituent
(i, j) of two or more words labeled A (fenceposts as :mod:`ssvm_torch.spans`; e.g. a span classifier's). A tree
of n >= 2 words gives every word one preterminal and every constituent of two or more words one nonterminal and
two children; its score is the sum of its parts' scores. Rows are given by ``lengths`` (B,) in [2, N] or a bool
prefix ``mask`` (B, N) (neither: N words). -inf scores forbid a rule, preterminal, root or labeled span.

**Trees** are labeled charts (B, N+1, N+1) int64, as the labeled charts of :mod:`ssvm_torch.spans`: a one-word
span holds its word's preterminal (0..T-1), a longer span its nonterminal (0..NT-1), -1 is off the tree. The
children of a constituent follow from the chart (a binary tree holds 2n - 1 spans).

**Losses** (B,), with Delta(y, y_b) = c_b x (the labeled spans of y not in y_b; one-word spans with their
preterminals count): ``pcfg_crf_nll`` = log Z - s(y_b), ``pcfg_hinge`` = max_y [s(y) + Delta] - s(y_b) (Taskar et
al. 2004's max-margin parsing over the grammar's trees), ``pcfg_softmax_margin`` = log sum_y exp(s(y) + Delta) -
s(y_b) (Gimpel & Smith 2010). c_b = 1 (``cost="hamming"``), 1 / n_b (``"normalized"``), a number or a tensor (B,).
The loss-augmented trees are those of the scores plus c_b on every (span, label) the gold tree lacks.

**Partial brackets** (Pereira & Schabes 1992): ``observed`` charts give some brackets of each row, labeled or not
(:mod:`~ssvm_torch.spans.pcfg_partial`); log Z, the expected counts and the best tree are then over C, the trees
that hold them (the bracket-constrained likelihood, its E-step, the completion), and the losses with
``partial=True`` compare with C (log Z - log Z_C, the latent hinge, the softmax-margin against C).

The recursion is :mod:`~ssvm_torch.spans.torch_pcfg`'s (the torch path, every device; its log-semiring step
:mod:`~ssvm_torch.spans.pcfg_products`), the best tree on the CPU :mod:`~ssvm_torch.spans.numba_pcfg`'s;
torch-struct's ``SentCFG`` is the test reference and the benchmark's baseline (``benchmarks/bench_pcfg.py``).
"""
from __future__ import annotations

import numpy as np
import torch

from ..chain.checks import refuse_bad_scores, tracing
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check, check_choice
from ..grad_mode import records_autograd
from ..trees.checks import parallel_rows, use_numba
from ..trees.losses import row_cost
from .checks import KERNELS, chart_faults, refuse_chart_faults, row_lengths
from .losses import span_decode
from .numba_pcfg import viterbi_batch, viterbi_batch_parallel
from .partial import allowed
from .pcfg_partial import check_observed, constrained, loss_rows, partial_loss
from .torch_pcfg import NEG, best_chart, chart_score, inside, masked


def _float(x, field: str, shapes: tuple, what: str) -> torch.Tensor:
    """``x`` refused by name unless a float tensor of one of ``shapes``."""
    check(torch.is_tensor(x) and x.is_floating_point() and tuple(x.shape) in shapes, field,
          f"a float tensor of shape {' or '.join(str(s) for s in shapes)} ({what})",
          (getattr(x, "dtype", type(x).__name__), tuple(getattr(x, "shape", ()))))
    return x


def check_grammar(terms, rules, roots, span_scores=None, mask=None, lengths=None):
    """The grammar and the rows checked, every field named: (terms, rules (B, NT, S, S), roots (B, NT),
    span_scores or None, lengths (B,) int64) in one floating dtype (float32 for half precision) on the terms'
    device."""
    check(torch.is_tensor(terms) and terms.is_floating_point() and terms.dim() == 3, "terms",
          "a float tensor (B, N, T): each word's preterminal scores", (getattr(terms, "dtype", type(terms).__name__),
                                                                        tuple(getattr(terms, "shape", ()))))
    B, N, T = terms.shape
    check(torch.is_tensor(roots) and roots.dim() in (1, 2), "roots", "a float tensor (B, NT) or (NT,)",
          (getattr(roots, "dtype", type(roots).__name__), tuple(getattr(roots, "shape", ()))))
    NT = roots.shape[-1]
    S = NT + T
    _float(roots, "roots", ((B, NT), (NT,)), "the root scores of NT nonterminals")
    _float(rules, "rules", ((B, NT, S, S), (NT, S, S)), f"NT = {NT} nonterminals (roots' size), S = NT + T = {S} "
           "symbols")
    check(NT >= 1 and T >= 1, "roots, terms", "at least one nonterminal and one preterminal", (NT, T))
    if span_scores is not None:
        _float(span_scores, "span_scores", ((B, N + 1, N + 1, NT),), "a score per constituent and nonterminal")
    for x, name in ((rules, "rules"), (roots, "roots"), (span_scores, "span_scores")):
        check(x is None or x.device == terms.device, name, f"a tensor on the terms' device {terms.device}",
              None if x is None else x.device)
    dtype = torch.promote_types(terms.dtype, torch.float32)
    for x, name in ((terms, "terms"), (rules, "rules"), (roots, "roots"), (span_scores, "span_scores")):
        if x is not None:
            refuse_bad_scores(x.detach(), name)
    lengths = row_lengths(B, N, terms.device, mask, lengths, 2, "a tree's root is a nonterminal over two or more "
                          f"words; terms has N = {N} word positions")
    rules = rules.to(dtype).expand(B, NT, S, S)
    roots = roots.to(dtype).expand(B, NT)
    return terms.to(dtype), rules, roots, None if span_scores is None else span_scores.to(dtype), lengths


def _finite(value: torch.Tensor) -> torch.Tensor:
    """-inf where no tree has a finite score (the recursion's NEG stand-in)."""
    return torch.where(value < NEG / 2, torch.full_like(value, float("-inf")), value)


def refuse_no_tree(log_z: torch.Tensor) -> None:
    """A row without a tree of finite score has no distribution (its entropy, its samples): refused by name, as
    the other layers refuse it."""
    if not tracing() and bool((log_z < NEG / 2).any()):
        b = int((log_z < NEG / 2).nonzero()[0, 0])
        raise SSVMInputError(f"terms, rules, roots: row {b} has no tree with a finite score (its -inf parts exclude "
                             "every tree; log Z -inf)")


def restrict(terms, roots, span, lengths, observed):
    """(terms, span scores) restricted to the trees that hold the ``observed`` brackets (checked; None: as given):
    -inf at the parts no such tree takes (:func:`~ssvm_torch.spans.pcfg_partial.constrained`)."""
    if observed is None:
        return terms, span
    return constrained(terms, span, check_observed(observed, terms, roots, lengths), lengths, roots.shape[1])


def _log_z(terms, rules, roots, span, lengths) -> torch.Tensor:
    value, _, _ = inside(*masked(terms, rules, roots, span, lengths), lengths, "log")
    return _finite(value)


def pcfg_log_partition(terms, rules, roots, span_scores=None, mask=None, lengths=None, observed=None) -> torch.Tensor:
    """log Z = log sum_y exp s(y) over every tree of every row (B,): the inside algorithm (module docstring);
    differentiable, its gradient the expected counts (:func:`pcfg_marginals`). Under a normalized grammar
    (log-probabilities) it is log p(sentence), the marginal likelihood a PCFG is induced by. With ``observed``
    brackets (:mod:`~ssvm_torch.spans.pcfg_partial`) the sum is over the trees that hold them, log Z_C: the
    bracket-constrained likelihood of Pereira & Schabes 1992 (-inf where no such tree scores finite)."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    if terms.shape[0] == 0:
        return terms.new_zeros(0) + terms.sum() * 0
    terms, span = restrict(terms, roots, span, lengths, observed)
    return _log_z(terms, rules, roots, span, lengths)


@records_autograd
def pcfg_marginals(terms, rules, roots, span_scores=None, mask=None, lengths=None, observed=None) -> dict:
    """The expected counts under p(y) = exp(s(y) - log Z) of every row, as a dict: "terms" (B, N, T) P(word i
    has preterminal P), "rules" (B, NT, S, S) the expected uses of A -> B C, "roots" (B, NT) P(root A),
    "spans" (B, N+1, N+1, NT) P(constituent (i, j) labeled A), and "log_z" (B,). The gradients of log Z. With
    ``observed`` brackets they are under p(y | y holds them) and "log_z" is log Z_C (:func:`pcfg_log_partition`):
    the E-step of Pereira & Schabes's inside-outside training on a partially bracketed corpus."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    terms, span = restrict(terms, roots, span, lengths, observed)
    B, N, T = terms.shape
    leaves = [x.detach().clone().requires_grad_(True) for x in (terms, rules, roots)]
    span_leaf = (terms.new_zeros(B, N + 1, N + 1, roots.shape[1]) if span is None else span.detach()).clone()
    span_leaf.requires_grad_(True)
    with torch.enable_grad():
        value, _, _ = inside(*masked(*leaves, span_leaf, lengths), lengths, "log")
        grads = torch.autograd.grad(value.sum(), [*leaves, span_leaf]) if B else [x.detach() * 0 for x in
                                                                                 (*leaves, span_leaf)]
    return {"terms": grads[0], "rules": grads[1], "roots": grads[2], "spans": grads[3], "log_z": _finite(value)}


def pcfg_decode(terms, rules, roots, span_scores=None, mask=None, lengths=None, mbr: bool = False,
                kernels: str = "auto", observed=None):
    """The best tree of every row: (charts (B, N+1, N+1) int64, the module docstring's labeled charts, scores (B,)
    their s(y), -inf where no tree scores finite). Viterbi CKY (the max semiring) and a top-down read: compiled for
    CPU float32 / float64 (:mod:`~ssvm_torch.spans.numba_pcfg`; ``kernels`` "auto" or "numba"), the torch pass
    elsewhere (``kernels="torch"`` on the CPU too). With ``mbr`` the tree of the most expected correct labeled spans
    under p(y) (Goodman 1996's labelled recall parse: CKY over the span marginals, a one-word span's preterminal
    included; its score is that expectation); it may use a rule the grammar forbids, as the labelled recall parse
    may. With ``observed`` brackets (:mod:`~ssvm_torch.spans.pcfg_partial`) the best tree of those that hold them
    (the latent SSVM's completion), or with ``mbr`` the labelled recall parse among them under p(y | y holds them)."""
    check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
    kernels = check_choice(kernels, "kernels", KERNELS)
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    B, N = terms.shape[:2]
    if B == 0:
        return torch.full((0, N + 1, N + 1), -1, dtype=torch.int64, device=terms.device), terms.new_zeros(0)
    keep = None if observed is None else check_observed(observed, terms, roots, lengths)
    if keep is not None:
        terms, span = constrained(terms, span, keep, lengths, roots.shape[1])
    if mbr:
        return _mbr(terms, rules, roots, span, lengths, keep)
    with torch.no_grad():
        chart, value = _viterbi(masked(terms, rules, roots, span, lengths), lengths, kernels)
    return chart, _finite(value)


def _viterbi(parts, lengths, kernels: str):
    """(charts, scores) of the best trees of masked inputs: the compiled row kernel where ``kernels`` on these
    scores means it (:func:`ssvm_torch.trees.checks.use_numba`), else the torch max-plus pass."""
    terms, rules, roots, span = parts
    if use_numba(terms, kernels, "terms"):
        B, N = terms.shape[:2]
        charts = np.full((B, N + 1, N + 1), -1, dtype=np.int64)
        host = [to_host(x.detach().contiguous()) for x in (terms, rules, roots)]
        scores = np.empty(B, dtype=host[0].dtype)
        sp = to_host(span.detach().contiguous()) if span is not None else np.zeros((B, 1, 1, 1), host[0].dtype)
        lens = np.ascontiguousarray(to_host(lengths), dtype=np.int64)
        (viterbi_batch_parallel if parallel_rows(B) else viterbi_batch)(*host, sp, span is not None, lens, charts,
                                                                          scores)
        return from_host(charts, terms.device), from_host(scores, terms.device)
    value, _, bp = inside(*parts, lengths, "max")
    return best_chart(bp, lengths, terms.shape[1]), value


def _mbr(terms, rules, roots, span, lengths, keep=None):
    """The labelled recall parse (:func:`pcfg_decode`): the labeled span CKY of :mod:`ssvm_torch.spans` over the
    marginals, the preterminals' on the one-word spans and the nonterminals' on the longer ones (-inf elsewhere and,
    with observed brackets ``keep``, at the (span, label) entries no tree that holds them takes)."""
    B, N, T = terms.shape
    NT, M = roots.shape[1], N + 1
    m = pcfg_marginals(terms, rules, roots, span, lengths=lengths)
    scores = terms.new_full((B, M, M, max(NT, T)), float("-inf"))
    scores[..., :NT] = m["spans"]
    pos = torch.arange(N, device=terms.device)
    scores[:, pos, pos + 1] = float("-inf")
    scores[:, pos, pos + 1, :T] = m["terms"]
    if keep is not None:
        scores = scores.masked_fill(~allowed(scores, keep, lengths), float("-inf"))
    with torch.no_grad():
        return span_decode(scores, lengths=lengths, return_scores=True)


def check_trees(charts, terms, roots, lengths, field: str = "charts") -> torch.Tensor:
    """Gold trees as labeled charts (module docstring): int (B, N+1, N+1), each row a binary tree over its words
    (:func:`ssvm_torch.spans.chart_faults`), one-word spans labeled in [0, T), longer ones in [0, NT)."""
    B, N, T = terms.shape
    NT, M = roots.shape[-1], N + 1
    check(torch.is_tensor(charts) and tuple(charts.shape) == (B, M, M) and not charts.is_floating_point()
          and charts.dtype != torch.bool, field, f"an int tensor ({B}, {M}, {M}) of labels (-1: no span)",
          (getattr(charts, "dtype", type(charts).__name__), tuple(getattr(charts, "shape", ()))))
    charts = charts.to(terms.device, torch.int64)
    if tracing() or B == 0:
        return charts
    refuse_chart_faults(chart_faults(charts >= 0, lengths, compiled=use_numba(terms, "auto", "terms")),
                        charts >= 0, lengths, field, "a binary tree")
    pos = torch.arange(M, device=terms.device)
    width = (pos[None, :] - pos[:, None])[None]
    bad = (charts < -1) | ((width == 1) & (charts >= T)) | ((width >= 2) & (charts >= NT))
    if bool(bad.any()):
        b, i, j = (int(v) for v in bad.nonzero()[0])
        kind = f"a preterminal in [0, {T})" if j - i == 1 else f"a nonterminal in [0, {NT})"
        raise SSVMInputError(f"{field}: row {b}, span ({i}, {j}): label {int(charts[b, i, j])}, expected {kind} "
                             "(-1: no span)")
    return charts


def pcfg_score(terms, rules, roots, charts, span_scores=None, mask=None, lengths=None) -> torch.Tensor:
    """s(y) (B,) of the given trees (labeled charts, checked): differentiable w.r.t. every score."""
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    charts = check_trees(charts, terms, roots, lengths)
    return _finite(chart_score(*masked(terms, rules, roots, span, lengths), charts, lengths))


def _augmented(terms, roots, span, charts, lengths, cost):
    """The scores plus c_b on every (span, label) the gold charts lack: (terms, span scores) of the loss-augmented
    trees (module docstring)."""
    B, N, T = terms.shape
    NT, M = roots.shape[1], N + 1
    c = row_cost(cost, lengths, terms.dtype)
    words = charts.diagonal(1, 1, 2)                                                      # (B, N) gold preterminals
    miss_t = torch.arange(T, device=terms.device) != words[..., None]
    terms = terms + c[:, None, None] * miss_t
    miss_s = torch.arange(NT, device=terms.device) != charts[..., None]                 # (B, M, M, NT)
    base = terms.new_zeros(B, M, M, NT) if span is None else span
    return terms, base + c[:, None, None, None] * miss_s


def _best_score(terms, rules, roots, span, lengths, kernels: str = "auto") -> torch.Tensor:
    """s(y*) (B,) of the best tree y* under the given scores, differentiable as the tree's parts' scores."""
    inputs = masked(terms, rules, roots, span, lengths)
    with torch.no_grad():
        best, _ = _viterbi([None if x is None else x.detach() for x in inputs], lengths, kernels)
    return _finite(chart_score(*inputs, best, lengths))


def _full_loss(kind: str, terms, rules, roots, span, charts, lengths, cost, kernels) -> torch.Tensor:
    """The losses of whole gold trees (module docstring) over checked inputs."""
    gold = chart_score(*masked(terms, rules, roots, span, lengths), charts, lengths)
    if kind == "crf":
        return _log_z(terms, rules, roots, span, lengths) - gold
    aug_terms, aug_span = _augmented(terms, roots, span, charts, lengths, cost)
    if kind == "softmax_margin":
        return _log_z(aug_terms, rules, roots, aug_span, lengths) - gold
    return _best_score(aug_terms, rules, roots, aug_span, lengths, kernels) - gold


def _loss(kind: str, terms, rules, roots, charts, span_scores, mask, lengths, cost, kernels="auto",
          partial: bool = False) -> torch.Tensor:
    kernels = check_choice(kernels, "kernels", KERNELS)
    check(isinstance(partial, bool), "partial", "True or False", repr(partial))
    terms, rules, roots, span, lengths = check_grammar(terms, rules, roots, span_scores, mask, lengths)
    charts = check_observed(charts, terms, roots, lengths, "charts") if partial else \
        check_trees(charts, terms, roots, lengths)
    if terms.shape[0] == 0:
        return terms.new_zeros(0) + terms.sum() * 0
    c = row_cost(cost, lengths, terms.dtype)

    def rows(idx):
        """The inputs of the rows ``idx`` (None: every row)."""
        return [x if x is None or idx is None else x[idx] for x in (terms, rules, roots, span, charts, lengths, c)]

    def full(idx):
        return _full_loss(kind, *rows(idx), kernels)

    if not partial:
        return full(None)

    def best(*parts):
        return _best_score(*parts, kernels)

    def part(idx):
        t, r, o, sp, ch, ln, cc = rows(idx)
        return partial_loss(kind, _log_z, best, t, r, o, sp, ch, ln, cc, rows=idx)

    return loss_rows(charts, lengths, full, part, terms)


def pcfg_crf_nll(terms, rules, roots, charts, span_scores=None, mask=None, lengths=None,
                 partial: bool = False) -> torch.Tensor:
    """log Z - s(y_b) (B,): the negative log-likelihood of the gold trees (module docstring); with ``partial`` a
    row's chart may hold only observed brackets, labeled or not (log Z - log Z_C,
    :mod:`~ssvm_torch.spans.pcfg_partial`)."""
    return _loss("crf", terms, rules, roots, charts, span_scores, mask, lengths, "hamming", partial=partial)


def pcfg_hinge(terms, rules, roots, charts, span_scores=None, mask=None, lengths=None, cost="hamming",
               kernels: str = "auto", partial: bool = False):
    """max_y [s(y) + Delta(y, y_b)] - s(y_b) (B,) >= 0, the structured hinge; its gradient the difference of the
    loss-augmented tree's parts and the gold tree's (module docstring); the loss-augmented tree by
    :func:`pcfg_decode`'s ``kernels``. With ``partial`` the latent hinge against the trees that hold the observed
    brackets (:mod:`~ssvm_torch.spans.pcfg_partial`)."""
    return _loss("hinge", terms, rules, roots, charts, span_scores, mask, lengths, cost, kernels, partial)


def pcfg_softmax_margin(terms, rules, roots, charts, span_scores=None, mask=None, lengths=None, cost="hamming",
                        partial: bool = False):
    """log sum_y exp(s(y) + Delta(y, y_b)) - s(y_b) (B,) (module docstring; ``partial`` as in :func:`pcfg_hinge`)."""
    return _loss("softmax_margin", terms, rules, roots, charts, span_scores, mask, lengths, cost, partial=partial)
