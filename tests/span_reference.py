"""Every binary tree over a few words, for the span package's tests to enumerate (tests/test_spans.py,
tests/test_kbest.py)."""
from __future__ import annotations

import functools
import itertools


@functools.lru_cache(maxsize=None)
def binary_trees(i: int, j: int) -> tuple:
    """Every binary tree over the span (i, j) as a frozenset of its spans (Catalan(j - i - 1) of them)."""
    if j - i == 1:
        return (frozenset({(i, j)}),)
    out = []
    for k in range(i + 1, j):
        for left, right in itertools.product(binary_trees(i, k), binary_trees(k, j)):
            out.append(left | right | {(i, j)})
    return tuple(out)


def labeled_trees(n: int, L: int):
    """Every labeled binary tree over n words: (spans, labels) with one label per span."""
    for tree in binary_trees(0, n):
        spans = sorted(tree)
        for labels in itertools.product(range(L), repeat=len(spans)):
            yield dict(zip(spans, labels))
