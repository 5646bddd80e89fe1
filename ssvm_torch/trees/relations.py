"""Relations that factor over arcs given the tree (the labeled dependency layer, :mod:`ssvm_torch.nn.dependency`):
label scores ``lab`` (B, N, N, L), ``lab[b, m, h, r]`` the score of relation r on the arc h -> m, -inf where r is
forbidden on that arc (an arc whose every relation is -inf is forbidden itself: logsumexp / max over its relations
is -inf). What the layer's calls share: each arc's relation distribution, the best relation at chosen heads, and
the refusal of a gold relation the scores forbid.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError
from .checks import word_mask


def label_log_probs(lab: torch.Tensor):
    """(logsumexp over the last dimension, log softmax, softmax) of label scores (..., L) (the relations of arcs,
    the labels of spans): a part whose labels are all -inf gets lse -inf, log-probabilities -inf and probabilities
    0 rather than NaN."""
    lse = torch.logsumexp(lab, -1)
    logp = lab - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)[..., None]
    return lse, logp, logp.exp()


def relation_probs(lab: torch.Tensor) -> torch.Tensor:
    """P(relation | arc) (B, N, N, L): the softmax over relations, 0 on an arc whose every relation is -inf (a
    forbidden arc, which no tree takes)."""
    return label_log_probs(lab)[2]


def relations_at(lab: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """Each word's best relation at its head, heads (B, N) or (B, k, N) -> the same shape, -1 off the words."""
    best = lab.argmax(3)                                            # (B, N(m), N(h))
    flat = heads.reshape(heads.shape[0], -1, heads.shape[-1])       # (B, k, N)
    rel = best[:, None].expand(-1, flat.shape[1], -1, -1).gather(3, flat.clamp(min=0)[..., None])[..., 0]
    return torch.where(flat >= 0, rel, torch.full_like(rel, -1)).reshape(heads.shape)


def refuse_forbidden_gold(lab: torch.Tensor, gold: torch.Tensor, rel: torch.Tensor, lengths: torch.Tensor) -> None:
    """Refuse by name a gold (head, relation) pair, both observed (>= 0), whose relation score is -inf: every loss
    of that row would be +inf."""
    B, N, _, L = lab.shape
    seen = word_mask(lengths, N) & (gold >= 0) & (rel >= 0)
    at_head = lab.gather(2, gold.clamp(min=0)[:, :, None, None].expand(B, N, 1, L))[:, :, 0]
    bad = seen & torch.isneginf(at_head.gather(2, rel.clamp(min=0)[..., None])[..., 0])
    if bool(bad.any()):
        b, m = (int(v) for v in bad.nonzero()[0])
        raise SSVMInputError(f"labels: row {b}, word {m}: the gold relation {int(rel[b, m])} on the gold arc "
                             f"{int(gold[b, m])} -> {m} has a -inf score in label_scores (a forbidden relation)")
