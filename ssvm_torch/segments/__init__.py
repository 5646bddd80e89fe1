"""Semi-Markov (segmental) chains for the whole toolkit, in one package with one convention (the way
:mod:`ssvm_torch.chain` serves chains and :mod:`ssvm_torch.trees` dependency trees).

**Convention.** A row of n positions 0..n-1 is cut into consecutive segments, each of 1..L positions and one
label in {0..K-1} (Sarawagi & Cohen 2004). Scores come as a padded batch ``seg_scores`` (B, T, L, K) with
``seg_scores[b, t, l, k]`` the score of the segment that starts at position t, covers l+1 positions and has
label k, plus ``first``/``last`` (K,) and ``trans`` (K, K) indexed **[next, prev]** as in the chain package:

    s(y) = first[k_1] + sum_j seg_scores[t_j, l_j - 1, k_j] + sum_{j>=2} trans[k_j, k_{j-1}] + last[k_J].

With L = 1 this is the linear chain of :mod:`ssvm_torch.chain` (tested). Rows are given by ``lengths`` (B,) or a
bool ``mask`` (B, T) on at positions 0..n_b-1; neither means T positions. A segmentation is ``segments`` (B, T)
int64: the label at each segment's first position, -1 at the segment's other positions and beyond the row
(:func:`~ssvm_torch.segments.convert.segments_from_tags` reads BIO / BIOES chunk tags into it and back). -inf
scores mark segments or transitions that may not be taken.

**Operations and backends.** Best segmentation, log Z and marginals (:mod:`~ssvm_torch.segments.ops`: numba for
CPU float32/float64, compiled, one row per thread; torch on any device, the reference and the autograd path),
the score and the task losses of segmentations (:mod:`~ssvm_torch.segments.scoring`), and the three training
losses, hinge, softmax-margin and CRF (:mod:`~ssvm_torch.segments.losses`), from full or partial annotation
(:mod:`~ssvm_torch.segments.partial`). torch-struct's ``SemiMarkovCRF`` is
a test reference and a benchmark baseline, not a backend.
"""
from .checks import check_segments, segment_lengths
from .convert import (partial_from_tags, segment_states, segments_from_tags, segments_of_states, spans,
                      tags_from_segments)
from .losses import (allowed_segments, segment_crf_nll, segment_decode, segment_hinge, segment_log_partition,
                     segment_loss, segment_marginals, segment_score, segment_softmax_margin)
from .partial import PartialSegmentation, observed_segmentation

__all__ = ["PartialSegmentation", "allowed_segments", "check_segments", "observed_segmentation", "partial_from_tags",
           "segment_crf_nll", "segment_decode", "segment_hinge", "segment_lengths", "segment_log_partition",
           "segment_loss", "segment_marginals", "segment_score", "segment_softmax_margin", "segment_states", "segments_from_tags",
           "segments_of_states", "spans", "tags_from_segments"]
