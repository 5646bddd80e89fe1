"""CoNLL-2000 text chunking: reader, featurization under a named or user template, chunk F1.

Templates (:mod:`ssvm_torch.data.templates`): ``sha-pereira`` (the default; the CRFsuite chunking
example after Sha & Pereira 2003: words w[-2..2], word bigrams w[-1]|w[0], w[0]|w[1], POS p[-2..2],
POS bigrams and trigrams in the window) and ``rich`` (it plus outer word bigrams, lower-cased
words, word x POS conjunctions, prefixes / suffixes 1-4, word shapes, orthographic flags and a +-3
window), or any template string. An attribute whose window leaves the sentence is not generated.

The attribute dictionary is built on the training sentences only (optionally keeping attributes
seen >= ``min_count`` times); unseen attributes of other sentences are dropped. The joint feature
map is the chain's (models/chain.py): emission = attributes (+ a constant) x tags, first/last-tag
biases, tag transitions; with all 8,936 training sentences and ``sha-pereira`` there are 22 tags
and 335,672 attributes, d = 22 (A + 1) + 2*22 + 22^2 = 7,385,334.

``heldout=f`` splits the training file itself: the first (1 - f) of its sentences train, the last f
are the development set that model selection looks at; the test file is then not read at all.

Tags come from the training data (22). ``I-LST`` occurs only in the test set: it is kept as an
"unknown" label that no prediction can match, so it counts as an error in the per-token error and
as a missed chunk in F1 (the official conlleval counts it the same way).
"""
from __future__ import annotations

import gzip
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch

from ..constraints import bio_to_bioes, bioes_to_bio
from ..errors import SSVMInputError, check
from . import feature_cache
from .templates import featurize, get_template
from .types import ChainData, data_file


def read_conll(path) -> list[list[tuple[str, str, str]]]:
    """Sentences of (word, POS, chunk tag) triples from a (gzipped) 3-column CoNLL file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    sents, cur, lineno = [], [], 0
    try:
        with opener(path, "rt", encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    if cur:
                        sents.append(cur)
                        cur = []
                    continue
                if len(parts) != 3:
                    raise SSVMInputError(f"{path.name} line {lineno}: expected 3 columns (word POS tag), "
                                         f"got {len(parts)}")
                cur.append(tuple(parts))
    except (EOFError, OSError, zlib.error) as e:     # a truncated or corrupt gzip, an unreadable file
        raise SSVMInputError(f"data file: {path} is damaged or unreadable after line {lineno} "
                             f"({type(e).__name__}: {e}); copy it again") from None
    except UnicodeDecodeError as e:
        raise SSVMInputError(f"data file: {path} line {lineno + 1}: expected ASCII text, got byte "
                             f"{e.object[e.start:e.start + 1]!r}") from None
    if cur:
        sents.append(cur)
    if not sents:
        raise SSVMInputError(f"data file: {path} holds no sentences (expected word POS tag lines, sentences "
                             "separated by blank lines)")
    return sents


def token_attributes(sent, template="sha-pereira") -> list[list[str]]:
    """The template's attribute strings for every token of a sentence (the readable reference)."""
    return get_template(template).attributes(sent)


def build_chain_data(sents, attr_index: dict, tags: list[str], name: str, allow_unknown: bool,
                     template="sha-pereira") -> ChainData:
    """Sparse (CSR) ChainData built from attribute strings, one dict lookup per attribute: the
    string reference the vectorized :func:`load_conll2000` is tested against."""
    template = get_template(template)
    tag_index = {t: k for k, t in enumerate(tags)}
    crow, cols, labels, lengths = [0], [], [], []
    for sent in sents:
        for attrs, tok in zip(template.attributes(sent), sent):
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


def split_heldout(sents: list, heldout: float) -> tuple[list, list]:
    """(fit, dev) of the training sentences: the last ``heldout`` share (at least one sentence) is the
    development set. The one split of every CoNLL model selection (``ssvm-train --select-lam
    --heldout``, the neural chunkers of :mod:`ssvm_torch.deep.conll_chunker`), so dev sets are identical."""
    check(isinstance(heldout, float) and 0.0 < heldout <= 0.5, "heldout", "a fraction in (0, 0.5]", heldout)
    n_fit = len(sents) - max(1, round(heldout * len(sents)))
    check(n_fit >= 1, "heldout", f"to leave at least one of the {len(sents)} sentences to train on", heldout)
    return sents[:n_fit], sents[n_fit:]


def load_conll2000(train_size: int | None = None, features="sha-pereira", min_count: int = 1,
                   heldout: float | None = None, cache: bool = True, tags: str = "bio") -> tuple[ChainData, ChainData]:
    """(train, test) of CoNLL-2000 (WSJ 15-18 train, 20 test) under the template ``features`` (a
    name in TEMPLATES, a template string or a :class:`Template`). ``train_size`` keeps the first N
    training sentences; ``heldout`` (in (0, 0.5]) returns (fit, dev) instead: the last ``heldout``
    of those sentences as dev, the test file untouched. The designs are cached on disk, keyed by the
    template, ``min_count``, the split and the data files' checksums; ``meta["featurization"]``
    says how long building them took and whether the cache answered. ``tags="bioes"`` trains on the
    tags converted to BIOES (:func:`ssvm_torch.constraints.bio_to_bioes`); ``meta["tags"]`` keeps the
    official BIO tags and :func:`chunk_f1` converts predictions back to BIO before scoring."""
    check(tags in ("bio", "bioes"), "tags", "'bio' or 'bioes'", repr(tags))
    template = get_template(features)
    train_path = data_file("conll2000_train.txt.gz")
    train = read_conll(train_path)
    if train_size is not None:
        check(isinstance(train_size, int) and 1 <= train_size <= len(train), "train_size",
              f"an int in [1, {len(train)}]", train_size)
        train = train[:train_size]
    if heldout is not None:
        (train, other), other_path, names = split_heldout(train, heldout), train_path, ("conll2000-fit", "conll2000-dev")
    else:
        other_path = data_file("conll2000_test.txt.gz")
        other, names = read_conll(other_path), ("conll2000", "conll2000-test")
    t0 = time.perf_counter()
    key = feature_cache.cache_key(template.key(), min_count, train_size, heldout, feature_cache.file_digest(train_path),
                                  feature_cache.file_digest(other_path))
    arrays = feature_cache.load(key) if cache else None
    hit = arrays is not None
    if arrays is None:
        (a, b), n_attr, n_edge = featurize(template, [train, other], min_count)
        arrays = {"train_crow": a.crow, "train_cols": a.cols, "other_crow": b.crow, "other_cols": b.cols,
                  "n_attributes": np.array([n_attr]), "n_edge_attributes": np.array([n_edge])}
        if n_edge:
            arrays.update({"train_edge_crow": a.edge_crow, "train_edge_cols": a.edge_cols,
                           "other_edge_crow": b.edge_crow, "other_edge_cols": b.edge_cols})
        if cache:
            feature_cache.save(key, arrays)
    info = {"template": template.name, "items": template.text(), "min_count": min_count,
            "n_attributes": int(arrays["n_attributes"][0]), "n_edge_attributes": int(arrays["n_edge_attributes"][0]),
            "seconds": time.perf_counter() - t0, "cached": hit}
    scheme = tags.upper()
    names_of = (lambda s: bio_to_bioes([t[2] for t in s])) if scheme == "BIOES" else (lambda s: [t[2] for t in s])
    tag_set = sorted({t for s in train for t in names_of(s)})
    return (_chain_data(train, arrays, "train", info, tag_set, names[0], False, names_of, scheme),
            _chain_data(other, arrays, "other", info, tag_set, names[1], True, names_of, scheme))



def _chain_data(sents, arrays: dict, split: str, info: dict, tags: list[str], name: str,
                allow_unknown: bool, names_of, scheme: str) -> ChainData:
    """ChainData of binary attribute indicators from a cached design (CSR rows = tokens); the labels
    are the tags ``names_of`` gives (BIO or BIOES), ``meta["tags"]`` the file's BIO tags."""
    tag_index = {t: k for k, t in enumerate(tags)}
    gold = [[t[2] for t in s] for s in sents]
    labels = [tag_index.get(t, len(tags)) for s in sents for t in names_of(s)]
    if not allow_unknown and len(tags) in labels:
        raise SSVMInputError(f"tags: a training tag is not in the tag set {tags}")
    n_tok = len(labels)

    def csr(prefix, width):
        crow, cols = arrays[f"{split}_{prefix}crow"], arrays[f"{split}_{prefix}cols"]
        if crow.shape != (n_tok + 1,) or int(crow[-1]) != len(cols) or (len(cols) and int(cols.max()) >= width):
            raise SSVMInputError(f"{name}: the featurized design does not match the sentences ({n_tok} tokens); "
                                 f"delete the feature cache in {feature_cache.cache_dir()}")
        with warnings.catch_warnings():           # torch flags sparse CSR as beta; we only store and slice it
            warnings.simplefilter("ignore", UserWarning)
            # binary indicators: one shared 1.0 (a stride-0 view) instead of nnz copies (13M on rich-edges),
            # and 4-byte indices where they fit
            if len(cols) < 2 ** 31 and width < 2 ** 31:
                crow, cols = crow.astype(np.int32), cols.astype(np.int32)
            return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(cols),
                                           torch.ones(1, dtype=torch.float64).expand(len(cols)), (n_tok, width))
    offsets = torch.zeros(len(sents) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor([len(s) for s in sents]), 0)
    E = csr("edge_", info["n_edge_attributes"]) if info["n_edge_attributes"] else None
    return ChainData(csr("", info["n_attributes"]), torch.tensor(labels, dtype=torch.int64), offsets, len(tags), name,
                     allow_unknown, {"tag_names": list(tags), "tags": gold, "featurization": info,
                                     "tag_scheme": scheme}, E)


def scored_tag_names(data: ChainData) -> list:
    """The tag string of each label as chunk F1 reads it: the data's tag names, BIOES names mapped to BIO."""
    names = data.meta["tag_names"]
    return bioes_to_bio(names) if data.meta.get("tag_scheme") == "BIOES" else names


def chunk_f1(data: ChainData, labels: torch.Tensor) -> dict:
    """Chunk precision / recall / F1 (in %) by seqeval (conlleval-compatible chunking rules),
    against the original gold BIO tag strings (tags unknown to the model included); predictions in
    BIOES are converted to BIO first, so F1 is always on the official chunks. One seqeval call gives
    the three (its separate precision / recall / F1 functions extract every chunk again each: 3x the time
    of the whole evaluation at every record of a CoNLL run)."""
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support
    names = scored_tag_names(data)
    lab = labels.cpu().numpy()
    off = data.offsets.cpu().numpy()
    pred = [[names[k] for k in lab[off[i]:off[i + 1]]] for i in range(data.n)]
    gold = data.meta["tags"]
    precision, recall, f1, _ = precision_recall_fscore_support(gold, pred, average="micro")
    return {"f1": 100 * float(f1), "precision": 100 * float(precision), "recall": 100 * float(recall)}
