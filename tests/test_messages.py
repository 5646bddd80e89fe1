"""Messages that point at the cause (issue 48, group 5): each case was misleading or silently wrong
before; each now names the field and the actual problem, or works."""
import numpy as np
import pytest
import torch

from ssvm_torch.constraints import allowed_transitions
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain


def test_a_scheme_that_cannot_label_a_chunk_type_is_refused():
    with pytest.raises(SSVMInputError, match=r"labels: scheme BIOES needs B-NP and E-NP .* use scheme 'BIO'"):
        allowed_transitions("BIOES", ["O", "B-NP", "I-NP", "B-VP", "I-VP"])
    with pytest.raises(SSVMInputError, match=r"labels: scheme BIO needs B-VP for the chunk type 'VP'"):
        allowed_transitions("BIO", ["O", "B-NP", "I-NP", "I-VP"])
    for scheme, labels in (("BIOES", ["O", "S-NP"]), ("BIOES", ["O", "B-NP", "E-NP"]), ("IOB1", ["O", "I-NP"]),
                           ("BIO", ["O", "B-NP"])):
        assert allowed_transitions(scheme, labels)["start"].shape == (len(labels),)


def test_mask_values_and_emission_dtypes_are_named_as_they_are():
    lay = LinearChain(3, batch_first=True)
    E = torch.randn(2, 4, 3)
    with pytest.raises(SSVMInputError, match=r"mask: expected values 0 or 1 .*, got 2 \(1 such entries\)"):
        lay.decode(E, torch.tensor([[1, 1, 2, 0], [1, 1, 1, 1]]))
    with pytest.raises(SSVMInputError, match=r"emissions: expected a float tensor, got torch.int64"):
        lay.decode(torch.ones(2, 4, 3, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match=r"emissions: expected a float tensor of 3 dimensions, got \(4, 3\)"):
        lay.decode(torch.randn(4, 3))


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_transition_scores_a_thousand_apart_are_computed_not_refused(kernels):
    """The CRF's log Z, loss and marginals with transition scores 1,000 apart (beyond the scaled
    recursion's range) equal enumeration: the log-space recursion takes those rows."""
    import itertools
    K, T = 3, 4
    lay = LinearChain(K, batch_first=True, loss="crf", kernels=kernels).double()
    with torch.no_grad():
        lay.transitions.copy_(torch.tensor([[0.0, 1000.0, -1000.0], [500.0, 0.0, 0.0], [-700.0, 300.0, 0.0]]))
    E = torch.randn(2, T, K, dtype=torch.float64)
    tags = torch.zeros(2, T, dtype=torch.int64)
    scores = {y: lay.score(E, torch.tensor([y, y])) for y in itertools.product(range(K), repeat=T)}
    logz = torch.logsumexp(torch.stack(list(scores.values())), 0)
    torch.testing.assert_close(lay.log_partition(E), logz, rtol=1e-12, atol=0)
    torch.testing.assert_close(lay(E, tags, reduction="none"), logz - scores[(0,) * T], rtol=1e-10, atol=1e-9)
    assert torch.isfinite(lay.marginals(E)).all()


def test_chain_estimator_takes_scipy_sparse_sequences():
    sparse = pytest.importorskip("scipy.sparse")
    pytest.importorskip("sklearn")
    from ssvm_torch import ChainSSVM
    rng = np.random.default_rng(0)
    X = [rng.random((int(n), 6)) * (rng.random((int(n), 6)) > 0.5) for n in rng.integers(2, 6, size=12)]
    Y = [rng.integers(0, 3, size=len(x)) for x in X]
    dense = ChainSSVM(lam=0.1, passes=3, seed=0).fit(X, Y)
    csr = ChainSSVM(lam=0.1, passes=3, seed=0).fit([sparse.csr_matrix(x) for x in X], Y)
    assert [p.tolist() for p in csr.predict([sparse.csr_matrix(x) for x in X])] == \
        [p.tolist() for p in dense.predict(X)]


def test_missing_datasets_message_names_what_every_command_has(tmp_path, monkeypatch):
    from ssvm_torch.data.types import data_dir
    monkeypatch.setenv("SSVM_TORCH_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(SSVMInputError) as e:
        data_dir()
    assert "set SSVM_TORCH_DATA" in str(e.value) and "pass --data-dir" not in str(e.value)
