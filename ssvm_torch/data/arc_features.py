"""Arc feature templates for first-order dependency parsing, and their compiled featurization into the
sparse arc-by-feature design of :class:`~ssvm_torch.data.trees.DependencyData`.

A template item is a conjunction of parts joined by ``|``; the item ``hp|mp|att`` gives, for the arc h -> m,
the feature ``hp|mp|att=<POS of h>|<POS of m>|<direction and distance>``. Parts:

    h<col>, m<col>        a column of the head / the modifier: w (the lower-cased form), f (its first five
                          characters: McDonald et al. 2005's back-off for long words), p (XPOS, the PTB tag
                          in EWT), u (UPOS), l (the lower-cased lemma)
    h<col>+1, m<col>-1    the same column of the token just right / left of the head or the modifier
                          (``<s>`` / ``</s>`` beyond the sentence; the root is its own ``<root>`` token)
    att                   direction and binned distance (1, 2, 3, 4, 5, 6-10, > 10), 14 values
    dir                   the direction alone
    n<col>                how many words between h and m share the head's value of the column (0, 1, 2+):
                          whether h is the nearest candidate of its kind, e.g. the nearest verb for a
                          punctuation mark (UD attaches punctuation to the clause it sits in)
    b<col>                a value of the column among the words strictly between h and m: one feature
                          for each distinct value there (a set, not a count)

The default template :data:`MCDONALD` is the first-order feature set of McDonald, Crammer & Pereira (ACL
2005, Table 1): head and modifier word / POS unigrams and their bigram conjunctions, the in-between POS
and the surrounding-POS quadruples, each once plain and once conjoined with direction and distance
(their "all features conjoined with direction and distance"; the in-between item plain only), with the
five-character prefix back-off of the word features and UPOS versions of the POS-only items.

Featurization (:func:`featurize`) never builds strings: every column is coded once as integers over the
values of all splits, an item's value is one mixed-radix int64 key, and the dictionary is the keys of the
*gold* arcs of the training sentences seen at least ``min_count`` times (MSTParser's feature set: a key
that no gold arc has gets no weight). Every arc h -> m (h != m, h = 0 the root) of every sentence is then
looked up in the dictionary (one open-addressing hash table over every item's keys), in compiled code and in one
pass, into a CSR design: arc a's features are ``ids[ptr[a]:ptr[a+1]]`` (int32, binary values), numbered by
descending frequency over the training arcs; the items of the head alone are kept per token (``tptr`` /
``tids``), since every arc that token heads shares them. The gold keys and both designs come from one key routine
(:mod:`ssvm_torch.data.arc_keys`); ``tests/test_ud_data.py`` checks them against :meth:`ArcTemplate.arc_strings`,
the readable reference, on drawn templates.
"""
from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from ..errors import SSVMInputError
from .arc_keys import arc_design, count_ids, dictionary_table, gold_keys, token_design

COLUMNS = ("w", "f", "p", "u", "l")
N_ATT = 14                          # 2 directions x 7 distance bins
_PART = re.compile(r"^(?:(att|dir)|([hmbn])([wfpul])([+-]1)?)$")


def parse_items(spec, what: str, example: str, part, check_item) -> tuple:
    """The items of a template ``spec`` (a string of items separated by spaces, or a list of item strings), each
    a tuple of ``part(item text, part text)`` over its parts joined by '|'; ``check_item(text, parts)`` refuses an
    item by name; an empty spec, a non-string item or an item listed twice is refused (``what`` names the
    template, ``example`` shows an item)."""
    texts = spec.split() if isinstance(spec, str) else list(spec) if isinstance(spec, (list, tuple)) else None
    if not texts or not all(isinstance(t, str) for t in texts):
        raise SSVMInputError(f"{what}: expected item strings such as {example}, got {spec!r}")
    items = []
    for text in texts:
        parts = tuple(part(text, piece.strip()) for piece in text.split("|"))
        check_item(text, parts)
        items.append(parts)
    if len(set(items)) != len(items):
        raise SSVMInputError(f"{what}: an item is listed twice in {texts}")
    return tuple(items)


def named_template(spec, cls, registry: dict, looks_like, what: str, example: str):
    """A template from a name in ``registry``, a template string / item list (``cls.parse``), or itself; a string
    that is no name and does not ``looks_like`` a template string is refused naming ``what``'s choices."""
    if isinstance(spec, cls):
        return spec
    if isinstance(spec, str) and spec in registry:
        return registry[spec]
    if isinstance(spec, str) and not looks_like(spec):
        raise SSVMInputError(f"{what}: expected one of {list(registry)} or a template string such as {example}, "
                             f"got {spec!r}")
    return cls.parse(spec)


@dataclass(frozen=True)
class ArcTemplate:
    """Items, each a tuple of parts (kind, column index, offset): kind 0 head, 1 modifier, 2 between,
    3 att, 4 dir."""

    name: str
    items: tuple

    @classmethod
    def parse(cls, spec, name: str = "custom") -> "ArcTemplate":
        def part(text, piece):
            m = _PART.match(piece)
            if m is None:
                raise SSVMInputError(f"arc template item {text!r}: expected parts h<col>, m<col> (optionally +1 / "
                                     f"-1), b<col>, att or dir joined by '|', columns {list(COLUMNS)}; got {piece!r}")
            if m.group(1):
                return (3 if m.group(1) == "att" else 4, 0, 0)
            who, col, off = m.group(2), COLUMNS.index(m.group(3)), int(m.group(4) or 0)
            if who in "bn" and off:
                raise SSVMInputError(f"arc template item {text!r}: a between or near part takes no offset")
            return ({"h": 0, "m": 1, "b": 2, "n": 5}[who], col, off)

        def item(text, parts):
            if sum(p[0] == 2 for p in parts) > 1:
                raise SSVMInputError(f"arc template item {text!r}: at most one between part")
        return cls(name, parse_items(spec, "arc template", "'hp|mp|att'", part, item))

    @staticmethod
    def part_name(part) -> str:
        kind, col, off = part
        if kind == 3:
            return "att"
        if kind == 4:
            return "dir"
        if kind == 5:
            return "n" + COLUMNS[col]
        return "hmb"[kind] + COLUMNS[col] + ("" if not off else f"{off:+d}")

    def item_name(self, item) -> str:
        return "|".join(self.part_name(p) for p in item)

    def text(self) -> str:
        return " ".join(self.item_name(item) for item in self.items)

    def key(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()[:24]

    def arc_strings(self, sentence, h: int, m: int) -> list[str]:
        """The feature strings of the arc h -> m of one sentence of (form, upos, xpos, lemma) tuples (h = 0 the
        root): the readable reference that the compiled :func:`featurize` is tested against."""
        def value(col, pos):
            return column_string(sentence, col, pos)
        att = distance_string(h, m)
        out = []
        for item in self.items:
            fixed, between = [], None
            for kind, col, off in item:
                if kind == 2:
                    between = col
                    fixed.append(None)
                elif kind == 5:
                    same = sum(value(col, pos) == value(col, h) for pos in range(min(h, m) + 1, max(h, m)))
                    fixed.append(str(min(same, 2)))
                else:
                    fixed.append(att if kind == 3 else ("R" if h < m else "L") if kind == 4 else
                                 value(col, (h if kind == 0 else m) + off))
            name = self.item_name(item)
            if between is None:
                out.append(f"{name}=" + "|".join(fixed))
                continue
            lo, hi = min(h, m), max(h, m)
            for v in sorted({value(between, pos) for pos in range(lo + 1, hi)}):
                out.append(f"{name}=" + "|".join(v if x is None else x for x in fixed))
        return out


def column_string(sentence, col: int, pos: int) -> str:
    """Column ``col`` of position ``pos`` of a sentence of (form, upos, xpos, lemma) tuples, as the templates'
    readable feature strings spell it (0 the root, < 0 / > n the padding)."""
    if pos == 0:
        return "<root>"
    if pos < 0:
        return "<s>"
    if pos > len(sentence):
        return "</s>"
    form, upos, xpos, lemma = sentence[pos - 1]
    return {"w": form.lower(), "f": form.lower()[:5], "p": xpos, "u": upos, "l": lemma.lower()}[COLUMNS[col]]


def distance_string(a: int, b: int) -> str:
    """The side and binned distance of positions a and b (1, 2, 3, 4, 5, 6-10, > 10) as a readable string."""
    d = abs(a - b)
    return ("R" if a < b else "L") + str(d if d <= 5 else 6 if d <= 10 else 7)


def _mcdonald() -> str:
    word = ["hw|hp", "hw", "mw|mp", "mw", "hw|hp|mw|mp", "hp|mw|mp", "hw|mw|mp", "hw|hp|mp", "hw|hp|mw", "hw|mw"]
    prefix = ["hf|hp", "mf|mp", "hf|hp|mf|mp", "hf|mf"]
    pos = ["hp", "mp", "hp|mp", "hu|mu", "hp|bu|mp",
           "hp|hp+1|mp-1|mp", "hp-1|hp|mp-1|mp", "hp|hp+1|mp|mp+1", "hp-1|hp|mp|mp+1",
           "hu|hu+1|mu-1|mu", "hu-1|hu|mu-1|mu", "hu|hu+1|mu|mu+1", "hu-1|hu|mu|mu+1"]
    base = word + prefix + pos
    # an item of the modifier alone (no head part, no direction or distance) adds the same score to every
    # head of a word, so the same amount to every tree: psi_i(y) cancels it and no solver ever moves its
    # weight; MSTParser carries them, here they are left out (a quarter fewer lookups per arc, the same model)
    constant = {"mw|mp", "mw", "mf|mp", "mp"}
    # the between item stays unconjoined: with direction and distance it was 11% of the lookups per arc (a
    # quarter of a BCFW pass on EWT) for no measurable dev UAS (86.72 with it, 86.65 without at 21 passes,
    # 86.68 / 86.73 at 12; benchmarks/results/ud_ewt_dev.json)
    return " ".join([item for item in base if item not in constant] + [f"{item}|att" for item in base
                                                                        if item != "hp|bu|mp"])


MCDONALD = ArcTemplate.parse(_mcdonald(), name="mcdonald")
#: a small set for tests and quick runs: word / POS unigrams and the POS bigram, with direction and distance
BASIC = ArcTemplate.parse("hw hp mw mp hp|mp hw|mw hp|mp|att hu|bu|mu", name="basic")
ARC_TEMPLATES = {"mcdonald": MCDONALD, "basic": BASIC}


def get_arc_template(spec) -> ArcTemplate:
    """A named template (:data:`ARC_TEMPLATES`), an item string, or an ArcTemplate."""
    return named_template(spec, ArcTemplate, ARC_TEMPLATES,
                          lambda t: "|" in t or " " in t.strip() or bool(_PART.match(t)), "features", "'hp|mp|att'")


# -- the columns as integer codes -----------------------------------------------------------------------------
def column_values(treebank) -> dict:
    """The string value of every column at every word of a :class:`~ssvm_torch.data.ud.Treebank`."""
    lower = [w.lower() for w in treebank.forms]
    return {"w": lower, "f": [w[:5] for w in lower], "p": list(treebank.xpos), "u": list(treebank.upos),
            "l": [w.lower() for w in treebank.lemmas]}


def code_columns(treebanks) -> tuple[list[np.ndarray], np.ndarray]:
    """(codes per treebank: (W, 5) int64 with values >= 3, radix per column (5,)): each column coded over
    the distinct values of all the treebanks (codes only: the dictionary comes from training gold arcs)."""
    values = [column_values(tb) for tb in treebanks]
    codes = [np.empty((len(tb.forms), len(COLUMNS)), dtype=np.int64) for tb in treebanks]
    radix = np.empty(len(COLUMNS), dtype=np.int64)
    for c, col in enumerate(COLUMNS):
        # codes in sorted order of the distinct strings (code points, as np.unique sorts them): a dictionary
        # lookup per word, where np.unique's sort of a fixed-width string array of every word took seconds
        uniq = sorted({v for vals in values for v in vals[col]})
        code = {v: i + 3 for i, v in enumerate(uniq)}
        for k, vals in enumerate(values):
            codes[k][:, c] = np.fromiter((code[v] for v in vals[col]), dtype=np.int64, count=len(vals[col]))
        radix[c] = len(uniq) + 3
    return codes, radix


def item_radices(template: ArcTemplate, radix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parts (P, 4) int64: item, kind, column, offset; part_ptr (T + 1,); multipliers (P,)) with each
    item's mixed-radix multipliers, refused when an item's key space exceeds int64."""
    rows, ptr, mult = [], [0], []
    for t, item in enumerate(template.items):
        m = 1
        for kind, col, off in item:
            rows.append((t, kind, col, off))
            mult.append(m)
            r = N_ATT if kind == 3 else 2 if kind == 4 else 3 if kind == 5 else int(radix[col])
            m *= r
            if m >= 2 ** 62:
                raise SSVMInputError(f"arc template item {template.item_name(item)!r}: its key space exceeds 2^62")
        ptr.append(len(rows))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4), np.asarray(ptr, dtype=np.int64), np.asarray(mult, dtype=np.int64)


#: arcs per thread below which a split is built in one call (a thread's start costs more than the arcs it saves)
MIN_ARCS_PER_THREAD = 200_000


def threaded_arc_design(codes, offsets, parts, part_ptr, mult, between, per_arc, radix_max, table, arc_off,
                        head_only, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~ssvm_torch.data.arc_keys.arc_design` of a split on ``threads`` threads (default numba's thread
    count, the one its parallel kernels use): the sentences cut into runs of about equal arc counts, each run's
    design built by one compiled call (it releases the GIL) and the runs' CSR rows joined in sentence order, so
    the design is the one-call design whatever the thread count (a thread gets MIN_ARCS_PER_THREAD arcs at least).
    The lookups in the dictionary's table (hundreds of MB) each wait on memory; threads wait in parallel."""
    n = offsets.shape[0] - 1
    if threads is not None and not (isinstance(threads, (int, np.integer)) and not isinstance(threads, bool)
                                    and threads >= 1):
        raise SSVMInputError(f"threads: expected None or an int >= 1, got {threads!r}")
    threads = numba.get_num_threads() if threads is None else int(threads)
    runs = max(1, min(threads, n, int(arc_off[-1]) // MIN_ARCS_PER_THREAD))
    if runs == 1:
        return arc_design(codes, offsets, parts, part_ptr, mult, between, per_arc, radix_max, table, arc_off,
                          head_only)
    cuts = np.searchsorted(arc_off, np.linspace(0, arc_off[-1], runs + 1)[1:-1])
    bounds = [0, *sorted(set(int(c) for c in cuts) - {0, n}), n]

    def run(a: int, b: int):
        return arc_design(codes, offsets[a:b + 1], parts, part_ptr, mult, between, per_arc, radix_max, table,
                          arc_off[a:b + 1] - arc_off[a], head_only)

    with ThreadPoolExecutor(len(bounds) - 1) as pool:
        parts_out = list(pool.map(run, bounds[:-1], bounds[1:]))
    ptr = np.empty(int(arc_off[-1]) + 1, dtype=np.int64)
    ptr[0], nnz = 0, 0
    for a, b, (p, _) in zip(bounds[:-1], bounds[1:], parts_out):
        ptr[arc_off[a] + 1:arc_off[b] + 1] = p[1:] + nnz
        nnz += int(p[-1])
    return ptr, np.concatenate([ids for _, ids in parts_out])


@dataclass
class ArcDesign:
    """The CSR designs of one split: arcs (arc_off (n + 1,), ptr (A + 1,) int64, ids (nnz,) int32) and head tokens
    (tptr (W + n + 1,) int64, tids int32: the features of the items of the head alone, shared by the n_i arcs
    that token heads)."""

    arc_off: np.ndarray
    ptr: np.ndarray
    ids: np.ndarray
    tptr: np.ndarray
    tids: np.ndarray


def featurize(template: ArcTemplate, treebanks, min_count: int = 1, designs_of=None, threads: int | None = None):
    """(one ArcDesign per treebank, the number of features d, per-item feature counts): the dictionary from
    the gold arcs of ``treebanks[0]`` (the training split) seen >= ``min_count`` times, every arc of every
    treebank looked up in it (module docstring). ``designs_of``: the indices of the treebanks whose designs are
    built (the others' are None; 0 among them), default all: the columns are coded over every treebank either way,
    so a design does not depend on which others are built. The items of the head alone (head columns only: no modifier,
    direction, distance or between part) are featurized once per token, not once per arc: an arc's score
    is its own features' plus its head token's (a seventh of McDonald's lookups per arc). ``threads``: the arc
    designs' threads (:func:`threaded_arc_design`; default numba's thread count): the designs do not depend on it."""
    if not isinstance(min_count, int) or min_count < 1:
        raise SSVMInputError(f"min_count: expected an int >= 1, got {min_count!r}")
    built = set(range(len(treebanks)) if designs_of is None else designs_of)
    if 0 not in built or not built <= set(range(len(treebanks))):
        raise SSVMInputError(f"designs_of: expected indices into the {len(treebanks)} treebanks including 0 (the "
                             f"training split), got {designs_of!r}")
    codes, radix = code_columns(treebanks)
    parts, part_ptr, mult = item_radices(template, radix)
    T = len(template.items)
    between = np.full(T, -1, dtype=np.int64)
    # keys of one arc at most: one per item, and a between item's one per distinct value between, fewer than the
    # column's values and than the longest sentence's words (the radix alone, 20k forms for bw, made the gold
    # keys of EWT's training split a 65 GB allocation)
    longest = max(int(np.diff(tb.offsets).max(initial=1)) for tb in treebanks)
    per_arc = T
    for q in range(len(parts)):
        if parts[q, 1] == 2:
            between[parts[q, 0]] = q
            per_arc += min(int(radix[parts[q, 2]]), longest - 1)
    radix_max = int(radix.max())
    train = treebanks[0]
    items, keys = gold_keys(codes[0], train.offsets, train.heads, parts, part_ptr, mult, between, per_arc,
                             radix_max)
    # the dictionary: per item, the keys of gold arcs seen >= min_count times; ids in order of items, then keys
    dict_keys, dict_ptr, per_item, most = [], [0], [], 0
    for t in range(T):
        uniq, counts = np.unique(keys[items == t], return_counts=True)
        most = max(most, int(counts.max(initial=0)))
        uniq = uniq[counts >= min_count]
        dict_keys.append(uniq)
        dict_ptr.append(dict_ptr[-1] + len(uniq))
        per_item.append(len(uniq))
    dict_keys = np.concatenate(dict_keys) if dict_keys else np.zeros(0, dtype=np.int64)
    dict_ptr = np.asarray(dict_ptr, dtype=np.int64)
    d = int(dict_ptr[-1])
    if d == 0 and most == 0:           # e.g. between items only, on sentences whose gold arcs span no word
        raise SSVMInputError(f"template: expected items that some gold arc of the {train.n} training sentences has, "
                             f"got {template.name!r}, whose items none of them has: no feature to learn")
    if d == 0:
        raise SSVMInputError(f"min_count: expected at most {most} (the count of the most frequent feature of the "
                             f"{train.n} training sentences' gold arcs), got {min_count}: no feature is left")
    dict_ids = np.arange(d, dtype=np.int32)
    head_only = np.array([all(kind == 0 for kind, _, _ in item) for item in template.items], dtype=np.bool_)
    table = dictionary_table(dict_keys, dict_ptr, dict_ids)
    designs = []
    for k, (tb, cd) in enumerate(zip(treebanks, codes)):
        if k not in built:
            designs.append(None)
            continue
        lengths = np.diff(tb.offsets)
        arc_off = np.concatenate([[0], np.cumsum(lengths * lengths)]).astype(np.int64)
        ptr, ids = threaded_arc_design(cd, tb.offsets, parts, part_ptr, mult, between, per_arc, radix_max, table,
                                       arc_off, head_only, threads)
        tptr = np.zeros(int(tb.offsets[-1]) + tb.n + 1, dtype=np.int64)
        token_design(cd, tb.offsets, parts, part_ptr, mult, head_only, table, False, tptr, np.zeros(0, dtype=np.int32))
        np.cumsum(tptr, out=tptr)
        tids = np.empty(int(tptr[-1]), dtype=np.int32)
        token_design(cd, tb.offsets, parts, part_ptr, mult, head_only, table, True, tptr, tids)
        designs.append(ArcDesign(arc_off, ptr, ids, tptr, tids))
    # feature ids by descending frequency over the training arcs (a token's features count once for each of the
    # n_i arcs it heads): the few features most arcs carry (the POS items; the top 1% of ids are 70% of EWT's
    # lookups) then share a compact, cache-resident stretch of w, which makes scoring every arc about a third
    # faster than ids in dictionary order
    train_lengths = np.diff(treebanks[0].offsets)
    per_token = np.repeat(train_lengths, train_lengths + 1).astype(np.float64)
    counts = count_ids(designs[0].ids, d) + np.bincount(
        designs[0].tids, weights=np.repeat(per_token, np.diff(designs[0].tptr)), minlength=d)
    order = np.argsort(-counts, kind="stable")
    new_id = np.empty(d, dtype=np.int32)
    new_id[order] = np.arange(d, dtype=np.int32)
    for des in (des for des in designs if des is not None):
        des.ids = new_id[des.ids]
        des.tids = new_id[des.tids]
    return designs, d, dict(zip((template.item_name(i) for i in template.items), per_item))
