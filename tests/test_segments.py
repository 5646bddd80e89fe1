"""The semi-Markov package (ssvm_torch.segments) against enumeration of every segmentation, the linear chain
(L = 1), torch-struct's SemiMarkov, and itself across backends; the losses, the conversions on CoNLL-2000 and
the refusals."""
import itertools

import pytest
import torch

from ssvm_torch.chain import chain_decode, chain_log_partition
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.segments.reference import torch_struct_potentials
from ssvm_torch.segments import (segment_crf_nll, segment_decode, segment_hinge, segment_log_partition,
                                 segment_loss, segment_marginals, segment_score, segment_softmax_margin,
                                 segments_from_tags, spans, tags_from_segments)

KERNELS = ["torch", "numba"]


def all_segmentations(n, L, K, T):
    """Every segmentation of n positions into segments of 1..L positions with K labels, padded to T."""
    def widths(m):
        if m == 0:
            yield []
            return
        for w in range(1, min(L, m) + 1):
            for rest in widths(m - w):
                yield [w] + rest
    for ws in widths(n):
        for labels in itertools.product(range(K), repeat=len(ws)):
            seg, t = [-1] * T, 0
            for w, k in zip(ws, labels):
                seg[t] = k
                t += w
            yield seg


def random_problem(seed, B=4, T=6, L=3, K=3, forbid=0.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, T, L, K, generator=g, dtype=dtype)
    if forbid:
        S = torch.where(torch.rand(S.shape, generator=g) < forbid, torch.tensor(float("-inf"), dtype=dtype), S)
    first, last = torch.randn(K, generator=g, dtype=dtype), torch.randn(K, generator=g, dtype=dtype)
    trans = torch.randn(K, K, generator=g, dtype=dtype)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    return S, first, last, trans, lengths


def enumerate_row(S, first, last, trans, lengths, b):
    """(segmentations (m, T), their scores (m,)) of row b, every score from segment_score."""
    B, T, L, K = S.shape
    ys = torch.tensor(list(all_segmentations(int(lengths[b]), L, K, T)), dtype=torch.int64).reshape(-1, T)
    m = ys.shape[0]
    scores = segment_score(S[b:b + 1].expand(m, -1, -1, -1), ys, first, last, trans, lengths=lengths[b:b + 1].expand(m))
    return ys, scores


def manual_score(S, first, last, trans, row):
    """s(y) of one row written out from its spans (independent of segment_score's gathers)."""
    parts = spans(torch.tensor([row]), torch.tensor([len(row)]))[0]
    if not parts:
        return 0.0
    s = float(first[parts[0][2]] + last[parts[-1][2]])
    for j, (t, e, k) in enumerate(parts):
        s += float(S[t, e - t - 1, k])
        if j:
            s += float(trans[k, parts[j - 1][2]])
    return s


def test_score_against_its_definition():
    S, first, last, trans, lengths = random_problem(0, B=1, T=5)
    for y in all_segmentations(5, 3, 3, 5):
        got = segment_score(S, torch.tensor([y]), first, last, trans)
        assert got.item() == pytest.approx(manual_score(S[0], first, last, trans, y), abs=1e-12)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("forbid", [0.0, 0.3])
def test_decode_log_partition_marginals_against_enumeration(kernels, forbid):
    S, first, last, trans, lengths = random_problem(1 + int(forbid * 10), forbid=forbid)
    logz = segment_log_partition(S, first, last, trans, lengths=lengths, kernels=kernels)
    M = segment_marginals(S, first, last, trans, lengths=lengths, kernels=kernels)
    best, best_scores = segment_decode(S, first, last, trans, lengths=lengths, kernels=kernels, return_scores=True)
    B, T, L, K = S.shape
    for b in range(B):
        ys, scores = enumerate_row(S, first, last, trans, lengths, b)
        if int(lengths[b]) == 0:
            assert logz[b] == 0 and best_scores[b] == 0 and (best[b] == -1).all()
            continue
        assert logz[b].item() == pytest.approx(torch.logsumexp(scores, 0).item(), abs=1e-10)
        top = int(scores.argmax())
        assert best_scores[b].item() == pytest.approx(scores[top].item(), abs=1e-10)
        assert segment_score(S[b:b + 1], best[b:b + 1], first, last, trans,
                             lengths=lengths[b:b + 1]).item() == pytest.approx(scores[top].item(), abs=1e-10)
        p = torch.softmax(scores, 0)
        expect = torch.zeros(T, L, K, dtype=S.dtype)
        for y, w in zip(ys.tolist(), p):
            for t, e, k in spans(torch.tensor([y]), lengths[b:b + 1])[0]:
                expect[t, e - t - 1, k] += w
        assert torch.allclose(M[b], expect, atol=1e-10)


def test_length_one_segments_are_the_linear_chain():
    g = torch.Generator().manual_seed(3)
    U = torch.randn(5, 7, 4, generator=g, dtype=torch.float64)
    first, last, trans = (torch.randn(*s, generator=g, dtype=torch.float64) for s in [(4,), (4,), (4, 4)])
    lengths = torch.tensor([7, 5, 1, 3, 6])
    for kernels in KERNELS:
        logz = segment_log_partition(U[:, :, None], first, last, trans, lengths=lengths, kernels=kernels)
        assert torch.allclose(logz, chain_log_partition(U, lengths, first, last, trans), atol=1e-10)
        seg = segment_decode(U[:, :, None], first, last, trans, lengths=lengths, kernels=kernels)
        assert torch.equal(seg, chain_decode(U, lengths, first, last, trans))


def test_log_partition_and_marginals_against_torch_struct(torch_struct_deps):
    """Row by row: torch-struct 0.5's SemiMarkov is exact on one row, but a batch of rows of different lengths
    gives the longer rows wrong values (its chart initialisation reads min(lengths) for every row); pinned
    below, so that the benchmark (benchmarks/bench_segments.py) gives it rows of one length only."""
    S, first, last, trans, _ = random_problem(4, B=3, T=7, L=3, K=3)
    lengths = torch.tensor([7, 4, 2])
    ours = segment_log_partition(S, first, last, trans, lengths=lengths)
    M = segment_marginals(S, first, last, trans, lengths=lengths)
    for b in range(3):
        n = int(lengths[b])
        edge = torch_struct_potentials(S[b:b + 1, :n], first, last, trans, lengths[b:b + 1])
        dist = torch_struct_deps.SemiMarkovCRF(edge, lengths=lengths[b:b + 1] + 1)
        assert dist.partition.item() == pytest.approx(ours[b].item(), abs=1e-9)
        theirs = dist.marginals.sum(-1)[0, :, 1:]                 # (n, L, K): summed over the previous label
        assert torch.allclose(theirs, M[b, :n], atol=1e-9)
        assert M[b, n:].abs().max().item() == 0.0 if n < 7 else True
    edge = torch_struct_potentials(S, first, last, trans, lengths)
    batch = torch_struct_deps.SemiMarkovCRF(edge, lengths=lengths + 1)
    assert not torch.allclose(batch.partition, ours, atol=1e-3)   # the pitfall: rows 0 and 1 come out wrong


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backends_agree_and_gradients_are_the_marginals(dtype):
    S, first, last, trans, lengths = random_problem(5, B=6, T=9, L=4, K=3, forbid=0.2, dtype=dtype)
    grads = {}
    for kernels in KERNELS:
        leaves = [x.clone().requires_grad_(True) for x in (S, first, last, trans)]
        logz = segment_log_partition(*leaves, lengths=lengths, kernels=kernels)
        (logz * torch.arange(1.0, 7.0, dtype=dtype)).sum().backward()
        grads[kernels] = (logz.detach(), [x.grad for x in leaves])
        assert torch.equal(segment_decode(S, first, last, trans, lengths=lengths, kernels=kernels),
                           segment_decode(S, first, last, trans, lengths=lengths, kernels="torch"))
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert torch.allclose(grads["torch"][0], grads["numba"][0], atol=tol)
    for a, b in zip(grads["torch"][1], grads["numba"][1]):
        assert torch.isfinite(b).all() and torch.allclose(a, b, atol=tol)
    M = segment_marginals(S, first, last, trans, lengths=lengths)
    assert torch.allclose(grads["numba"][1][0] / torch.arange(1.0, 7.0, dtype=dtype)[:, None, None, None], M,
                          atol=tol)


def test_gradcheck_of_the_compiled_log_partition():
    S, first, last, trans, lengths = random_problem(6, B=2, T=4, L=2, K=2)
    args = [x.clone().requires_grad_(True) for x in (S, first, last, trans)]
    assert torch.autograd.gradcheck(lambda *a: segment_log_partition(*a, lengths=lengths, kernels="numba"), args)


@pytest.mark.parametrize("loss", ["tokens", "segments"])
@pytest.mark.parametrize("kernels", KERNELS)
def test_hinge_and_softmax_margin_against_enumeration(loss, kernels):
    S, first, last, trans, lengths = random_problem(7, B=4, T=5, L=3, K=2)
    gold = segment_decode(S + 2 * torch.randn(S.shape, generator=torch.Generator().manual_seed(8),
                                              dtype=S.dtype), first, last, trans, lengths=lengths)
    cost = torch.tensor([1.0, 0.5, 2.0, 1.0], dtype=torch.float64)
    hinge = segment_hinge(S, gold, first, last, trans, lengths=lengths, loss=loss, cost=cost, kernels=kernels)
    sm = segment_softmax_margin(S, gold, first, last, trans, lengths=lengths, loss=loss, cost=cost, kernels=kernels)
    nll = segment_crf_nll(S, gold, first, last, trans, lengths=lengths, kernels=kernels)
    for b in range(S.shape[0]):
        ys, scores = enumerate_row(S, first, last, trans, lengths, b)
        delta = segment_loss(ys, gold[b:b + 1].expand(ys.shape[0], -1), lengths[b:b + 1].expand(ys.shape[0]),
                             loss=loss, cost=float(cost[b]))
        gold_score = segment_score(S[b:b + 1], gold[b:b + 1], first, last, trans, lengths=lengths[b:b + 1])
        assert hinge[b].item() == pytest.approx((scores + delta).max().item() - gold_score.item(), abs=1e-10)
        assert sm[b].item() == pytest.approx(torch.logsumexp(scores + delta, 0).item() - gold_score.item(), abs=1e-10)
        assert nll[b].item() == pytest.approx(torch.logsumexp(scores, 0).item() - gold_score.item(), abs=1e-10)
    assert (hinge >= -1e-12).all()


def test_losses_count_what_they_say():
    lengths = torch.tensor([6])
    gold = torch.tensor([[0, -1, 1, -1, -1, 0]])                 # [0,2):0 [2,5):1 [5,6):0
    pred = torch.tensor([[0, -1, 1, 1, -1, 0]])                  # [2,5) cut into [2,3) and [3,5)
    assert segment_loss(pred, gold, lengths, "tokens").item() == 1.0             # the B at position 3
    assert segment_loss(pred, gold, lengths, "segments").item() == 3.0           # 2 false positives, 1 missed
    assert segment_loss(gold, gold, lengths, "segments").item() == 0.0
    assert segment_loss(pred, gold, lengths, "tokens", cost="normalized").item() == pytest.approx(1 / 6)


def test_hinge_gradient_is_the_loss_augmented_segments_minus_the_gold_ones():
    S, first, last, trans, lengths = random_problem(9, B=3, T=6, L=3, K=3)
    gold = segment_decode(torch.randn_like(S), first, last, trans, lengths=lengths)
    leaf = S.clone().requires_grad_(True)
    segment_hinge(leaf, gold, first, last, trans, lengths=lengths).sum().backward()
    from ssvm_torch.segments.scoring import augmented
    SA, _ = augmented(S, gold, lengths, "tokens", torch.ones(3, dtype=S.dtype))
    ystar = segment_decode(SA, first, last, trans, lengths=lengths)
    expect = torch.zeros_like(S)
    for b in range(3):
        for sign, y in ((1, ystar), (-1, gold)):
            for t, e, k in spans(y[b:b + 1], lengths[b:b + 1])[0]:
                expect[b, t, e - t - 1, k] += sign
    assert torch.equal(leaf.grad, expect)


@pytest.mark.parametrize("scheme", ["BIO", "BIOES"])
def test_chunk_tags_round_trip_on_conll2000(scheme):
    from ssvm_torch.constraints import bio_to_bioes
    from ssvm_torch.data.conll import read_conll
    from ssvm_torch.data.types import data_file
    sents = read_conll(data_file("conll2000_train.txt.gz"))
    tags = [[tag for _, _, tag in s] for s in sents]
    if scheme == "BIOES":
        tags = [bio_to_bioes(t) for t in tags]
    kinds = sorted({t[2:] for s in tags for t in s if t != "O"})
    labels = ["O"] + kinds
    segments, lengths = segments_from_tags(tags, labels, scheme=scheme)
    assert tags_from_segments(segments, lengths, labels, scheme=scheme) == tags
    found = spans(segments, lengths)
    chunks = sum(1 for s in tags for t in s if t[:1] in ("B", "S"))
    assert sum(1 for row in found for _, _, k in row if k != 0) == chunks


def test_conlleval_reading_of_ill_formed_tags():
    segments, lengths = segments_from_tags([["I-NP", "I-NP", "O", "I-VP", "B-VP", "I-NP"]], ["O", "NP", "VP"])
    assert spans(segments, lengths)[0] == [(0, 2, 1), (2, 3, 0), (3, 4, 2), (4, 5, 2), (5, 6, 1)]


def test_refusals_name_the_field():
    S, first, last, trans, lengths = random_problem(10, B=2, T=4, L=2, K=2)
    cases = [
        (lambda: segment_log_partition(S[0]), "seg_scores: expected shape (B, T, L, K)"),
        (lambda: segment_log_partition(S.masked_fill(S > 1, float("nan"))), "seg_scores"),
        (lambda: segment_log_partition(S, first[:1]), "first: expected a float tensor of shape (2,)"),
        (lambda: segment_log_partition(S, lengths=torch.tensor([5, 1])), "lengths: expected values in [0, 4]"),
        (lambda: segment_log_partition(S, mask=torch.tensor([[True, False, True, False]] * 2)), "mask: expected"),
        (lambda: segment_hinge(S, torch.tensor([[0, -1, -1, 1], [0, 1, 0, 1]])), "at most L = 2 positions"),
        (lambda: segment_hinge(S, torch.tensor([[-1, 0, 0, 1], [0, 1, 0, 1]])), "position 0 of a non-empty row"),
        (lambda: segment_hinge(S, torch.tensor([[0, 2, 0, 1], [0, 1, 0, 1]])), "segments: expected a label in [0, 2)"),
        (lambda: segment_decode(torch.full_like(S, float("-inf"))), "row 0 has no segmentation"),
        (lambda: segment_hinge(S, torch.zeros(2, 5, dtype=torch.int64)),
         "with B = 2 and T = 4 (seg_scores' positions)"),
        (lambda: segment_score(S, torch.zeros(2, 3, dtype=torch.int64)), "with B = 2 and T = 4"),
        (lambda: segment_log_partition(S, kernels="cuda"), "kernels: expected one of"),
        (lambda: segment_hinge(S, torch.zeros(2, 4, dtype=torch.int64), loss="f1"), "loss: expected one of"),
        (lambda: segments_from_tags([["B-NP", "X-NP"]], ["O", "NP"]), "tags: expected 'O' or a BIO tag"),
        (lambda: segments_from_tags([["B-NP", "B-PP"]], ["O", "NP"]), "'PP' (sentence 0, position 1)"),
        (lambda: segments_from_tags([["B-NP", 3]], ["O", "NP"]), "tags: expected tag strings, got int 3"),
        (lambda: tags_from_segments(torch.tensor([[2, 0]]), torch.tensor([2]), ["O", "NP"]),
         "labels: expected a name for every segment label (at least 3)"),
        (lambda: segment_loss(torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 3, dtype=torch.int64),
                              torch.tensor([4])), "lengths: expected integers in [0, 3]"),
        (lambda: segment_loss(torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 2, dtype=torch.int64),
                              torch.tensor([2])), "gold: expected a segmentation of pred's shape"),
    ]
    for call, message in cases:
        with pytest.raises(SSVMInputError, match=None) as info:
            call()
        assert message in str(info.value), (message, str(info.value))


def test_half_precision_and_the_torch_path_on_every_device():
    S, first, last, trans, lengths = random_problem(11, B=3, T=5, L=2, K=3)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    ref = segment_log_partition(S, first, last, trans, lengths=lengths)
    for dev in devices:
        args = [x.to(dev) for x in (S, first, last, trans)]
        got = segment_log_partition(*args, lengths=lengths.to(dev), kernels="torch")
        assert got.device.type == dev and torch.allclose(got.cpu(), ref, atol=1e-10)
    half = segment_log_partition(S.to(torch.bfloat16), first.float(), last.float(), trans.float(), lengths=lengths)
    assert half.dtype == torch.float32 and torch.allclose(half.double(), ref, atol=0.1)


def test_scaled_kernel_hands_an_underflowing_row_to_the_log_space_one():
    """A row whose only allowed segmentations lie 1,000 nats below the best-scoring segment at their start (that
    segment can be followed by nothing): the scaled recursion's normalizer underflows to 0, the row is redone in
    log space and agrees with the torch recursion."""
    import numpy as np
    from ssvm_torch.segments import numba_semimarkov
    S, first, last, trans, _ = random_problem(12, B=2, T=5, L=2, K=3)
    S[:, 0, 0, 0] = 1000.0                    # label 0 for position 0 alone: the best segment there ...
    trans[:, 0] = float("-inf")              # ... which nothing may follow
    lengths = torch.tensor([5, 4])
    M = np.zeros((5, 2, 3))
    row = [x.numpy() for x in (S[0], first, last, trans)]
    assert np.isnan(numba_semimarkov.marginals_row_scaled(*row, 5, M, np.zeros(3), np.zeros(3), np.zeros((3, 3))))
    assert not M.any()
    for b in range(2):
        ys, scores = enumerate_row(S, first, last, trans, lengths, b)
        expect = torch.logsumexp(scores, 0)
        assert segment_log_partition(S[b:b + 1], first, last, trans, lengths=lengths[b:b + 1],
                                     kernels="numba").item() == pytest.approx(expect.item(), rel=1e-12)
    M_nb = segment_marginals(S, first, last, trans, lengths=lengths, kernels="numba")
    M_tr = segment_marginals(S, first, last, trans, lengths=lengths, kernels="torch")
    assert torch.allclose(M_nb, M_tr, atol=1e-10)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("forbid, dtype", [(0.0, torch.float64), (0.3, torch.float64), (0.0, torch.float32)])
def test_nbest_against_enumeration(forbid, dtype, kernels):
    S, first, last, trans, lengths = random_problem(11, B=5, T=5, L=3, K=2, forbid=forbid, dtype=dtype)
    lengths[1], lengths[2] = 0, 1
    S[2, 0, 0] = float("-inf")                                 # row 2 (one position): no segmentation at all
    S[2, 0, 0, 1] = 0.5                                        # ... but one
    n = 12
    segs, scores = segment_decode(S, first, last, trans, lengths=lengths, nbest=n, return_scores=True,
                                  kernels=kernels)
    assert segs.shape == (5, n, 5) and scores.shape == (5, n)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for b in range(5):
        ys, every = enumerate_row(S, first, last, trans, lengths, b)
        finite = every[torch.isfinite(every)].sort(descending=True).values
        m = min(n, finite.shape[0])
        assert torch.allclose(scores[b, :m], finite[:m], atol=tol)
        assert torch.isneginf(scores[b, m:]).all() and (segs[b, m:] == -1).all()
        got = segs[b, :m]
        again = segment_score(S[b:b + 1].expand(m, -1, -1, -1), got, first, last, trans,
                              lengths=lengths[b:b + 1].expand(m))
        assert torch.allclose(again, scores[b, :m], atol=tol)      # each list entry is what its score says
        assert len({tuple(y.tolist()) for y in got}) == m          # n different segmentations
    assert scores[1, 0].item() == 0 and (segs[1] == -1).all()     # the empty row's one segmentation
    one = segment_decode(S, first, last, trans, lengths=lengths, return_scores=True)[1]
    assert torch.allclose(scores[:, 0], one, atol=tol)
    with pytest.raises(SSVMInputError, match="nbest: expected an int >= 1"):
        segment_decode(S, nbest=0)
    empty = segment_decode(S[:0], nbest=3, kernels=kernels)      # no rows, and rows of no positions
    assert empty.shape == (0, 3, 5) and segment_decode(S[:, :0], nbest=3, kernels=kernels).shape == (5, 3, 0)


def test_nbest_scores_equal_torch_structs_topk(torch_struct_deps):
    """torch-struct's k-max semiring on rows of one length (its pitfall above): the same k best scores."""
    S, first, last, trans, _ = random_problem(12, B=3, T=8, L=3, K=3)
    lengths = torch.full((3,), 8)
    edge = torch_struct_potentials(S, first, last, trans, lengths)
    top = torch_struct_deps.SemiMarkovCRF(edge, lengths=lengths + 1).topk(6).detach()
    theirs = (top * edge.nan_to_num(neginf=0.0)[None]).sum((2, 3, 4, 5)).t()
    for kernels in KERNELS:
        ours = segment_decode(S, first, last, trans, lengths=lengths, nbest=6, return_scores=True, kernels=kernels)[1]
        assert torch.allclose(ours, theirs, atol=1e-9)
