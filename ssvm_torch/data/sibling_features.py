"""Adjacent-sibling feature templates for second-order dependency parsing (McDonald & Pereira 2006, Section 3:
MSTParser's second-order features), their dictionary from the gold trees, and the scores of every sibling part
(h, s, m) of a sentence, in torch (any device) and compiled (:mod:`ssvm_torch.data.sibling_keys`).

A sibling part is a word m, its head h and s, the dependent of h between h and m nearest to m (the adjacent
sibling of :mod:`ssvm_torch.trees.sibling`). The dependent nearest its head on each side has none; with
``first_child`` (the default, McDonald & Pereira 2006's s(h, -, m)) it has the first-child part (h, h, m), whose
sibling columns read "no sibling" (the code BOS) and whose sdist is the side and distance of h and m; without it
(SuPar's convention) it has no part. A template item is a conjunction of parts joined by ``|``:

    h<col>, s<col>, m<col>    a column of the head / the sibling / the modifier (the arc templates' columns: w the
                              lower-cased form, f its first five characters, p XPOS, u UPOS, l the lemma)
    dir                       the side of the head the two dependents are on
    sdist                     direction and binned distance between s and m (1, 2, 3, 4, 5, 6-10, > 10)

The default :data:`MCDONALD_PEREIRA` (with first-child parts; ``mcdonald-pereira-adjacent`` the same items
without them) is MSTParser's set: the POS trigram of head, sibling and modifier with and
without the side (``POS_TRIP``), and the sibling pairs of POS / word conjunctions each with the side and with
the distance (``CH_PAIR``, ``CH_WPAIR``, ``CH_WPOS``, ``CH_PWOS``), plus UPOS versions of the POS items. An item
without a head part depends on (s, m) alone (the side too: s lies between h and m), so a sentence's n^2 pairs
carry those, and only the head's items are looked up per part (n^3 / 3 of them).

Featurization builds no strings: the columns are the arc featurization's integer codes
(:func:`ssvm_torch.data.arc_features.code_columns`), an item's value is a mixed-radix int64 key, and the
dictionary is the keys of the gold sibling parts of the training trees seen at least ``min_count`` times; a
key's feature id is ``offset`` + its place in the dictionary (after the arc features' ids).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SSVMInputError
from .arc_features import COLUMNS, N_ATT, column_string, distance_string, named_template, parse_items

_PART = re.compile(r"^(?:(dir|sdist)|([hsm])([wfpul]))$")
TABLE_MAX = 1 << 22            # an item whose key space is at most this is looked up in a dense table


@dataclass(frozen=True)
class SiblingTemplate:
    """Items, each a tuple of parts (kind, column): kind 0 head, 1 sibling, 2 modifier, 3 dir, 4 sdist;
    ``first_child``: whether a head's nearest dependent on each side has the part (h, h, m) (module docstring)."""

    name: str
    items: tuple
    first_child: bool = True

    @classmethod
    def parse(cls, spec, name: str = "custom", first_child: bool = True) -> "SiblingTemplate":
        def part(text, piece):
            m = _PART.match(piece)
            if m is None:
                raise SSVMInputError(f"sibling template item {text!r}: expected parts h<col>, s<col>, m<col>, "
                                     f"dir or sdist joined by '|', columns {list(COLUMNS)}; got {piece!r}")
            return (3 if m.group(1) == "dir" else 4, 0) if m.group(1) else ("hsm".index(m.group(2)),
                                                                          COLUMNS.index(m.group(3)))

        def item(text, parts):
            if not any(kind in (1, 2) for kind, _ in parts):
                raise SSVMInputError(f"sibling template item {text!r}: needs a sibling or a modifier part")
        if not isinstance(first_child, bool):
            raise SSVMInputError(f"first_child: expected True or False, got {first_child!r}")
        return cls(name, parse_items(spec, "sibling template", "'hp|sp|mp'", part, item), first_child)

    @staticmethod
    def item_name(item) -> str:
        return "|".join("dir" if k == 3 else "sdist" if k == 4 else "hsm"[k] + COLUMNS[c] for k, c in item)

    def text(self) -> str:
        """The items, and ``+first-child`` where the template has first-child parts (a record of the model)."""
        return " ".join(self.item_name(item) for item in self.items) + (" +first-child" if self.first_child else "")

    def key(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()[:24]

    def part_strings(self, sentence, h: int, s: int, m: int) -> list[str]:
        """The feature strings of the sibling part (h, s, m) of one sentence of (form, upos, xpos, lemma) tuples
        (h = 0 the root; s = h a first-child part): the readable reference the compiled keys are tested against."""
        def value(col, pos, kind):
            return "<first>" if kind == 1 and s == h else column_string(sentence, col, pos)
        sdist = distance_string(s, m)
        out = []
        for item in self.items:
            vals = [("R" if h < m else "L") if k == 3 else sdist if k == 4 else value(c, (h, s, m)[k], k)
                    for k, c in item]
            out.append(f"{self.item_name(item)}=" + "|".join(vals))
        return out


MCDONALD_PEREIRA = SiblingTemplate.parse(
    "hp|sp|mp|dir hp|sp|mp sp|mp|dir sp|mp|sdist sw|mw|dir sw|mw|sdist sw|mp|dir sw|mp|sdist sp|mw|dir sp|mw|sdist "
    "hu|su|mu|dir su|mu|sdist", name="mcdonald-pereira")
SIBLING_TEMPLATES = {"mcdonald-pereira": MCDONALD_PEREIRA,
                     "mcdonald-pereira-adjacent": SiblingTemplate("mcdonald-pereira-adjacent", MCDONALD_PEREIRA.items,
                                                                  first_child=False)}


def get_sibling_template(spec) -> SiblingTemplate:
    """A named template (:data:`SIBLING_TEMPLATES`), an item string, or a SiblingTemplate."""
    return named_template(spec, SiblingTemplate, SIBLING_TEMPLATES, lambda t: "|" in t or bool(_PART.match(t)),
                          "sibling features", "'hp|sp|mp'")


def sibling_radices(template: SiblingTemplate, radix: np.ndarray):
    """(parts (P, 3) int64: item, kind, column; part_ptr (T + 1,); multipliers (P,); key space per item (T,))."""
    rows, ptr, mult, space = [], [0], [], []
    for t, item in enumerate(template.items):
        m = 1
        for kind, col in item:
            rows.append((t, kind, col))
            mult.append(m)
            m *= 2 if kind == 3 else N_ATT if kind == 4 else int(radix[col])
            if m >= 2 ** 62:
                raise SSVMInputError(f"sibling template item {template.item_name(item)!r}: its key space exceeds 2^62")
        ptr.append(len(rows))
        space.append(m)
    return (np.asarray(rows, dtype=np.int64).reshape(-1, 3), np.asarray(ptr, dtype=np.int64),
            np.asarray(mult, dtype=np.int64), np.asarray(space, dtype=np.int64))


@dataclass
class SiblingDesign:
    """The sibling features of one split: ``codes`` (W, 5) int64 the words' column codes; the template's
    ``parts`` / ``part_ptr`` / ``mult`` (:func:`sibling_radices`) and ``has_head`` (T,) bool; the dictionary
    ``keys`` (K,) sorted within each item, ``key_ptr`` (T + 1,); ``table`` int64 with ``table_ptr`` (T + 1,): each
    item's lookup of a key's place in ``keys`` (a dense table where its key space is at most :data:`TABLE_MAX`,
    else a hash; data/sibling_keys.py's ``item_entry``); ``first_child`` as the template's;
    feature id of dictionary entry k = ``offset`` + k. Every tensor but ``codes`` is shared by the splits."""

    codes: torch.Tensor
    parts: torch.Tensor
    part_ptr: torch.Tensor
    mult: torch.Tensor
    has_head: torch.Tensor
    keys: torch.Tensor
    key_ptr: torch.Tensor
    table: torch.Tensor
    table_ptr: torch.Tensor
    offset: int
    template: str = "custom"
    first_child: bool = True

    @property
    def n_features(self) -> int:
        return int(self.keys.shape[0])

    def to(self, device) -> "SiblingDesign":
        return SiblingDesign(*(t.to(device) for t in (self.codes, self.parts, self.part_ptr, self.mult, self.has_head,
                                                      self.keys, self.key_ptr, self.table, self.table_ptr)),
                             self.offset, self.template, self.first_child)

    def with_words(self, words: torch.Tensor) -> "SiblingDesign":
        """The design of the words ``words`` (a subset's), the dictionary shared."""
        return SiblingDesign(self.codes[words], self.parts, self.part_ptr, self.mult, self.has_head, self.keys,
                             self.key_ptr, self.table, self.table_ptr, self.offset, self.template, self.first_child)

    def host(self) -> tuple:
        """The compiled kernels' argument tuple (NumPy views on the CPU)."""
        return tuple(np.ascontiguousarray(t.cpu().numpy()) for t in (
            self.codes, self.parts, self.part_ptr, self.mult, self.has_head, self.keys, self.key_ptr, self.table,
            self.table_ptr)) + (self.offset, self.first_child)


def build_designs(template: SiblingTemplate, codes: list, radix: np.ndarray, train_offsets: np.ndarray,
                  train_heads: np.ndarray, offset: int, min_count: int = 1, table_max: int = TABLE_MAX) -> list:
    """One :class:`SiblingDesign` per split (``codes`` per split from ``code_columns``), the dictionary from the
    gold sibling parts of the training trees (``train_offsets``, ``train_heads``) seen >= ``min_count`` times;
    the items whose key space is at most ``table_max`` get a dense lookup table, the others a hash."""
    from .sibling_keys import build_hash, gold_sibling_keys
    parts, part_ptr, mult, space = sibling_radices(template, radix)
    items, keys = gold_sibling_keys(codes[0], train_offsets, train_heads, parts, part_ptr, mult, template.first_child)
    T = len(template.items)
    dict_keys, key_ptr = [], [0]
    for t in range(T):
        uniq, counts = np.unique(keys[items == t], return_counts=True)
        dict_keys.append(uniq[counts >= min_count])
        key_ptr.append(key_ptr[-1] + len(dict_keys[-1]))
    flat = np.concatenate(dict_keys).astype(np.int64) if T else np.zeros(0, dtype=np.int64)
    tables, table_ptr = [], [0]
    for t in range(T):
        if space[t] <= table_max:                 # mode 0: a dense table over the key space
            tab = np.full(2 + int(space[t]), -1, dtype=np.int64)
            tab[0], tab[1] = 0, 0
            tab[2 + dict_keys[t]] = np.arange(key_ptr[t], key_ptr[t + 1], dtype=np.int64)
        else:                                     # mode 1: an open-addressing hash, at most half full
            bits = max(int(2 * len(dict_keys[t])).bit_length(), 1)
            tab = np.empty(2 + 2 ** (bits + 1), dtype=np.int64)
            build_hash(np.ascontiguousarray(dict_keys[t], dtype=np.int64), key_ptr[t], bits, tab)
        tables.append(tab)
        table_ptr.append(table_ptr[-1] + len(tab))
    has_head = np.array([any(k == 0 for k, _ in item) for item in template.items], dtype=np.bool_)
    shared = [torch.from_numpy(a) for a in (parts, part_ptr, mult, has_head, flat, np.asarray(key_ptr, dtype=np.int64),
                                            np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64),
                                            np.asarray(table_ptr, dtype=np.int64))]
    return [SiblingDesign(torch.from_numpy(np.ascontiguousarray(c)), *shared, int(offset), template.name,
                          template.first_child) for c in codes]


# -- the scores of every sibling part, in torch (the reference, and the path off the CPU) -----------------------
def _values(design: SiblingDesign, kind: int, col: int, h, s, m, start):
    """An item part's value for index tensors h, s, m (broadcast) of sentences whose words start at ``start``."""
    codes = design.codes[:, col]
    if kind == 3:
        return (h > m).long()
    if kind == 4:
        d = (s - m).abs()
        b = torch.where(d <= 5, d - 1, torch.where(d <= 10, torch.full_like(d, 5), torch.full_like(d, 6)))
        return torch.where(s < m, b, b + 7)
    pos = (h, s, m)[kind]
    word = codes[(start + pos - 1).clamp(min=0, max=codes.shape[0] - 1)]
    word = torch.where(pos == 0, torch.zeros_like(word), word)          # ROOT = 0 (arc_keys.py)
    return torch.where(s == h, torch.ones_like(word), word) if kind == 1 else word    # first child: BOS = 1


def sibling_scores_torch(design: SiblingDesign, w: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor,
                         N: int) -> torch.Tensor:
    """(B, N, N, N) sib_scores[b, m, h, s] = <w, f(h, s, m)> of the sentences whose words start at ``starts``
    (B,), for s strictly between h and m on the words and, with the design's ``first_child``, s = h != m (the
    first-child parts); -inf elsewhere (never read by the decoders)."""
    dev = w.device
    B = starts.shape[0]
    pos = torch.arange(N, device=dev)
    m, h, s = pos[None, :, None, None], pos[None, None, :, None], pos[None, None, None, :]
    n = lengths[:, None, None, None]
    valid = (m >= 1) & (m <= n) & (h <= n) & (s >= 1) & (s <= n) & (torch.minimum(h, m) < s) & (s < torch.maximum(h, m))
    if design.first_child:
        valid = valid | ((m >= 1) & (m <= n) & (h <= n) & (s == h) & (h != m))
    start = starts[:, None, None, None]
    out = torch.zeros(B, N, N, N, dtype=w.dtype, device=dev)
    parts, ptr, mult = design.parts.tolist(), design.part_ptr.tolist(), design.mult.tolist()
    key_ptr = design.key_ptr.tolist()
    zero = torch.zeros((), dtype=w.dtype, device=dev)
    for t in range(len(ptr) - 1):
        lo, hi = key_ptr[t], key_ptr[t + 1]
        if hi == lo:                # no gold part had this item (min_count, a small split): it scores nothing, and
            continue                # w[offset + lo] may lie past w's end (the last item)
        key = torch.zeros(B, N, N, N, dtype=torch.int64, device=dev)
        for q in range(ptr[t], ptr[t + 1]):
            key += _values(design, parts[q][1], parts[q][2], h, s, m, start) * mult[q]
        sorted_keys = design.keys[lo:hi]
        at = torch.searchsorted(sorted_keys, key.reshape(-1)).clamp(max=hi - lo - 1).reshape(key.shape)
        out += torch.where(sorted_keys[at] == key, w[design.offset + lo + at], zero)
    return out.masked_fill(~valid, float("-inf"))


def sibling_ids(design: SiblingDesign, starts: torch.Tensor, h: torch.Tensor, s: torch.Tensor,
                m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(part, id) int64 pairs: the feature ids of many sibling parts at once, parts (h[p], s[p], m[p]) (s = h: a
    first-child part) of sentences whose words start at ``starts[p]`` (all (P,) on the design's device), each part's
    ids in item order as :func:`sibling_part_ids` gives them one part at a time (tests/test_sibling_ssvm.py)."""
    parts, ptr, mult = design.parts.tolist(), design.part_ptr.tolist(), design.mult.tolist()
    key_ptr = design.key_ptr.tolist()
    found_part, found_id = [], []
    for t in range(len(ptr) - 1):
        lo, hi = key_ptr[t], key_ptr[t + 1]
        if hi == lo:                                 # no gold part had this item: it has no feature
            continue
        key = torch.zeros_like(h)
        for q in range(ptr[t], ptr[t + 1]):
            key = key + _values(design, parts[q][1], parts[q][2], h, s, m, starts) * mult[q]
        at = torch.searchsorted(design.keys[lo:hi], key)
        hit = (at < hi - lo) & (design.keys[lo + at.clamp(max=hi - lo - 1)] == key)
        found_part.append(torch.nonzero(hit)[:, 0])
        found_id.append(design.offset + lo + at[hit])
    if not found_part:
        empty = torch.zeros(0, dtype=torch.int64, device=h.device)
        return empty, empty
    part, ids = torch.cat(found_part), torch.cat(found_id)
    order = torch.sort(part, stable=True).indices            # by part, items in order within each
    return part[order], ids[order]


def sibling_part_ids(design: SiblingDesign, start: int, h: int, s: int, m: int) -> list[int]:
    """The feature ids of one sibling part (h, s, m) (s = h: a first-child part) of the sentence whose words start
    at ``start``, one scalar lookup per item: the part-by-part reference that tests hold :func:`sibling_ids`
    (what phi and add_psi use) and the compiled lookup to."""
    ids = []
    parts, ptr, mult = design.parts.tolist(), design.part_ptr.tolist(), design.mult.tolist()
    dev = design.keys.device
    t_h, t_s, t_m, t_start = (torch.tensor(v, device=dev) for v in (h, s, m, start))
    for t in range(len(ptr) - 1):
        key = sum(int(_values(design, parts[q][1], parts[q][2], t_h, t_s, t_m, t_start)) * mult[q]
                  for q in range(ptr[t], ptr[t + 1]))
        lo, hi = int(design.key_ptr[t]), int(design.key_ptr[t + 1])
        k = int(torch.searchsorted(design.keys[lo:hi], torch.tensor(key, device=dev))) if hi > lo else 0
        if lo + k < hi and int(design.keys[lo + k]) == key:
            ids.append(design.offset + lo + k)
    return ids
