"""Restarts from the best dev weights at a lower learning rate when dev stops improving (issue 72).

A run with ``lr_restarts`` = R > 0 does not stop the first time ``patience`` epochs pass without a better dev
score. The next epoch starts from the best dev epoch's weights (the selected ones: with weight averaging the
average, which then becomes the trained weights too), with a fresh Adam state (its moments belong to the
steps past the best epoch) and the learning rate ``lr`` x ``restart_factor`` ^ k at the k-th restart; patience
counts again from there. The run stops when patience runs out after the R-th restart (or at the trainer's cap).
This is torch's ``ReduceLROnPlateau`` with the best weights restored at each reduction, a schedule that only
dev decides.

Each epoch's history record holds its learning rate (``"lr"``) and, when it began with a restart,
``"restart": true``: the restarts done are read back from the history, so a run resumed from any epoch's
checkpoint, a stopped run's included, takes the decisions the uninterrupted run takes.
"""
from __future__ import annotations

import torch

from ..errors import check


def check_restarts(lr_restarts, restart_factor, lr_decay) -> None:
    """Refuse by name a restart count that is not an int >= 0, a factor outside (0, 1), or restarts with a decaying
    rate (one schedule at a time)."""
    check(isinstance(lr_restarts, int) and not isinstance(lr_restarts, bool) and lr_restarts >= 0, "lr_restarts",
          "an int >= 0 (restarts from the best dev weights at a lower rate; 0: stop when patience runs out)",
          lr_restarts)
    check(isinstance(restart_factor, (int, float)) and 0 < restart_factor < 1, "restart_factor",
          "a number in (0, 1) (the learning rate's factor at each restart)", restart_factor)
    check(lr_restarts == 0 or lr_decay == 1, "lr_restarts", "0 with lr_decay < 1 (one schedule at a time)",
          lr_restarts)


def restarts_done(history: list) -> list:
    """The epochs that began with a restart."""
    return [r["epoch"] for r in history if r.get("restart")]


def patience_spent(epoch: int, best_epoch: int, history: list, patience: int) -> bool:
    """Whether epoch ``epoch`` ends ``patience`` epochs after the later of the best dev epoch and the epoch before
    the last restart (a restart's first epoch counts as the first of its patience window)."""
    anchor = max([best_epoch] + [e - 1 for e in restarts_done(history)])
    return epoch - anchor >= patience


def restart_due(epoch: int, best_epoch: int, history: list, patience: int, lr_restarts: int) -> bool:
    """Whether epoch ``epoch`` begins with a restart: the previous epoch spent the patience and restarts remain."""
    return (epoch > 0 and len(restarts_done(history)) < lr_restarts
            and patience_spent(epoch - 1, best_epoch, history, patience))


def restart_from(best_state: dict, networks, optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Load ``best_state`` into every network of ``networks`` (the trained one and its average, same keys), clear
    the optimizer's state and set its learning rate to ``lr``."""
    for net in networks:
        net.load_state_dict(best_state)
    optimizer.state.clear()
    for group in optimizer.param_groups:
        group["lr"] = lr
