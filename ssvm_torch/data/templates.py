"""Feature templates as data, and their vectorized featurization into a sparse design.

A template is a list of *attribute items*; an item is one or more ``column[offset]`` parts joined
by ``|``. For token t the item ``w[-1]|p[0]`` gives the attribute ``w[-1]|p[0]=<word at t-1>|<POS
at t>``; an item whose window leaves the sentence gives nothing at t (the CRFsuite convention, and
the one of Sha & Pereira 2003). Template strings list items separated by white space, e.g.
``"w[0] w[-1]|w[0] suf3[0] shape[0]"``.

An item prefixed ``edge:`` is an *edge-observation* attribute (Sha & Pereira 2003's label-pair x
observation features): ``edge:p[0]`` at token t >= 1 conditions the transition y_{t-1} -> y_t on
the POS tag at t; the model gets one weight per (edge attribute, label pair seen in the training
data), which keeps the chain first-order (models/chain_edges.py). Edge attributes are never
generated at the first token of a sentence (no transition enters it).

Columns (functions of one token's word or POS tag, evaluated once per distinct word):

    w, p             the word, the part-of-speech tag
    lw               the lower-cased word
    pre1..pre4       the word's first 1-4 characters (the whole word when shorter)
    suf1..suf4       its last 1-4 characters
    shape            word shape: upper -> X, lower -> x, digit -> d, other characters kept, runs
                     collapsed ("McDonald's" -> "XxXx'x", "1,200" -> "d,d", "U.S." -> "X.X.")
    cap, digit, hyphen, punct   0/1 flags: initial capital, any digit, a hyphen, no letter or digit

Users add their own columns (``Template.parse(text, columns={"name": fn})`` with ``fn(word) -> str``,
or ``{"name": ("p", fn)}`` for a function of the POS tag) without editing the package.

Featurization (:func:`featurize`) never builds attribute strings: every column is coded once as
integers over the distinct values of all splits, an item's value at every token is one mixed-radix
int64 key, the dictionary is ``np.unique`` over the training keys (attributes seen at least
``min_count`` times), and other splits are looked up by binary search. Attribute ids follow the
order of first occurrence in the training tokens (item order within a token), which is the order a
``dict.setdefault`` pass over the attribute strings gives, so a template reproduces a string-built
dictionary exactly (tests/test_templates.py).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import SSVMInputError
from .arc_features import named_template


def word_shape(word: str) -> str:
    """Collapsed word shape: upper -> X, lower -> x, digit -> d, anything else kept; runs of one class
    collapsed."""
    out = []
    for ch in word:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def _flag(test: Callable[[str], bool]) -> Callable[[str], str]:
    return lambda word: "1" if test(word) else "0"


BUILTIN_COLUMNS: dict[str, tuple[str, Callable[[str], str] | None]] = {
    "w": ("w", None), "p": ("p", None), "lw": ("w", str.lower), "shape": ("w", word_shape),
    **{f"pre{k}": ("w", (lambda k: lambda s: s[:k])(k)) for k in range(1, 5)},
    **{f"suf{k}": ("w", (lambda k: lambda s: s[-k:])(k)) for k in range(1, 5)},
    "cap": ("w", _flag(lambda s: s[:1].isupper())), "digit": ("w", _flag(lambda s: any(c.isdigit() for c in s))),
    "hyphen": ("w", _flag(lambda s: "-" in s)), "punct": ("w", _flag(lambda s: not any(c.isalnum() for c in s))),
}

_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(-?\d+)\]$")


@dataclass(frozen=True)
class Template:
    """Attribute items (tuples of (column, offset) parts) and the columns they use."""

    name: str
    items: tuple
    columns: tuple          # (name, source "w" | "p", fn or None), sorted by name
    edge_items: tuple = ()  # items of the edge-observation attributes (``edge:`` prefix)

    @classmethod
    def parse(cls, spec, columns: dict | None = None, name: str = "custom") -> "Template":
        """A template from a string of white-space separated items or a list of item strings;
        ``columns`` adds user columns (see the module docstring)."""
        texts = spec.split() if isinstance(spec, str) else list(spec)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise SSVMInputError(f"template: expected item strings such as 'w[0]' or 'w[-1]|p[0]', got {spec!r}")
        table = dict(BUILTIN_COLUMNS)
        for col, how in (columns or {}).items():
            src, fn = how if isinstance(how, tuple) else ("w", how)
            if col in BUILTIN_COLUMNS or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(col)) or src not in ("w", "p") \
                    or not callable(fn):
                raise SSVMInputError(f"template column {col!r}: expected a new name and fn(word) -> str or "
                                     f"('w' | 'p', fn); built-in names are {sorted(BUILTIN_COLUMNS)}")
            table[col] = (src, fn)
        items, edge_items = [], []
        for text in texts:
            parts = []
            edge = text.startswith("edge:")
            for part in text.removeprefix("edge:").split("|"):
                m = _PART.match(part.strip())
                if m is None or m.group(1) not in table:
                    raise SSVMInputError(f"template item {text!r}: expected column[offset] parts joined by '|' with "
                                         f"columns from {sorted(table)}, got {part!r}")
                parts.append((m.group(1), int(m.group(2))))
            (edge_items if edge else items).append(tuple(parts))
        if len(set(items)) != len(items) or len(set(edge_items)) != len(edge_items):
            raise SSVMInputError(f"template: an item is listed twice in {texts}")
        if not items:
            raise SSVMInputError(f"template: expected at least one node item besides the edge: items, got {texts}")
        used = sorted({c for item in items + edge_items for c, _ in item})
        return cls(name, tuple(items), tuple((c, *table[c]) for c in used), tuple(edge_items))

    def item_name(self, item, edge: bool = False) -> str:
        return ("edge:" if edge else "") + "|".join(f"{c}[{off}]" for c, off in item)

    def text(self) -> str:
        return " ".join([self.item_name(item) for item in self.items] +
                        [self.item_name(item, True) for item in self.edge_items])

    def key(self) -> str:
        """A digest of the items and of the code of every user column (the feature cache's key)."""
        h = hashlib.sha256(self.text().encode())
        for col, src, fn in self.columns:
            if fn is not None and (col, src, fn) != (col, *BUILTIN_COLUMNS.get(col, (None, None))):
                code = fn.__code__
                h.update(f"{col}:{src}:".encode() + code.co_code + repr(code.co_consts).encode())
        return h.hexdigest()[:24]

    def attributes(self, sent, edge: bool = False) -> list[list[str]]:
        """The (``edge``: edge-observation) attribute strings of every token of one sentence of
        (word, POS, ...) tuples: the reference the vectorized :func:`featurize` is tested against."""
        values = {c: [t[0 if src == "w" else 1] if fn is None else fn(t[0 if src == "w" else 1]) for t in sent]
                  for c, src, fn in self.columns}
        T = len(sent)
        return [[f"{self.item_name(item, edge)}=" + "|".join(values[c][t + off] for c, off in item)
                 for item in (self.edge_items if edge else self.items)
                 if all(0 <= t + off < T for _, off in item) and (t >= 1 or not edge)] for t in range(T)]


SHA_PEREIRA = Template.parse(
    "w[-2] w[-1] w[0] w[1] w[2] w[-1]|w[0] w[0]|w[1] "
    "p[-2] p[-1] p[0] p[1] p[2] p[-2]|p[-1] p[-1]|p[0] p[0]|p[1] p[1]|p[2] "
    "p[-2]|p[-1]|p[0] p[-1]|p[0]|p[1] p[0]|p[1]|p[2]", name="sha-pereira")

RICH = Template.parse(
    SHA_PEREIRA.text() + " "
    "w[-2]|w[-1] w[1]|w[2] lw[-1] lw[0] lw[1] "
    "w[0]|p[0] w[-1]|p[0] p[-1]|w[0] w[0]|p[1] p[0]|w[1] w[-1]|p[-1] w[1]|p[1] "
    "pre1[0] pre2[0] pre3[0] pre4[0] suf1[0] suf2[0] suf3[0] suf4[0] suf2[-1] suf2[1] suf3[-1] suf3[1] "
    "shape[-1] shape[0] shape[1] shape[-1]|shape[0] shape[0]|shape[1] shape[0]|p[0] "
    "cap[0] digit[0] hyphen[0] punct[0] cap[-1]|cap[0] cap[0]|cap[1] "
    "w[-3] w[3] p[-3] p[3] p[-3]|p[-2] p[2]|p[3] p[-1]|p[1] w[-1]|w[1] p[-1]|w[0]|p[1]", name="rich")

RICH_EDGES = Template.parse(RICH.text() + " edge:p[0] edge:w[0]", name="rich-edges")

TEMPLATES = {"sha-pereira": SHA_PEREIRA, "rich": RICH, "rich-edges": RICH_EDGES}


def get_template(template) -> Template:
    """A :class:`Template` from a name in :data:`TEMPLATES`, a template string / item list, or itself."""
    return named_template(template, Template, TEMPLATES, lambda t: "[" in t, "features", "'w[0] w[-1]|w[0] suf3[0]'")


def factorize(values: list) -> tuple[np.ndarray, list]:
    """(int64 code of every value, the distinct values in order of first appearance)."""
    uniq = list(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(uniq)}
    return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values)), uniq


@dataclass
class Design:
    """A split's sparse design: CSR row pointers / sorted attribute ids per token (``edge_*``: the
    edge-observation attributes, None without edge items)."""

    crow: np.ndarray
    cols: np.ndarray
    edge_crow: np.ndarray | None = None
    edge_cols: np.ndarray | None = None


def featurize(template: Template, splits: list, min_count: int = 1) -> tuple[list[Design], int, int]:
    """Designs of every split (lists of sentences of (word, POS, ...) tuples) under ``template``, with
    the attribute dictionaries built on ``splits[0]`` (attributes seen >= ``min_count`` times there;
    the others' unseen attributes dropped). Returns (designs, number of attributes, number of edge
    attributes)."""
    if not (isinstance(min_count, (int, np.integer)) and min_count >= 1):
        raise SSVMInputError(f"min_count: expected an int >= 1, got {min_count!r}")
    sents = [s for sp in splits for s in sp]
    lengths = np.array([len(s) for s in sents], dtype=np.int64)
    N = int(lengths.sum())
    pos = np.arange(N) - np.repeat(np.cumsum(lengths) - lengths, lengths)        # position in its sentence
    length_of = np.repeat(lengths, lengths)
    raw = {src: factorize([t[k] for s in sents for t in s]) for k, src in enumerate("wp")}
    codes, sizes = {}, {}
    for col, src, fn in template.columns:           # integer codes over the distinct values of all splits
        inv, uniq = raw[src]
        if fn is not None:
            derived = [fn(v) for v in uniq]
            bad = next((v for v, d in zip(uniq, derived) if not isinstance(d, str)), None)
            if bad is not None:
                raise SSVMInputError(f"template column {col!r}: fn must return str, got "
                                     f"{type(fn(bad)).__name__} for {bad!r}")
            dinv, uniq = factorize(derived)
            inv = dinv[inv]
        codes[col], sizes[col] = inv, len(uniq)
    n_train = int(sum(len(s) for s in splits[0]))
    sizes_of = [int(sum(len(s) for s in sp)) for sp in splits]
    node, n_attr, most = _encode(template, template.items, codes, sizes, pos, length_of, n_train, min_count, sizes_of)
    if n_attr == 0:
        raise SSVMInputError(f"min_count: expected at most {most} (the count of the most frequent attribute of the "
                             f"{len(splits[0])} training sentences), got {min_count}: no attribute is left")
    if not template.edge_items:
        return [Design(c, k) for c, k in node], n_attr, 0
    edge, n_edge, _ = _encode(template, template.edge_items, codes, sizes, pos, length_of, n_train, min_count,
                              sizes_of, first=1)
    return [Design(c, k, ec, ek) for (c, k), (ec, ek) in zip(node, edge)], n_attr, n_edge


def _encode(template, items, codes, sizes, pos, length_of, n_train, min_count, sizes_of, first=0):
    """CSR (row pointers, sorted ids) of every split for one list of items, tokens at positions
    >= ``first`` only, the dictionary size and the training count of the most frequent attribute (see
    :func:`featurize`)."""
    N = len(pos)
    n_items = len(items)
    ids = np.full((n_items, N), -1, dtype=np.int64)      # item-major: every item's pass is contiguous
    firsts, inverses, most = [], [], 0
    for j, item in enumerate(items):
        lo = max(first, -min(off for _, off in item))
        hi = max(0, max(off for _, off in item))
        rows = np.flatnonzero((pos >= lo) & (pos < length_of - hi))   # tokens whose window fits the sentence
        key = np.zeros(len(rows), dtype=np.int64)
        radix = 1
        for col, off in item:
            key += codes[col][rows + off] * radix
            radix *= sizes[col]
            if radix >= 2 ** 62:
                raise SSVMInputError(f"template item {template.item_name(item)!r}: too many value combinations "
                                     "to key in 64 bits; split it into shorter items")
        uk, inv = np.unique(key, return_inverse=True)
        train = rows < n_train                          # the dictionary counts training tokens only
        count = np.bincount(inv[train], minlength=len(uk))
        first_at = np.full(len(uk), N, dtype=np.int64)
        np.minimum.at(first_at, inv[train], rows[train])
        keep = count >= min_count
        most = max(most, int(count.max(initial=0)))
        firsts.append(first_at[keep] * n_items + j)
        inverses.append((rows, inv, keep))
    # attribute ids: order of first occurrence in the training tokens, item order within a token
    order = np.argsort(np.concatenate(firsts))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    start = 0
    for j, (rows, inv, keep) in enumerate(inverses):
        id_of = np.full(len(keep), -1, dtype=np.int64)
        id_of[keep] = rank[start:start + int(keep.sum())]
        start += int(keep.sum())
        ids[j, rows] = id_of[inv]
    ids = np.sort(ids.T, axis=1)                    # per token: -1 first, then its sorted attribute ids
    out, begin = [], 0
    for size in sizes_of:
        block = ids[begin:begin + size]
        crow = np.zeros(size + 1, dtype=np.int64)
        np.cumsum((block >= 0).sum(1), out=crow[1:])
        out.append((crow, block[block >= 0]))
        begin += size
    return out, len(order), most
