"""Segmentations to and from what users hold: chunk tags (BIO / IOB2 or BIOES, CoNLL-2000's and NER's), span
lists and per-position (label, begins) states. Outside positions ("O") are one-position segments of the label ``outside`` (the usual semi-Markov set-up
for chunking and NER), so tags -> segments -> tags is exact (tested on
every sentence of CoNLL-2000). Chunks are read the way conlleval reads them: a chunk starts at B-X (S-X), or at
I-X (E-X) whose previous tag is O or of another type."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import SSVMInputError, check

SCHEMES = ("BIO", "BIOES")


def _split(tag: str, scheme: str, outside: str, where: str):
    if not isinstance(tag, str):
        raise SSVMInputError(f"tags: expected tag strings, got {type(tag).__name__} {tag!r} at {where}")
    if tag == outside:
        return "O", None
    prefix, _, kind = tag.partition("-")
    if not kind or prefix not in ("B", "I") + (("E", "S") if scheme == "BIOES" else ()):
        raise SSVMInputError(f"tags: expected {outside!r} or a {scheme} tag such as 'B-NP', got {tag!r} at {where}")
    return prefix, kind


def _read(tags, labels, scheme: str, outside: str, unknown: bool):
    """(labels, begins, ends (B, T) int64, -1 where not observed; lengths (B,)) of tag lists (module docstring);
    ``unknown``: None marks a position whose tag is unknown (refused as a non-string tag otherwise)."""
    check(scheme in SCHEMES, "scheme", f"one of {list(SCHEMES)}", repr(scheme))
    check(isinstance(tags, (list, tuple)) and all(isinstance(s, (list, tuple)) for s in tags), "tags",
          "a list of sentences, each a list of tag strings" + (" or None (unknown)" if unknown else ""),
          type(tags).__name__)
    index = {name: i for i, name in enumerate(labels)}
    check(len(index) == len(labels), "labels", "distinct names", list(labels))
    T = max((len(s) for s in tags), default=0)
    # filled as numpy arrays, one conversion at the end: a torch element write per position cost CoNLL-2000's
    # 260k positions seconds
    out = np.full((3, len(tags), T), -1, dtype=np.int64)
    for b, sentence in enumerate(tags):
        read = [None if tag is None and unknown else _split(tag, scheme, outside, f"sentence {b}, position {t}")
                for t, tag in enumerate(sentence)]
        label_row, begin_row, end_row = out[0, b], out[1, b], out[2, b]
        for t, tag in enumerate(read):
            if tag is None:
                continue
            prefix, kind = tag
            name = outside if prefix == "O" else kind
            if name not in index:
                raise SSVMInputError(f"labels: expected every segment label of the tags, {name!r} (sentence {b}, "
                                     f"position {t}) is not among {list(labels)}")
            label_row[t] = index[name]
            before = read[t - 1] if t else ("O", None)
            if before is None:                        # the tag alone: B-, S-, O begin; I-, E- go on
                begins = prefix in ("O", "B", "S")
            else:                                     # conlleval's reading, the BIOES chunk closed by E- / S-
                ended = before[0] in ("O", "E", "S")
                begins = prefix in ("O", "B", "S") or kind != before[1] or (scheme == "BIOES" and ended)
            begin_row[t] = int(begins)
            if t + 1 < len(sentence) and read[t + 1] is None and (prefix == "O" or scheme == "BIOES"):
                end_row[t] = int(prefix in ("O", "E", "S"))
    out = list(torch.from_numpy(out))
    return out, torch.tensor([len(s) for s in tags], dtype=torch.int64)


def segments_from_tags(tags, labels, scheme: str = "BIO", outside: str = "O", device=None):
    """(segments (B, T) int64, lengths (B,)) of sentences given as lists of chunk tags; ``labels`` lists the
    segment labels (chunk types and ``outside``), a label's index being its id. T = the longest sentence."""
    (label, begins, _), lengths = _read(tags, labels, scheme, outside, unknown=False)
    segments = torch.where(begins == 1, label, torch.full_like(label, -1))
    return segments.to(device or "cpu"), lengths.to(device or "cpu")


def partial_from_tags(tags, labels, scheme: str = "BIO", outside: str = "O", device=None):
    """(PartialSegmentation, lengths (B,)) of sentences given as lists of chunk tags with None at the positions
    whose tag is unknown (partial annotation, :mod:`ssvm_torch.segments.partial`). An observed tag gives its
    position's segment label and begin flag, read as :func:`segments_from_tags` reads them when the tag before is
    known and from the tag alone (B-, S-, O begin; I-, E- go on) when it is not; and, when the next tag is
    unknown, the end flag the tag implies (O, and BIOES's E-, S- end; BIOES's B-, I- go on). A sentence without
    None observes exactly the segmentation :func:`segments_from_tags` returns."""
    from .partial import PartialSegmentation
    fields, lengths = _read(tags, labels, scheme, outside, unknown=True)
    dev = device or "cpu"
    return PartialSegmentation(*(x.to(dev) for x in fields)), lengths.to(dev)


def spans(segments: torch.Tensor, lengths: torch.Tensor) -> list[list[tuple[int, int, int]]]:
    """Every row's segments as (start, end, label) with end exclusive, in order (one host read)."""
    from .checks import segment_lengths
    seglen = segment_lengths(segments, lengths).tolist()
    labels = segments.tolist()
    return [[(t, t + w, labels[b][t]) for t, w in enumerate(row) if w > 0] for b, row in enumerate(seglen)]


def tags_from_segments(segments: torch.Tensor, lengths: torch.Tensor, labels, scheme: str = "BIO",
                       outside: str = "O") -> list[list[str]]:
    """The chunk tags of every row (a list of strings of its length): a segment of label ``outside`` gives O at
    each of its positions, any other one B-X I-X ... (BIOES: S-X, or B-X I-X ... E-X)."""
    check(scheme in SCHEMES, "scheme", f"one of {list(SCHEMES)}", repr(scheme))
    rows = spans(segments, lengths)
    top = max((k for row in rows for _, _, k in row), default=-1)
    check(top < len(labels), "labels", f"a name for every segment label (at least {top + 1})", len(labels))
    out = []
    for row in rows:
        tags = []
        for start, end, k in row:
            name = labels[k]
            if name == outside:
                tags += [outside] * (end - start)
            elif scheme == "BIOES" and end - start == 1:
                tags.append(f"S-{name}")
            else:
                inner = [f"I-{name}"] * (end - start - 1)
                if scheme == "BIOES":
                    inner[-1] = f"E-{name}"
                tags += [f"B-{name}"] + inner
        out.append(tags)
    return out


def segment_states(segments: torch.Tensor, lengths: torch.Tensor, K: int) -> torch.Tensor:
    """The per-position states (B, T) of segmentations: k where a segment of label k begins, K + k where it goes
    on, -1 beyond each row (the data's ``Y`` of :class:`~ssvm_torch.models.SemiMarkovModel`, the BIO reading of
    segments)."""
    from .scoring import starts_and_labels
    begins, labels, _ = starts_and_labels(segments, lengths)
    return torch.where(labels < 0, labels, labels + K * (~begins).long())


def segments_of_states(states: torch.Tensor, K: int) -> torch.Tensor:
    """The segmentations (B, T) of per-position states (-1 beyond each row): the label where a segment begins."""
    return torch.where((states >= 0) & (states < K), states, torch.full_like(states, -1))
