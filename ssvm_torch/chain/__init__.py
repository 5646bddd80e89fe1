"""The linear-chain dynamic programs of the whole toolkit, in one package with one convention.

**Convention.** A chain of length L with label set {0..K-1} scores a labeling y as

    s(y) = first[y_0] + sum_t U[t, y_t] + sum_{t>=1} trans[y_t, y_{t-1}] + last[y_{L-1}],

``U`` the (B, T, K) unary (emission) scores, ``first``/``last`` (K,) (also called start / end) and
``trans`` (K, K) indexed **[next, prev]** (the layout of the OCR weight vector, models/chain.py).
Rows are given either by ``lengths`` (row b = its first lengths[b] positions: the BCFW models and
stores, :mod:`~ssvm_torch.chain.padded`, :mod:`~ssvm_torch.chain.losses`) or by a bool ``mask``
(row b = its masked-on positions in order, gaps allowed, possibly none: the taggers' layout,
:mod:`~ssvm_torch.chain.ops`); ragged rows stacked with offsets serve the marginal-based solvers
(:mod:`~ssvm_torch.chain.ragged`). Tag constraints enter as additive 0 / -inf penalties on
(first, last, trans), never written into weights. :class:`~ssvm_torch.nn.LinearChain` keeps
pytorch-crf's public convention (``transitions[i, j]`` = score of i -> j) and translates at one
boundary (``LinearChain._scores``: ``transitions.t()``).

**Operations and backends.** Every operation has one dispatch rule: ``numba`` (CPU float32/float64,
compiled, the default there), ``torch`` (any device; the reference) and, for Viterbi on CUDA,
``triton`` (the fused kernel). The recursions exist once per backend:

* Viterbi -- numba :func:`~ssvm_torch.chain.numba_viterbi.viterbi_segment_tt` (every compiled kernel,
  the BCFW store kernels of oracles/chain_kernels.py and oracles/edge_kernels.py included), torch
  :func:`~ssvm_torch.chain.torch_viterbi.viterbi_loop`, Triton
  :func:`~ssvm_torch.chain.triton_viterbi.viterbi_fused`;
* forward-backward (log Z, marginals, expectations, the CRF gradient) -- numba
  :mod:`~ssvm_torch.chain.numba_fb` (the layer's CRF, the ragged marginals, the EG kernel of
  oracles/eg_kernels.py), torch :func:`~ssvm_torch.chain.torch_ops.log_partition_rows` and autograd;
* path score -- torch :func:`~ssvm_torch.chain.torch_ops.padded_score`, numba
  :func:`~ssvm_torch.chain.numba_masked.nb_path_scores`.

torch-struct (:mod:`~ssvm_torch.chain.torch_struct`) is an independent reference for tests and
benchmarks, not a backend. A new backend adds its kernels as a module here and a branch in the
dispatch of :mod:`~ssvm_torch.chain.ops` (masked operations) and :mod:`~ssvm_torch.chain.padded`
(lengths-based decoding); a new operation goes into :mod:`~ssvm_torch.chain.ops` with one
function per backend, and into :mod:`~ssvm_torch.chain.losses` if it has a lengths-based form.
"""
from . import edge_chain
from .checks import refuse_bad_scores
from .losses import (chain_crf_nll, chain_decode, chain_expectations, chain_hinge, chain_log_partition,
                     chain_marginals, chain_score, hamming)
from .padded import check_chain, decode, viterbi
from .ragged import chain_marginals_ragged
from .torch_struct import edge_potentials

__all__ = ["chain_crf_nll", "chain_decode", "chain_expectations", "chain_hinge", "chain_log_partition",
           "chain_marginals", "chain_marginals_ragged", "chain_score", "check_chain", "decode", "edge_potentials",
           "edge_chain", "hamming", "refuse_bad_scores", "viterbi"]
