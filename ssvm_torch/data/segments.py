"""Chunk-tagged sequence data as segmentations (the data of :class:`~ssvm_torch.models.semimarkov.SemiMarkovModel`).

:func:`chunk_segments` reads a :class:`ChainData` whose labels are chunk tags (CoNLL-2000's, from
:func:`ssvm_torch.data.conll.load_conll2000`) into segments the way conlleval reads chunks
(:func:`ssvm_torch.segments.segments_from_tags`): one label per chunk type plus the outside label "O" (label 0),
whose segments cover one position, and one state per position, k where a segment of label k begins and K + k
where it goes on. Features, offsets and the file's gold BIO tags (``meta["tags"]``, which chunk F1 is scored
against) are kept.
"""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check
from ..segments import segments_from_tags
from ..segments.convert import segment_states
from .types import ChainData

OUTSIDE = "O"


def chunk_types(data: ChainData) -> list[str]:
    """"O" and the chunk types of the data's BIO tags, sorted: the segment labels (label 0 = "O")."""
    check("tags" in data.meta, "data.meta", "the file's BIO chunk tags (meta['tags'], e.g. load_conll2000's)",
          sorted(data.meta))
    return [OUTSIDE] + sorted({t[2:] for s in data.meta["tags"] for t in s if t != OUTSIDE})


def chunk_segments(data: ChainData, labels: list[str] | None = None) -> ChainData:
    """``data`` with its labels replaced by segment states over ``labels`` (default :func:`chunk_types` of the
    data; pass the training split's to read an evaluation split). A chunk of a type outside ``labels`` is refused
    in training data; in evaluation data (``allow_unknown``) its positions read as "O" segments for the task loss,
    while chunk F1 (scored on ``meta["tags"]``) still counts it as missed."""
    labels = chunk_types(data) if labels is None else list(labels)
    check(labels and labels[0] == OUTSIDE, "labels", f"a list of segment labels starting with {OUTSIDE!r}", labels)
    known = set(labels)
    tags = []
    for b, sentence in enumerate(data.meta["tags"]):
        row = []
        for t, tag in enumerate(sentence):
            if tag != OUTSIDE and tag[2:] not in known:
                if not data.allow_unknown:
                    raise SSVMInputError(f"data: sentence {b}, position {t}: chunk type {tag[2:]!r} is not among the "
                                         f"segment labels {labels}")
                tag = OUTSIDE
            row.append(tag)
        tags.append(row)
    check(len(tags) == data.n, "data.meta['tags']", f"{data.n} sentences", len(tags))
    K = len(labels)
    segments, lengths = segments_from_tags(tags, labels, scheme="BIO")
    states = segment_states(segments, lengths, K)
    Y = states[torch.arange(segments.shape[1])[None, :] < lengths[:, None]]
    check(Y.shape[0] == data.Y.shape[0], "data.meta['tags']", f"{data.Y.shape[0]} positions (the data's)", Y.shape[0])
    meta = {**data.meta, "segment_labels": labels, "tag_scheme": "BIO"}
    return ChainData(data.X, Y, data.offsets, 2 * K, data.name, data.allow_unknown, meta, data.E)
