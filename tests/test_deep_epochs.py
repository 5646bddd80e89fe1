"""The deep pipelines' epoch draws (ssvm_torch/deep/epochs.py): the per-epoch permutation and the batches of
similar-length sentences (LengthPooledBatches): every sentence once an epoch, the pools' batches sorted by
length, the draw a function of (seed, epoch) alone, and on EWT's training sentences far less padding than
random batches of the same size."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch.deep.epochs import EpochPermutation, LengthPooledBatches, batch_padding


def pooled_epoch(lengths, batch, pool, seed, epoch):
    sampler = LengthPooledBatches(lengths, batch, pool, seed)
    sampler.sampler.set_epoch(epoch)             # what Lightning's _set_sampler_epoch reaches
    return sampler, list(sampler)


@pytest.mark.parametrize("n,batch,pool", [(100, 8, 3), (97, 8, 3), (5, 8, 2), (64, 32, 1), (1000, 7, 50)])
def test_every_sentence_once_in_batches_of_the_size_sorted_within_each_pool(n, batch, pool):
    lengths = torch.randint(1, 60, (n,), generator=torch.Generator().manual_seed(n))
    sampler, batches = pooled_epoch(lengths, batch, pool, seed=3, epoch=2)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(n))
    perm = EpochPermutation(n, 3)
    perm.set_epoch(2)
    perm = list(perm)
    span = batch * pool
    for start in range(0, n, span):              # each pool: the permutation's slice, sorted, cut into batches
        chunk = perm[start:start + span]
        ranked = sorted(chunk, key=lambda i: (int(lengths[i]), chunk.index(i)))
        expected = [ranked[k:k + batch] for k in range(0, len(ranked), batch)]
        assert all(b in batches for b in expected)
    sizes = sorted(len(b) for b in batches)
    assert sizes.count(batch) >= len(batches) - -(-n // span)    # short batches: at most one per pool


def test_the_draw_is_a_function_of_seed_and_epoch():
    lengths = torch.randint(1, 40, (300,), generator=torch.Generator().manual_seed(0))
    a = pooled_epoch(lengths, 16, 4, seed=1, epoch=5)[1]
    assert a == pooled_epoch(lengths, 16, 4, seed=1, epoch=5)[1]
    assert a != pooled_epoch(lengths, 16, 4, seed=1, epoch=6)[1]
    assert a != pooled_epoch(lengths, 16, 4, seed=2, epoch=5)[1]


def test_batch_padding_counts_the_root_and_the_longest_sentence():
    lengths = torch.tensor([1, 3, 2])
    cost = batch_padding([[0, 1], [2]], lengths)             # widths 4 and 3: (2 * 4 + 3) tokens over 2 + 4 + 3
    assert cost["padded_tokens"] == pytest.approx(11 / 9)
    assert cost["padded_n2"] == pytest.approx((2 * 16 + 9) / (4 + 16 + 9))


def test_bad_pool_is_refused_by_name():
    with pytest.raises(ValueError, match="pool: expected an int >= 1"):
        LengthPooledBatches(torch.ones(10, dtype=torch.int64), 4, 0, 0)


def test_pooled_batches_pad_far_less_than_random_ones_on_ewt():
    """EWT's 12,544 training sentences in batches of 32: random batches pad the tokens about 3x and the (n+1)^2
    arc scores about 6.6x; pools of 20 batches bring them under 1.3x and 2x, with the same number of batches."""
    from ssvm_torch.deep.ud_text import load_ud_parsing
    lengths = load_ud_parsing().train.lengths

    def padded(batches):
        cost = batch_padding(batches, lengths)
        return cost["padded_tokens"], cost["padded_n2"]

    perm = list(EpochPermutation(len(lengths), 0))
    random_batches = [perm[k:k + 32] for k in range(0, len(perm), 32)]
    pooled = pooled_epoch(lengths, 32, 20, seed=0, epoch=0)[1]
    assert len(pooled) == len(random_batches)
    tokens_r, n2_r = padded(random_batches)
    tokens_p, n2_p = padded(pooled)
    assert tokens_r > 2.5 and n2_r > 5.0
    assert tokens_p < 1.3 and n2_p < 2.0
