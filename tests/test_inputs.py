"""Bad input fails early with a clear message naming the field."""
import numpy as np
import pytest
import torch

from conftest import explicit
from ssvm_torch import (ChainData, ChainModel, ExplicitData, SSVMInputError, Solver, SolverConfig, load_dataset,
                        make_store)
from ssvm_torch.data import load_ocr


def good():
    return [np.zeros((3, 4)), np.ones((2, 4))], [np.array([0, 1, 2]), np.array([1, 1])]


def test_ocr_splits_match_the_papers():
    tr, te = load_ocr("small")
    assert (tr.n, te.n) == (626, 6251)
    assert (tr.X.shape[0], te.X.shape[0]) == (4617, 47535)
    tr2, te2 = load_ocr("large")
    assert (tr2.n, te2.n) == (6251, 626)
    assert tr.X.shape[1] == 128 and set(torch.unique(tr.X).tolist()) == {0.0, 1.0}
    assert tr.lengths.min() == 3 and max(tr.lengths.max(), te.lengths.max()) == 14
    assert torch.equal(torch.unique(torch.cat([tr.Y, te.Y])), torch.arange(26))


@pytest.mark.parametrize("xs,ys,k,field", [
    ([np.zeros((3, 4)), np.ones((2, 5))], [np.zeros(3, int), np.zeros(2, int)], 3, "xs[1]"),
    ([np.zeros((3, 4))], [np.zeros(2, int)], 3, "ys[0]"),
    ([np.zeros((3, 4)), np.zeros((0, 4))], [np.zeros(3, int), np.zeros(0, int)], 3, "sequence 1"),
    ([np.zeros((3, 4))], [np.array([0, 3, 1])], 3, "Y"),
    ([np.zeros((3, 4))], [np.array([0, -1, 1])], 3, "Y"),
    ([np.full((3, 4), np.nan)], [np.zeros(3, int)], 3, "X"),
    ([np.zeros(3)], [np.zeros(3, int)], 3, "xs[0]"),
    ([np.zeros((3, 4))], [np.zeros(3, int), np.zeros(2, int)], 3, "ys"),
    ([np.zeros((3, 4))], [np.zeros(3, int)], 0, "n_states"),
])
def test_bad_chain_data(xs, ys, k, field):
    with pytest.raises(SSVMInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ChainData.from_sequences(xs, ys, k)


def test_bad_offsets_and_label_dtype():
    with pytest.raises(SSVMInputError, match="offsets"):
        ChainData(torch.zeros(5, 2), torch.zeros(5, dtype=torch.int64), torch.tensor([0, 2, 4]), 2)
    with pytest.raises(SSVMInputError, match="Y"):
        ChainData(torch.zeros(5, 2), torch.zeros(5), torch.tensor([0, 2, 5]), 2)
    with pytest.raises(SSVMInputError, match="sequence 1"):
        ChainData(torch.zeros(5, 2), torch.zeros(5, dtype=torch.int64), torch.tensor([0, 2, 2, 5]), 2)


@pytest.mark.parametrize("lam", [0, -1e-3, float("nan"), float("inf"), "abc"])
def test_bad_lambda(lam):
    data = ChainData.from_sequences(*good(), 3)
    with pytest.raises(SSVMInputError, match="lam"):
        make_store(ChainModel.for_data(data), data, lam)
    with pytest.raises(SSVMInputError, match="lam"):
        make_store(*explicit([np.zeros((2, 3))], [np.zeros(2)]), lam)


def test_model_data_mismatch_and_bad_w():
    data = ChainData.from_sequences(*good(), 3)
    m = ChainModel(5, 3)
    with pytest.raises(SSVMInputError, match="data.X"):
        make_store(m, data, 0.1)
    with pytest.raises(SSVMInputError, match="w: expected a vector of length d"):
        ChainModel.for_data(data).split(torch.zeros(7))


def test_unknown_dataset_and_solver_options():
    with pytest.raises(SSVMInputError, match="dataset"):
        load_dataset("ocr-huge")
    with pytest.raises(SSVMInputError, match="split"):
        load_ocr("medium")
    data = ChainData.from_sequences(*good(), 3)
    d = make_store(ChainModel.for_data(data), data, 0.1)
    for kw, field in [({"solver": "sgd"}, "solver"), ({"sampling": "greedy"}, "sampling"),
                      ({"gap_check": 0}, "gap_check"), ({"passes": 0}, "passes"),
                      ({"gap_threshold": -1}, "gap_threshold"), ({"time_budget": 0}, "time_budget")]:
        with pytest.raises(SSVMInputError, match=field):
            Solver(d, SolverConfig(**kw))


def test_explicit_model_validation():
    with pytest.raises(SSVMInputError, match=r"losses\[0\]"):
        ExplicitData([np.zeros((2, 3))], [np.zeros(3)])
    with pytest.raises(SSVMInputError, match=r"psi\[1\]"):
        ExplicitData([np.zeros((2, 3)), np.zeros((2, 4))], [np.zeros(2), np.zeros(2)])
    with pytest.raises(SSVMInputError, match=r"psi\[0\]"):
        ExplicitData([np.full((2, 3), np.inf)], [np.zeros(2)])


def test_shipped_data_checksum():
    import hashlib
    from ssvm_torch.data import data_dir
    for line in (data_dir() / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((data_dir() / name).read_bytes()).hexdigest() == digest, name


def test_missing_data_dir_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SSVM_TORCH_DATA", str(tmp_path / "nope"))
    with pytest.raises(SSVMInputError, match="data directory"):
        load_ocr("small")


def test_kernels_choice_is_checked():
    data = ChainData.from_sequences(*good(), 3)
    with pytest.raises(SSVMInputError, match="kernels"):
        make_store(ChainModel.for_data(data), data, 0.1, kernels="cuda")
    with pytest.raises(SSVMInputError, match="kernels: 'numba' needs CPU float64"):
        make_store(ChainModel.for_data(data), data, 0.1, dtype=torch.float32, kernels="numba")
    with pytest.raises(SSVMInputError, match="kernels: 'numba' needs a CPU float64 store and a structure with "
                                             "compiled block steps .* got ExplicitModel"):
        make_store(*explicit([np.zeros((2, 3))], [np.zeros(2)]), 0.1, kernels="numba")
    assert make_store(ChainModel.for_data(data), data, 0.1, kernels="torch").kernels == "torch"
