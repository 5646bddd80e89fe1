"""dtype/device coverage, parametrized over ``cpu`` and ``cuda`` (skipped without a GPU): the
pure-torch path on a device tracks the float64 CPU numba run; float32 tracks float64; mini-batch
BCFW runs there too. The CPU guard of the device path is tests/test_device_guard.py."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, make_store
from ssvm_torch.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="needs a CUDA device"))]


def run(sub, dtype, device="cpu", kernels="auto", **cfg):
    m = ChainModel.for_data(sub)
    d = make_store(m, sub, 0.05, device=device, dtype=dtype, kernels=kernels)
    opts = dict(solver="bcfw", sampling="perm", passes=4, gap_check=2, seed=1)
    hist = Solver(d, SolverConfig(**{**opts, **cfg})).run()
    return d, hist


def test_float32_tracks_float64(ocr_small):
    sub = ocr_small[0].subset(range(25))
    d64, h64 = run(sub, torch.float64)
    d32, h32 = run(sub, torch.float32)
    assert d32.w.dtype == torch.float32 and d32.kernels == "torch"          # served by the torch path
    assert h32[-1]["gap"] == pytest.approx(h64[-1]["gap"], rel=1e-3)
    assert torch.allclose(d32.w.double(), d64.w, atol=1e-4 * float(d64.w.abs().max()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cfg", [{}, {"batch_size": 8}, {"step": "pairwise", "cache": True}],
                         ids=["bcfw", "minibatch", "pairwise-cache"])
def test_torch_path_on_device_matches_numba_on_cpu(ocr_small, device, cfg):
    sub = ocr_small[0].subset(range(25))
    dc, hc = run(sub, torch.float64, device, kernels="torch", **cfg)
    d, h = run(sub, torch.float64, **cfg)
    assert dc.w.device.type == device and dc.kernels == "torch" and d.kernels == "numba"
    assert hc[-1]["gap"] == pytest.approx(h[-1]["gap"], rel=1e-9)
    assert torch.allclose(dc.w.cpu(), d.w, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["scene", "segmentation-synth", "pose-synth", "hansards"])
def test_dense_structures_run_on_device(device, name):
    task = load_task(name, train_size=6 if name != "scene" else None)
    sub = task.train.subset(range(6))
    ref = make_store(task.model, sub, 0.1, nonnegative=task.nonnegative)
    dev = make_store(task.model, sub.to(device), 0.1, device=device, kernels="torch", nonnegative=task.nonnegative)
    cfg = SolverConfig(solver="bcfw", sampling="gap", batch_size=2, passes=3, gap_check=1, seed=0)
    h_ref, h_dev = Solver(ref, cfg).run(), Solver(dev, cfg).run()
    assert dev.w.device.type == device
    assert h_dev[-1]["gap"] == pytest.approx(h_ref[-1]["gap"], rel=1e-7, abs=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("structure", ["semimarkov", "dependency", "constituency"])
@pytest.mark.parametrize("cfg", [{}, {"batch_size": 3}, {"step": "pairwise", "cache": True}],
                         ids=["bcfw", "minibatch", "pairwise-cache"])
def test_structure_stores_torch_path_on_device_matches_numba_on_cpu(device, structure, cfg):
    """The semi-Markov, dependency-tree and constituency stores' torch path (what a GPU runs) on ``device`` takes the compiled
    CPU path's steps: the same last gap and w."""
    import numpy as np
    from conftest import random_dependency_data, random_segment_data, random_span_data
    from ssvm_torch.models import ConstituencyModel, DependencyModel, SemiMarkovModel
    rng = np.random.default_rng(4)
    if structure == "semimarkov":
        data = random_segment_data(rng, 8, 3, 3, 4, tmin=1, tmax=6, outside=0, sparse=True)
        model = SemiMarkovModel.for_data(data, max_length=3, outside=0)
    elif structure == "dependency":
        data = random_dependency_data(rng, 8, 12, lmin=2, lmax=5)
        model = DependencyModel.for_data(data, projective=True)
    else:
        data = random_span_data(rng, 8, 10, 3, lmin=1, lmax=7)
        model = ConstituencyModel.for_data(data, fill=0)
    config = SolverConfig(**{"solver": "bcfw", "sampling": "gap", "passes": 4, "gap_check": 2, "seed": 2, **cfg})
    ref = make_store(model, data, 0.1)
    dev = make_store(model, data, 0.1, device=device, kernels="torch")
    h_ref, h_dev = Solver(ref, config).run(), Solver(dev, config).run()
    assert ref.kernels == "numba" and dev.kernels == "torch" and dev.w.device.type == device
    assert h_dev[-1]["gap"] == pytest.approx(h_ref[-1]["gap"], rel=1e-9, abs=1e-12) and h_ref[-1]["gap"] > 0
    assert torch.allclose(dev.w.cpu(), ref.w, atol=1e-10)


def test_bench_gpu_skips_cleanly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == \
        f"bench_gpu: skipped, no CUDA device (torch {torch.__version__})"
