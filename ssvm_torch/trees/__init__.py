"""Dependency trees (first order, and second order with adjacent siblings) for the whole toolkit, in one package with one convention (the way
:mod:`ssvm_torch.chain` serves chains).

**Convention.** A sentence of n words has positions 0..n, position 0 the root. Scores come as a padded
batch ``arc_scores`` (B, N, N) with ``arc_scores[b, m, h]`` the score of word m taking head h (SuPar's and
the biaffine parser's layout; row 0 is unused, the diagonal is never an arc); a tree's score is the sum of
its arcs, s(y) = sum_m arc_scores[b, m, y_m]. Rows are given by a bool ``mask`` (B, N), False at
position 0 and on exactly at positions 1..n_b, or by ``lengths`` (B,) = n_b; neither means N-1 words.
A tree is ``heads`` (B, N) int64 with heads[b, m] the head of word m (0 = the root), -1 at position 0 and
beyond the words. ``multiroot=False`` (the default, as in UD) allows exactly one word under the root;
``projective=True`` allows no crossing arcs. -inf scores mark arcs that may not be taken.

**Operations and backends.** Every operation has one dispatch rule (:mod:`~ssvm_torch.trees.ops`): numba
(CPU float32/float64, compiled, batched, threads over sentences), Triton (CUDA, the projective recursions)
and torch (any device; the reference).
The recursions exist once per backend:

* projective best tree and log Z / marginals (Eisner; inside-outside): numba
  :mod:`~ssvm_torch.trees.numba_eisner` (the outside pass writes the gradient), Triton
  :mod:`~ssvm_torch.trees.triton_eisner` for CUDA (inside and outside kernels, one program per sentence),
  torch :mod:`~ssvm_torch.trees.torch_eisner` (autograd; any device, the reference);
* non-projective best tree (Chu-Liu-Edmonds with the single-root constraint in one run):
  :mod:`~ssvm_torch.trees.numba_mst`, on the host for every device;
* non-projective log Z / marginals (the matrix-tree theorem, Koo et al. 2007):
  :mod:`~ssvm_torch.trees.matrix_tree`, torch on every device.

**Second order** (:mod:`~ssvm_torch.trees.sibling`): every call takes ``sib_scores`` (B, N, N, N),
``sib_scores[b, m, h, s]`` the score of m and s being adjacent dependents of h (SuPar's ``Dependency2oCRF``
layout), for projective trees: numba :mod:`~ssvm_torch.trees.numba_sibling`, Triton
:mod:`~ssvm_torch.trees.triton_sibling`, torch :mod:`~ssvm_torch.trees.torch_sibling`, one dispatch in
:mod:`~ssvm_torch.trees.sibling_ops`.

torch-struct's ``DependencyCRF`` / ``NonProjectiveDependencyCRF`` (root scores on the diagonal, [head,
modifier]) are a test reference and a benchmark baseline, not a backend.
"""
from .checks import check_heads, resolve_lengths, tree_faults
from .sibling import adjacent_siblings
from .losses import (dependency_crf_nll, dependency_decode, dependency_hinge, dependency_log_partition,
                     dependency_marginals, dependency_score, dependency_softmax_margin, is_tree)

__all__ = ["adjacent_siblings", "check_heads", "dependency_crf_nll", "dependency_decode", "dependency_hinge",
           "dependency_log_partition", "dependency_marginals", "dependency_score", "dependency_softmax_margin", "is_tree",
           "resolve_lengths", "tree_faults"]
