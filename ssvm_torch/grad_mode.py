"""Autograd inside a call whatever the caller's grad mode and autocast. The layers compute marginals (and, on their
torch paths, entropies, KL divergences and MBR decodes) as gradients of log Z, so autograd must record inside them
even when the caller's does not: ``torch.enable_grad()`` does that under ``torch.no_grad()``, but under
``torch.inference_mode()`` (Lightning's validation, test and predict loops run in it by default) a tensor made
there (an "inference tensor") can neither require grad nor be saved for a backward, and those calls raised; and a
backward run inside ``torch.autocast`` (mixed-precision training) runs its matrix products in half precision (the
chain's marginals were off by 1e-3 under CPU bfloat16 autocast). :func:`records_autograd` runs such a function
outside inference mode on normal copies of its tensor arguments, and with autocast off: the structured recursions
compute in the dtype of their inputs (float32 for half precision, as the layers do)."""
from __future__ import annotations

import contextlib
import functools

import torch

AMP_DEVICES = ("cpu", "cuda")


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
    ``torch.inference_mode()`` and ``torch.autocast``: under inference mode it runs outside it, under
    ``torch.no_grad()`` (its own ``enable_grad`` records as under ``no_grad``), on normal copies of its
    inference-tensor arguments, its results normal tensors without a graph; under autocast it runs with autocast off.
    Otherwise it is ``fn`` itself."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if torch.compiler.is_compiling():       # traced (torch.compile, torch.export): the graph's own modes
            return fn(*args, **kwargs)
        inference = torch.is_inference_mode_enabled()
        amp = [device for device in AMP_DEVICES if torch.is_autocast_enabled(device)]
        if not inference and not amp:
            return fn(*args, **kwargs)
        with contextlib.ExitStack() as stack:
            for device in amp:
                stack.enter_context(torch.autocast(device, enabled=False))
            if inference:
                stack.enter_context(torch.inference_mode(False))
                stack.enter_context(torch.no_grad())
                args, kwargs = _normal(args), {k: _normal(v) for k, v in kwargs.items()}
            return fn(*args, **kwargs)
    return run
