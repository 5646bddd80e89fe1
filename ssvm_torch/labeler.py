"""The second stage of the dependency parser: dependency relations for a given tree (McDonald, Lerman &
Pereira, CoNLL 2006, "Multilingual dependency analysis with a two-stage discriminative parser").

The first stage (the arc-factored tree SSVM, :mod:`ssvm_torch.models.dependency`) finds the heads; this one
labels the arcs. The children of each head, in sentence order, form one chain, and their relations are
labeled jointly by a first-order chain SSVM (:class:`~ssvm_torch.models.chain.ChainModel`, trained by BCFW
with gap sampling like every chain here), so that a head's children influence each other's relations (one
``nsubj`` per verb, ``obj`` after ``nsubj``) as McDonald et al.'s sibling chains do. Labels are the universal
part of DEPREL (what the CoNLL 2018 LAS compares). Why two stages rather than labeled arcs in the tree SSVM:
labeled first-order parsing multiplies the arc scoring by the number of relations (37 on EWT) in every
oracle call, while the labels given the tree cost one chain decode; McDonald et al. report the two-stage
parser within a few tenths of a joint one.

Attributes of child m under head h (the tree given: gold when training, predicted when parsing): words,
lemmas, XPOS and UPOS of m and h, direction and binned distance, their conjunctions, m's neighbours' POS,
h's own head's UPOS, m's number of children and the UPOS of its first and last child, m's place among its
siblings, and the lower-cased word's last three characters. The dictionary is the training trees'
attributes (in order of first occurrence, so a retrained labeler is the same model).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from .data.types import ChainData

#: lambda of the labeler's SSVM and its BCFW budget, chosen on EWT's dev split with gold heads
#: (docs/structures.md has the table)
LABELER_LAM = 1e-4
LABELER_PASSES = 5


def _bin(d: int) -> str:
    return str(d) if d <= 5 else "6-10" if d <= 10 else ">10"


def child_attributes(sent, heads, m: int, siblings: list[int], children: list[list[int]]) -> list[str]:
    """The attribute strings of word m (1-based) under its head in the tree ``heads`` (heads[m - 1])."""
    h = heads[m - 1]
    word, upos, xpos, lemma = sent[m - 1]
    w, lw = word.lower(), lemma.lower()
    if h == 0:
        hw = hu = hp = hl = "<root>"
        gu = "<none>"
    else:
        hw, hu, hp, hl = sent[h - 1][0].lower(), sent[h - 1][1], sent[h - 1][2], sent[h - 1][3].lower()
        g = heads[h - 1]
        gu = "<root>" if g == 0 else sent[g - 1][1]
    direction = "L" if m < h else "R"
    att = direction + _bin(abs(m - h))
    left = sent[m - 2][2] if m >= 2 else "<s>"
    right = sent[m][2] if m < len(sent) else "</s>"
    kids = children[m]
    n_kids = str(min(len(kids), 3))
    first_kid = sent[kids[0] - 1][1] if kids else "<none>"
    last_kid = sent[kids[-1] - 1][1] if kids else "<none>"
    k = siblings.index(m)
    place = ("first" if k == 0 else "mid") + ("-last" if k == len(siblings) - 1 else "")
    return [f"mw={w}", f"mp={xpos}", f"mu={upos}", f"ml={lw}", f"hw={hw}", f"hp={hp}", f"hu={hu}", f"hl={hl}",
            f"att={att}", f"dir={direction}", f"mu|hu={upos}|{hu}", f"mp|hp={xpos}|{hp}", f"mw|hp={w}|{hp}",
            f"mp|hw={xpos}|{hw}", f"mu|att={upos}|{att}", f"mp|hp|dir={xpos}|{hp}|{direction}", f"mw|hw={w}|{hw}",
            f"ml|hl={lw}|{hl}", f"suf3={w[-3:]}", f"mp-1|mp|mp+1={left}|{xpos}|{right}", f"gu|hu|mu={gu}|{hu}|{upos}",
            f"kids={n_kids}", f"kid1={first_kid}", f"kidn={last_kid}", f"mu|kid1={upos}|{first_kid}",
            f"place={place}", f"hu|dir|mu|place={hu}|{direction}|{upos}|{place}", "bias"]


def sibling_chains(sentences, heads_flat, offsets) -> tuple[list[list[str]], list[int]]:
    """(attribute lists in chain order, the flat word index of each chain position) and the chain offsets:
    one chain per head with children, the children in sentence order."""
    attrs, words, chain_off = [], [], [0]
    for i, sent in enumerate(sentences):
        s = int(offsets[i])
        n = len(sent)
        heads = [int(v) for v in heads_flat[s:s + n]]
        children = [[] for _ in range(n + 1)]
        for m in range(1, n + 1):
            children[heads[m - 1]].append(m)
        for h in range(n + 1):
            sibs = children[h]
            if not sibs:
                continue
            for m in sibs:
                attrs.append(child_attributes(sent, heads, m, sibs, children))
                words.append(s + m - 1)
            chain_off.append(len(words))
    return attrs, words, chain_off


def _chain_data(attrs, chain_off, labels, index: dict, K: int, unknown: bool) -> ChainData:
    crow, cols = [0], []
    for a in attrs:
        ids = sorted({index[x] for x in a if x in index})
        cols.extend(ids)
        crow.append(len(cols))
    import warnings
    with warnings.catch_warnings():               # torch flags sparse CSR as beta; it is only stored and sliced
        warnings.simplefilter("ignore", UserWarning)
        X = torch.sparse_csr_tensor(torch.tensor(crow, dtype=torch.int64), torch.tensor(cols, dtype=torch.int64),
                                    torch.ones(len(cols), dtype=torch.float64), (len(attrs), len(index)))
    return ChainData(X, torch.as_tensor(labels, dtype=torch.int64), torch.tensor(chain_off, dtype=torch.int64), K,
                     "sibling-chains", unknown)


@dataclass
class TreeLabeler:
    """A trained labeler: the attribute dictionary, the chain model and its weights."""

    index: dict
    label_names: list
    model: object
    w: torch.Tensor
    gap: float
    passes: float

    def digest(self) -> str:
        """SHA-256 of the dictionary (a retrained labeler must give the same one)."""
        return hashlib.sha256("\n".join(self.index).encode()).hexdigest()

    def predict(self, data, heads_flat: torch.Tensor) -> torch.Tensor:
        """Universal relation ids (W,) of every word of ``data`` (DependencyData) under the tree ``heads_flat``."""
        attrs, words, chain_off = sibling_chains(data.meta["sentences"], heads_flat.tolist(), data.offsets.tolist())
        K = len(self.label_names)
        cd = _chain_data(attrs, chain_off, np.zeros(len(words), dtype=np.int64), self.index, K, True)
        pred = self.model.predict_ragged(self.w, cd)
        out = torch.full((int(data.offsets[-1]),), -1, dtype=torch.int64)
        out[torch.tensor(words, dtype=torch.int64)] = pred.to(torch.int64)
        return out


def train_labeler(train, lam: float = LABELER_LAM, passes: float = LABELER_PASSES, seed: int = 0) -> TreeLabeler:
    """The labeler of the training trees of ``train`` (DependencyData with ``meta["sentences"]``), BCFW with
    gap sampling on the chain SSVM of the sibling chains (module docstring)."""
    from .models import ChainModel
    from .solvers import Solver, SolverConfig
    from .stores import make_store
    attrs, words, chain_off = sibling_chains(train.meta["sentences"], train.heads.tolist(), train.offsets.tolist())
    index: dict = {}
    for a in attrs:
        for x in a:
            index.setdefault(x, len(index))
    names = list(train.meta["label_names"])
    labels = train.labels[torch.tensor(words, dtype=torch.int64)]
    if bool((labels < 0).any()):
        raise ValueError("train: every training relation must be in the label set")
    cd = _chain_data(attrs, chain_off, labels, index, len(names), False)
    model = ChainModel.for_data(cd, loss="hamming", emission="feature-major")
    store = make_store(model, cd, lam)
    history = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=passes, gap_check=passes,
                                         seed=seed)).run()
    return TreeLabeler(index, names, model, store.w.clone(), history[-1]["gap"], history[-1]["passes"])


def attachment_scores(data, heads_flat: torch.Tensor, cache: dict) -> dict:
    """UAS and LAS in percent over every word (CoNLL 2018: punctuation included, LAS on the universal part of
    DEPREL) of the predicted tree ``heads_flat`` against ``data``'s gold tree, and the share of sentences with
    a wrong head. ``cache["train"]`` is the training data of the labeler, trained on first use and kept in
    ``cache["labeler"]``."""
    if "labeler" not in cache:
        cache["labeler"] = train_labeler(cache["train"])
    heads_flat = heads_flat.to("cpu")
    gold = data.heads.to("cpu")
    ok = heads_flat == gold
    labels = cache["labeler"].predict(data, heads_flat)
    las_ok = ok & (labels == data.labels.to("cpu"))
    rows = torch.repeat_interleave(torch.arange(data.n), data.lengths.cpu())
    wrong_sent = torch.zeros(data.n, dtype=torch.int64).index_add_(0, rows, (~ok).long()) > 0
    W = gold.shape[0]
    return {"uas": 100.0 * float(ok.sum()) / W, "las": 100.0 * float(las_ok.sum()) / W,
            "sentence_error": float(wrong_sent.double().mean())}
