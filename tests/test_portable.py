"""ssvm_torch/portable.py: solver states packed for ``torch.load(weights_only=True)``; with ``sparse=True`` (every
checkpoint) the mostly-zero tensors as index / value pairs, restored bit for bit, and a damaged or forged sparse
entry refused by name."""
import numpy as np
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.portable import SPARSE_MIN, pack, unpack


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32])
def test_sparse_packing_restores_every_bit(dtype):
    t = torch.zeros(3, SPARSE_MIN, dtype=dtype)
    special = [1.5, -2.0, 7.0] if not dtype.is_floating_point else [-0.0, float("nan"), float("-inf"), 1e-310, 3.25]
    for i, v in enumerate(special):
        t[i % 3, 17 * i + 1] = v
    packed = pack({"t": t, "nested": [(t, np.arange(3))]}, sparse=True)
    assert isinstance(packed["t"], dict) and "__sparse__" in packed["t"]
    back = unpack(packed)
    for got in (back["t"], back["nested"][0][0]):
        assert got.dtype == dtype and got.shape == t.shape
        assert torch.equal(bits(got), bits(t))               # -0.0, NaN, subnormals: the same bit patterns
    assert np.array_equal(back["nested"][0][1], np.arange(3))


def test_dense_small_or_unsupported_tensors_stay_as_they_are():
    dense = torch.arange(1, 4 * SPARSE_MIN + 1, dtype=torch.float64)
    half = torch.zeros(4 * SPARSE_MIN, dtype=torch.float64)
    half[::3] = 1.0                                  # a third non-zero: 16 bytes each (int32 index + value) > 1/2
    small = torch.zeros(SPARSE_MIN - 1)
    flags = torch.zeros(4 * SPARSE_MIN, dtype=torch.bool)
    packed = pack({"dense": dense, "half": half, "small": small, "flags": flags}, sparse=True)
    assert all(isinstance(packed[k], torch.Tensor) for k in packed)
    assert isinstance(pack({"t": torch.zeros(4 * SPARSE_MIN)})["t"], torch.Tensor)     # sparse off by default
    assert isinstance(pack({"t": torch.zeros(4 * SPARSE_MIN)}, sparse=True)["t"], dict)   # all zero: no entries


def test_a_checkpoint_is_smaller_and_loads_exactly(tmp_path):
    w = torch.zeros(1 << 16, dtype=torch.float64)
    w[torch.randperm(w.numel(), generator=torch.Generator().manual_seed(0))[:500]] = torch.randn(500, dtype=torch.float64)
    state = {"dual": {"w": w, "ell": 0.25}, "gaps": np.linspace(0, 1, 7)}
    path = save_checkpoint(tmp_path / "c.pt", state, {"run": 1})
    assert path.stat().st_size < w.numel() * 8 / 10
    back = load_checkpoint(path, {"run": 1})
    assert torch.equal(back["dual"]["w"], w) and back["dual"]["ell"] == 0.25
    assert np.array_equal(back["gaps"], state["gaps"])


@pytest.mark.parametrize("forged", [
    {"shape": [10], "index": torch.tensor([3, 10], dtype=torch.int32), "values": torch.ones(2)},   # out of range
    {"shape": [10], "index": torch.tensor([-1], dtype=torch.int32), "values": torch.ones(1)},
    {"shape": [10], "index": torch.tensor([1, 2]), "values": torch.ones(3)},                        # lengths differ
    {"shape": [10], "index": torch.tensor([1.0]), "values": torch.ones(1)},                         # float index
    {"shape": "10", "index": torch.tensor([1]), "values": torch.ones(1)},
    {"shape": [10], "values": torch.ones(1)}])
def test_a_forged_sparse_entry_is_refused_by_name(forged):
    with pytest.raises(SSVMInputError, match="sparse tensor"):
        unpack({"w": {"__sparse__": forged}})
