"""ssvm_torch.deep.bilstm: a bidirectional nn.LSTM over a padded batch without packing gives the packed
computation's outputs and gradients (zeros past each sentence), never reads the padding, draws nothing from the
random generator outside training dropout, and refuses an LSTM it cannot run."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ssvm_torch.deep.bilstm import bilstm_by_length, reverse_within


def packed(lstm, x, lengths):
    p = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(lstm(p)[0], batch_first=True, total_length=x.shape[1])[0]


@pytest.mark.parametrize("layers", [1, 3])
def test_outputs_and_gradients_are_the_packed_lstms(layers):
    torch.manual_seed(layers)
    lstm = nn.LSTM(7, 5, num_layers=layers, batch_first=True, bidirectional=True).double()
    lengths = torch.tensor([1, 9, 4, 9, 2])
    x = torch.randn(5, 9, 7, dtype=torch.float64, requires_grad=True)
    state = torch.get_rng_state()
    mine, theirs = bilstm_by_length(lstm, x, lengths), packed(lstm, x, lengths)
    assert torch.equal(state, torch.get_rng_state())
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-12)
    assert bool((mine[torch.arange(9)[None, :] >= lengths[:, None]] == 0).all())
    g = torch.randn_like(mine)
    params = [x, *lstm.parameters()]
    for a, b in zip(torch.autograd.grad(mine, params, g), torch.autograd.grad(theirs, params, g)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_padding_is_never_read_and_reversal_is_its_own_inverse():
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 3, num_layers=2, batch_first=True, bidirectional=True).double().eval()
    lengths = torch.tensor([2, 6, 3])
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    past = torch.arange(6)[None, :] >= lengths[:, None]
    noisy = x.masked_fill(past[..., None], 1e3)
    torch.testing.assert_close(bilstm_by_length(lstm, noisy, lengths), bilstm_by_length(lstm, x, lengths),
                               rtol=0, atol=0)
    r = reverse_within(x, lengths)
    assert torch.equal(r[1], x[1].flip(0)) and torch.equal(r[0, :2], x[0, :2].flip(0)) and torch.equal(r[0, 2:],
                                                                                                        x[0, 2:])
    assert torch.equal(reverse_within(r, lengths), x)


def test_training_applies_dropout_between_layers_only():
    """In training with dropout p between layers, a one-layer LSTM draws nothing (nn.LSTM applies none after the
    last layer) and equals the packed one; a two-layer one draws and differs from eval mode."""
    torch.manual_seed(1)
    lengths = torch.tensor([3, 5])
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    one = nn.LSTM(4, 3, batch_first=True, bidirectional=True, dropout=0.0).double().train()
    torch.testing.assert_close(bilstm_by_length(one, x, lengths), packed(one, x, lengths), rtol=0, atol=1e-12)
    two = nn.LSTM(4, 3, num_layers=2, batch_first=True, bidirectional=True, dropout=0.5).double().train()
    trained = bilstm_by_length(two, x, lengths)
    assert not torch.allclose(trained, bilstm_by_length(two.eval(), x, lengths))


def test_an_lstm_it_cannot_run_is_refused():
    for lstm in (nn.LSTM(4, 3, batch_first=True), nn.LSTM(4, 3, bidirectional=True),
                 nn.LSTM(4, 3, batch_first=True, bidirectional=True, proj_size=2)):
        with pytest.raises(ValueError, match="expected a bidirectional, batch-first nn.LSTM"):
            bilstm_by_length(lstm, torch.zeros(1, 2, 4), torch.tensor([2]))
