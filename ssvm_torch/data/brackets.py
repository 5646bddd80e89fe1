"""A strict reader of Penn-Treebank-style bracketed trees ("(S (NP (DT The) (NN cat)) (VP (VBD sat)))", one or
several trees per file, any layout of whitespace) into what the span package takes: the words, their
part-of-speech tags and the constituents as labeled spans (i, j, label) over the words' fenceposts
(:mod:`ssvm_torch.spans`).

The usual preprocessing of constituency parsing (evalb's and SuPar's): empty elements (``-NONE-`` traces) are
removed, with every constituent left empty by that; function tags and indices are stripped (``NP-SBJ-1`` ->
``NP``; labels that begin with ``-``, such as ``-LRB-``, are kept whole); the preterminals (a label over one word)
give the tags and no span; an unlabeled outermost bracket (PTB's ``( (S ...) )``) or a ``TOP`` / ``ROOT`` one is
dropped; a unary chain (a constituent whose only child covers the same words) becomes one span labeled with the
chain's labels joined by ``+`` from the top (``S+VP``). The spans then nest and appear once each, as
:func:`ssvm_torch.spans.binarize` wants them. A malformed tree (unbalanced brackets, a word outside a
preterminal, a bracket with no label) ends the read in one error naming the tree and the character offset.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SSVMInputError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
ROOT_LABELS = ("", "TOP", "ROOT")


@dataclass
class BracketedTree:
    """One tree: ``words`` and ``tags`` (one each per word) and ``spans`` [(i, j, label)], pre-order."""

    words: list
    tags: list
    spans: list


def _strip(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP; -NONE-, -LRB- kept."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def _parse(tokens: list, start: int, tree_no: int):
    """One node from tokens[start] == "(": ((label, children or a word, offset), next index); children are nodes."""
    pos = start + 1
    if pos >= len(tokens):
        raise SSVMInputError(f"brackets: tree {tree_no}: unbalanced brackets (the text ends inside a bracket)")
    label = ""
    if tokens[pos][1] not in "()":
        label = tokens[pos][1]
        pos += 1
    children = []
    while pos < len(tokens) and tokens[pos][1] != ")":
        if tokens[pos][1] == "(":
            if isinstance(children, str):
                raise SSVMInputError(f"brackets: tree {tree_no}, offset {tokens[pos][0]}: a bracket after the word "
                                     f"{children!r} of a preterminal")
            child, pos = _parse(tokens, pos, tree_no)
            children.append(child)
        else:
            if children or not label:
                raise SSVMInputError(f"brackets: tree {tree_no}, offset {tokens[pos][0]}: the word {tokens[pos][1]!r} "
                                     "is not alone under a label (a preterminal: (TAG word))")
            children = tokens[pos][1]
            pos += 1
    if pos >= len(tokens):
        raise SSVMInputError(f"brackets: tree {tree_no}: unbalanced brackets (the text ends inside a bracket)")
    if not children:
        raise SSVMInputError(f"brackets: tree {tree_no}, offset {tokens[start][0]}: an empty bracket")
    return (label, children, tokens[start][0]), pos + 1


def _prune(node):
    """The node without empty elements and emptied constituents (None if nothing is left)."""
    label, children, offset = node
    if isinstance(children, str):
        return None if label == "-NONE-" else node
    kept = [c for c in (_prune(c) for c in children) if c is not None]
    return (label, kept, offset) if kept else None


def _collect(node, words: list, tags: list, spans: list, tree_no: int) -> None:
    label, children, offset = node
    if isinstance(children, str):
        words.append(children)
        tags.append(label)
        return
    if not label:
        raise SSVMInputError(f"brackets: tree {tree_no}, offset {offset}: a constituent with no label (only an "
                             "outermost bracket around one tree may have none)")
    chain = [_strip(label)]
    while len(children) == 1 and not isinstance(children[0][1], str):      # a unary chain: one span
        label, children, offset = children[0]
        if not label:
            raise SSVMInputError(f"brackets: tree {tree_no}, offset {offset}: a constituent with no label")
        chain.append(_strip(label))
    at = len(spans)
    spans.append(None)
    start = len(words)
    for child in children:
        _collect(child, words, tags, spans, tree_no)
    spans[at] = (start, len(words), "+".join(chain))


def read_brackets(text: str) -> list:
    """Every tree of ``text`` as a :class:`BracketedTree` (module docstring)."""
    tokens = [(m.start(), m.group()) for m in _TOKEN.finditer(text)]
    trees, pos = [], 0
    while pos < len(tokens):
        if tokens[pos][1] == ")":
            raise SSVMInputError(f"brackets: offset {tokens[pos][0]}: a ')' closes no bracket")
        if tokens[pos][1] != "(":
            raise SSVMInputError(f"brackets: offset {tokens[pos][0]}: expected '(' to open tree {len(trees)}, got "
                                 f"{tokens[pos][1]!r}")
        node, pos = _parse(tokens, pos, len(trees))
        while node[0] in ROOT_LABELS and isinstance(node[1], list) and len(node[1]) == 1:
            node = node[1][0]                                                  # ( (S ...) ), (TOP (S ...))
        node = _prune(node)
        words, tags, spans = [], [], []
        if node is not None:
            _collect(node, words, tags, spans, len(trees))
        trees.append(BracketedTree(words, tags, spans))
    return trees
