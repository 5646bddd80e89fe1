"""The coordinate-sharded chain stores in one process (no collectives; the two-process runs are in
tests/test_distributed.py): the same mini-batch trajectory as the chain stores' own path, with and
without edge-observation features, exact resume from a checkpoint, and w whole at sync points."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.distributed.column_shards import ColumnShardedChain
from ssvm_torch.distributed.column_shards_edges import ColumnShardedEdgeChain
from ssvm_torch.distributed import sharded_store
from ssvm_torch.models.chain_edges import EdgeChainModel
from ssvm_torch.stores import ChainDual, EdgeChainDual
from ssvm_torch.tasks import load_task

LAM = 0.05


@pytest.fixture(scope="module", params=["sha-pereira", "rich-edges"])
def task(request):
    return load_task("conll2000", train_size=40, features=request.param)


def columns_store(task):
    store = sharded_store(task, LAM, exchange="columns")        # one process: no collectives
    assert type(store) is (ColumnShardedEdgeChain if isinstance(task.model, EdgeChainModel) else ColumnShardedChain)
    return store


def config(passes=8):
    return SolverConfig(solver="bcfw", sampling="gap", batch_size=7, passes=passes, gap_check=1, seed=3)


def test_one_process_follows_the_stores_own_mini_batch_path(task):
    """Same draws, same line search: every record's gap, primal and dual equal the generic store's
    (EdgeChainDual's / ChainDual's batch_corners) to rounding, and the final w likewise."""
    generic = make_store(task.model, task.train, LAM)
    assert type(generic) is (EdgeChainDual if isinstance(task.model, EdgeChainModel) else ChainDual)
    ref = Solver(generic, config()).run()
    store = columns_store(task)
    hist = Solver(store, config()).run()
    assert [r["passes"] for r in hist] == [r["passes"] for r in ref] and len(hist) >= 4
    for a, b in zip(hist, ref):
        for key in ("gap", "primal", "dual"):
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-13), key
    assert hist[-1]["gap"] < 0.5 * hist[0]["gap"]
    store.sync_w()
    assert torch.allclose(store.w, generic.w, rtol=1e-9, atol=1e-12)


def test_w_is_whole_at_sync_points_and_equals_its_recomputation(task):
    """Between checks the emission columns live in the rank's compact share; after sync_w, w equals
    the one computed from the block statistics alone (edge block included)."""
    store = columns_store(task)
    solver = Solver(store, config(passes=2))
    solver.run()
    store.sync_w()
    w = store.w.clone()
    store.recompute()
    assert torch.allclose(store.w, w, rtol=1e-10, atol=1e-13)
    gp = store.gap_pass()
    assert float(gp.block_gaps.sum()) == pytest.approx(store.primal(gp.H) - store.dual(), rel=1e-9)


def test_resume_from_a_checkpoint_reproduces_the_run(task):
    full_store = columns_store(task)
    full = Solver(full_store, config()).run()
    part_store = columns_store(task)
    part = Solver(part_store, config())
    part.start()
    part.interval()
    part.interval()
    state = part.state_dict()
    resumed_store = columns_store(task)
    resumed = Solver(resumed_store, config())
    resumed.load_state_dict(state)
    hist = resumed.run()
    strip = [{k: v for k, v in r.items() if k != "time_s"} for r in hist]
    assert strip == [{k: v for k, v in r.items() if k != "time_s"} for r in full]
    assert torch.equal(resumed_store.w, full_store.w)
