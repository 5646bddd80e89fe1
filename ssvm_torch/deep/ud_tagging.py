"""The UPOS head of the parser that reads words only (``tags: predicted``, :mod:`ssvm_torch.deep.ud_parser`): an
MLP on the shared BiLSTM states gives emissions over the treebank's UPOS tags, and a
:class:`ssvm_torch.nn.LinearChain` turns them into a sequence loss (hinge, softmax-margin or CRF, chosen like the
tree head's) and into tags (Viterbi). The parser and the tagger are trained jointly on one loss (the tree head's +
the relations' + ``tag_weight`` x the tagger's); nothing gold but the words reaches the network at test time.

Tag ids: the UPOS vocabulary (:class:`~ssvm_torch.deep.ud_text.UDVocab`) starts with its specials (padding,
unknown, root); the chain's K states are the vocabulary's tags after them. A gold tag the training set never had
(unknown) is unobserved for the loss (partial annotation, :mod:`ssvm_torch.chain.partial`) and wrong for the
accuracy.

Tag noise (``tag_noise``, training only, issue 72): a parser whose scorers read the predicted tags
(``tag_feed``) learns on training sentences its tagger already fits (99.3% right in eval mode, 97.9% with
dropout, against 95.5% on dev), so the scorers learn to trust tags more than test tags deserve.
:func:`confusable_tags` replaces a share of the fed tags by tags the tagger itself finds likely (the training
counterpart of the jackknifed tags that pipeline parsers train on).
"""
from __future__ import annotations

import torch
from torch import nn

from ..nn import LinearChain
from .ud_text import SPECIALS

TAG_LOSSES = ("hinge", "softmax_margin", "crf")


def tag_targets(upos: torch.Tensor) -> torch.Tensor:
    """The chain's tag index of every UPOS id (B, N): id - len(SPECIALS), negative (unobserved) for the specials."""
    return torch.where(upos >= len(SPECIALS), upos - len(SPECIALS), torch.full_like(upos, -1))


class TagHead(nn.Module):
    """Emissions (an MLP and a linear map of the BiLSTM states) and a LinearChain over ``n_tags`` UPOS tags."""

    def __init__(self, n_in: int, n_tags: int, tag_dim: int, dropout: float, loss: str):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(n_in, tag_dim), nn.LeakyReLU(0.1), nn.Dropout(dropout))
        self.out = nn.Linear(tag_dim, n_tags)
        self.chain = LinearChain(n_tags, batch_first=True, loss=loss)

    def emissions(self, states: torch.Tensor) -> torch.Tensor:
        return self.out(self.mlp(states))

    def loss(self, states: torch.Tensor, upos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B,) the chain's loss of the gold tags at the words (``mask``: the words, not the root)."""
        return self.chain(self.emissions(states), tag_targets(upos), mask, reduction="none")

    def decode(self, states: torch.Tensor, mask: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """(B, N) UPOS ids (vocabulary ids, specials included) of the best tag sequence, -1 off the words;
        ``noise`` > 0 (training only): that share of them replaced by :func:`confusable_tags`."""
        emissions = self.emissions(states)
        tags = self.chain.decode(emissions, mask)
        return confusable_tags(torch.where(tags >= 0, tags + len(SPECIALS), tags), emissions, mask, noise)


def confusable_tags(tags: torch.Tensor, emissions: torch.Tensor, mask: torch.Tensor, rate: float) -> torch.Tensor:
    """``tags`` (B, N, vocabulary UPOS ids, as :meth:`TagHead.decode` returns) with each word's tag (``mask``)
    replaced, with probability ``rate``, by a tag drawn from the tagger's own per-word distribution
    softmax(``emissions`` (B, N, K)) renormalized without the tag it replaces (Gumbel-max): errors of the kinds
    the tagger makes (NOUN for PROPN), not uniform ones. Draws from torch's global generator (seeded per step by
    the training loop, like dropout); ``rate`` 0 draws nothing and returns ``tags``."""
    if rate == 0:
        return tags
    chain = (tags - len(SPECIALS)).clamp(min=0)
    others = emissions.float().scatter(-1, chain[..., None], float("-inf"))
    gumbel = -torch.log(-torch.log(torch.rand_like(others).clamp_(min=1e-20)))
    drawn = (others + gumbel).argmax(-1) + len(SPECIALS)
    flip = (torch.rand(tags.shape, device=tags.device) < rate) & mask
    return torch.where(flip, drawn, tags)


def tag_accuracy(gold: list, pred: list) -> float:
    """Tag accuracy in % over every word: CoNLL 2018's UPOS (or XPOS) score with gold tokenization."""
    words = sum(len(g) for g in gold)
    right = sum(a == b for g, p in zip(gold, pred) for a, b in zip(g, p))
    return 100.0 * right / max(1, words)
