"""Between charts and span lists: a tree as the list of its spans (i, j) or labeled spans (i, j, label),
pre-order (by start, then the longer span first: SuPar's ``ConstituencyCRF.argmax`` order)."""
from __future__ import annotations

import torch

from ..errors import SSVMInputError, check


def chart_from_spans(spans: list, n_fenceposts: int, labeled: bool = False, device=None) -> torch.Tensor:
    """A padded batch of charts (B, n_fenceposts, n_fenceposts) from one list of spans per row: bool charts of
    (i, j) pairs, or with ``labeled`` int64 charts of (i, j, label) triples (-1 off the spans). Spans are
    placed as given (:func:`ssvm_torch.spans.check_charts` checks that they form binary trees)."""
    check(isinstance(spans, (list, tuple)), "spans", "a list with one list of spans per row", type(spans).__name__)
    M = int(n_fenceposts)
    check(M >= 1, "n_fenceposts", "an int >= 1 (N + 1 for rows of at most N words)", n_fenceposts)
    out = (torch.full((len(spans), M, M), -1, dtype=torch.int64) if labeled
           else torch.zeros(len(spans), M, M, dtype=torch.bool))
    width = 3 if labeled else 2
    for b, row in enumerate(spans):
        for s in row:
            if len(s) != width:
                raise SSVMInputError(f"spans: row {b}: expected {'(i, j, label)' if labeled else '(i, j)'} items, "
                                     f"got {tuple(s)!r}")
            i, j = int(s[0]), int(s[1])
            if not 0 <= i < j < M:
                raise SSVMInputError(f"spans: row {b}: span ({i}, {j}) is not 0 <= i < j <= {M - 1}")
            if bool(out[b, i, j] >= 0) if labeled else bool(out[b, i, j]):
                raise SSVMInputError(f"spans: row {b}: span ({i}, {j}) appears twice (a chart holds a span once)")
            if labeled:
                if int(s[2]) < 0:
                    raise SSVMInputError(f"spans: row {b}: span ({i}, {j}) has the negative label {int(s[2])}")
                out[b, i, j] = int(s[2])
            else:
                out[b, i, j] = True
    return out if device is None else out.to(device)


def spans_of_chart(charts: torch.Tensor) -> list:
    """One list of spans per row of a chart batch: (i, j) pairs of a bool chart, (i, j, label) triples of an
    int chart (entries >= 0), pre-order."""
    check(torch.is_tensor(charts) and charts.dim() == 3, "charts", "a chart batch (B, N+1, N+1)",
          tuple(getattr(charts, "shape", ())))
    host = charts.detach().cpu()
    rows = []
    for c in host:
        on = c if c.dtype == torch.bool else c >= 0
        spans = [(int(i), int(j)) if c.dtype == torch.bool else (int(i), int(j), int(c[i, j]))
                 for i, j in on.nonzero().tolist()]
        rows.append(sorted(spans, key=lambda s: (s[0], -s[1])))
    return rows


def binarize(spans: list, n: int, fill: int) -> list:
    """A binary tree over n words (2n - 1 labeled spans) from an n-ary one: ``spans`` (i, j, label) nested (no
    crossing, no span twice: collapse a unary chain into one label first, as SuPar does), each node's children
    joined from the left ((c1 c2) c3 ...: NLTK's ``chomsky_normal_form("left")``, SuPar's factorization), the
    joins, the missing one-word spans and a missing whole-sentence span labeled ``fill``. Refused by name when
    the spans cross, repeat or leave 0 <= i < j <= n."""
    check(isinstance(n, int) and n >= 1, "n", "an int >= 1 (words)", n)
    seen = {}
    for s in spans:
        i, j, lab = (int(v) for v in s)
        if not 0 <= i < j <= n:
            raise SSVMInputError(f"spans: span ({i}, {j}) is not 0 <= i < j <= {n}")
        if (i, j) in seen:
            raise SSVMInputError(f"spans: span ({i}, {j}) appears twice (labels {seen[(i, j)]} and {lab}): collapse "
                                 "unary chains into one label")
        seen[(i, j)] = lab
    for t in range(n):
        seen.setdefault((t, t + 1), fill)
    seen.setdefault((0, n), fill)
    ordered = sorted(seen, key=lambda s: (s[0], -s[1]))             # pre-order: a parent before its children
    out, stack, children = [], [], {s: [] for s in ordered}
    for s in ordered:
        while stack and stack[-1][1] <= s[0]:
            stack.pop()
        if stack:
            parent = stack[-1]
            if s[1] > parent[1]:
                raise SSVMInputError(f"spans: ({parent[0]}, {parent[1]}) and ({s[0]}, {s[1]}) cross")
            children[parent].append(s)
        stack.append(s)
    for s in ordered:
        out.append((s[0], s[1], seen[s]))
        kids = children[s]
        for k in range(1, len(kids) - 1):                           # the left joins (c1 .. c_{k+1})
            out.append((s[0], kids[k][1], fill))
    return sorted(out, key=lambda s: (s[0], -s[1]))


def debinarize(spans: list, fill: int) -> list:
    """The n-ary tree of a binarized one: its spans without those labeled ``fill`` (the joins, and the one-word
    and whole-sentence spans that :func:`binarize` added)."""
    return [tuple(int(v) for v in s) for s in spans if int(s[2]) != fill]


def subtree_brackets(heads: list, labels: list) -> list | None:
    """The constituents of a projective dependency tree: for every word with dependents, the span of its subtree
    labeled ``labels[m]`` (the flattest dependency-to-phrase conversion, Collins et al. 1999, Xia & Palmer 2001: a
    phrase per head, all its dependents its children). ``heads[m - 1]`` is the head of word m (1..n, 0 the root);
    words are fenceposted 0..n as in the package (word m covers (m - 1, m)). None when a subtree is not contiguous
    (a non-projective tree)."""
    n = len(heads)
    check(len(labels) == n, "labels", f"one label per word ({n})", len(labels))
    for m, h in enumerate(heads, 1):
        if not 0 <= int(h) <= n or int(h) == m:
            raise SSVMInputError(f"heads: word {m}'s head {int(h)} is not in [0, {n}] or the word itself")
    lo, hi = list(range(n + 1)), list(range(n + 1))           # per word 1..n: its subtree's first / last word
    has_dependent = [False] * (n + 1)
    size = [1] * (n + 1)
    depth = [0] * (n + 1)
    for m in range(1, n + 1):                                   # depth by walking to the root (trees: no cycle)
        h, d = int(heads[m - 1]), 0
        while h != 0:
            d += 1
            if d > n:
                raise SSVMInputError(f"heads: word {m} is on a cycle (not a tree): {list(map(int, heads))[:20]}")
            h = int(heads[h - 1])
        depth[m] = d
    for m in sorted(range(1, n + 1), key=lambda w: -depth[w]):  # children before parents
        h = int(heads[m - 1])
        if h:
            has_dependent[h] = True
            lo[h], hi[h], size[h] = min(lo[h], lo[m]), max(hi[h], hi[m]), size[h] + size[m]
    out = []
    for m in range(1, n + 1):
        if hi[m] - lo[m] + 1 != size[m]:
            return None
        if has_dependent[m]:
            out.append((lo[m] - 1, hi[m], int(labels[m - 1])))
    return sorted(out, key=lambda s: (s[0], -s[1]))
