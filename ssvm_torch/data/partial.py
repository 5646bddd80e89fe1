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


def hidden_parts(count: int, fraction: float, seed: int, offsets: torch.Tensor | None = None,
                 fields: tuple = ("hide_labels", "hide_seed"), stream: int = 0) -> torch.Tensor:
    """(count,) bool on the CPU, True at the parts hidden: ``round(fraction * count)`` of them drawn by ``seed``
    (:func:`hidden_positions`, its ``stream``, errors naming ``fields``), or with ``offsets`` (n+1,), the parts of
    sentence i being offsets[i]:offsets[i+1], every part of ``round(fraction * n)`` whole sentences (the same draw
    over n)."""
    if offsets is None:
        return hidden_positions(count, fraction, int(seed), fields, stream)
    offsets = offsets.cpu()
    check(int(offsets[-1]) == count, "offsets", f"sentence offsets ending at the {count} parts", int(offsets[-1]))
    gone = hidden_positions(offsets.numel() - 1, fraction, int(seed), fields, stream)
    return torch.repeat_interleave(gone, offsets.diff())


def kept_parts(count: int, fraction: float, seed: int, observed: torch.Tensor | None,
               offsets: torch.Tensor | None = None) -> torch.Tensor:
    """(count,) bool on the CPU: the parts left observed when :func:`hidden_parts` are hidden and those already
    unobserved stay so."""
    kept = ~hidden_parts(count, fraction, seed, offsets)
    return kept if observed is None else kept & observed.cpu()


__all__ = ["check_hiding", "hidden_parts", "hidden_positions", "kept_parts"]
