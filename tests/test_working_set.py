"""The cutting plane's working set kept as joint labelings (solvers/working_set.py) against the dense
rows it stands for: the same products, the same point, the same run, an exact resume."""
import numpy as np
import pytest
import torch

from ssvm_torch import ChainModel, SolverConfig, make_store
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.outputs import load_checkpoint, save_checkpoint
from ssvm_torch.solvers import make_solver
from ssvm_torch.solvers.working_set import DenseWorkingSet, LabelingWorkingSet, make_working_set
from conftest import without_time
from test_other_solvers import tiny_matching


@pytest.fixture
def ocr_store(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(25))
    return make_store(ChainModel.for_data(sub), sub, 0.05)


def test_labelings_give_the_dense_rows_products_and_point(ocr_store):
    d = ocr_store
    dense, compact = DenseWorkingSet(d), LabelingWorkingSet(d)
    rng = torch.Generator().manual_seed(0)
    for _ in range(3):                                        # corners at three different w
        d.set_point(0.3 * torch.randn(d.w.shape, generator=rng, dtype=d.w.dtype), 0.0)
        gp = d.gap_pass()
        a, _ = d.corner_point(gp)
        np.testing.assert_allclose(compact.lam_dots(a), dense.lam_dots(a), rtol=1e-12, atol=1e-12)
        dense.append(a, gp)
        compact.append(a, gp)
    assert all(y.dtype == torch.int16 for y in compact.labels)
    w = torch.randn(d.w.shape, generator=rng, dtype=d.w.dtype)
    np.testing.assert_allclose(compact.lam_dots(w), dense.lam_dots(w), rtol=1e-12, atol=1e-12)
    alpha = np.array([0.2, 0.0, 0.5])                         # sum < 1: the rest on the ground truth (psi = 0)
    torch.testing.assert_close(compact.point(alpha), dense.point(alpha), rtol=0, atol=1e-12)
    dense.keep(np.array([True, False, True]))
    compact.keep(np.array([True, False, True]))
    np.testing.assert_allclose(compact.lam_dots(w), dense.lam_dots(w), rtol=1e-12, atol=1e-12)


def test_compiled_joint_products_are_the_torch_paths(ocr_small):
    """The chain store's joint products on its compiled path (one walk per labeling, nb_labelings_scores) equal its
    torch path's, and the store's own w is left as it was (the potentials of another w need no copy of it)."""
    train, _ = ocr_small
    sub = train.subset(range(25))
    m = ChainModel.for_data(sub)
    compiled, torch_path = make_store(m, sub, 0.05), make_store(m, sub, 0.05, kernels="torch")
    rng = torch.Generator().manual_seed(3)
    labels = []
    for _ in range(3):
        compiled.set_point(0.3 * torch.randn(m.d, generator=rng, dtype=torch.float64), 0.0)
        labels.append(compiled.joint_labels(compiled.gap_pass()))
    w = torch.randn(m.d, generator=rng, dtype=torch.float64)
    before = compiled.w.clone()
    np.testing.assert_allclose(compiled.joint_dots(w, labels).numpy(), torch_path.joint_dots(w, labels).numpy(),
                               rtol=1e-12, atol=1e-12)
    assert torch.equal(compiled.w, before)


def test_a_run_on_labelings_is_the_dense_run(ocr_small, tmp_path):
    train, _ = ocr_small
    sub = train.subset(range(25))
    m = ChainModel.for_data(sub)

    def run(form, passes=12, state=None):
        s = make_solver(make_store(m, sub, 0.05), SolverConfig(solver="cutting-plane", passes=passes, gap_check=4,
                                                               working_set=form))
        if state is not None:
            s.load_state_dict(state)
        return s, s.run()
    _, dense = run("dense")
    compact, hist = run("labelings")
    assert isinstance(compact.ws, LabelingWorkingSet)
    assert [r["passes"] for r in hist] == [r["passes"] for r in dense]
    assert [r["working_set"] for r in hist] == [r["working_set"] for r in dense]
    for key in ("primal", "dual", "gap"):
        np.testing.assert_allclose([r[key] for r in hist], [r[key] for r in dense], rtol=0, atol=1e-9)
    part, _ = run("labelings", passes=4)
    save_checkpoint(tmp_path / "ck.pt", part.state_dict())
    _, resumed = run("labelings", state=load_checkpoint(tmp_path / "ck.pt"))
    assert without_time(resumed) == without_time(hist)


def test_auto_picks_labelings_only_for_large_chain_models(ocr_store):
    assert isinstance(make_working_set(ocr_store, "auto"), DenseWorkingSet)          # d = 4,082 < 2^20
    model, data = tiny_matching()
    with pytest.raises(SSVMInputError, match="working_set"):
        make_working_set(make_store(model, data, 1.0), "labelings")
    with pytest.raises(SSVMInputError, match="working_set"):
        SolverConfig(solver="cutting-plane", working_set="sparse").validate()
