"""torch's intra-op thread count survives numba's thread pool (ssvm_torch/devices.py, start_numba_threads): under
numba's OpenMP layer the pool's lazy start, after a serial kernel had run, reset the count torch reads, so a run
asked for one thread (ssvm-train's default) decoded its later batches and summed its updates on two."""
import os
import subprocess
import sys

import pytest

SCRIPT = """
import torch
torch.set_num_threads(1)
import numpy as np
import ssvm_torch
from ssvm_torch.segments import numba_semimarkov as nb
S, f, t, L = np.random.randn(1, 5, 2, 3), np.zeros(3), np.zeros((3, 3)), np.array([5])
for name in ("_best_rows_serial", "_best_rows"):      # a serial kernel, then the first parallel one
    getattr(nb, name)(S, f, f, t, L, np.empty((1, 5), dtype=np.int64), np.empty(1))
    print(torch.get_num_threads())
from ssvm_torch.tasks import load_task
from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
task = load_task("conll2000-segments", train_size=20)
train_perceptron(task.model, task.train, PerceptronConfig(epochs=1))
print(torch.get_num_threads())
"""


@pytest.mark.long
@pytest.mark.parametrize("layer", ["default", "omp", "workqueue"])
def test_a_one_thread_process_keeps_one_thread_after_numbas_pool_starts(layer):
    import numba
    env = {**os.environ, **({} if layer == "default" else {"NUMBA_THREADING_LAYER": layer})}
    if layer == "omp":
        try:
            from numba.np.ufunc import omppool  # noqa: F401
        except ImportError:
            pytest.skip("numba has no OpenMP threading layer here")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1"] * 3, (numba.config.NUMBA_NUM_THREADS, out.stdout)


CONCURRENT = """
import threading
import torch
from ssvm_torch.nn import ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment
g = torch.Generator().manual_seed(0)
S, E = torch.randn(16, 13, 13, generator=g), torch.randn(16, 20, 5, generator=g)
A = torch.randn(16, 12, 12, 3, generator=g)
chain = LinearChain(5, batch_first=True)
calls = [lambda: DependencyTree().marginals(S), lambda: ConstituencyTree().marginals(S),
         lambda: MonotonicAlignment().marginals(A), lambda: chain.marginals(E), lambda: DependencyTree().decode(S),
         lambda: chain.decode(E)]
expected = [f() for f in calls]
wrong = []
def work():
    for _ in range(15):
        for f, e in zip(calls, expected):
            if not torch.equal(f(), e):
                wrong.append(1)
threads = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("wrong", len(wrong))
"""


@pytest.mark.long
@pytest.mark.parametrize("layer", ["default", "workqueue"])
def test_layers_called_from_several_threads_at_once(layer):
    """Four Python threads (a thread-pool server) calling the layers' parallel kernels at once: numba's workqueue
    threading layer (its choice where neither TBB nor OpenMP loads) terminated the process ("Concurrent access has
    been detected"); its launches now take turns (ssvm_torch/devices.py, launched), with the same results."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", **({} if layer == "default" else {"NUMBA_THREADING_LAYER": layer})}
    out = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["wrong", "0"], out.stdout
