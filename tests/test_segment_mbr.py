"""SemiMarkovChain.decode(mbr=True): the segmentation (and the n) of least expected task loss under the semi-Markov
CRF, both losses, against enumeration of every segmentation with its probability and its loss to every other
(segment_loss); forbidden segments and transitions, observed annotation, both kernels; errors named."""
import pytest
import torch
from conftest import all_segmentations

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import SemiMarkovChain
from ssvm_torch.segments import PartialSegmentation, segment_decode, segment_loss, segment_score
from ssvm_torch.segments.mbr import token_gains

KERNELS = ("numba", "torch")


def layer(seg_loss, kernels, seed=0, K=3, L=3):
    torch.manual_seed(seed)
    lay = SemiMarkovChain(K, L, seg_loss=seg_loss, kernels=kernels).double()
    with torch.no_grad():
        lay.transitions.normal_(std=1.5)
    return lay


def enumerated(lay, S, n):
    """(every segmentation of one row's n positions padded to T (m, T), its probability (m,)) under the layer's CRF
    of segment scores S (1, T, L, K) (no length table), those of -inf score dropped."""
    T = S.shape[1]
    ys = torch.tensor([y + [-1] * (T - n) for y in all_segmentations(n, lay.num_labels, lay.max_length)])
    with torch.no_grad():
        score = segment_score(S.expand(len(ys), -1, -1, -1), ys, lay.start_transitions, lay.end_transitions,
                              lay.transitions.t(), lengths=torch.full((len(ys),), n))
    keep = score > float("-inf")
    return ys[keep], torch.softmax(score[keep], 0)


def risks(lay, S, n):
    """{segmentation (a tuple padded to T): E_p[Delta(y, it)]} over the allowed segmentations, Delta by
    segment_loss with the layer's seg_loss."""
    ys, p = enumerated(lay, S, n)
    lengths, c = torch.full((len(ys),), n), torch.ones(len(ys), dtype=torch.float64)
    return {tuple(y.tolist()): float((p * segment_loss(y[None].expand(len(ys), -1), ys, lengths, lay.seg_loss,
                                                        c)).sum()) for y in ys}


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("seg_loss", ["tokens", "segments"])
def test_mbr_segmentation_has_the_least_expected_loss(kernels, seg_loss):
    """The MBR segmentation's expected loss (enumerated) is the minimum; the n MBR segmentations' are the n smallest
    in order; some -inf segments and one -inf transition stay forbidden; Viterbi's segmentation is beaten on some
    row of the fixture (asserted, so plain decoding would fail); an empty row decodes to -1."""
    lay = layer(seg_loss, kernels, seed=1)
    with torch.no_grad():
        lay.transitions[0, 1] = float("-inf")
    g = torch.Generator().manual_seed(2)
    S = 0.7 * torch.randn(8, 5, 3, 3, generator=g, dtype=torch.float64)
    S[:, :, 2, 2] = float("-inf")                           # no label-2 segment of 3 positions
    lengths = torch.tensor([5, 4, 5, 3, 5, 2, 5, 0])
    one, viterbi = lay.decode(S, lengths=lengths, mbr=True), lay.decode(S, lengths=lengths)
    many = lay.decode(S, lengths=lengths, mbr=True, nbest=3)
    assert one.shape == (8, 5) and many.shape == (8, 3, 5)
    beaten = 0
    for b in range(7):
        r = risks(lay, S[b:b + 1], int(lengths[b]))
        best = min(r.values())
        assert r[tuple(one[b].tolist())] == pytest.approx(best, abs=1e-9)
        beaten += r[tuple(viterbi[b].tolist())] > best + 1e-9
        assert [r[tuple(y.tolist())] for y in many[b]] == pytest.approx(sorted(r.values())[:3], abs=1e-9)
        assert len({tuple(y.tolist()) for y in many[b]}) == 3
    assert bool((one[7] == -1).all()) and bool((many[7] == -1).all())
    assert beaten >= 1


def test_token_gains_are_the_enumerated_pair_probabilities():
    """token_gains(M)[t, l, k] = P(k begins at t) + sum_{u in t+1..t+l} P(u inside a k segment), the
    probabilities summed over the enumerated segmentations directly; 0 past the row."""
    lay = layer("tokens", "torch", seed=3)
    S = torch.randn(1, 4, 3, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    gains = token_gains(lay.marginals(S))[0]
    ys, p = enumerated(lay, S, 4)
    begin = torch.zeros(4, 3, dtype=torch.float64)
    inside = torch.zeros(4, 3, dtype=torch.float64)
    for y, py in zip(ys.tolist(), p):
        label = y[0]
        for u, v in enumerate(y):
            label = v if v >= 0 else label
            (begin if v >= 0 else inside)[u, label] += py
    for t in range(4):
        for length in range(3):
            for k in range(3):
                want = 0.0 if t + length >= 4 else float(begin[t, k] + inside[t + 1:t + length + 1, k].sum())
                assert float(gains[t, length, k]) == pytest.approx(want, abs=1e-10)


def test_mbr_with_observed_annotation_agrees_with_it():
    """decode(observed=..., mbr=True) returns segmentations that agree with what is observed (the CRF conditioned
    on it), e.g. a begin forced at position 2."""
    lay = layer("tokens", "torch", seed=5)
    S = torch.randn(3, 5, 3, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    labels = torch.full((3, 5), -1)
    begins = torch.zeros(3, 5, dtype=torch.int64) - 1
    begins[:, 2] = 1
    ends = torch.full((3, 5), -1)
    got = lay.decode(S, observed=PartialSegmentation(labels, begins, ends), mbr=True)
    assert bool((got[:, 2] >= 0).all())


def test_mbr_refusals_name_the_field():
    lay = layer("tokens", "torch")
    S = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    with pytest.raises(SSVMInputError, match="mbr"):
        lay.decode(S, mbr="yes")
    with pytest.raises(SSVMInputError, match="nbest"):
        lay.decode(S, mbr=True, nbest=0)
    S[1] = float("-inf")
    with pytest.raises(SSVMInputError, match="row 1"):
        lay.decode(S, mbr=True)


@pytest.mark.long
@pytest.mark.parametrize("seg_loss", ["tokens", "segments"])
def test_segment_decode_mbr_is_the_layers(seg_loss):
    """segment_decode(..., mbr=seg_loss) on the layer's parameters gives the layer's MBR segmentations (n best too),
    and the differences of their gains are those of their expected losses (enumerated); an unknown kind is refused
    by name."""
    lay = layer(seg_loss, "numba", seed=7)
    S = torch.randn(5, 6, 3, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    lengths = torch.tensor([6, 5, 1, 0, 3])
    params = (lay.start_transitions, lay.end_transitions, lay.transitions.t())
    got = segment_decode(S, *params, lengths=lengths, mbr=seg_loss)
    assert torch.equal(got, lay.decode(S, lengths=lengths, mbr=True))
    many, gains = segment_decode(S, *params, lengths=lengths, mbr=seg_loss, nbest=4, return_scores=True)
    assert torch.equal(many, lay.decode(S, lengths=lengths, mbr=True, nbest=4))
    for b in (0, 4):             # the gains are minus the expected loss up to a constant per row
        r = risks(lay, S[b:b + 1], int(lengths[b]))
        for j in range(1, 4):
            assert float(gains[b, 0] - gains[b, j]) == pytest.approx(r[tuple(many[b, j].tolist())]
                                                                     - r[tuple(many[b, 0].tolist())], abs=1e-9)
    with pytest.raises(SSVMInputError, match="mbr"):
        segment_decode(S, *params, mbr="f1")
