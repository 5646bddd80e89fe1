"""The structured hinge of a linear chain as a layer on top of a network: :class:`ChainSSVMHead`
(emission weights, first / last / transition scores), whose loss and decoder are the chain
package's :func:`~ssvm_torch.chain.chain_hinge` and :func:`~ssvm_torch.chain.chain_decode`."""
from __future__ import annotations

import torch
from torch import nn

from ..chain import chain_decode, chain_hinge
from ..errors import check, check_choice


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
