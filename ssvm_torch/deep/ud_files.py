"""The files ``python -m ssvm_torch.deep.ud_parse`` reads and writes (:mod:`ssvm_torch.deep.ud_parse`): a CoNLL-U
file as its lines and word lines, plain text (one whitespace-tokenized sentence per line) as the same, the
input's own trees when it has them (to score the parse against), and the output text with the parser's
UPOS, HEAD and DEPREL in place. Every fault of a file is one error naming the file and its line.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.ud import is_index, universal
from ..errors import SSVMInputError
from ..trees.checks import FAULTS, tree_faults


@dataclass
class ConlluFile:
    """A CoNLL-U file as its lines (newlines stripped) and, per sentence, the indices of its word lines (the
    integer IDs 1..n of the basic tree; ranges and empty nodes are other lines). ``origins``: per sentence, the
    line of the user's file it came from when that file is not these lines (plain text, :func:`text_words`)."""

    path: Path
    lines: list
    words: list
    origins: list | None = None

    def line_of(self, i: int) -> int:
        """The 1-based line of the input file where sentence ``i`` starts (its first word line, or its text line)."""
        return self.origins[i] if self.origins is not None else self.words[i][0] + 1


def read_text(path: Path, kind: str) -> str:
    """The UTF-8 text of ``path`` (gunzipped when it ends in .gz), a byte-order mark dropped (some editors write
    one; it is not part of the first line); a missing, unreadable or non-UTF-8 file is one error naming it."""
    if not path.is_file():
        raise SSVMInputError(f"input: expected a {kind}, {path} "
                             f"{'is a directory' if path.is_dir() else 'does not exist'}")
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            return f.read().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise SSVMInputError(f"input: {path} is not a readable UTF-8 {kind} ({type(e).__name__}: {e})") from None


def read_words(path) -> ConlluFile:
    """The lines and word lines of ``path`` (gzipped when it ends in .gz); a word line needs 10 tab-separated
    fields and IDs 1..n in order, else one error naming the line. HEAD and DEPREL are not read here."""
    path = Path(path)
    raw = read_text(path, "CoNLL-U file")
    lines = raw.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    words, current = [], []
    for k, line in enumerate(lines):
        if not line.strip():
            if current:
                words.append(current)
            current = []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise SSVMInputError(f"input: {path}:{k + 1}: expected 10 tab-separated fields (ID FORM LEMMA UPOS XPOS "
                                 f"FEATS HEAD DEPREL DEPS MISC), got {len(fields)}")
        if "-" in fields[0] or "." in fields[0]:            # a multiword-token range or an empty node: kept as is
            continue
        if not fields[1]:
            raise SSVMInputError(f"input: {path}:{k + 1}: the FORM field is empty (the parser reads every word's form)")
        if fields[0] != str(len(current) + 1):
            raise SSVMInputError(f"input: {path}:{k + 1}: expected word ID {len(current) + 1} (IDs run 1..n in each "
                                 f"sentence), got {fields[0]!r}")
        current.append(k)
    if current:
        words.append(current)
    if not words:
        raise SSVMInputError(f"input: {path} holds no sentence (no word line with an integer ID)")
    return ConlluFile(path, lines, words)


def input_trees(doc: ConlluFile):
    """(heads, universal relations) per sentence when every word's HEAD is an integer in ASCII digits and every
    sentence's heads form a tree with one word under the root (UD's rule; the scores are against trees), else
    (None, why): None when a HEAD is not an integer (an unannotated file), a one-line reason when the integers
    are not trees."""
    heads, rels = [], []
    for sent in doc.words:
        cols = [doc.lines[k].split("\t") for k in sent]
        if not all(is_index(c[6]) for c in cols):
            return None, None
        heads.append([int(c[6]) for c in cols])
        rels.append([universal(c[7]) for c in cols])
    n = max(len(h) for h in heads)
    padded = torch.full((len(heads), n + 1), -1, dtype=torch.int64)
    for i, h in enumerate(heads):
        padded[i, 1:len(h) + 1] = torch.tensor(h)
    code = tree_faults(padded, torch.tensor([len(h) for h in heads]), False, False)
    if bool((code != 0).any()):
        i = int((code != 0).nonzero()[0, 0])
        line = doc.line_of(i)
        return None, (f"sentence {i + 1} (line {line}) of the input has HEAD values that are not a tree "
                      f"({FAULTS[int(code[i])]}); no UAS / LAS against them")
    return (heads, rels), None


def written(doc: ConlluFile, pred: dict) -> bytes:
    """``doc``'s text with HEAD and DEPREL of every word line replaced by ``pred``'s, and UPOS (XPOS) too when
    ``pred`` has it (a words-only parser; one with an XPOS head). With ``pred["nbest"]`` (:func:`written_nbest`)
    every sentence once per tree of its k best."""
    if pred.get("nbest") is not None:
        return written_nbest(doc, pred)
    lines = list(doc.lines)
    tags = pred.get("upos") or [None] * len(doc.words)
    xtags = pred.get("xpos") or [None] * len(doc.words)
    for sent, heads, labels, upos, xpos in zip(doc.words, pred["heads"], pred["labels"], tags, xtags):
        for j, (k, h, r) in enumerate(zip(sent, heads, labels)):
            fields = lines[k].split("\t")
            fields[6], fields[7] = str(h), r
            if upos is not None:
                fields[3] = upos[j]
            if xpos is not None:
                fields[4] = xpos[j]
            lines[k] = "\t".join(fields)
    return ("\n".join(lines) + "\n").encode("utf-8")


def sentence_blocks(doc: ConlluFile) -> list:
    """(first, end) line indices of every sentence's block: its comment lines, word lines, ranges and empty nodes,
    between blank lines."""
    blocks = []
    for sent in doc.words:
        first, end = sent[0], sent[-1] + 1
        while first > 0 and doc.lines[first - 1].strip():
            first -= 1
        while end < len(doc.lines) and doc.lines[end].strip():
            end += 1
        blocks.append((first, end))
    return blocks


def written_nbest(doc: ConlluFile, pred: dict) -> bytes:
    """Every sentence of ``doc`` once per tree of ``pred["nbest"]`` (best first; fewer than k when it has fewer
    trees), each block as the 1-best output writes it with that tree's HEAD and DEPREL, after its comments
    ``# nbest_rank = r`` (1-based), ``# nbest_score = s(y)`` and ``# nbest_log_prob = log p(y)`` (the tree CRF of
    the parser's scores); a ``# sent_id = X`` becomes ``X.nbest<r>`` (sentence ids stay unique), and document /
    paragraph comments (``# newdoc``, ``# newpar``) stay with the first tree only."""
    tags = pred.get("upos") or [None] * len(doc.words)
    xtags = pred.get("xpos") or [None] * len(doc.words)
    out = []
    previous = 0
    for sent, (first, end), trees, upos, xpos in zip(doc.words, sentence_blocks(doc), pred["nbest"], tags, xtags):
        out += doc.lines[previous:first]                  # the blank lines between blocks, as read
        previous = end
        for r, (heads, labels, score, logp) in enumerate(trees, 1):
            block = list(doc.lines[first:end])
            for j, k in enumerate(sent):
                fields = block[k - first].split("\t")
                fields[6], fields[7] = str(heads[j]), labels[j]
                if upos is not None:
                    fields[3] = upos[j]
                if xpos is not None:
                    fields[4] = xpos[j]
                block[k - first] = "\t".join(fields)
            c = 0
            while c < len(block) and block[c].startswith("#"):
                c += 1
            comments = [f"{line.rstrip()}.nbest{r}" if line.startswith("# sent_id") else line for line in block[:c]
                        if r == 1 or not line.startswith(("# newdoc", "# newpar"))]
            comments += [f"# nbest_rank = {r}", f"# nbest_score = {score:.6f}", f"# nbest_log_prob = {logp:.6f}"]
            out += comments + block[c:]
            if r < len(trees):
                out.append("")
    out += doc.lines[previous:]
    return ("\n".join(out) + "\n").encode("utf-8")


def text_words(path) -> ConlluFile:
    """Plain text, one sentence per line, words separated by whitespace (``--input-format text``), as a CoNLL-U
    document whose only filled columns are ID and FORM. Blank lines hold no sentence and are skipped, so each
    sentence carries ``# sent_id`` = the number of its line in the text (an output sentence is found by its
    input line) and ``# text`` = its words joined by single spaces (UD's two required comments)."""
    path = Path(path)
    raw = read_text(path, "text file")
    lines, words, origins = [], [], []
    # "\n" alone ends a line (as for sed and wc), not str.splitlines' form feeds and Unicode separators: the
    # sent_id must be the line number other tools show; a "\r" before it is whitespace, gone with split()
    for number, text in enumerate(raw.split("\n"), 1):
        tokens = text.split()
        if not tokens:
            continue
        lines += [f"# sent_id = {number}", f"# text = {' '.join(tokens)}"]
        words.append(list(range(len(lines), len(lines) + len(tokens))))
        origins.append(number)
        lines += [f"{i}\t{t}\t_\t_\t_\t_\t_\t_\t_\t_" for i, t in enumerate(tokens, 1)] + [""]
    if not words:
        raise SSVMInputError(f"input: {path} holds no sentence (every line is blank)")
    return ConlluFile(path, lines, words, origins)
