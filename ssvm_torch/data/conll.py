"""CoNLL-2000 text chunking: reader, the Sha & Pereira (2003) attribute template, chunk F1.

Attribute template (the CRFsuite chunking example, after Sha & Pereira 2003), for token t with
words w and part-of-speech tags p; an attribute whose window leaves the sentence is not generated:

    w[t-2], w[t-1], w[t], w[t+1], w[t+2],
    w[t-1]|w[t], w[t]|w[t+1],
    p[t-2], p[t-1], p[t], p[t+1], p[t+2],
    p[t-2]|p[t-1], p[t-1]|p[t], p[t]|p[t+1], p[t+1]|p[t+2],
    p[t-2]|p[t-1]|p[t], p[t-1]|p[t]|p[t+1], p[t]|p[t+1]|p[t+2]

The attribute dictionary is built on the training sentences only; unseen test attributes are
dropped. The joint feature map is the chain's (models/chain.py): emission = attributes (+ a
constant) x tags, first/last-tag biases, tag transitions. With all 8,936 training sentences
there are 22 tags and the dictionary gives d = 22 (A + 1) + 2*22 + 22^2 (printed by
``load_conll2000``; the paper's map has d = 1,643,026).

Tags come from the training data (22). ``I-LST`` occurs only in the test set: it is kept as an
"unknown" label that no prediction can match, so it counts as an error in the per-token error and
as a missed chunk in F1 (the official conlleval counts it the same way).
"""
from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import torch

from ..errors import SSVMInputError, check
from .types import ChainData, data_file

TEMPLATE = (
    (("w", -2),), (("w", -1),), (("w", 0),), (("w", 1),), (("w", 2),),
    (("w", -1), ("w", 0)), (("w", 0), ("w", 1)),
    (("p", -2),), (("p", -1),), (("p", 0),), (("p", 1),), (("p", 2),),
    (("p", -2), ("p", -1)), (("p", -1), ("p", 0)), (("p", 0), ("p", 1)), (("p", 1), ("p", 2)),
    (("p", -2), ("p", -1), ("p", 0)), (("p", -1), ("p", 0), ("p", 1)), (("p", 0), ("p", 1), ("p", 2)),
)


def read_conll(path) -> list[list[tuple[str, str, str]]]:
    """Sentences of (word, POS, chunk tag) triples from a (gzipped) 3-column CoNLL file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    sents, cur = [], []
    with opener(path, "rt", encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                if cur:
                    sents.append(cur)
                    cur = []
                continue
            if len(parts) != 3:
                raise SSVMInputError(f"{path.name} line {lineno}: expected 3 columns (word POS tag), got {len(parts)}")
            cur.append(tuple(parts))
    if cur:
        sents.append(cur)
    return sents


def token_attributes(sent) -> list[list[str]]:
    """The template's attribute strings for every token of a sentence."""
    words = [t[0] for t in sent]
    pos = [t[1] for t in sent]
    cols = {"w": words, "p": pos}
    T = len(sent)
    out = []
    for t in range(T):
        attrs = []
        for tmpl in TEMPLATE:
            if all(0 <= t + off < T for _, off in tmpl):
                name = "|".join(f"{c}[{off}]" for c, off in tmpl)
                value = "|".join(cols[c][t + off] for c, off in tmpl)
                attrs.append(f"{name}={value}")
        out.append(attrs)
    return out


def build_chain_data(sents, attr_index: dict, tags: list[str], name: str, allow_unknown: bool) -> ChainData:
    """Sparse (CSR) ChainData: binary attribute indicators per token; unseen attributes dropped."""
    tag_index = {t: k for k, t in enumerate(tags)}
    crow, cols, labels, lengths = [0], [], [], []
    for sent in sents:
        for attrs, tok in zip(token_attributes(sent), sent):
            ids = sorted({attr_index[a] for a in attrs if a in attr_index})
            cols.extend(ids)
            crow.append(len(cols))
            tag = tok[2]
            if tag not in tag_index and not allow_unknown:
                raise SSVMInputError(f"tag {tag!r}: not in the tag set {tags}")
            labels.append(tag_index.get(tag, len(tags)))
        lengths.append(len(sent))
    N = len(labels)
    with warnings.catch_warnings():           # torch flags sparse CSR as beta; we only store and slice it
        warnings.simplefilter("ignore", UserWarning)
        X = torch.sparse_csr_tensor(torch.tensor(crow, dtype=torch.int64), torch.tensor(cols, dtype=torch.int64),
                                    torch.ones(len(cols), dtype=torch.float64), (N, len(attr_index)))
    offsets = torch.zeros(len(sents) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return ChainData(X, torch.tensor(labels, dtype=torch.int64), offsets, len(tags), name, allow_unknown,
                     {"tag_names": list(tags), "tags": [[t[2] for t in s] for s in sents]})


def load_conll2000(train_size: int | None = None) -> tuple[ChainData, ChainData]:
    """CoNLL-2000 (WSJ 15-18 train, 20 test). ``train_size`` keeps the first N training sentences
    (the attribute dictionary and tag set are then built from those only)."""
    train = read_conll(data_file("conll2000_train.txt.gz"))
    test = read_conll(data_file("conll2000_test.txt.gz"))
    if train_size is not None:
        check(isinstance(train_size, int) and 1 <= train_size <= len(train), "train_size",
              f"an int in [1, {len(train)}]", train_size)
        train = train[:train_size]
    attr_index: dict[str, int] = {}
    for sent in train:
        for attrs in token_attributes(sent):
            for a in attrs:
                attr_index.setdefault(a, len(attr_index))
    tags = sorted({tok[2] for s in train for tok in s})
    return (build_chain_data(train, attr_index, tags, "conll2000", False),
            build_chain_data(test, attr_index, tags, "conll2000-test", True))


def chunk_f1(data: ChainData, labels: torch.Tensor) -> dict:
    """Chunk precision / recall / F1 (in %) by seqeval (conlleval-compatible chunking rules),
    against the original gold tag strings (tags unknown to the model included)."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    names = data.meta["tag_names"]
    lab = labels.cpu().numpy()
    off = data.offsets.cpu().numpy()
    pred = [[names[k] for k in lab[off[i]:off[i + 1]]] for i in range(data.n)]
    gold = data.meta["tags"]
    return {"f1": 100 * f1_score(gold, pred), "precision": 100 * precision_score(gold, pred),
            "recall": 100 * recall_score(gold, pred)}
