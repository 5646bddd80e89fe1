"""Decoding with a trained UD parser's network and scoring what it decodes: :func:`decode_split` (trees by the
tree layer, relations at the decoded heads, tags of a words-only network), :func:`attachment_scores` (UAS /
LAS by CoNLL 2018's definitions) and :func:`split_scores` (everything an epoch's evaluation records). Shared by
training's dev and test evaluation (:mod:`ssvm_torch.deep.ud_parser`) and by ``ud_parse``
(:mod:`ssvm_torch.deep.ud_parse`).

Two decodes (``decode``): ``"max"``, the highest-scoring tree (Eisner, second-order Eisner or MST, as the tree
layer is), and ``"mbr"``, the tree of highest expected LAS under the model (:func:`expected_las_heads`). With
``nbest=k`` (``"max"`` only) also the k highest-scoring trees of every sentence (:mod:`ssvm_torch.trees.kbest`),
each with the labeler's relations at its heads, its score and its log-probability under the tree CRF of the arc
(and sibling) scores."""
from __future__ import annotations

import sys

import torch
from tqdm import tqdm

from ..errors import SSVMInputError, check_choice
from ..nn import DependencyTree
from ..trees import dependency_decode
from ..trees.checks import tree_faults
from ..trees.lawler import check_nbest
from ..trees.sibling import fold_first_child
from .biaffine import BiaffineParser
from .ud_tagging import tag_accuracy

DECODES = ("max", "mbr")


def attachment_scores(gold_heads: list, gold_rels: list, heads: list, rels: list) -> tuple[float, float]:
    """(UAS, LAS) in % over every word (CoNLL 2018: punctuation included; relations compared as given,
    the universal parts here)."""
    words = correct = labeled = 0
    for gh, gr, ph, pr in zip(gold_heads, gold_rels, heads, rels):
        for a, b, c, d in zip(gh, gr, ph, pr):
            words += 1
            if a == c:
                correct += 1
                labeled += b == d
    return 100.0 * correct / max(1, words), 100.0 * labeled / max(1, words)


def sibling_scores(network: BiaffineParser, states: torch.Tensor, lengths: torch.Tensor):
    """The network's sibling scores (B, N, N, N) of sentences of ``lengths`` words for a second-order network
    (0 past each sentence), None for a first-order one."""
    return network.sib_scores(states, lengths) if network.sib_dim > 0 else None


#: the largest (sentences x (N + 1)^3) sibling-score batch that decoding builds at once (64 M entries), and the
#: largest (sentences x (N + 1)^2 x relations) batch of relation scores at every head that ``"mbr"`` builds
SIBLING_BUDGET = RELATION_BUDGET = 1 << 26


@torch.no_grad()
def expected_las_heads(tree: DependencyTree, arcs: torch.Tensor, mask: torch.Tensor, rel_all: torch.Tensor,
                       sibs: torch.Tensor | None = None) -> torch.Tensor:
    """Minimum-Bayes-risk heads (B, N) for LAS: the tree (of ``tree``'s kind: projective or not, single-root)
    maximizing sum_m mu(h_m -> m) max_l p(l | h_m, m), the expected number of words with the right head and
    relation when the relation is the labeler's best at that head. mu: the arc marginals of the tree CRF of
    ``arcs`` (with ``sibs``, the second-order one); p: the softmax of ``rel_all`` (B, N(m), N(h), L) over
    relations. Goodman 1996's maximum expected labelled recall for trees; Zhang et al. 2020 decode their
    second-order CRF parser from its marginals the same way (unlabelled). The objective is arc-factored, so the
    first-order decoder of the same tree kind finds it exactly."""
    mu = tree.marginals(arcs, mask, sib_scores=sibs)
    mu = mu[0] if isinstance(mu, tuple) else mu
    best_p = torch.softmax(rel_all.float(), -1).amax(-1)
    first = DependencyTree(projective=tree.projective, multiroot=tree.multiroot, loss="crf")
    return first.decode(mu.float() * best_p, mask)


def split_scores(split, pred: dict) -> dict:
    """What :func:`decode_split`'s ``pred`` scores on ``split``'s gold annotation: UAS / LAS of the decoded trees,
    UAS of the per-word argmax and the share of sentences (%) where that argmax is not a single-root tree
    (``uas_argmax``, ``argmax_not_tree``), and the tag accuracies of the tags it predicts (``upos``, ``xpos``)."""
    gold_heads = [split.gold_heads(i) for i in range(split.n)]
    gold_rels = [split.rel_names[int(split.offsets[i]):int(split.offsets[i + 1])] for i in range(split.n)]
    uas, las = attachment_scores(gold_heads, gold_rels, pred["heads"], pred["labels"])
    uas_argmax, _ = attachment_scores(gold_heads, gold_rels, pred["heads_argmax"], pred["labels"])
    lengths = split.lengths
    padded = torch.full((split.n, int(lengths.max()) + 1), -1, dtype=torch.int64)
    for i, h in enumerate(pred["heads_argmax"]):
        padded[i, 1:len(h) + 1] = torch.tensor(h)
    not_tree = float((tree_faults(padded, lengths, False, False) != 0).double().mean()) * 100
    out = {"uas": uas, "las": las, "uas_argmax": uas_argmax, "argmax_not_tree": not_tree}
    for kind, names in (("upos", split.upos_names), ("xpos", split.xpos_names)):
        if kind in pred:
            gold = [names[int(split.offsets[i]):int(split.offsets[i + 1])] for i in range(split.n)]
            out[kind] = tag_accuracy(gold, pred[kind])
    return out


def ranked_trees(network: BiaffineParser, tree: DependencyTree, scorer, arcs: torch.Tensor, mask: torch.Tensor,
                 sibs: torch.Tensor | None, k: int):
    """The k best trees of a batch (host tensors): heads (B, k, N) (-1 at the ranks past a sentence's trees), the
    labeler's relations at each tree's heads (B, k, N), the trees' scores s(y) (B, k) (-inf past them) and their
    log-probabilities s(y) - log Z under the tree CRF of the same scores (B, k)."""
    logz = tree.log_partition(arcs, mask, sib_scores=sibs)
    if sibs is not None and tree.first_child:           # the layer folds its first-child parts; the function not
        arcs, sibs = fold_first_child(arcs, sibs)
    heads, scores = dependency_decode(arcs, mask, projective=tree.projective, multiroot=tree.multiroot,
                                      kernels=tree.kernels, return_scores=True, sib_scores=sibs, nbest=k)
    rels = torch.stack([network.rel_scores(scorer, torch.where(heads[:, r] >= 0, heads[:, r], heads[:, 0])).argmax(2)
                        for r in range(k)], 1)
    return heads.cpu(), rels.cpu(), scores.cpu(), (scores - logz[:, None]).cpu()


def tree_layer(loss: str, projective: bool, first_child: bool = False) -> DependencyTree:
    """The tree layer of a head: its loss (``local`` trains without it, decodes with it) over projective
    (Eisner) or all (Chu-Liu-Edmonds) single-root trees; ``first_child``: the second order's first-child parts."""
    return DependencyTree(projective=projective, multiroot=False, loss="crf" if loss == "local" else loss,
                          first_child=first_child)


@torch.no_grad()
def decode_split(network: BiaffineParser, tree: DependencyTree, split, rels: list, device, chunk: int = 128,
                 upos_names: list | None = None, progress: bool = False, xpos_names: list | None = None,
                 decode: str = "max", nbest: int = 1) -> dict:
    """Heads and relation names of every sentence of ``split`` (a :class:`~ssvm_torch.deep.ud_text.UDSplit`, in
    its order): trees decoded by the tree layer ``tree`` (Eisner or MST), relations by the network's labeler at
    those heads (names from ``rels``); also the per-word argmax heads (``heads_argmax``). Sentences batched by
    length, ``chunk`` at a time; the caller sets the network's mode (eval for dropout off). A words-only
    network (with a tagger) also predicts the UPOS tags (``upos``, names from ``upos_names``), one with an XPOS
    tagger the XPOS tags (``xpos``, names from ``xpos_names``). ``progress``: a progress bar on stderr when it is
    a terminal. ``decode``: ``"max"`` or ``"mbr"`` (the module docstring). ``nbest=k > 1`` (with ``"max"``): also
    ``"nbest"``, per sentence its k best trees (fewer when it has fewer) as (heads, relation names, score, log
    probability), the first the tree of ``"heads"``."""
    check_choice(decode, "decode", DECODES)
    check_nbest(nbest)
    if nbest > 1 and decode != "max":
        raise SSVMInputError(f"nbest: {nbest} needs decode 'max' (the k best trees by score); decode {decode!r} "
                             "picks one tree")
    order = torch.argsort(split.lengths, stable=True)
    heads, labels, argmax, upos, xpos, ranked = ([None] * split.n for _ in range(6))
    bar = tqdm(total=split.n, unit="sentence", file=sys.stderr, disable=None if progress else True, leave=False)
    s = 0
    while s < split.n:
        idx = order[s:s + chunk]
        if network.sib_dim > 0:               # second order: the (B, N, N, N) sibling scores within a budget
            rows = max(1, SIBLING_BUDGET // (int(split.lengths[idx[-1]]) + 2) ** 3)
            idx = idx[:rows]
            while len(idx) > 1 and len(idx) * (int(split.lengths[idx[-1]]) + 2) ** 3 > SIBLING_BUDGET:
                idx = idx[:len(idx) // 2]
        if decode == "mbr":                   # the relation scores at every head: within their budget too
            idx = idx[:max(1, RELATION_BUDGET // ((int(split.lengths[idx[-1]]) + 1) ** 2 * len(rels)))]
        s += len(idx)
        batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in split.batch(idx).items()}
        states = network.encode(batch)
        tags = network.tagger.decode(states, batch["mask"]) if network.tagger is not None else None
        xtags = network.xpos_tagger.decode(states, batch["mask"]).cpu() if network.xpos_tagger is not None else None
        scorer = network.scorer_states(states, batch["mask"], tags)
        arcs = network.arc_scores(scorer)
        sibs = sibling_scores(network, scorer, batch["lengths"])
        sibs = None if sibs is None else sibs.float()
        if decode == "mbr":
            best = expected_las_heads(tree, arcs.float(), batch["mask"], network.rel_scores_all(scorer), sibs)
        elif nbest > 1:
            kbest = ranked_trees(network, tree, scorer, arcs.float(), batch["mask"], sibs, nbest)
            best = kbest[0][:, 0]
        else:
            best = tree.decode(arcs.float(), batch["mask"], sib_scores=sibs)
        rel = network.rel_scores(scorer, best).argmax(2).cpu()
        tags = tags.cpu() if tags is not None else None
        N = arcs.shape[1]
        cand = torch.arange(N, device=arcs.device)[None, None, :] <= batch["lengths"][:, None, None]
        local = arcs.masked_fill(~cand, float("-inf")).argmax(2).cpu()
        best = best.cpu()
        for row, i in enumerate(idx.tolist()):
            n = int(split.lengths[i])
            heads[i] = best[row, 1:n + 1].tolist()
            labels[i] = [rels[k] for k in rel[row, 1:n + 1].tolist()]
            argmax[i] = local[row, 1:n + 1].tolist()
            if tags is not None:
                upos[i] = [upos_names[k] for k in tags[row, 1:n + 1].tolist()]
            if xtags is not None:
                xpos[i] = [xpos_names[k] for k in xtags[row, 1:n + 1].tolist()]
            if nbest > 1:
                trees, rank_rels, scores, logp = kbest
                ranked[i] = [(trees[row, r, 1:n + 1].tolist(), [rels[k] for k in rank_rels[row, r, 1:n + 1].tolist()],
                              float(scores[row, r]), float(logp[row, r]))
                             for r in range(nbest) if bool(torch.isfinite(scores[row, r]))]
        bar.update(len(idx))
    bar.close()
    out = {"heads": heads, "labels": labels, "heads_argmax": argmax}
    if nbest > 1:
        out["nbest"] = ranked
    if network.tagger is not None:
        out["upos"] = upos
    if network.xpos_tagger is not None:
        out["xpos"] = xpos
    return out
