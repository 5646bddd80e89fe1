"""The k best alignment paths (ssvm_torch/align/kbest.py) against enumeration of every path: the scores are the k
largest, each path is valid, distinct and scores its value, the first is the decoder's path (ties included), and
a row with fewer paths than k is padded."""
import pytest
import torch

from ssvm_torch.align import check_path, decode, kbest
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import MonotonicAlignment
from test_alignment import batch, reference


def check_against_enumeration(S, n, m, local, k):
    paths, values = kbest(S, k, n, m, local=local)
    B, N, M = S.shape[0], S.shape[1], S.shape[2]
    assert paths.shape == (B, k, N, M) and values.shape == (B, k) and values.dtype == S.dtype
    layer = MonotonicAlignment(local=local)
    for b, (P, sc) in enumerate(reference(S.double(), n, m, local)):
        finite = sc[torch.isfinite(sc)].sort(descending=True).values
        want = finite[:k]
        got = values[b, :len(want)].double()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-9)
        assert bool((values[b, len(want):] == float("-inf")).all()) and bool((paths[b, len(want):] == -1).all())
        kept = paths[b, :len(want)]
        check_path(kept, n[b].repeat(len(want)), m[b].repeat(len(want)), kept.shape, local)
        scored = layer.score(S[b:b + 1].expand(len(want), *S.shape[1:]).double(), kept,
                                  n[b].repeat(len(want)), m[b].repeat(len(want)))
        torch.testing.assert_close(scored, got, rtol=0, atol=1e-9)
        assert len({tuple(p.flatten().tolist()) for p in kept}) == len(want)        # distinct
    return paths


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("forbid", [False, True])
@pytest.mark.parametrize("k", [1, 3, 40])
def test_kbest_equals_enumeration(local, forbid, k):
    S, n, m = batch(7, forbid=forbid)
    paths = check_against_enumeration(S, n, m, local, k)
    for kernels in ("numba", "torch"):
        assert torch.equal(paths[:, 0], decode(S, n, m, local=local, kernels=kernels))


@pytest.mark.parametrize("local", [False, True])
def test_ties_keep_the_decoders_first_path(local):
    g = torch.Generator().manual_seed(3)
    S = torch.randint(-2, 3, (4, 3, 4, 3), generator=g).double()          # integer scores: many ties
    n, m = torch.tensor([3, 3, 2, 1]), torch.tensor([4, 2, 4, 1])
    paths = check_against_enumeration(S, n, m, local, 12)
    assert torch.equal(paths[:, 0], decode(S, n, m, local=local))


def test_layer_decode_nbest_keeps_the_device_and_precision_and_refuses_by_name():
    S, n, m = batch(2)
    layer = MonotonicAlignment()
    S32 = S.float()
    paths, values = kbest(S32, 4, n, m)
    assert values.dtype == torch.float32 and torch.equal(layer.decode(S32, n, m, nbest=4), paths)
    assert torch.equal(layer.decode(S32, n, m, nbest=1), decode(S32, n, m))
    for bad in (0, True, 2.0):
        with pytest.raises(SSVMInputError, match="nbest"):
            layer.decode(S, n, m, nbest=bad)
    blocked = torch.full((1, 2, 2, 3), float("-inf"), dtype=torch.float64)
    with pytest.raises(SSVMInputError, match="at least one path"):
        kbest(blocked, 2)
    empty = kbest(S[:0], 3)
    assert empty[0].shape == (0, 3, 4, 3) and empty[1].shape == (0, 3)
