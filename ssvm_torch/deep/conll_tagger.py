"""The neural chunker: word, character and POS embeddings -> BiLSTM -> per-token emissions ->
:class:`ssvm_torch.nn.LinearChain` (structured hinge or CRF), optionally with the linear model's sparse
template attributes as an extra, additive input (the hybrid). With ``structure="semimarkov"`` the same encoder
scores chunks as segments instead (:class:`ssvm_torch.nn.SemiMarkovChain`, Sarawagi & Cohen 2004): a segment
[t, t+l] of label k scores the sum of its positions' emissions for k, a begin score at t, an end score at t+l
(one more linear map of the BiLSTM's output) and a learnt (length, label) score; "O" positions are segments of
one position (a longer "O" segment would spell the same tags as several short ones).

Encoder (Lample et al. 2016 / Ma & Hovy 2016 without pre-trained vectors): lower-cased word embeddings
learned from scratch, a character CNN with max-pooling over each word form (capitalisation, suffixes:
Ma & Hovy 2016, Sec. 2.1), embeddings of the gold POS column (the linear model's input too), dropout
on the concatenation and on the BiLSTM's output, a linear map to one score per tag. Hybrid: one
``nn.EmbeddingBag`` row of per-tag scores per template attribute, summed over a token's attributes and
added to the emissions, which is the linear model's emission term w_y . phi(x_t) exactly
(:mod:`ssvm_torch.models.chain`); the network then adds to it rather than relearning it. With a semi-Markov head
an attribute's row holds three scores per segment label, added to the token, begin and end scores: the chain's
BIOES tags give the attributes a begin (B-, S-) and an end (E-, S-) score per chunk type too.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..nn import LinearChain, SemiMarkovChain, span_sums
from .bilstm import bilstm_by_length
from .conll_text import PAD


class CharCNN(nn.Module):
    """Max over positions of a width-``width`` convolution of character embeddings: (U, L) -> (U, filters)."""

    def __init__(self, n_chars: int, dim: int = 30, filters: int = 50, width: int = 3):
        super().__init__()
        self.embed = nn.Embedding(n_chars, dim, padding_idx=PAD)
        self.conv = nn.Conv1d(dim, filters, width, padding=width // 2)

    def forward(self, chars: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(U, filters) for ``chars`` (U, L), each form PAD-padded to L; or, with ``rows`` (U,), for the row
        layout of :func:`ssvm_torch.deep.ud_text.char_rows` (``chars`` (R, W + 2 width // 2): a form on
        ``rows[u]`` consecutive rows of W characters with width // 2 characters of context either side), the
        max over each form's rows. PAD embeds to zeros (padding_idx), so a row's context and the convolution's
        zero padding give the same sums: both layouts give the same vectors."""
        if rows is None:
            h = self.conv(self.embed(chars).transpose(1, 2))                      # (U, filters, L)
            h = h.masked_fill((chars == PAD)[:, None, :], float("-inf"))
            return h.max(2).values
        side = self.conv.padding[0]
        h = F.conv1d(self.embed(chars).transpose(1, 2), self.conv.weight, self.conv.bias)   # (R, filters, W)
        h = h.masked_fill((chars[:, side:chars.shape[1] - side] == PAD)[:, None, :], float("-inf")).max(2).values
        if h.shape[0] == rows.shape[0]:                   # one row per form (no form longer than a row)
            return h
        owner = torch.repeat_interleave(torch.arange(rows.shape[0], device=rows.device), rows, output_size=h.shape[0])
        return h.new_zeros(rows.shape[0], h.shape[1]).scatter_reduce(0, owner[:, None].expand_as(h), h, "amax",
                                                                    include_self=False)


class ChunkTagger(nn.Module):
    """Emissions (B, T, K) of a padded batch (:meth:`ssvm_torch.deep.conll_text.Split.batch`) and the chain
    layer that turns them into a loss or tags. ``n_attributes`` > 0 adds the sparse attribute scores
    (an ``EmbeddingBag`` with sparse gradients, zero at start: the hybrid starts as the pure network);
    ``attr_dropout`` drops each attribute occurrence with that probability in training."""

    def __init__(self, n_words: int, n_chars: int, n_pos: int, n_tags: int, n_attributes: int = 0,
                 word_dim: int = 100, char_dim: int = 30, char_filters: int = 50, pos_dim: int = 25,
                 hidden: int = 128, layers: int = 1, dropout: float = 0.5, loss: str = "hinge",
                 constraints=None, kernels: str = "auto", attr_dropout: float = 0.0, max_segment: int = 0,
                 single_scores: bool = False):
        super().__init__()
        self.attr_dropout = attr_dropout
        self.max_segment = max_segment             # > 0: the semi-Markov chunker, n_tags = its segment labels
        self.single_scores = single_scores         # the hybrid's attributes also score one-position segments
        self.words = nn.Embedding(n_words, word_dim, padding_idx=PAD)
        self.chars = CharCNN(n_chars, char_dim, char_filters)
        self.pos = nn.Embedding(n_pos, pos_dim, padding_idx=PAD)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(word_dim + char_filters + pos_dim, hidden, num_layers=layers, batch_first=True,
                            bidirectional=True, dropout=dropout if layers > 1 else 0.0)
        self.out = nn.Linear(2 * hidden, n_tags)
        self.attributes = None
        if n_attributes:
            # semi-Markov: token, begin, end (and one-position segment) scores
            width = (4 if single_scores else 3) * n_tags if max_segment else n_tags
            self.attributes = nn.EmbeddingBag(n_attributes, width, mode="sum", sparse=True)
            nn.init.zeros_(self.attributes.weight)
        if max_segment:
            self.bounds = nn.Linear(2 * hidden, 2 * n_tags)            # begin and end scores of each label
            self.chain = SemiMarkovChain(n_tags, max_segment, loss=loss, seg_loss="tokens", length_scores=True,
                                         kernels=kernels)
            only_short = torch.zeros(max_segment, n_tags)
            only_short[1:, 0] = float("-inf")                             # label 0 = "O": one position only
            self.register_buffer("outside_lengths", only_short, persistent=False)
        else:
            self.chain = LinearChain(n_tags, batch_first=True, loss=loss, constraints=constraints,
                                     token_loss="hamming", kernels=kernels)

    def emissions(self, batch: dict, word: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token tag scores (B, T, K); ``word`` replaces the batch's word ids (UNK dropout)."""
        return self._scores(batch, word)[0]

    def segment_scores(self, batch: dict, word: torch.Tensor | None = None) -> torch.Tensor:
        """The semi-Markov chunker's segment scores (B, T, max_segment, K) (module docstring)."""
        scores, h, extra = self._scores(batch, word)
        T, L = scores.shape[1], self.max_segment
        K = scores.shape[-1]
        bounds = self.bounds(h) if extra is None else self.bounds(h) + extra[..., :2 * K]
        begin, end = bounds.chunk(2, -1)
        last = (torch.arange(T, device=h.device)[:, None] + torch.arange(L, device=h.device)).clamp(max=T - 1)
        S = span_sums(scores, L) + begin[:, :, None, :] + end[:, last] + self.outside_lengths
        if extra is not None and self.single_scores:                  # one-position segments' own scores
            S = torch.cat([S[:, :, :1] + extra[:, :, None, 2 * K:], S[:, :, 1:]], 2)
        return S

    def _scores(self, batch: dict, word: torch.Tensor | None):
        """(per-token scores (B, T, K), the BiLSTM's output after dropout (B, T, 2 hidden), the attributes' begin,
        end (and one-position segment) scores (B, T, 2K or 3K) of a semi-Markov hybrid, else None)."""
        mask = batch["mask"]
        word = batch["word"] if word is None else word
        chars = self.chars(batch["chars"])[batch["form"]]
        x = self.drop(torch.cat([self.words(word), chars, self.pos(batch["pos"])], -1))
        h = self.drop(bilstm_by_length(self.lstm, x, mask.sum(1)))  # the packed BiLSTM (ssvm_torch/deep/bilstm.py)
        scores, extra = self.out(h), None
        if self.attributes is not None:
            ids, offsets = batch["bag"]
            weights = None
            if self.training and self.attr_dropout > 0:
                # attribute dropout: each attribute of each token is dropped with probability p (kept ones
                # scaled by 1/(1-p)), so the sparse rows cannot fit the training set alone, the hinge keeps
                # a margin to learn from and the BiLSTM keeps learning
                keep = torch.rand(ids.shape, device=ids.device) >= self.attr_dropout
                weights = keep.to(self.attributes.weight.dtype) / (1.0 - self.attr_dropout)
            flat = self.attributes(ids, offsets, per_sample_weights=weights)   # (tokens, K, 3K or 4K), row-major
            padded = flat.new_zeros(*mask.shape, flat.shape[1]).masked_scatter(mask[..., None], flat)
            K = scores.shape[-1]
            scores = scores + padded[..., :K]
            extra = padded[..., K:] if self.max_segment else None
        return scores, h, extra

    def dense_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("attributes.")]

    def sparse_parameters(self):
        return [] if self.attributes is None else [self.attributes.weight]
