"""LinearChain.decode(mbr=True): the labeling (and the k labelings) of least expected token loss under the CRF,
against brute-force enumeration of every allowed labeling and its probability, with gap masks, an empty row,
the BIO constraints, a cost matrix, transitions set to -inf by hand, on every kernel; errors named."""
import itertools

import pytest
import torch

from ssvm_torch.chain.triton_viterbi import fused_available
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain, allowed_transitions

KERNELS = ("numba", "torch") + (("triton",) if fused_available(torch.zeros(1, 1, 2)) else ())
BIO = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
MASK = torch.tensor([[1, 1, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]]).bool()


def layer(kernels, constrained, token_loss="hamming", seed=0):
    torch.manual_seed(seed)
    lay = LinearChain(5, batch_first=True, kernels=kernels, token_loss=token_loss,
                      constraints=allowed_transitions("BIO", BIO) if constrained else None).double()
    torch.nn.init.normal_(lay.transitions, std=2.0)
    return lay


def expected_risks(lay, E, mask, b, cost):
    """{labeling of row b's masked-on positions: E_p[Delta(y, labeling)]} over the allowed labelings, p by
    enumeration (exp of layer.score of every labeling, normalised), Delta = sum_t cost[y_t, y'_t]: by linearity
    sum_t (m_t @ cost)[y'_t], m_t the enumerated distribution's tag frequencies at t."""
    pos = torch.nonzero(mask[b])[:, 0]
    cons = lay.constraint_masks
    paths = [y for y in itertools.product(range(lay.num_tags), repeat=len(pos))
             if cons is None or (bool(cons["start"][y[0]]) and bool(cons["end"][y[-1]])
                                 and all(bool(cons["transitions"][a, c]) for a, c in zip(y, y[1:])))]
    Y = torch.tensor(paths)                                          # (P, n)
    full = torch.zeros(len(paths), mask.shape[1], dtype=torch.int64)
    full[:, pos] = Y
    with torch.no_grad():
        s = lay.score(E[b:b + 1].expand(len(paths), -1, -1), full, mask[b:b + 1].expand(len(paths), -1))
    keep = s > float("-inf")
    Y, p = Y[keep], torch.softmax(s[keep], 0)
    m = torch.zeros(len(pos), lay.num_tags, dtype=torch.float64)
    for t in range(len(pos)):
        m[t].index_add_(0, Y[:, t], p)
    per_tag = m @ cost                                               # (n, K): E[cost[y_t, k]]
    risk = per_tag.gather(1, Y.t()).sum(0)
    return {tuple(y.tolist()): float(r) for y, r in zip(Y, risk)}


def row_labels(labels, mask, b):
    return tuple(int(v) for v in labels[b][mask[b]])


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("token_loss", ["hamming", "matrix"])
def test_mbr_labeling_has_the_least_expected_loss(kernels, constrained, token_loss):
    """The MBR labeling is allowed and its expected loss, by enumeration, is the minimum over the allowed
    labelings; the k MBR labelings are distinct and their risks the k smallest in order; -1 off the mask. The
    fixture is one where Viterbi's labeling is not the MBR one on some rows (asserted), so plain decoding fails."""
    cost = (torch.rand(5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3).fill_diagonal_(0)
    lay = layer(kernels, constrained, cost if token_loss == "matrix" else "hamming", seed=1)
    C = lay.token_cost
    mask = torch.cat([MASK, torch.ones(6, 4, dtype=torch.bool)])
    E = torch.randn(10, 4, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    one, viterbi = lay.decode(E, mask, mbr=True), lay.decode(E, mask)
    k = 4
    many = lay.decode(E, mask, mbr=True, nbest=k)
    assert one.shape == (10, 4) and many.shape == (10, k, 4)
    assert bool((one[~mask] == -1).all()) and bool((many.permute(1, 0, 2)[:, ~mask] == -1).all())
    beaten = 0
    for b in [0, 1, 2] + list(range(4, 10)):
        risks = expected_risks(lay, E, mask, b, C)
        best = min(risks.values())
        assert risks[row_labels(one, mask, b)] == pytest.approx(best, abs=1e-9)
        beaten += risks[row_labels(viterbi, mask, b)] > best + 1e-9
        ranks = min(k, len(risks))                       # row 2 under BIO: 3 labelings of one position
        got = [risks[row_labels(many[:, j], mask, b)] for j in range(ranks)]
        assert len({row_labels(many[:, j], mask, b) for j in range(ranks)}) == ranks
        assert got == pytest.approx(sorted(risks.values())[:ranks], abs=1e-9)
        assert bool((many[b, ranks:] == -1).all())
    assert bool((one[3] == -1).all()) and bool((many[3] == -1).all())
    assert beaten >= 1


def test_mbr_with_hamming_and_no_constraints_is_the_most_probable_tag_per_position():
    """Without constraints the Hamming MBR labeling is each position's argmax marginal (Goodman's maximum expected
    accuracy for tags); with the BIO constraints it stays allowed where the argmax marginals would break them."""
    lay = layer("torch", False)
    E = torch.randn(6, 9, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    mu = lay.marginals(E)
    assert torch.equal(lay.decode(E, mbr=True), mu.argmax(2))
    bio = layer("torch", True)
    labels = bio.decode(E, mbr=True)
    assert not bio.constraint_masks["start"][labels[:, 0]].logical_not().any()
    assert bool(bio.constraint_masks["transitions"][labels[:, :-1], labels[:, 1:]].all())


@pytest.mark.parametrize("kernels", KERNELS)
def test_mbr_keeps_transitions_set_to_minus_infinity_forbidden(kernels):
    """pytorch-crf users forbid moves by writing -inf into ``transitions``: the MBR pass keeps them forbidden
    (its own transition scores are 0 elsewhere), and the result's risk is the least among the allowed labelings."""
    lay = layer(kernels, False)
    with torch.no_grad():
        lay.transitions[0, 2] = float("-inf")          # O -> I-NP
        lay.start_transitions[2] = float("-inf")
    E = torch.randn(4, 4, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    E[:, :, 2] += 3.0                                  # I-NP everywhere is likely per position
    labels = lay.decode(E, MASK, mbr=True)
    for b in range(3):
        y = row_labels(labels, MASK, b)
        assert y[0] != 2 and all(not (a == 0 and c == 2) for a, c in zip(y, y[1:]))
        risks = expected_risks(lay, E, MASK, b, lay.token_cost)
        assert risks[y] == pytest.approx(min(risks.values()), abs=1e-9)


def test_mbr_kernels_agree_and_lists_match_the_tensor():
    """The numba and torch backends give the same MBR labelings on a larger batch (float32 too); as_lists gives
    each row's masked-on tags; batch_first=False reads (T, B, K)."""
    E = torch.randn(16, 12, 5, generator=torch.Generator().manual_seed(6))
    mask = torch.rand(16, 12, generator=torch.Generator().manual_seed(7)) > 0.3
    got = {}
    for kernels in KERNELS:
        lay = layer(kernels, True).float()
        got[kernels] = lay.decode(E, mask, mbr=True)
        assert lay.decode(E, mask, mbr=True, as_lists=True) == [r[r >= 0].tolist() for r in got[kernels]]
    for kernels in KERNELS[1:]:
        assert torch.equal(got[kernels], got["numba"])
    lay = layer("torch", True).float()
    lay.batch_first = False
    assert torch.equal(lay.decode(E.transpose(0, 1), mask.t(), mbr=True), got["numba"])


def test_mbr_refuses_bad_arguments_and_rows_without_labelings():
    lay = layer("torch", True)
    E = torch.randn(2, 3, 5, dtype=torch.float64)
    with pytest.raises(SSVMInputError, match="mbr"):
        lay.decode(E, mbr=1)
    with pytest.raises(SSVMInputError, match="nbest"):
        lay.decode(E, mbr=True, nbest=0)
    with torch.no_grad():
        lay.end_transitions.fill_(float("-inf"))           # no labeling can end
    with pytest.raises(SSVMInputError, match="row 0"):
        lay.decode(E, mbr=True)
