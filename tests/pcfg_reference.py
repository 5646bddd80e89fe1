"""Every tree of a small PCFG and its score from the grammar's definition (not by the package), for the PCFG tests
(tests/test_pcfg.py, tests/test_pcfg_information.py): random grammars, the labeled trees with their children,
a tree's score, log Z / best tree / expected counts / log-probabilities by enumeration."""
from __future__ import annotations

import itertools

import torch

from span_reference import binary_trees


def grammar(B, N, NT, T, seed, dtype=torch.float64, span=True, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    S = NT + T
    out = [torch.randn(B, N, T, generator=g, dtype=dtype), torch.randn(B, NT, S, S, generator=g, dtype=dtype),
           torch.randn(B, NT, generator=g, dtype=dtype),
           torch.randn(B, N + 1, N + 1, NT, generator=g, dtype=dtype) if span else None]
    return [None if x is None else x.to(device) for x in out]


def parent_children(tree):
    """{span of >= 2 words: (left child, right child)} of a binary tree given as its set of spans."""
    out = {}
    for i, j in tree:
        if j - i >= 2:
            k = max(kk for (ii, kk) in tree if ii == i and kk < j)
            out[(i, j)] = ((i, k), (k, j))
    return out


def labeled_pcfg_trees(n, NT, T):
    """Every tree of a grammar over n words: {span: label}, preterminals on the one-word spans."""
    for tree in binary_trees(0, n):
        words = sorted(s for s in tree if s[1] - s[0] == 1)
        phrases = sorted(s for s in tree if s[1] - s[0] >= 2)
        for tags in itertools.product(range(T), repeat=len(words)):
            for labels in itertools.product(range(NT), repeat=len(phrases)):
                yield {**dict(zip(words, tags)), **dict(zip(phrases, labels))}, parent_children(tree)


def tree_score(terms, rules, roots, span, n, labels, children, NT):
    """s(y) of one row from the definition: root + preterminals + each phrase's rule and span score."""
    s = float(roots[labels[(0, n)]])
    for (i, j), lab in labels.items():
        if j - i == 1:
            s += float(terms[i, lab])
            continue
        (l_span, r_span) = children[(i, j)]
        sym = [labels[c] + (NT if c[1] - c[0] == 1 else 0) for c in (l_span, r_span)]
        s += float(rules[lab, sym[0], sym[1]]) + (0.0 if span is None else float(span[i, j, lab]))
    return s


def add_counts(counts: dict, labels: dict, children: dict, w: float, n: int, NT: int) -> None:
    """counts ("terms", "roots", "rules") += w x the parts of one tree."""
    counts["roots"][labels[(0, n)]] += w
    for (i, j), lab in labels.items():
        if j - i == 1:
            counts["terms"][i, lab] += w
        else:
            sym = [labels[c] + (NT if c[1] - c[0] == 1 else 0) for c in children[(i, j)]]
            counts["rules"][lab, sym[0], sym[1]] += w


def brute(terms, rules, roots, span, n, NT, T, gold=None, cost=0.0):
    """(log Z, best score, best tree's labels, expected counts) of one row by enumeration; with ``gold`` the
    scores are augmented by ``cost`` per (span, label) the gold tree lacks."""
    S = NT + T
    trees, totals = [], []
    counts = {"terms": torch.zeros(terms.shape, dtype=torch.float64), "roots": torch.zeros(NT, dtype=torch.float64),
              "rules": torch.zeros(NT, S, S, dtype=torch.float64)}
    for labels, children in labeled_pcfg_trees(n, NT, T):
        total = tree_score(terms, rules, roots, span, n, labels, children, NT)
        if gold is not None:
            total += cost * sum(gold.get(sp) != lab for sp, lab in labels.items())
        trees.append((labels, children))
        totals.append(total)
    t = torch.tensor(totals, dtype=torch.float64)
    p = torch.softmax(t, 0)
    for (labels, children), w in zip(trees, p.tolist()):
        add_counts(counts, labels, children, w, n, NT)
    k = int(t.argmax())
    return float(torch.logsumexp(t, 0)), float(t[k]), trees[k][0], counts


def chart_of(labels, M):
    c = torch.full((M, M), -1, dtype=torch.int64)
    for (i, j), lab in labels.items():
        c[i, j] = lab
    return c


def enumerated_log_probs(terms, rules, roots, span, n, NT, T):
    """{tree key: log p(tree)} of one row by enumeration (the definition's scores), -inf trees kept."""
    keys, totals = [], []
    for labels, children in labeled_pcfg_trees(n, NT, T):
        keys.append(tuple(sorted(labels.items())))
        totals.append(tree_score(terms, rules, roots, span, n, labels, children, NT))
    t = torch.tensor(totals, dtype=torch.float64)
    return dict(zip(keys, (t - torch.logsumexp(t, 0)).tolist()))


def math_exp(v: float) -> float:
    return 0.0 if v == float("-inf") else float(torch.tensor(v, dtype=torch.float64).exp())
