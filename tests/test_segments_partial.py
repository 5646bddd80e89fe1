"""Partial annotation of segmentations (ssvm_torch.segments.partial / objectives): the allowed segments and the
three losses against enumeration of every segmentation with an independent agreement test, the full-annotation
and nothing-observed limits, the tag reading on CoNLL-2000, and the refusals."""
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.segments import (PartialSegmentation, allowed_segments, observed_segmentation, partial_from_tags,
                                 segment_crf_nll, segment_decode, segment_hinge, segment_softmax_margin,
                                 segments_from_tags, spans)

from test_segments import KERNELS, enumerate_row, random_problem

FNS = {"hinge": segment_hinge, "softmax_margin": segment_softmax_margin, "crf": segment_crf_nll}


def hide(observed: PartialSegmentation, fraction: float, seed: int) -> PartialSegmentation:
    """Each field of each position unobserved with probability ``fraction`` (independently)."""
    g = torch.Generator().manual_seed(seed)
    return PartialSegmentation(*(torch.where(torch.rand(x.shape, generator=g) < fraction, -1, x) for x in observed))


def agrees(y: torch.Tensor, length: int, observed: PartialSegmentation, b: int) -> tuple[bool, int]:
    """(whether segmentation y of row b agrees with every observed field, Delta_O: the observed positions whose
    label or begin flag differs), from y's own fields position by position (not from segments)."""
    mine = observed_segmentation(y[None], torch.tensor([length]))
    agree, wrong = True, 0
    for t in range(length):
        fields = [(int(observed[f][b, t]), int(mine[f][0, t])) for f in range(3)]
        agree &= all(o < 0 or o == v for o, v in fields)
        wrong += any(o >= 0 and o != v for o, v in fields[:2])
    return agree, wrong


def problem(seed, hidden=0.5, B=5, T=6, L=3, K=3):
    S, first, last, trans, lengths = random_problem(seed, B=B, T=T, L=L, K=K)
    gold = segment_decode(S + 3 * torch.randn(S.shape, generator=torch.Generator().manual_seed(seed + 100),
                                              dtype=S.dtype), first, last, trans, lengths=lengths)
    return S, first, last, trans, lengths, hide(observed_segmentation(gold, lengths), hidden, seed + 200)


@pytest.mark.long
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("seed, hidden", [(0, 0.5), (1, 0.8), (2, 0.3)])
def test_partial_losses_against_enumeration(kernels, seed, hidden):
    S, first, last, trans, lengths, obs = problem(seed, hidden)
    cost = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.25], dtype=torch.float64)
    got = {name: fn(S, obs, first, last, trans, lengths=lengths, kernels=kernels,
                    **({} if name == "crf" else {"cost": cost})) for name, fn in FNS.items()}
    allowed = allowed_segments(S, obs, lengths=lengths)
    for b in range(S.shape[0]):
        n = int(lengths[b])
        ys, scores = enumerate_row(S, first, last, trans, lengths, b)
        marks = [agrees(y, n, obs, b) for y in ys]
        inside = torch.tensor([a for a, _ in marks])
        delta = cost[b] * torch.tensor([w for _, w in marks], dtype=torch.float64)
        assert bool(inside.any())                                   # the gold segmentation agrees
        for y, a in zip(ys, inside.tolist()):                       # C = the segmentations over allowed segments
            assert a == all(bool(allowed[b, t, e - t - 1, k]) for t, e, k in spans(y[None], lengths[b:b + 1])[0])
        log_c = torch.logsumexp(scores[inside], 0)
        assert got["crf"][b].item() == pytest.approx((torch.logsumexp(scores, 0) - log_c).item(), abs=1e-10)
        assert got["softmax_margin"][b].item() == pytest.approx(
            (torch.logsumexp(scores + delta, 0) - log_c).item(), abs=1e-10)
        assert got["hinge"][b].item() == pytest.approx(
            ((scores + delta).max() - scores[inside].max()).item(), abs=1e-10)
    assert all(bool((v >= -1e-10).all()) for v in got.values())


@pytest.mark.parametrize("name", list(FNS))
def test_full_observation_is_the_full_loss_and_nothing_observed_is_zero(name):
    S, first, last, trans, lengths, _ = problem(3, 0.0)
    gold = segment_decode(torch.randn_like(S), first, last, trans, lengths=lengths)
    full = observed_segmentation(gold, lengths)
    for observed in (full, PartialSegmentation(full.labels, full.begins)):        # with and without the ends
        assert torch.equal(FNS[name](S, observed, first, last, trans, lengths=lengths),
                           FNS[name](S, gold, first, last, trans, lengths=lengths))
    nothing = PartialSegmentation(*(torch.full_like(full.labels, -1) for _ in range(3)))
    assert torch.equal(FNS[name](S, nothing, first, last, trans, lengths=lengths), torch.zeros(S.shape[0],
                                                                                                dtype=S.dtype))


@pytest.mark.long
@pytest.mark.parametrize("kernels", KERNELS)
def test_partial_gradients(kernels):
    S, first, last, trans, lengths, obs = problem(4, 0.5)
    leaf = S.clone().requires_grad_(True)
    segment_hinge(leaf, obs, first, last, trans, lengths=lengths, kernels=kernels).sum().backward()
    from ssvm_torch.segments.partial import check_partial, constraints
    counts, allowed = constraints(check_partial(obs, lengths, 3, S.shape[1]), 3, 3)
    ystar = segment_decode(S + counts.to(S.dtype), first, last, trans, lengths=lengths)
    y_c = segment_decode(S.masked_fill(~allowed, float("-inf")), first, last, trans, lengths=lengths)
    expect = torch.zeros_like(S)                  # the loss-augmented segments minus C's best ones
    for b in range(S.shape[0]):
        for sign, y in ((1, ystar), (-1, y_c)):
            for t, e, k in spans(y[b:b + 1], lengths[b:b + 1])[0]:
                expect[b, t, e - t - 1, k] += sign
    assert torch.equal(leaf.grad, expect)
    args = (S.clone().requires_grad_(True), first.clone().requires_grad_(True), last,
            trans.clone().requires_grad_(True))
    for name in ("crf", "softmax_margin"):
        assert torch.autograd.gradcheck(lambda s, f, l, t: FNS[name](s, obs, f, l, t, lengths=lengths,
                                                                     kernels=kernels), args)


# BIOES on the whole training set is slow-tier: BIO runs the same check here, and the reading of BIOES partial
# tags is checked on small cases in the fast tier (test_tag_reading_of_unknown_neighbours)
@pytest.mark.long
@pytest.mark.parametrize("scheme", ["BIO", pytest.param("BIOES", marks=pytest.mark.slow)])
def test_tags_with_unknown_positions_on_conll2000(scheme):
    """Every training sentence: full tags observe exactly segments_from_tags' segmentation; with half of the
    positions unknown, that segmentation still agrees (every one of its segments allowed) and is not the only
    one (C is larger)."""
    from ssvm_torch.constraints import bio_to_bioes
    from ssvm_torch.data.conll import read_conll
    from ssvm_torch.data.types import data_file
    tags = [[tag for _, _, tag in s] for s in read_conll(data_file("conll2000_train.txt.gz"))]
    if scheme == "BIOES":
        tags = [bio_to_bioes(t) for t in tags]
    labels = ["O"] + sorted({t[2:] for s in tags for t in s if t != "O"})
    gold, lengths = segments_from_tags(tags, labels, scheme=scheme)
    full, _ = partial_from_tags(tags, labels, scheme=scheme)
    assert torch.equal(torch.where(full.begins == 1, full.labels, -1), gold)
    g = torch.Generator().manual_seed(0)
    unknown = iter((torch.rand(sum(map(len, tags)), generator=g) < 0.5).tolist())
    half = [[None if next(unknown) else t for t in s] for s in tags]
    obs, _ = partial_from_tags(half, labels, scheme=scheme)
    L, counted = 15, 0
    for a in range(0, len(tags), 1000):             # blocks of sentences: the (B, T, L, K) table of all is ~1 GB
        rows = slice(a, a + 1000)
        block = PartialSegmentation(obs.labels[rows], obs.begins[rows], None if obs.ends is None else obs.ends[rows])
        allowed = allowed_segments(torch.zeros(block.labels.shape[0], gold.shape[1], L, len(labels)), block,
                                   lengths=lengths[rows])
        b, t, e, k = torch.tensor([(b, t, e, k) for b, row in enumerate(spans(gold[rows], lengths[rows]))
                                   for t, e, k in row]).T
        assert bool(allowed[b, t, e - t - 1, k].all())              # every gold segment is allowed
        counted += int(allowed.sum())
    assert counted > int((gold >= 0).sum())


def test_tag_reading_of_unknown_neighbours():
    obs, _ = partial_from_tags([["B-NP", None, "I-NP", "O", None, "E-VP"]], ["O", "NP", "VP"], scheme="BIOES")
    assert obs.labels.tolist() == [[1, -1, 1, 0, -1, 2]]
    assert obs.begins.tolist() == [[1, -1, 0, 1, -1, 0]]
    assert obs.ends.tolist() == [[0, -1, -1, 1, -1, -1]]        # B- goes on; O ends; known next: its begin says
    obs, _ = partial_from_tags([["I-NP", "B-VP", None, "O"]], ["O", "NP", "VP"])
    assert obs.begins.tolist() == [[1, 1, -1, 1]] and obs.ends.tolist() == [[-1, -1, -1, -1]]


def test_partial_refusals_name_the_field():
    S, first, last, trans, lengths, obs = problem(5, 0.5, B=2, T=4, L=2, K=2)
    minus = torch.full((2, 4), -1)
    cases = [
        (lambda: segment_crf_nll(S, PartialSegmentation(obs.labels[:1], obs.begins), lengths=lengths),
         "segments.labels: expected an integer tensor of shape (2, 4)"),
        (lambda: segment_crf_nll(S, PartialSegmentation(minus + 3, minus), lengths=lengths),
         "segments.labels: expected values in [0, 1]"),
        (lambda: segment_crf_nll(S, PartialSegmentation(minus, minus + 3)), "segments.begins: expected values in"),
        (lambda: segment_crf_nll(S, PartialSegmentation(minus, torch.zeros(2, 4, dtype=torch.int64))),
         "segments.begins: position 0 of row 0 always begins a segment"),
        (lambda: segment_crf_nll(S, PartialSegmentation(minus, minus, torch.zeros(2, 4, dtype=torch.int64))),
         "segments.ends: position 3 of row 0 always ends a segment"),
        # positions 0..2 observed going on after a begin at 0: a segment of 4 > L = 2 positions
        (lambda: segment_crf_nll(S, PartialSegmentation(minus, torch.tensor([[1, 0, 0, -1], [-1] * 4]))),
         "segments: row 0: no segmentation with a finite score agrees"),
        (lambda: segment_hinge(S, PartialSegmentation(minus, minus), loss="segments"),
         "seg_loss: expected 'tokens' with partial annotation"),
        # a full row whose inner label contradicts its segment's
        (lambda: segment_crf_nll(S, PartialSegmentation(torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0]]),
                                                        torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]]))),
         "segments: row 0: the observed labels and begins give a segmentation that disagrees"),
        (lambda: segment_crf_nll(S, (obs.labels, obs.begins)),
         "segments: expected a segmentation (B, T) or a PartialSegmentation"),
        (lambda: partial_from_tags([["B-NP", 3]], ["O", "NP"]), "tags: expected tag strings"),
        (lambda: allowed_segments(S, (obs.labels, obs.begins)), "observed: expected a PartialSegmentation"),
        (lambda: allowed_segments(S, PartialSegmentation(minus.float(), minus)), "observed.labels: expected an "
         "integer tensor"),
    ]
    for call, message in cases:
        with pytest.raises(SSVMInputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                           .replace("]", r"\]")):
            call()


@pytest.mark.parametrize("loss", list(FNS))
def test_layer_takes_a_partial_segmentation(loss):
    from ssvm_torch.nn import SemiMarkovChain
    torch.manual_seed(1)
    layer = SemiMarkovChain(3, 3, loss=loss, cost="normalized", length_scores=True).double()
    S, _, _, _, lengths, obs = problem(6, 0.5)
    got = layer(S, obs, lengths=lengths, reduction="none")
    args = (layer.start_transitions, layer.end_transitions, layer.transitions.t())
    expect = FNS[loss](S + layer.length_scores, obs, *args, lengths=lengths,
                       **({} if loss == "crf" else {"cost": "normalized"}))
    assert torch.allclose(got, expect, atol=1e-12) and bool((got > 0).any())
    got.sum().backward()
    assert float(layer.transitions.grad.abs().sum()) > 0


def test_constrained_rows_stay_in_the_scaled_kernel():
    """Restricted to C, whole positions have no segment ending (or starting) there: the scaled forward-backward
    gives those vectors the scale -inf (nothing reaches them) instead of handing the row to the log-space
    recursion, and agrees with it."""
    import numpy as np
    from ssvm_torch.segments import numba_semimarkov as nbm
    S, first, last, trans, lengths, obs = problem(7, 0.3, B=6, T=8, L=3, K=3)
    allowed = allowed_segments(S, obs, lengths=lengths)
    S_C = S.masked_fill(~allowed, float("-inf"))
    args = [x.numpy() for x in (first, last, trans)]
    for b in range(6):
        n = int(lengths[b])
        outs = [[np.zeros((8, 3, 3)), np.zeros(3), np.zeros(3), np.zeros((3, 3))] for _ in range(2)]
        scaled = nbm.marginals_row_scaled(S_C[b].numpy(), *args, n, *outs[0])
        logz = nbm.marginals_row_log(S_C[b].numpy(), *args, n, *outs[1])
        if n:
            assert np.isfinite(scaled) and scaled == pytest.approx(logz, abs=1e-10)
            assert all(np.allclose(u, v, atol=1e-10) for u, v in zip(*outs))
    # some start positions admit no segment at all (the vectors that used to send a row to the log space)
    assert any(bool((~allowed[b, :int(lengths[b])].flatten(1).any(1)).any()) for b in range(6))


def test_layer_decodes_under_an_observation():
    """SemiMarkovChain.decode(observed=...): the best (and n best) of the segmentations that agree, equal to the
    decode of the scores restricted to the allowed segments, and in C by the position-by-position test."""
    from ssvm_torch.nn import SemiMarkovChain
    torch.manual_seed(2)
    layer = SemiMarkovChain(3, 3).double()
    S, _, _, _, lengths, obs = problem(8, 0.5)
    got = layer.decode(S, lengths=lengths, observed=obs)
    args = (layer.start_transitions, layer.end_transitions, layer.transitions.t())
    restricted = S.masked_fill(~allowed_segments(S, obs, lengths=lengths), float("-inf"))
    assert torch.equal(got, segment_decode(restricted, *args, lengths=lengths))
    for b in range(S.shape[0]):
        assert agrees(got[b], int(lengths[b]), obs, b)[0]
    top = layer.decode(S, lengths=lengths, observed=obs, nbest=3)
    from ssvm_torch.segments import segment_score
    assert torch.allclose(segment_score(S, top[:, 0], *args, lengths=lengths),   # ties may pick another one
                          segment_score(S, got, *args, lengths=lengths), atol=1e-12)
    for b in range(S.shape[0]):
        for y in top[b]:
            assert (y == -1).all() or agrees(y, int(lengths[b]), obs, b)[0]
    lone = PartialSegmentation(torch.full_like(obs.labels, -1), torch.tensor([[1, 0, 0, 0, -1, -1]] * 5))
    with pytest.raises(SSVMInputError, match="row 0 has no segmentation .* agree with observed"):
        layer.decode(S, lengths=lengths, observed=lone)                         # a 4-position segment, L = 3
