"""The structured hinge of a linear chain as a differentiable torch function.

For a padded batch of chains with scores s(y) = sum_t U[t, y_t] + first[y_0] + last[y_{T-1}]
+ sum_t trans[y_{t+1}, y_t] (the conventions of :func:`ssvm_torch.oracles.viterbi.viterbi`), the
per-example structured hinge of the n-slack SSVM (objective (1) of Osokin et al. 2016) is

    H_i = max_y [ Delta(y, y_i) + s_i(y) ] - s_i(y_i)  >= 0,

Delta the Hamming loss c_i sum_t [y_t != y_i,t] with c_i = 1/T_i (normalized, the default) or a
given per-sequence ``token_loss``. H_i is convex and piecewise linear in the scores; its
subgradient w.r.t. (U, first, last, trans) is the statistics of the loss-augmented labeling y*
minus those of the ground truth. :func:`chain_hinge` finds y* with the batched max oracle on the
tensors' device (the numba kernel on CPU float64, the torch recursion elsewhere: no host round
trip on CUDA) and returns Delta(y*) + s(y*) - s(y_i) built from differentiable gathers, so
autograd yields exactly that subgradient (and any loss on top of it composes).
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import check, check_choice
from ..oracles.viterbi import check_chain
from . import chain_ops


def chain_score(unary, lengths, first, last, trans, labels) -> torch.Tensor:
    """s_i(y) of padded labelings ``labels`` (B, T) (-1 beyond ``lengths``): (B,), differentiable
    w.r.t. the score tensors."""
    B, T, K = unary.shape
    valid = torch.arange(T, device=unary.device)[None, :] < lengths[:, None]
    lab = labels.clamp(min=0)
    s = torch.where(valid, unary.gather(2, lab[..., None])[..., 0], unary.new_zeros(())).sum(1)
    s = s + first[lab[:, 0]] + last[lab.gather(1, (lengths - 1)[:, None])[:, 0]]
    if T > 1:
        s = s + torch.where(valid[:, 1:], trans[lab[:, 1:], lab[:, :-1]], unary.new_zeros(())).sum(1)
    return s


def hamming(labels, gt, lengths, token_loss=None) -> torch.Tensor:
    """Delta(y, y_i) = c_i sum_t [y_t != y_i,t], c_i = 1/T_i unless ``token_loss`` (B,) is given."""
    wrong = ((labels != gt) & (gt >= 0)).sum(1)
    c = 1.0 / lengths.to(torch.float64) if token_loss is None else token_loss.to(torch.float64)
    return wrong * c


def _as_masked(unary, lengths, gt, token_loss):
    """The padded-by-lengths arguments in the masked form of :mod:`ssvm_torch.nn.chain_ops`:
    mask (B, T), gold labels (0 where padded), per-row loss of one wrong position, Hamming costs."""
    B, T, K = unary.shape
    mask = torch.arange(T, device=unary.device)[None, :] < lengths[:, None]
    gold = None if gt is None else gt.clamp(min=0)
    rowc = (1.0 / lengths.to(torch.float64) if token_loss is None else token_loss.to(torch.float64))
    cost = 1.0 - torch.eye(K, dtype=torch.float64, device=unary.device)
    return mask, gold, rowc, cost


def _check_scores(unary, lengths, first, last, trans, gt) -> None:
    check_chain(unary, lengths, first, last, trans, gt)
    for name, t in (("unary", unary), ("first", first), ("last", last), ("trans", trans)):
        chain_ops.refuse_bad_scores(t.detach(), name)


def chain_decode(unary, lengths, first, last, trans, gt=None, token_loss=None, kernels: str = "auto") -> torch.Tensor:
    """Max-scoring labelings (B, T) int64, -1 beyond ``lengths``; loss-augmented if ``gt`` is given.
    No gradient flows (use :func:`chain_hinge` for training). The oracle is
    :func:`ssvm_torch.nn.chain_ops.decode`; ``kernels``: "auto" (compiled on CPU float32/float64,
    torch elsewhere), "numba" or "torch"."""
    _check_scores(unary, lengths, first, last, trans, gt)
    mask, gold, rowc, cost = _as_masked(unary, lengths, gt, token_loss)
    with torch.no_grad():
        labels, _ = chain_ops.decode(unary, mask, first, last, trans, kernels=kernels, gold=gold, rowc=rowc, cost=cost)
    return labels


def chain_hinge(unary, lengths, first, last, trans, gt, token_loss=None, kernels: str = "auto") -> torch.Tensor:
    """Per-example structured hinge H_i (B,) (module docstring), differentiable w.r.t. ``unary``,
    ``first``, ``last`` and ``trans``; its gradient is the subgradient
    onehot-statistics(y*) - onehot-statistics(y_i) of the loss-augmented labeling y*
    (:func:`ssvm_torch.nn.chain_ops.hinge`, the oracle of :class:`~ssvm_torch.nn.LinearChain` too)."""
    _check_scores(unary, lengths, first, last, trans, gt)
    mask, gold, rowc, cost = _as_masked(unary, lengths, gt, token_loss)
    return chain_ops.hinge(unary, mask, first, last, trans, gold, rowc, cost, kernels=kernels)


class ChainSSVMHead(nn.Module):
    """A linear-chain SSVM on top of a network: emission weights W (K, F) and bias (K,) (the
    constant feature of :class:`~ssvm_torch.models.chain.ChainModel`), ``first``, ``last`` and
    ``trans`` [next, prev]. ``forward(features, lengths, gt)`` returns the hinges H_i of the padded
    features (B, T, F); :meth:`decode` predicts; :meth:`to_w` / :meth:`load_w` convert to and from the
    ChainModel weight vector (label-major layout), so the BCFW engine and this head share weights."""

    def __init__(self, n_features: int, n_states: int, loss: str = "normalized"):
        super().__init__()
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_states) >= 1, "n_states", "an int >= 1", n_states)
        self.loss = check_choice(loss, "loss", ("normalized", "hamming"))
        K, F = int(n_states), int(n_features)
        self.emission = nn.Linear(F, K)
        nn.init.zeros_(self.emission.weight)
        nn.init.zeros_(self.emission.bias)
        self.first = nn.Parameter(torch.zeros(K))
        self.last = nn.Parameter(torch.zeros(K))
        self.trans = nn.Parameter(torch.zeros(K, K))

    def unaries(self, features: torch.Tensor) -> torch.Tensor:
        F = self.emission.in_features
        check(torch.is_tensor(features) and features.dim() == 3 and features.shape[2] == F, "features",
              f"a (B, T, {F}) tensor (n_features = {F})", tuple(getattr(features, "shape", ())) or type(features))
        return self.emission(features)

    def token_loss(self, lengths):
        return None if self.loss == "normalized" else torch.ones(lengths.shape, dtype=torch.float64,
                                                                 device=lengths.device)

    def forward(self, features, lengths, gt) -> torch.Tensor:
        return chain_hinge(self.unaries(features), lengths, self.first, self.last, self.trans, gt,
                           self.token_loss(lengths))

    def decode(self, features, lengths) -> torch.Tensor:
        return chain_decode(self.unaries(features), lengths, self.first, self.last, self.trans)

    def sq_norm(self) -> torch.Tensor:
        """||w||^2 of the head's weights (the regularizer lam/2 ||w||^2 of objective (1))."""
        return sum((p * p).sum() for p in self.parameters())

    def to_w(self) -> torch.Tensor:
        """The ChainModel weight vector [W | bias per state, first, last, trans] (label-major)."""
        W = torch.cat([self.emission.weight, self.emission.bias[:, None]], 1)
        return torch.cat([W.reshape(-1), self.first, self.last, self.trans.reshape(-1)]).detach()

    @torch.no_grad()
    def load_w(self, w: torch.Tensor) -> None:
        K, F = self.emission.weight.shape
        d = K * (F + 1) + 2 * K + K * K
        check(w.dim() == 1 and w.shape[0] == d, "w", f"a vector of length {d}", tuple(w.shape))
        W = w[:K * (F + 1)].view(K, F + 1)
        self.emission.weight.copy_(W[:, :F])
        self.emission.bias.copy_(W[:, F])
        e = K * (F + 1)
        self.first.copy_(w[e:e + K])
        self.last.copy_(w[e + K:e + 2 * K])
        self.trans.copy_(w[e + 2 * K:].view(K, K))
