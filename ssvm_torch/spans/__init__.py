"""Binary constituency trees (CKY) for the whole toolkit, in one package with one convention (the way
:mod:`ssvm_torch.trees` serves dependency trees): the structure of Taskar et al. 2004's max-margin parsing,
Stern et al. 2017's span parser and the TreeCRF of Finkel et al. 2008 / Zhang et al. 2020.

**Convention.** A sentence of n words has fenceposts 0..n; the span (i, j), 0 <= i < j <= n, covers words
i..j-1. Scores come as a padded batch ``span_scores`` (B, N+1, N+1) with ``span_scores[b, i, j]`` the score
of the span (i, j) (SuPar's ``ConstituencyCRF`` layout; entries with i >= j are never read), or as
(B, N+1, N+1, L) with one score per span and label. A binary tree over n words holds 2n - 1 spans (the n
one-word spans, the sentence, and for every span of two or more words its two children); its score is the
sum of its (labeled) span scores. Rows are given by ``lengths`` (B,) = n_b or a bool ``mask`` (B, N) on for
words 0..n_b-1; neither means N words. A tree is a chart (B, N+1, N+1): bool, or for labeled scores int64
with each span's label and -1 elsewhere. -inf scores mark spans (labels) that may not be taken.

**Operations and backends.** One dispatch rule (:mod:`~ssvm_torch.spans.ops`): numba for CPU float32 /
float64 (:mod:`~ssvm_torch.spans.numba_cky`: compiled, batched, threads over sentences; the marginals come
from a top-down pass, no autograd graph) and torch for any device (:mod:`~ssvm_torch.spans.torch_cky`:
vectorized over a width's spans, autograd; the reference). Labeled trees reduce to unlabeled ones by a
logsumexp / max over the labels (one CKY for any number of labels).

SuPar's ``ConstituencyCRF`` and torch-struct's ``TreeCRF`` are test references and benchmark baselines, not
backends. The layer is :class:`ssvm_torch.nn.ConstituencyTree`.
"""
from .checks import UNLABELED, chart_faults, check_charts, resolve_lengths
from .convert import binarize, chart_from_spans, debinarize, spans_of_chart, subtree_brackets
from .pcfg import (pcfg_crf_nll, pcfg_decode, pcfg_hinge, pcfg_log_partition, pcfg_marginals, pcfg_score,
                   pcfg_softmax_margin)
from .pcfg_information import pcfg_cross_entropy, pcfg_entropy, pcfg_kl
from .pcfg_sampling import pcfg_sample
from .losses import (bracket_counts, span_crf_nll, span_decode, span_hinge, span_log_partition, span_marginals,
                     span_score, span_softmax_margin)

__all__ = ["UNLABELED", "binarize", "bracket_counts", "chart_faults", "chart_from_spans", "check_charts", "debinarize",
           "pcfg_crf_nll", "pcfg_cross_entropy", "pcfg_decode", "pcfg_entropy", "pcfg_hinge", "pcfg_kl",
           "pcfg_log_partition", "pcfg_marginals", "pcfg_sample", "pcfg_score", "pcfg_softmax_margin",
           "resolve_lengths", "span_crf_nll", "span_decode", "span_hinge", "span_log_partition", "span_marginals",
           "span_score", "span_softmax_margin", "spans_of_chart", "subtree_brackets"]
