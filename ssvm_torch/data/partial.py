"""The positions a partial-annotation experiment hides: ``round(fraction * n)`` of ``n`` training positions,
chosen uniformly by a seed (torch's CPU generator, so the same positions on every machine and for every
loss trained on them). Used by the latent SSVM's ``--hide-labels`` (:func:`ssvm_torch.latent.hide_labels`)
and by the neural chunker's and parser's ``hide_fraction`` (issue 73's runs)."""
from __future__ import annotations

import torch

from ..errors import check


def check_hiding(fraction: float, seed: int, fields: tuple = ("hide_fraction", "hide_seed")) -> None:
    """Refuse, naming ``fields``, a fraction outside [0, 1) or a seed that is not an int >= 0."""
    check(isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0.0 <= fraction < 1.0,
          fields[0], "a fraction in [0, 1)", fraction)
    check(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, fields[1], "an int >= 0", seed)


def hidden_positions(n: int, fraction: float, seed: int,
                     fields: tuple = ("hide_fraction", "hide_seed"), stream: int = 0) -> torch.Tensor:
    """(n,) bool, True at the ``round(fraction * n)`` hidden positions: the first of a permutation of
    0..n-1 drawn by ``seed`` (the settings checked by :func:`check_hiding`, errors naming ``fields``). ``stream``
    k > 0 takes the k-th permutation drawn after it instead: a second, independent set from the same seed (the
    bracket labels hidden beside the brackets, :func:`ssvm_torch.latent.hide_brackets`)."""
    check_hiding(fraction, seed, fields)
    g = torch.Generator().manual_seed(seed)
    for _ in range(stream):
        torch.randperm(n, generator=g)
    hidden = torch.zeros(n, dtype=torch.bool)
    hidden[torch.randperm(n, generator=g)[:int(round(fraction * n))]] = True
    return hidden


__all__ = ["check_hiding", "hidden_positions"]
