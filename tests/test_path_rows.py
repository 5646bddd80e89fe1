"""The regularization path's breakpoint weights kept row by row (ssvm_torch/path_rows.py): bit for bit what was
appended (-0.0 and NaN included), sparse where that halves a row, written exactly as ssvm_torch.portable writes the
(J, d) matrix, and a path whose weights are mostly zero keeps them sparse through its checkpoints, path.pt and a
resume."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import explicit
from ssvm_torch import SolverConfig, SSVMInputError
from ssvm_torch.outputs import load_checkpoint, load_torch, save_checkpoint
from ssvm_torch.path import RegPath, regularization_path
from ssvm_torch.path_rows import PathRows
from ssvm_torch.portable import pack, unpack
from ssvm_torch.stores import make_store


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int64)


def test_rows_come_back_bit_for_bit_and_pack_as_portable_packs_the_matrix():
    d = 3000
    g = torch.Generator().manual_seed(0)
    sparse = torch.zeros(d, dtype=torch.float64)
    sparse[torch.randperm(d, generator=g)[:200]] = torch.randn(200, generator=g, dtype=torch.float64)
    sparse[5], sparse[7] = -0.0, float("nan")                   # kept as bit patterns
    dense = torch.randn(d, generator=g, dtype=torch.float64)
    zero = torch.zeros(d, dtype=torch.float64)
    rows = PathRows(d)
    for w in (sparse, dense, zero, sparse.float()):             # any dtype goes in as float64
        rows.append(w)
    want = torch.stack([sparse, dense, zero, sparse.float().double()])
    assert len(rows) == 4 and all(torch.equal(bits(rows.row(j)), bits(want[j])) for j in range(4))
    assert torch.equal(bits(rows.matrix()), bits(want))
    k = int(torch.count_nonzero(bits(sparse)))                  # 202: -0.0 and NaN count
    assert k == 202 and rows.nbytes() == 2 * k * 12 + 8 * d     # int32 positions + float64 values, one dense row
    packed = rows.packed()
    assert torch.equal(bits(unpack(packed)), bits(want))
    reference = pack(want, sparse=True)["__sparse__"]           # what a checkpoint writes for the matrix
    assert packed["__sparse__"]["shape"] == reference["shape"]
    assert torch.equal(packed["__sparse__"]["index"], reference["index"])
    assert torch.equal(bits(packed["__sparse__"]["values"]), bits(reference["values"]))
    full = PathRows(d)
    for _ in range(3):
        full.append(dense)
    assert torch.equal(full.packed(), torch.stack([dense] * 3))     # not half zero: the matrix itself
    with pytest.raises(SSVMInputError, match=r"w: expected a vector of length d = 3000, got \(2999,\)"):
        rows.append(dense[:-1])


def sparse_problem(seed=0, n=12, m=6, d=3000, active=15):
    """An explicit problem whose psi rows touch ``active`` of d features each: w stays mostly zero."""
    rng = np.random.default_rng(seed)
    psi, losses = [], []
    for _ in range(n):
        p = np.zeros((m, d))
        for y in range(1, m):
            p[y, rng.choice(d, active, replace=False)] = rng.normal(size=active)
        loss = rng.uniform(0.1, 1.0, size=m)
        loss[0] = 0.0
        psi.append(p)
        losses.append(loss)
    return explicit(psi, losses)


@pytest.mark.long
def test_a_sparse_path_keeps_sparse_rows_through_checkpoints_path_pt_and_a_resume(tmp_path):
    cfg = SolverConfig(solver="bcfw", sampling="gap", gap_check=1)
    states = []
    full = regularization_path(make_store(*sparse_problem(), 0.3), 0.05, lam_min=0.05, config=cfg,
                               checkpoint=states.append)
    J, d = len(full.lambdas), 3000
    assert J >= 8 and full.rows.nbytes() < J * d * 8 / 4          # kept sparse: under a quarter of the dense bytes
    assert "__sparse__" in states[-1]["W"] and torch.equal(unpack(states[-1]["W"]), full.W)
    full.save(tmp_path / "p")
    saved = load_torch(tmp_path / "p" / "path.pt")
    assert torch.equal(saved["W"], full.W) and torch.equal(RegPath.load(tmp_path / "p").W, full.W)
    lam = float(full.lambdas[J // 2]) * 0.99
    assert torch.equal(RegPath.load(tmp_path / "p").w(lam), full.w(lam))
    # resumed from a middle state, through a file and in memory: the same breakpoints and weights
    save_checkpoint(tmp_path / "c.pt", states[J // 2], {"k": 1})
    for state in (load_checkpoint(tmp_path / "c.pt"), states[J // 2]):
        resumed = regularization_path(make_store(*sparse_problem(), 0.3), 0.05, lam_min=0.05, config=cfg,
                                      resume=state)
        assert torch.equal(resumed.lambdas, full.lambdas) and torch.equal(resumed.W, full.W)


def test_a_path_pt_is_read_row_by_row_and_a_damaged_w_is_refused_by_name(tmp_path):
    d = 3000
    g = torch.Generator().manual_seed(1)
    rows = PathRows(d)
    for k in range(5):
        w = torch.zeros(d, dtype=torch.float64)
        w[torch.randperm(d, generator=g)[:100 * (k + 1)]] = torch.randn(100 * (k + 1), generator=g, dtype=torch.float64)
        rows.append(w if k < 4 else torch.randn(d, generator=g, dtype=torch.float64))     # the last row dense
    packed = rows.packed()
    again = PathRows.of_packed(packed)
    assert torch.equal(bits(again.matrix()), bits(rows.matrix())) and again.nbytes() == rows.nbytes()
    assert torch.equal(PathRows.of_packed(rows.matrix()).matrix(), rows.matrix())
    lam = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    path = RegPath(lam, rows, torch.ones(5, dtype=torch.float64), eps=0.1, lam_end=0.0)
    path.save(tmp_path)
    assert torch.equal(RegPath.load(tmp_path).W, rows.matrix())
    entry = packed["__sparse__"]
    for change in ({"index": entry["index"].flip(0)}, {"index": entry["index"] + 5 * d},
                   {"values": entry["values"].float()}, {"values": entry["values"][:-1]}, {"shape": [5]}):
        with pytest.raises(SSVMInputError, match=r"path.W: expected a float64 \(J, d\) matrix or its non-zero"):
            PathRows.of_packed({"__sparse__": {**entry, **change}}, "path.W")
    with pytest.raises(SSVMInputError, match=r"W: expected a float64 \(J, d\) matrix, got torch.float32"):
        PathRows.of_packed(rows.matrix().float())
