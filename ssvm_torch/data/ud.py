"""Universal Dependencies treebanks (CoNLL-U): a strict reader of the basic dependency tree and the
UD English-EWT splits shipped in ``datasets/ud_english_ewt/`` (datasets/README.md).

A sentence is a block of lines ended by a blank line; ``#`` lines are comments (``# sent_id = ...`` kept);
a word line has 10 tab-separated fields ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC
(https://universaldependencies.org/format.html). The basic tree's nodes are the lines whose ID is an
integer; multiword-token ranges (``3-4``) and empty nodes of the enhanced graph (``8.1``) are skipped.
Every sentence must be a tree over its words 1..n: IDs in order from 1, HEAD an integer in [0, n] other
than the word's own ID, no cycle, exactly one word under the root (UD's rule). A line that breaks any of
this ends the read in one error naming the file, the line and what was expected.

The reader is a plain loop over the lines (no per-word objects): it reads EWT's training file in about a
third of the time the ``conllu`` package takes (benchmarks/bench_trees.py measures both; the tests check
that they read the same trees).
"""
from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import SSVMInputError
from .types import data_file

UD_EWT = {"train": "ud_english_ewt/en_ewt-ud-train.conllu.gz", "dev": "ud_english_ewt/en_ewt-ud-dev.conllu.gz",
          "test": "ud_english_ewt/en_ewt-ud-test.conllu.gz"}


@dataclass
class Treebank:
    """Sentences of a CoNLL-U file, stored flat: word w of sentence i is entry offsets[i] + w - 1 of the
    word lists; ``heads`` are within-sentence (0 = the root), ``lines`` the file line of every word."""

    name: str
    forms: list
    lemmas: list
    upos: list
    xpos: list
    deprels: list
    heads: np.ndarray               # (W,) int64
    offsets: np.ndarray             # (n + 1,) int64
    lines: np.ndarray               # (W,) int64
    sent_ids: list = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, i: int) -> list[tuple]:
        """Sentence i as (form, lemma, upos, xpos, head, deprel) tuples."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return [(self.forms[k], self.lemmas[k], self.upos[k], self.xpos[k], int(self.heads[k]), self.deprels[k])
                for k in range(s, e)]

    def copy(self) -> "Treebank":
        """The same sentences in lists and arrays of its own (the strings are shared: they are immutable)."""
        return Treebank(self.name, list(self.forms), list(self.lemmas), list(self.upos), list(self.xpos),
                        list(self.deprels), self.heads.copy(), self.offsets.copy(), self.lines.copy(),
                        list(self.sent_ids))

    def subset(self, idx) -> "Treebank":
        """The sentences ``idx`` in that order."""
        idx = [int(i) for i in idx]
        rows = [np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx]
        flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        pick = flat.tolist()
        return Treebank(self.name, [self.forms[k] for k in pick], [self.lemmas[k] for k in pick],
                        [self.upos[k] for k in pick], [self.xpos[k] for k in pick], [self.deprels[k] for k in pick],
                        self.heads[flat], np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64),
                        self.lines[flat], [self.sent_ids[i] for i in idx] if self.sent_ids else [])


#: UD's 17 universal POS tags (the UPOS column; https://universaldependencies.org/u/pos/)
UPOS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
             "SCONJ", "SYM", "VERB", "X")


def universal(deprel: str) -> str:
    """The universal part of a DEPREL (``nsubj:pass`` -> ``nsubj``): what LAS compares (CoNLL 2018)."""
    return deprel.split(":", 1)[0]


def is_index(field: str) -> bool:
    """Whether a CoNLL-U ID / HEAD field is a non-negative integer in ASCII digits: ``str.isdigit`` also accepts
    "²" (which ``int`` refuses) and "١" (which it reads as 1), neither of them an index in the format."""
    return field.isascii() and field.isdigit()


def _fail(path, lineno, what):
    raise SSVMInputError(f"{path}:{lineno}: {what}")


def _tree_fault(heads: list[int]) -> str | None:
    """Why heads (0 = root, words 1..n) is not a single-root tree, or None."""
    n = len(heads)
    roots = sum(1 for h in heads if h == 0)
    if roots != 1:
        return f"exactly one word with HEAD 0 (the root), got {roots}"
    state = [0] * (n + 1)                 # 0 unseen, 1 on the current path, 2 reaches the root
    state[0] = 2
    for start in range(1, n + 1):
        path, v = [], start
        while state[v] == 0:
            state[v] = 1
            path.append(v)
            v = heads[v - 1]
        if state[v] == 1:
            return f"a tree, but words {sorted(path[path.index(v):])} form a cycle"
        for u in path:
            state[u] = 2
    return None


def read_conllu(path) -> Treebank:
    """The basic trees of a (gzipped) CoNLL-U file (module docstring for what is checked)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    forms, lemmas, upos, xpos, deprels, heads, lines, offsets, sent_ids = [], [], [], [], [], [], [], [0], []
    cur_heads: list[int] = []
    cur_lines: list[int] = []
    cur_id = None
    lineno = 0

    def close():
        n = len(cur_heads)
        for k, h in enumerate(cur_heads):
            if h > n:
                _fail(path, cur_lines[k], f"HEAD: expected a word index in [0, {n}] (the sentence's words), got {h}")
        fault = _tree_fault(cur_heads)
        if fault is not None:
            _fail(path, cur_lines[0], f"the sentence starting here (its lines {cur_lines[0]}-{cur_lines[-1]}) is not "
                                      f"a dependency tree: expected {fault}")
        heads.extend(cur_heads)
        lines.extend(cur_lines)
        offsets.append(len(heads))
        sent_ids.append(cur_id if cur_id is not None else str(len(offsets) - 2))

    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n").rstrip("\r")
                if not line:
                    if cur_heads:
                        close()
                        cur_heads, cur_lines, cur_id = [], [], None
                    continue
                if line[0] == "#":
                    if line.startswith("# sent_id"):
                        cur_id = line.split("=", 1)[1].strip() if "=" in line else None
                    continue
                cols = line.split("\t")
                if len(cols) != 10:
                    _fail(path, lineno, f"expected 10 tab-separated fields (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL "
                                        f"DEPS MISC), got {len(cols)}")
                wid = cols[0]
                if not is_index(wid):
                    if "-" in wid or "." in wid:
                        a, _, b = wid.replace(".", "-").partition("-")
                        if is_index(a) and is_index(b):
                            continue                 # a multiword-token range or an empty node: not a tree node
                    _fail(path, lineno, f"ID: expected an integer word index (or a range 3-4 / an empty node 8.1), "
                                        f"got {wid!r}")
                if int(wid) != len(cur_heads) + 1:
                    _fail(path, lineno, f"ID: expected word {len(cur_heads) + 1} of the sentence, got {wid}")
                head = cols[6]
                if not is_index(head):
                    _fail(path, lineno, f"HEAD: expected an integer (0 = the root), got {head!r}")
                cur_heads.append(int(head))
                cur_lines.append(lineno)
                if int(head) == int(wid):
                    _fail(path, lineno, f"HEAD: expected another word's ID or 0, word {wid} heads itself")
                if not cols[7] or cols[7] == "_":
                    _fail(path, lineno, f"DEPREL: expected a relation for word {wid}, got {cols[7]!r}")
                forms.append(cols[1])
                lemmas.append(cols[2])
                upos.append(cols[3])
                xpos.append(cols[4])
                deprels.append(cols[7])
            if cur_heads:
                close()
    except (EOFError, OSError, zlib.error) as e:
        raise SSVMInputError(f"{path}:{lineno}: the file is damaged or unreadable after this line "
                             f"({type(e).__name__}: {e})") from None
    except UnicodeDecodeError as e:
        raise SSVMInputError(f"{path}:{lineno + 1}: expected UTF-8 text, got byte {e.object[e.start:e.start + 1]!r}") \
            from None
    heads_a = np.asarray(heads, dtype=np.int64)
    offsets_a = np.asarray(offsets, dtype=np.int64)
    if len(offsets_a) == 1:
        raise SSVMInputError(f"{path}: holds no sentences (expected CoNLL-U word lines, sentences separated by "
                             "blank lines)")
    return Treebank(path.name, forms, lemmas, upos, xpos, deprels, heads_a, offsets_a, np.asarray(lines, np.int64),
                    sent_ids)


#: the shipped splits read in this process, (path, size, mtime) -> Treebank: a parser run reads all three and every
#: run, test or notebook cell that loads them again would read and check some 250,000 lines (a third of a tiny
#: parser run's time); each call returns a copy, so what a caller changes never reaches the next one
_SPLITS: dict = {}


def load_ud_ewt(split: str) -> Treebank:
    """One split of UD English-EWT v2.16 ("train", "dev", "test"), checked against datasets/SHA256SUMS; read once
    per process and file version (a copy each call)."""
    if split not in UD_EWT:
        raise SSVMInputError(f"split: expected one of {list(UD_EWT)}, got {split!r}")
    path = data_file(UD_EWT[split])
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SPLITS:
        for old in [k for k in _SPLITS if k[0] == key[0]]:      # an earlier version of the file
            del _SPLITS[old]
        _SPLITS[key] = read_conllu(path)
    return _SPLITS[key].copy()
