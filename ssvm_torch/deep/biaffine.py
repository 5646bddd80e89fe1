"""The biaffine dependency parser's network (Dozat & Manning 2017), without pre-trained vectors: word
embeddings learned from scratch (with UNK dropout in training), a character CNN over each form (Ma & Hovy
2016's, :class:`ssvm_torch.deep.conll_tagger.CharCNN`), gold UPOS embeddings, a BiLSTM, and two biaffine
scorers on MLP projections of its states:

    arc_scores[b, m, h] = d_m^T U h_h + h_h . u         (d = MLP_dep(r_m), h = MLP_head(r_h); Sec. 2.2)
    rel_scores[b, m, l] = [d'_m; 1]^T W_l [h'_{y_m}; 1]   (relations of word m given its head y_m)

The arc scores go to a head loss (:mod:`ssvm_torch.deep.ud_parser`: per-word cross-entropy, or a tree loss
through :class:`ssvm_torch.nn.DependencyTree`); relations are scored at the gold head in training and at
the decoded head in prediction, so every head loss shares one relation classifier.

With ``sib_dim`` > 0 the network also scores adjacent siblings for the second-order tree layer, by the
triaffine scorer of Zhang et al. (2020) (SuPar's ``Triaffine``, bias on the sibling and modifier sides):

    sib_scores[b, m, h, s] = [s'_s; 1]^T W_(h) [d'_m; 1],   W_(h)[i, j] = sum_k W[i, k, j] h'_h[k]

with three MLP projections s', d', h' of the BiLSTM states (sibling, modifier, head roles).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bilstm import bilstm_by_length
from .conll_tagger import CharCNN
from .ud_text import PAD, ROOT


class MLP(nn.Sequential):
    def __init__(self, n_in: int, n_out: int, dropout: float):
        super().__init__(nn.Linear(n_in, n_out), nn.LeakyReLU(0.1), nn.Dropout(dropout))


class BiaffineParser(nn.Module):
    """Arc scores (B, N, N) and relation scores of a padded batch (:meth:`ssvm_torch.deep.ud_text.UDSplit.batch`)."""

    def __init__(self, n_words: int, n_chars: int, n_upos: int, n_rels: int, word_dim: int = 100,
                 char_dim: int = 30, char_filters: int = 50, upos_dim: int = 50, hidden: int = 200,
                 layers: int = 2, arc_dim: int = 256, rel_dim: int = 64, dropout: float = 0.33,
                 upos_input: bool = True, sib_dim: int = 0, tag_head: nn.Module | None = None,
                 tag_feed_dim: int = 0):
        super().__init__()
        self.upos_input = upos_input
        self.words = nn.Embedding(n_words, word_dim, padding_idx=PAD)
        self.chars = CharCNN(n_chars, char_dim, char_filters)
        self.upos = nn.Embedding(n_upos, upos_dim, padding_idx=PAD) if upos_input else None
        self.drop = nn.Dropout(dropout)
        n_in = word_dim + char_filters + (upos_dim if upos_input else 0)
        self.lstm = nn.LSTM(n_in, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
        # tag_feed_dim > 0 (a words-only parser whose scorers read its predicted tags): the scorers' input is the
        # BiLSTM state and the predicted tag's embedding (scorer_states)
        self.tag_feed = nn.Embedding(n_upos, tag_feed_dim, padding_idx=PAD) if tag_feed_dim > 0 else None
        n_scorer = 2 * hidden + tag_feed_dim
        self.arc_dep, self.arc_head = MLP(n_scorer, arc_dim, dropout), MLP(n_scorer, arc_dim, dropout)
        self.rel_dep, self.rel_head = MLP(n_scorer, rel_dim, dropout), MLP(n_scorer, rel_dim, dropout)
        self.arc_U = nn.Parameter(torch.zeros(arc_dim, arc_dim))     # zero start: uniform heads (D&M 2017)
        self.arc_u = nn.Parameter(torch.zeros(arc_dim))
        self.rel_W = nn.Parameter(torch.zeros(n_rels, rel_dim + 1, rel_dim + 1))
        self.tagger = tag_head                  # the UPOS head of a words-only parser (ssvm_torch/deep/ud_tagging.py)
        self.xpos_tagger = None                 # its XPOS head, if any: set after the rest (ud_parser.build_network)
        self.sib_dim = sib_dim
        if sib_dim > 0:
            self.sib_s, self.sib_d, self.sib_h = (MLP(n_scorer, sib_dim, dropout) for _ in range(3))
            self.sib_W = nn.Parameter(torch.zeros(sib_dim + 1, sib_dim, sib_dim + 1))   # zero start: no sibling effect

    def encode(self, batch: dict, word: torch.Tensor | None = None) -> torch.Tensor:
        """BiLSTM states (B, N, 2 hidden) of root + words; ``word`` replaces the word ids (UNK dropout)."""
        word = batch["word"] if word is None else word
        parts = [self.words(word), self.chars(batch["chars"], batch["char_rows"])[batch["form"]]]
        if self.upos is not None:
            parts.append(self.upos(batch["upos"]))
        x = self.drop(torch.cat(parts, -1))
        # the packed BiLSTM's outputs, root + words, without packing (ssvm_torch/deep/bilstm.py: faster on a CPU)
        return self.drop(bilstm_by_length(self.lstm, x, batch["lengths"] + 1))

    def scorer_states(self, states: torch.Tensor, mask: torch.Tensor, tags: torch.Tensor | None = None,
                      tag_noise: float = 0.0) -> torch.Tensor:
        """What the arc, relation and sibling scorers read: the BiLSTM ``states`` (B, N, 2 hidden), and for a
        network built with ``tag_feed_dim`` > 0 the embedding of the tagger's predicted UPOS at each word (its
        Viterbi tags, ``mask`` the words; ROOT at the root, PAD past the words) concatenated to them. The tags are
        decoded without gradient: a hard pipeline inside one network, so the tree loss trains the embedding and
        the encoder, not the tagger's choice. ``tags`` (B, N): the tagger's Viterbi tags of ``states`` when the
        caller has decoded them already (a decoder that outputs them too), so that they are not decoded twice;
        ``tag_noise`` (training): the share of decoded tags replaced by confusable ones
        (:func:`ssvm_torch.deep.ud_tagging.confusable_tags`)."""
        if self.tag_feed is None:
            return states
        if tags is None:
            with torch.no_grad():
                tags = self.tagger.decode(states, mask, tag_noise)
        tags = torch.where(mask, tags, torch.full_like(tags, PAD))
        tags[:, 0] = ROOT
        return torch.cat([states, self.drop(self.tag_feed(tags))], -1)

    def arc_scores(self, states: torch.Tensor) -> torch.Tensor:
        """(B, N, N): [b, m, h] = dep_m^T U head_h + head_h . u."""
        dep, head = self.arc_dep(states), self.arc_head(states)
        return torch.einsum("bmi,ij,bhj->bmh", dep, self.arc_U, head) + (head @ self.arc_u)[:, None, :]

    def sib_scores(self, states: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, N, N): [b, m, h, s] the triaffine score of m and s being adjacent dependents of h (module
        docstring; SuPar's layout), for a network built with ``sib_dim`` > 0. ``lengths`` (B,): words per
        sentence (root excluded); the entries past a sentence's root + words are 0 (the tree layer reads
        none of them), and each sentence costs n d^3 + n^2 d^2 + n^3 d for its own n = length + 1 rather
        than the batch's padded N: the padded cubic products were most of a second-order training step."""
        sib, dep, head = self.sib_s(states), self.sib_d(states), self.sib_h(states)
        ones = sib.new_ones(sib.shape[:2] + (1,))
        sib, dep = torch.cat([sib, ones], -1), torch.cat([dep, ones], -1)
        B, N, d = head.shape
        lengths = torch.full((B,), N - 1, device=head.device) if lengths is None else lengths.to(head.device)
        sizes = (lengths + 1).tolist()
        inside = torch.arange(N, device=head.device)[None, :] <= lengths[:, None]      # root + words
        # W_(h) of every sentence's heads in one product, [(h, i), j] per sentence: one GEMM and one weight
        # gradient rather than one per sentence
        per_heads = (head[inside] @ self.sib_W.transpose(0, 1).reshape(d, -1)).split(sizes)
        out = []
        # unbind, not batch[b] slices: each slice's backward would write a zero tensor of the whole batch
        for n, s_b, d_b, per_head in zip(sizes, sib.unbind(0), dep.unbind(0), per_heads):
            # [m, (h, i)] = sum_j dep[m, j] W_(h)[i, j], then [m, h, s] = sum_i that * sib[s, i]: two matrix products
            t = d_b[:n] @ per_head.view(n * (d + 1), d + 1).T
            score = (t.view(n * n, d + 1) @ s_b[:n].T).view(n, n, n)
            out.append(score if n == N else F.pad(score, (0, N - n, 0, N - n, 0, N - n)))
        return torch.stack(out)

    def _rel_sides(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """([d_m; 1]^T W_l (B, N, L, d + 1), [h; 1] (B, N, d + 1)): the relation biaffine's two sides."""
        dep, head = self.rel_dep(states), self.rel_head(states)
        ones = dep.new_ones(dep.shape[:2] + (1,))
        dep, head = torch.cat([dep, ones], -1), torch.cat([head, ones], -1)
        # [d_m; 1]^T W_l for every l in one matrix product, then the dot with [h; 1] at the head: the einsum
        # "bmi,lij,bmj->bml" in that order, which torch's einsum does not pick (it went through a batch of
        # B * N tiny products, 1.7x slower forward and backward at the recipe's sizes)
        L, d = self.rel_W.shape[0], dep.shape[2]
        return (dep @ self.rel_W.transpose(0, 1).reshape(d, L * d)).view(*dep.shape[:2], L, d), head

    def rel_scores(self, states: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """(B, N, L): the relation scores of every word m attached to heads[b, m] (clamped at 0 where -1)."""
        left, head = self._rel_sides(states)
        at_head = head.gather(1, heads.clamp(min=0)[..., None].expand(-1, -1, head.shape[2]))
        return (left * at_head[:, :, None, :]).sum(-1)

    def rel_scores_all(self, states: torch.Tensor) -> torch.Tensor:
        """(B, N, N, L): ``[b, m, h, l]`` the score of relation l on the arc h -> m, at every candidate head h (the
        values of :meth:`rel_scores` at each head, in one product)."""
        left, head = self._rel_sides(states)
        return torch.einsum("bmld,bhd->bmhl", left, head)
