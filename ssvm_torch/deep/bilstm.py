"""A bidirectional ``nn.LSTM`` run over a padded batch of sentences of different lengths without packing:
:func:`bilstm_by_length` gives what ``pack_padded_sequence`` -> the LSTM -> ``pad_packed_sequence`` gives (the
same outputs and gradients; zeros past each sentence), from the same module's weights.

Why: on a CPU, torch runs an LSTM over a packed sequence step by step with one small matrix product per time
step and direction, while an unpacked batch goes to oneDNN's fused LSTM. Each direction of each layer is run
here as a one-directional LSTM over the padded batch: the forward one reads each sentence from its first word, so
the padding after its last word never reaches its outputs; the backward one reads each sentence reversed within
its own length (:func:`reverse_within`), so that it too starts at the sentence's last word and meets the padding
only after its first. The padded steps are computed and thrown away, which costs less than the per-step path.
Between layers, dropout as ``nn.LSTM`` applies it (on the outputs of every layer but the last, in training).
On other devices the packed sequence goes to the LSTM as before (cuDNN runs packed sequences fused).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``x`` (B, N, d) with the first ``lengths[b]`` steps of each row b in reverse order, the rest as they are
    (its own inverse)."""
    t = torch.arange(x.shape[1], device=x.device)
    idx = torch.where(t[None, :] < lengths[:, None], lengths[:, None] - 1 - t[None, :], t[None, :])
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[2]))


def _one_direction(n_in: int, hidden: int) -> nn.LSTM:
    """A one-layer, one-directional LSTM of that shape for :func:`torch.func.functional_call` to run with the
    weights of one direction of one layer of a bidirectional ``nn.LSTM``: its own weights live on the meta device
    (no memory, no draw from the random generator) and are never used."""
    return nn.LSTM(n_in, hidden, batch_first=True, device="meta")


def bilstm_by_length(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The outputs (B, N, 2 hidden) of the bidirectional, batch-first ``lstm`` (with biases, no projections) over
    ``x`` (B, N, input) whose row b holds ``lengths[b]`` steps and then padding: equal to running it over the
    packed sequence and padding the result with zeros (module docstring); the padding of ``x`` is never read."""
    if not (lstm.bidirectional and lstm.batch_first and lstm.bias and lstm.proj_size == 0):
        raise ValueError("bilstm_by_length: expected a bidirectional, batch-first nn.LSTM with biases and no "
                         "projections")
    if x.device.type != "cpu":
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]
    lengths = lengths.to(x.device)
    inside = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
    out = x
    for layer in range(lstm.num_layers):
        if layer > 0 and lstm.training and lstm.dropout > 0:
            out = F.dropout(out, lstm.dropout, training=True)
        shape = _one_direction(out.shape[2], lstm.hidden_size)
        forward = functional_call(shape, {f"{n}_l0": getattr(lstm, f"{n}_l{layer}") for n in _WEIGHTS}, (out,))[0]
        backward = functional_call(shape, {f"{n}_l0": getattr(lstm, f"{n}_l{layer}_reverse") for n in _WEIGHTS},
                                   (reverse_within(out, lengths),))[0]
        out = torch.cat([forward, reverse_within(backward, lengths)], -1)
    return out * inside[..., None]
