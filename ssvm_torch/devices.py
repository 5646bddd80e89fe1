"""Where tensors live, and the one sanctioned way to leave the device.

Every store keeps its state on one ``device`` (CPU or CUDA); the solver's steps and gap passes run
torch ops on it. A few oracles are CPU libraries (PyMaxflow's graph cut, scipy's assignment, the
numba kernels on CPU float64): they read their inputs through :func:`to_host` and hand results back
through :func:`from_host`, once per batch. Nothing else converts a tensor to numpy.

:func:`host_guard` makes that checkable on a machine without a GPU, which is how CI runs: inside it

* ``Tensor.numpy()``, ``np.asarray(tensor)`` (``Tensor.__array__``) and ``torch.from_numpy`` raise
  :class:`HostCopyError` -- on CUDA they fail or silently copy to the host;
* a tensor factory (``torch.arange``, ``torch.zeros``, ``torch.tensor``, ``torch.as_tensor`` of
  non-tensor data, ...) called without ``device=`` raises -- on CUDA it makes a CPU tensor that
  then meets device tensors ("indices should be either on cpu or on the same device");
* :func:`to_host` / :func:`from_host` still work and are counted (``guard.host_copies``), so a test
  can also check that a CPU-library oracle copies once per batch, not once per element.

The guard is a torch function mode plus two patched methods; it is for tests and for authors of new
structures (docs/structures.md), not for production runs.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time

import numba
import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .errors import SSVMInputError, check, check_choice


def parse_device(value, field: str = "device") -> torch.device:
    """``value`` as a CPU or CUDA torch device, refused in one line naming ``field`` when it is not a
    device, another kind, or CUDA on a machine without it (before any work)."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise SSVMInputError(f"{field}: expected a torch device such as 'cpu' or 'cuda:0', got {value!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise SSVMInputError(f"{field}: expected 'cpu' or 'cuda[:N]', got {value!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SSVMInputError(f"{field}: {value!r} requested but no CUDA device is available")
    return device

__all__ = ["KERNELS", "HostCopyError", "from_host", "host_guard", "resolve_device", "store_kernels", "to_host"]

#: ``numba``: compiled CPU kernels (CPU float64 only); ``torch``: the pure-torch path (any device);
#: ``auto``: numba where it applies, torch elsewhere.
KERNELS = ("auto", "numba", "torch")

_NUMPY = torch.Tensor.numpy
_ARRAY = torch.Tensor.__array__
_FROM_NUMPY = torch.from_numpy
_state = threading.local()

# Factories whose result lands on the default device unless told otherwise.
_FACTORIES = {torch.arange, torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn,
              torch.randint, torch.randperm, torch.linspace, torch.eye, torch.tensor, torch.as_tensor}


class HostCopyError(RuntimeError):
    """A tensor left its device (or a new one was made on the default device) inside :func:`host_guard`."""


def resolve_device(device) -> torch.device:
    """``device`` as a torch.device (``None`` is the CPU)."""
    return torch.device(device) if device is not None else torch.device("cpu")


def store_kernels(kernels: str, device: torch.device, dtype: torch.dtype) -> str:
    """The kernels a store's state on ``device`` in ``dtype`` runs (:data:`KERNELS`): ``auto`` is numba
    for CPU float64 state and torch otherwise; ``numba`` elsewhere is refused."""
    check_choice(kernels, "kernels", KERNELS)
    numba_ok = device.type == "cpu" and dtype == torch.float64
    if kernels == "numba" and not numba_ok:
        raise SSVMInputError(f"kernels: 'numba' needs CPU float64 state, got device {device}, dtype {dtype}")
    if kernels == "auto":
        return "numba" if numba_ok else "torch"
    return kernels


def start_numba_threads() -> None:
    """Start numba's thread pool now, torch's intra-op thread count kept (called when the package is imported).
    Under numba's OpenMP threading layer (its choice where TBB is not installed) the pool otherwise starts at the
    first parallel kernel, and when a serial kernel ran in the process before it, that start resets the OpenMP
    thread count torch reads: ``torch.set_num_threads(1)`` (``ssvm-train``'s ``--threads 1``) became 2 at the
    semi-Markov model's first batch, and its perceptron epoch ran its index_add_ on two threads
    (tests/test_threads.py)."""
    threads = torch.get_num_threads()
    try:
        from numba.np.ufunc.parallel import _launch_threads
    except ImportError:                  # a numba without it starts its pool as before
        return
    _launch_threads()
    torch.set_num_threads(threads)


_LAUNCH = threading.Lock()


def _launches_take_turns() -> bool:
    """Whether numba's threading layer is the workqueue one (or not chosen yet: no parallel kernel has run)."""
    try:
        return numba.threading_layer() == "workqueue"
    except ValueError:
        return True


def launched(kernel):
    """A numba ``parallel=True`` kernel made safe to call from several Python threads at once (a thread-pool
    server decoding requests): numba's workqueue threading layer, its choice where neither TBB nor OpenMP loads,
    is not thread-safe and terminates the process when two threads launch parallel kernels together; under it
    the launches take turns behind one lock, under TBB and OpenMP they run as they are (tests/test_threads.py).
    ``.kernel`` is the numba dispatcher itself."""
    @functools.wraps(kernel.py_func)
    def launch(*args, **kwargs):
        if _launches_take_turns():
            with _LAUNCH:
                return kernel(*args, **kwargs)
        return kernel(*args, **kwargs)
    launch.kernel = kernel
    return launch


def use_threads(threads: int, field: str = "threads") -> None:
    """Give the calling thread ``threads`` CPU threads for torch's intra-op pool and for numba's parallel
    kernels alike (the chain layer's rows run over ``numba.get_num_threads()``, docs/nn.md): a neural module's
    ``threads`` is the cores it may use, so two runs with one thread each share 2 cores without
    oversubscribing them (numba's own default is every core). Anything but an int >= 1 is refused naming
    ``field``."""
    check(isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1, field, "an int >= 1", threads)
    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def device_clock(device: torch.device) -> float:
    """Seconds on the host clock after every kernel queued on ``device`` has finished.

    CUDA kernels run asynchronously: a host timer read right after a launch measures the launch,
    not the work, so the solvers read this at their timing boundaries (the records' ``time_s``);
    on the CPU it is ``time.perf_counter()``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _sanctioned():
    return getattr(_state, "sanctioned", 0) > 0


@contextlib.contextmanager
def _sanction():
    _state.sanctioned = getattr(_state, "sanctioned", 0) + 1
    guard = getattr(_state, "guard", None)
    if guard is not None:
        guard.host_copies += 1
    try:
        yield
    finally:
        _state.sanctioned -= 1


def to_host(t: torch.Tensor) -> np.ndarray:
    """The tensor as a numpy array on the host (a copy from a GPU, a zero-copy view of a CPU tensor).
    The one sanctioned device -> host conversion: CPU-library oracles call it once per batch."""
    with _sanction():
        return _NUMPY(t.detach().cpu())


def to_host_all(*tensors: torch.Tensor) -> list[np.ndarray]:
    """:func:`to_host` of each tensor (contiguous first) under one sanction: the per-call cost of a
    kernel that takes many small arrays stays a few microseconds."""
    with _sanction():
        return [_NUMPY(t.detach().contiguous().cpu()) for t in tensors]


def from_host(a, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A numpy array (a CPU library's result) as a tensor on ``device``: the way back from :func:`to_host`."""
    with _sanction():
        t = _FROM_NUMPY(np.ascontiguousarray(a))
        return t.to(device=device, dtype=dtype) if dtype is not None else t.to(device)


def _refuse_numpy(self, *args, **kwargs):
    if _sanctioned():
        return _NUMPY(self, *args, **kwargs)
    raise HostCopyError("Tensor.numpy() inside host_guard: a device tensor would leave its device here "
                        "(use ssvm_torch.devices.to_host where a CPU library needs the values)")


def _refuse_array(self, *args, **kwargs):
    if _sanctioned():
        return _ARRAY(self, *args, **kwargs)
    raise HostCopyError("np.asarray(tensor) inside host_guard: a device tensor would leave its device here "
                        "(keep it a tensor, or use ssvm_torch.devices.to_host)")


def _refuse_from_numpy(a):
    if _sanctioned():
        return _FROM_NUMPY(a)
    raise HostCopyError("torch.from_numpy inside host_guard makes a CPU tensor whatever the store's device "
                        "(use ssvm_torch.devices.from_host(array, device))")


class _FactoryMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES and "device" not in kwargs and not _sanctioned():
            data = args[0] if args else kwargs.get("data")
            if not (func in (torch.as_tensor, torch.tensor) and isinstance(data, torch.Tensor)):
                name = getattr(func, "__name__", str(func))
                raise HostCopyError(f"torch.{name}(...) without device= inside host_guard: on CUDA it makes a "
                                    "CPU tensor that then meets the store's device tensors (pass device=)")
        return func(*args, **kwargs)


class _Guard:
    host_copies = 0


@contextlib.contextmanager
def host_guard():
    """Forbid implicit host copies and default-device factories (module docstring); yields an
    object whose ``host_copies`` counts the sanctioned :func:`to_host` / :func:`from_host` calls."""
    guard = _Guard()
    previous = getattr(_state, "guard", None)
    _state.guard = guard
    torch.Tensor.numpy, torch.Tensor.__array__, torch.from_numpy = _refuse_numpy, _refuse_array, _refuse_from_numpy
    try:
        with _FactoryMode():
            yield guard
    finally:
        torch.Tensor.numpy, torch.Tensor.__array__, torch.from_numpy = _NUMPY, _ARRAY, _FROM_NUMPY
        _state.guard = previous
