"""Autograd inside a call whatever the caller's grad mode. The layers compute marginals (and, on their torch paths,
entropies, KL divergences and MBR decodes) as gradients of log Z, so autograd must record inside them even when the
caller's does not: ``torch.enable_grad()`` does that under ``torch.no_grad()``, but under
``torch.inference_mode()`` (Lightning's validation, test and predict loops run in it by default) a tensor made
there (an "inference tensor") can neither require grad nor be saved for a backward, and those calls raised.
:func:`records_autograd` runs such a function outside inference mode on normal copies of its tensor arguments."""
from __future__ import annotations

import functools

import torch


def _normal(x):
    """``x`` with every inference tensor in it (tuples and lists too) replaced by a normal copy."""
    if torch.is_tensor(x):
        return x.clone() if x.is_inference() else x
    if isinstance(x, tuple) and hasattr(x, "_fields"):                       # a named tuple
        return type(x)(*(_normal(v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(_normal(v) for v in x)
    return x


def records_autograd(fn):
    """``fn``, which records autograd inside (``torch.enable_grad()`` and ``torch.autograd.grad``), callable under
    ``torch.inference_mode()``: there it runs outside inference mode under ``torch.no_grad()`` (its own
    ``enable_grad`` records as under ``no_grad``) on normal copies of its inference-tensor arguments; its results are
    then normal tensors without a graph. Outside inference mode it is ``fn`` itself, at no cost."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode(False), torch.no_grad():
            return fn(*_normal(args), **{k: _normal(v) for k, v in kwargs.items()})
    return run
