"""Restoring a store's blocks from a checkpoint's state, checked first.

A checkpoint is a file a user hands in: its block state may come from another run (another lam, another
dataset, another structure) or be damaged. ``Tensor.copy_`` broadcasts, so a (d,) tensor copied into an
(n, d) block matrix would fill every row without a word; and a refusal found after some tensors were
copied would leave the store half overwritten. :func:`copy_checked` checks every field first, naming
it, and copies only when all pass.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check


def check_like(field: str, src, like: torch.Tensor, what: str = "") -> None:
    """Refuse ``src`` unless it is a tensor of ``like``'s shape, naming ``field`` (``what`` says what it holds)."""
    check(isinstance(src, torch.Tensor) and tuple(src.shape) == tuple(like.shape), field,
          f"{what + ', ' if what else ''}a tensor of shape {tuple(like.shape)}",
          tuple(src.shape) if isinstance(src, torch.Tensor) else type(src).__name__)


def copy_checked(store, state: dict, keys: tuple[str, ...]) -> None:
    """Copy ``state[key]`` into the store's tensor attribute ``key`` for every key, after checking that
    each is a tensor of that attribute's shape, that ``state["ell"]`` holds one number and that
    ``state["lam"]`` is the store's lam (its blocks are scaled by 1 / (lam n), Alg. 3 of Lacoste-Julien et
    al. 2013, so another lam's blocks are another dual point). Nothing is copied unless every check
    passes. The caller sets ell itself (stores keep it as a float or a one-element tensor)."""
    check(isinstance(state, dict), "state", "a dict of the store's tensors", type(state).__name__)
    for key in (*keys, "ell", "lam"):
        if key not in state:
            raise SSVMInputError(f"state[{key!r}]: missing (a checkpoint of another structure? this store is "
                                 f"{type(store).__name__}, which keeps {', '.join(keys)})")
    for key in keys:
        check_like(f"state[{key!r}]", state[key], getattr(store, key))
    ell = state["ell"]
    check(isinstance(ell, (int, float)) or (isinstance(ell, torch.Tensor) and ell.numel() == 1), "state['ell']",
          "one number", ell)
    if float(state["lam"]) != store.lam:
        raise SSVMInputError(f"state['lam']: expected {store.lam} (this store's lam), got {state['lam']}")
    for key in keys:
        getattr(store, key).copy_(state[key])


def state_ell(state: dict) -> float:
    """The checkpoint's ell (saved as a float or a one-element tensor) as a float."""
    ell = state["ell"]
    return float(ell.reshape(-1)[0]) if isinstance(ell, torch.Tensor) else float(ell)


class TensorEll:
    """The point's ``ell`` kept as a one-element tensor ``_ell`` beside ``w``: the ``ell`` property and ``set_point``
    of the compact stores (chains, semi-Markov, constituency and second-order trees)."""

    @property
    def ell(self) -> float:
        return float(self._ell[0])

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.w.copy_(w)
        self._ell[0] = ell


class TensorBlockState(TensorEll):
    """``state_dict`` / ``load_state_dict`` of a store whose block state is its tensors ``STATE_TENSORS``,
    its ell (a one-element tensor ``_ell``) and lam: the chain and tree stores (a subclass with more block
    statistics extends the tuple). Loading goes through :func:`copy_checked`."""

    STATE_TENSORS: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        return {**{key: getattr(self, key).clone() for key in self.STATE_TENSORS}, "ell": self._ell.clone(),
                "lam": self.lam}

    def load_state_dict(self, state: dict) -> None:
        copy_checked(self, state, self.STATE_TENSORS)
        self._ell.fill_(state_ell(state))


__all__ = ["TensorBlockState", "TensorEll", "check_like", "copy_checked", "state_ell"]
