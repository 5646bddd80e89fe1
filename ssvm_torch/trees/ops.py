"""The tree package's operations on a padded batch, each with one dispatch rule over its backends: the best
tree (loss-augmented when a gold tree and a cost are given), log Z (differentiable), the arc marginals, the
score of given trees, and the three losses (structured hinge, softmax-margin, CRF).

Arguments, after validation by the callers (:func:`ssvm_torch.trees.losses` and
:class:`~ssvm_torch.nn.DependencyTree`): ``S`` (B, N, N) float [modifier, head], ``lengths`` (B,) int64 words
per row, ``gold`` (B, N) int64 heads (-1 off the words), ``cost`` (B,) the loss of one wrong head per row.

The rule, ``kernels="auto"``: the compiled kernels (:mod:`~ssvm_torch.trees.numba_eisner`,
:mod:`~ssvm_torch.trees.numba_mst`) for CPU float32 / float64 scores outside tracing, spread over numba's
threads when torch has more than one and the batch has at least
:data:`~ssvm_torch.trees.checks.PARALLEL_MIN` rows; the Triton
kernels (:mod:`~ssvm_torch.trees.triton_eisner`) for CUDA scores outside tracing; the torch recursions
(:mod:`~ssvm_torch.trees.torch_eisner`) elsewhere. Non-projective log Z and marginals are the
matrix-tree theorem in torch on every device (:mod:`~ssvm_torch.trees.matrix_tree`: LAPACK is the
kernel); the non-projective best tree is Chu-Liu-Edmonds, on the host for scores on any device (one copy
each way per batch: the contraction is sequential).
"""
from __future__ import annotations

import numpy as np
import torch

from ..grad_mode import records_autograd
from ..devices import from_host
from ..errors import SSVMInputError
from . import matrix_tree, torch_eisner, triton_eisner
from .checks import host_batch, parallel_rows, tracing, use_numba, word_mask
from .numba_eisner import eisner_batch, eisner_batch_parallel, inside_outside_batch, inside_outside_batch_parallel
from .numba_mst import mst_batch, mst_batch_parallel


def _eisner(S: torch.Tensor):
    """The projective recursions off the compiled CPU kernels: the Triton kernels for CUDA scores
    (:func:`ssvm_torch.trees.triton_eisner.available`) outside tracing, else the torch recursions."""
    return triton_eisner if triton_eisner.available(S) and not tracing() else torch_eisner


def fail_no_tree(scores: torch.Tensor, lengths: torch.Tensor, what: str = "best-tree score") -> None:
    if tracing():
        return
    bad = ~(scores > torch_eisner.NEG / 2) & (lengths > 0)
    bad |= torch.isnan(scores)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise SSVMInputError(f"arc_scores: row {b} ({int(lengths[b])} words) has no dependency tree of the chosen "
                             f"kind with a finite score (its -inf arcs exclude every tree; {what} "
                             f"{float(scores[b]):.3g})")


def best(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool, kernels: str = "auto",
         refuse: bool = True):
    """(heads (B, N) int64, -1 at the root position and beyond the length; scores (B,) in S's dtype): the
    best tree of every row. No gradient. A row without a tree of finite score is refused by name (``refuse``),
    or left with a score below -1e29 for the caller to name."""
    S = S.detach()
    B, N, _ = S.shape
    if not projective and torch.compiler.is_exporting():
        raise SSVMInputError("projective: False decodes by Chu-Liu-Edmonds on the host, which torch.export (and so "
                             "ONNX export) cannot trace; export a projective layer (Eisner's torch recursion exports) "
                             "or decode outside the exported graph")
    if projective and not use_numba(S, kernels):
        heads, scores = _eisner(S).best_tree(S, lengths, multiroot)
    else:                              # compiled kernels, or Chu-Liu-Edmonds on the host for any device
        Sh, Lh = host_batch(S, lengths)
        heads = np.empty((B, N), dtype=np.int64)
        scores = np.empty(B)
        par = parallel_rows(B)
        if projective:
            (eisner_batch_parallel if par else eisner_batch)(Sh, Lh, multiroot, heads, scores)
        else:
            (mst_batch_parallel if par else mst_batch)(Sh, Lh, multiroot, heads, scores)
        heads, scores = from_host(heads, S.device), from_host(scores, S.device).to(S.dtype)
    if refuse:
        fail_no_tree(scores, lengths)
    return heads, scores


def augment(S: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """S + cost_b [h != gold[b, m]] on the words' rows: the scores whose best tree is the loss-augmented
    one (the Hamming loss over heads decomposes over arcs). Differentiable in S (the offsets are constants). A
    word whose gold head is negative (unobserved: the latent SSVM's data) costs nothing."""
    B, N, _ = S.shape
    word = word_mask(lengths, N) & (gold >= 0)
    wrong = torch.ones(B, N, N, dtype=S.dtype, device=S.device)
    wrong.scatter_(2, gold.clamp(min=0)[:, :, None], 0.0)
    offset = wrong * (cost.to(S.dtype)[:, None, None] * word[:, :, None].to(S.dtype))
    return S + offset


class _CompiledLogZ(torch.autograd.Function):
    """log Z of projective trees by the compiled inside-outside; the backward multiplies the marginals that
    the forward pass wrote (no graph through the recursion)."""

    @staticmethod
    def forward(ctx, S, lengths, multiroot):
        Sh, Lh = host_batch(S, lengths)
        B, N, _ = Sh.shape
        want = S.requires_grad
        logz = np.empty(B)
        M = np.zeros((B, N, N) if want else (B, 1, 1))
        (inside_outside_batch_parallel if parallel_rows(B) else inside_outside_batch)(Sh, Lh, multiroot, want, logz, M)
        ctx.save_for_backward(from_host(M, S.device) if want else S.new_zeros(0))
        ctx.dtype = S.dtype
        return from_host(logz, S.device).to(S.dtype)

    @staticmethod
    def backward(ctx, grad):
        (M,) = ctx.saved_tensors
        return (grad.to(torch.float64)[:, None, None] * M).to(ctx.dtype), None, None


def log_partition(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool,
                  kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) of the trees of every row (0 for an empty row), differentiable: its gradient is the arc
    marginals. A row without any tree of finite score is refused by name."""
    if not projective:
        use_numba(S, kernels)                          # refuses kernels="numba" where it cannot run
        logz = matrix_tree.log_partition(S, lengths, multiroot)
    elif use_numba(S, kernels):
        logz = _CompiledLogZ.apply(S, lengths, multiroot)
    else:
        logz = _eisner(S).log_partition(S, lengths, multiroot)
    fail_no_tree(logz.detach(), lengths, "log Z")
    return logz


def marginals(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool,
              kernels: str = "auto") -> torch.Tensor:
    """P(h -> m) (B, N, N) [modifier, head] under the CRF of the scores, zero off the words. No gradient."""
    return marginals_and_log_partition(S, lengths, projective, multiroot, kernels)[0].to(S.dtype)


@records_autograd
def marginals_and_log_partition(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool,
                                kernels: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """(the marginals (B, N, N), log Z (B,) float64) from one inside-outside pass or one factorization; the
    marginals float64 from the compiled and matrix-tree kernels, S's dtype from the torch inside pass. No
    gradient. A row without any tree of finite score is refused by name."""
    S = S.detach()
    if not projective:
        use_numba(S, kernels)
        M, logz = matrix_tree.marginals(S, lengths, multiroot)
        fail_no_tree(logz, lengths, "log Z")
        return M, logz.to(torch.float64)
    if use_numba(S, kernels):
        Sh, Lh = host_batch(S, lengths)
        B, N, _ = Sh.shape
        logz, M = np.empty(B), np.zeros((B, N, N))
        (inside_outside_batch_parallel if parallel_rows(B) else inside_outside_batch)(Sh, Lh, multiroot, True, logz, M)
        fail_no_tree(from_host(logz, S.device), lengths, "log Z")
        return from_host(M, S.device), from_host(logz, S.device).to(torch.float64)
    with torch.enable_grad():
        leaf = S.clone().requires_grad_(True)
        logz = _eisner(S).log_partition(leaf, lengths, multiroot)
        fail_no_tree(logz.detach(), lengths, "log Z")
        (grad,) = torch.autograd.grad(logz.sum(), leaf)
    return grad, logz.detach().to(torch.float64)


def score(S: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """s(heads) = sum over the words m of S[b, m, heads[b, m]]: (B,), differentiable."""
    word = word_mask(lengths, S.shape[1])
    picked = S.gather(2, heads.clamp(min=0)[:, :, None])[:, :, 0]
    return torch.where(word, picked, torch.zeros_like(picked)).sum(1)


def wrong_heads(heads: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The number of words whose head differs from the gold one: (B,) int64 (words with a negative gold head,
    unobserved, not counted)."""
    return ((heads != gold) & word_mask(lengths, heads.shape[1]) & (gold >= 0)).sum(1)


def hinge(S, gold, lengths, cost, projective: bool, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """max_y [s(y) + Delta(y, gold)] - s(gold) per row (B,), Delta = cost_b x the wrong heads; differentiable,
    its gradient the arc indicators of the loss-augmented tree minus those of the gold tree."""
    with torch.no_grad():
        y, _ = best(augment(S.detach(), gold, lengths, cost), lengths, projective, multiroot, kernels)
    delta = cost.to(S.dtype) * wrong_heads(y, gold, lengths).to(S.dtype)
    return score(S, y, lengths) + delta - score(S, gold, lengths)


def softmax_margin(S, gold, lengths, cost, projective: bool, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """log sum_y exp(s(y) + Delta(y, gold)) - s(gold) per row (Gimpel & Smith 2010): the CRF loss of the
    loss-augmented scores (s(gold) is unchanged by the augmentation)."""
    return log_partition(augment(S, gold, lengths, cost), lengths, projective, multiroot, kernels) - score(S, gold, lengths)


def nll(S, gold, lengths, projective: bool, multiroot: bool, kernels: str = "auto") -> torch.Tensor:
    """log Z - s(gold) per row: the CRF's negative log-likelihood."""
    return log_partition(S, lengths, projective, multiroot, kernels) - score(S, gold, lengths)
