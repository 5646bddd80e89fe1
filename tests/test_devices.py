"""dtype/device coverage: the pure-torch path in float32 tracks float64; CUDA runs where present."""
import pytest
import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, make_store


def run(sub, dtype, device="cpu"):
    m = ChainModel.for_data(sub)
    d = make_store(m, sub, 0.05, device=device, dtype=dtype)
    hist = Solver(d, SolverConfig(solver="bcfw", sampling="perm", passes=4, gap_check=2, seed=1)).run()
    return d, hist


def test_float32_tracks_float64(ocr_small):
    sub = ocr_small[0].subset(range(25))
    d64, h64 = run(sub, torch.float64)
    d32, h32 = run(sub, torch.float32)
    assert d32.w.dtype == torch.float32 and d32.kernels == "torch"          # served by the torch path
    assert h32[-1]["gap"] == pytest.approx(h64[-1]["gap"], rel=1e-3)
    assert torch.allclose(d32.w.double(), d64.w, atol=1e-4 * float(d64.w.abs().max()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(ocr_small):
    sub = ocr_small[0].subset(range(25))
    dc, hc = run(sub, torch.float64, "cuda")
    d, h = run(sub, torch.float64)
    assert dc.w.is_cuda
    assert hc[-1]["gap"] == pytest.approx(h[-1]["gap"], rel=1e-9)
    assert torch.allclose(dc.w.cpu(), d.w, atol=1e-10)
