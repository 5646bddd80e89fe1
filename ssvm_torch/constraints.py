"""Chunking schemes (BIO = IOB2, IOB1, BIOES): tag-sequence constraints as boolean masks, and the
conversion between BIO and BIOES tags (:func:`bio_to_bioes`, :func:`bioes_to_bio`).

A constraint set is a dict of boolean tensors ``{"start": (K,), "transitions": (K, K), "end": (K,)}``
with True = allowed and ``transitions[i, j]`` = "tag i may be followed by tag j" (the orientation
of pytorch-crf's ``transitions`` parameter). The rules are those of AllenNLP's
``allowed_transitions`` (BIOES = its BIOUL with E = L, S = U):

* BIO:   a chunk starts with B-x; I-x only after B-x or I-x; anything may follow O, B, I.
* IOB1:  a chunk starts with I-x; B-x only right after B-x or I-x (two adjacent chunks of one type).
* BIOES: B-x is followed by I-x or E-x, I-x by I-x or E-x; a chunk of one token is S-x; a sequence
  starts with O, B or S and ends with O, E or S.

:func:`penalties` turns a constraint set into additive scores (0 allowed, -inf forbidden) in the
project's internal orientation ``trans[next, prev]``: the one place where the orientation flips.
Both the layer (:class:`ssvm_torch.nn.LinearChain`) and the linear chain models use it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from .errors import SSVMInputError, check

SCHEMES = {"BIO": ("B", "I"), "IOB2": ("B", "I"), "IOB1": ("B", "I"), "BIOES": ("B", "I", "E", "S")}


def _split(label: str, prefixes, scheme: str):
    if label == "O":
        return "O", None
    head, sep, kind = label.partition("-")
    if not sep or head not in prefixes or not kind:
        raise SSVMInputError(f"labels: expected 'O' or one of {', '.join(p + '-TYPE' for p in prefixes)} "
                             f"for scheme {scheme}, got {label!r}")
    return head, kind


def _allowed(scheme, a, ka, b, kb) -> bool:
    """May tag (b, kb) follow tag (a, ka)? ``a`` is "START" at the first position, ``b`` "END" after the last."""
    same = ka == kb
    if scheme == "BIOES":
        if a == "START":
            return b in ("O", "B", "S")
        if b == "END":
            return a in ("O", "E", "S")
        return (a in ("O", "E", "S") and b in ("O", "B", "S")) or (a in ("B", "I") and b in ("I", "E") and same)
    if scheme == "IOB1":
        if a == "START":
            return b in ("O", "I")
        if b == "END":
            return True
        return b in ("O", "I") or (b == "B" and a in ("B", "I") and same)
    if a == "START":                       # BIO / IOB2
        return b in ("O", "B")
    if b == "END":
        return True
    return b in ("O", "B") or (b == "I" and a in ("B", "I") and same)


def _refuse_unreachable(scheme: str, parts) -> None:
    """A chunk type whose tags the scheme can never use is refused: under BIOES a chunk of several
    tokens needs B-X and E-X (B opens it, E closes it; I only continues), under BIO an I-X needs a B-X
    before it. Labels of another scheme (BIO tags given as "BIOES") would otherwise make every such
    chunk unlabelable and the decoder return all "O"."""
    kinds = {}
    for head, kind in parts:
        if kind is not None:
            kinds.setdefault(kind, set()).add(head)
    for kind, heads in sorted(kinds.items()):
        need = {"BIOES": {"B", "E"} if heads & {"B", "I", "E"} else set(),
                "BIO": {"B"} if "I" in heads else set()}.get(scheme, set())
        if need - heads:
            hint = " (these look like BIO tags: use scheme 'BIO')" if scheme == "BIOES" and heads <= {"B", "I"} else ""
            raise SSVMInputError(f"labels: scheme {scheme} needs {' and '.join(sorted(h + '-' + kind for h in need))} "
                                 f"for the chunk type {kind!r}, which has only {', '.join(sorted(h + '-' + kind for h in heads))}: "
                                 f"no tag sequence could label such a chunk{hint}")


def allowed_transitions(scheme: str, labels) -> dict[str, torch.Tensor]:
    """The constraint set of ``scheme`` ("BIO" = "IOB2", "IOB1", "BIOES"; case-insensitive) over
    the tags ``labels``: a sequence of K tag names ("B-NP", "I-NP", "O", ...) with labels[k] the
    name of tag k, or an AllenNLP-style ``{k: name}`` dict with keys 0..K-1."""
    check(isinstance(scheme, str) and scheme.upper() in SCHEMES, "scheme", f"one of {sorted(SCHEMES)}", repr(scheme))
    scheme = "BIO" if scheme.upper() == "IOB2" else scheme.upper()
    if isinstance(labels, Mapping):
        keys = sorted(labels)
        check(keys == list(range(len(keys))), "labels", "a dict with keys 0..K-1", keys[:5])
        labels = [labels[k] for k in keys]
    check(isinstance(labels, Sequence) and not isinstance(labels, str) and len(labels) >= 1
          and all(isinstance(x, str) for x in labels), "labels", "a non-empty sequence of tag names (str)",
          type(labels).__name__)
    check(len(set(labels)) == len(labels), "labels", "distinct tag names", list(labels))
    parts = [_split(x, SCHEMES[scheme], scheme) for x in labels]
    _refuse_unreachable(scheme, parts)
    K = len(parts)
    start = torch.tensor([_allowed(scheme, "START", None, p, k) for p, k in parts])
    end = torch.tensor([_allowed(scheme, p, k, "END", None) for p, k in parts])
    trans = torch.tensor([[_allowed(scheme, p, k, q, m) for q, m in parts] for p, k in parts]).view(K, K)
    return {"start": start, "transitions": trans, "end": end}


def check_constraints(constraints, K: int) -> dict[str, torch.Tensor]:
    """Validate a constraint set for K tags: boolean tensors of the right shapes, at least one allowed
    start and one allowed end tag (refused by name otherwise). Whether a sequence of a given length
    can be labeled at all is found by the oracles, which name the row when none can."""
    check(isinstance(constraints, Mapping) and set(constraints) == {"start", "transitions", "end"},
          "constraints", "a dict with keys 'start', 'transitions', 'end'",
          sorted(constraints) if isinstance(constraints, Mapping) else type(constraints).__name__)
    out = {}
    for name, shape in (("start", (K,)), ("transitions", (K, K)), ("end", (K,))):
        t = constraints[name]
        check(torch.is_tensor(t) and t.dtype == torch.bool and tuple(t.shape) == shape, f"constraints[{name!r}]",
              f"a bool tensor of shape {shape}", (getattr(t, "dtype", type(t)), tuple(getattr(t, "shape", ()))))
        out[name] = t
    check(bool(out["start"].any()) and bool(out["end"].any()), "constraints",
          "at least one allowed start tag and one allowed end tag", "none allowed")
    return out


def penalties(constraints, dtype=torch.float64, device=None):
    """(start, end, trans[next, prev]) additive scores: 0 where allowed, -inf where forbidden."""
    def pen(mask):
        return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask.to(device), float("-inf"))
    return pen(constraints["start"]), pen(constraints["end"]), pen(constraints["transitions"]).t().contiguous()


def first_violation(constraints, labels: torch.Tensor, mask: torch.Tensor):
    """The first (row, position) at which labels (B, T) (read where ``mask`` is on) break the
    constraint set, or None. The position is where the forbidden tag stands (for a forbidden end,
    the row's last masked-on position)."""
    start, trans, end = (constraints[k].to(labels.device) for k in ("start", "transitions", "end"))
    lab = labels.clamp(min=0)
    B, T = labels.shape
    on = mask.bool()
    # previous masked-on label of every position (-1 if none): a running index of the last on position
    idx = torch.where(on, torch.arange(T, device=labels.device).expand(B, T), torch.full_like(lab, -1))
    last_on = torch.cummax(idx, 1).values
    prev_pos = torch.cat([torch.full_like(last_on[:, :1], -1), last_on[:, :-1]], 1)
    prev_lab = lab.gather(1, prev_pos.clamp(min=0))
    bad = on & torch.where(prev_pos < 0, ~start[lab], ~trans[prev_lab, lab])
    row_end = last_on[:, -1]
    bad_end = (row_end >= 0) & ~end[lab.gather(1, row_end.clamp(min=0)[:, None])[:, 0]]
    bad = bad | (torch.nn.functional.one_hot(row_end.clamp(min=0), T).bool() & bad_end[:, None])
    if not bool(bad.any()):
        return None
    flat = int(torch.nonzero(bad.reshape(-1))[0])
    return flat // T, flat % T


def bio_to_bioes(tags: list[str]) -> list[str]:
    """One sentence's BIO (IOB2) tags in BIOES: a chunk of one token is S-X, the last token of a longer
    chunk E-X. An I-X that does not continue a chunk of type X starts one (conlleval's reading)."""
    out = []
    for i, tag in enumerate(tags):
        if tag == "O":
            out.append("O")
            continue
        head, _, kind = tag.partition("-")
        check(head in ("B", "I") and kind, "tags", "BIO tags ('O', 'B-X', 'I-X')", repr(tag))
        starts = head == "B" or i == 0 or tags[i - 1] == "O" or tags[i - 1].partition("-")[2] != kind
        nxt = tags[i + 1] if i + 1 < len(tags) else "O"
        continues = nxt.startswith("I-") and nxt.partition("-")[2] == kind
        out.append(("B-" if continues else "S-") + kind if starts else ("I-" if continues else "E-") + kind)
    return out


def bioes_to_bio(tags: list[str]) -> list[str]:
    """BIOES tags back to BIO: S-X -> B-X, E-X -> I-X (B, I and O unchanged)."""
    swap = {"S": "B", "E": "I"}
    return [t if t == "O" else swap.get(t[0], t[0]) + t[1:] for t in tags]
