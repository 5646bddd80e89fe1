"""The parser's network from its hyper-parameters and vocabularies: what a run of
:class:`~ssvm_torch.deep.ud_parser.UDParser` trains and what ``ssvm-parse`` loads a saved ``parser.pt`` into. Kept
apart from the LightningModule so that parsing text (``ssvm_torch.deep.ud_parse``) never imports Lightning."""
from __future__ import annotations

from .biaffine import BiaffineParser
from .ud_tagging import TagHead
from .ud_text import SPECIALS

HEADS = ("local", "crf", "hinge", "softmax_margin")


def build_network(hp, vocab) -> BiaffineParser:
    """The network of the hyper-parameters ``hp`` (the recipe's names: ``word_dim``, ``hidden``, ...) over the
    vocabularies ``vocab`` (:class:`~ssvm_torch.deep.ud_text.UDVocab`): what a run trains and what a saved
    ``parser.pt`` is loaded into (one without ``order``, written before the second order, is first order)."""
    sib_dim = hp["sib_dim"] if hp.get("order", 1) == 2 else 0
    tagger = (TagHead(2 * hp["hidden"], len(vocab.upos) - len(SPECIALS), hp["tag_dim"], hp["dropout"], hp["tag_loss"])
              if hp.get("tags", "gold") == "predicted" else None)
    tag_feed_dim = hp["upos_dim"] if tagger is not None and hp.get("tag_feed", False) else 0
    network = BiaffineParser(len(vocab.words), len(vocab.chars), len(vocab.upos), len(vocab.rels), hp["word_dim"],
                             hp["char_dim"], hp["char_filters"], hp["upos_dim"], hp["hidden"], hp["layers"],
                             hp["arc_dim"], hp["rel_dim"], hp["dropout"], hp["upos_input"], sib_dim, tagger, tag_feed_dim)
    if hp.get("xpos", False):       # made last, so that the other initial weights are those of a run without it
        network.xpos_tagger = TagHead(2 * hp["hidden"], len(vocab.xpos) - len(SPECIALS), hp["tag_dim"], hp["dropout"],
                                      hp["tag_loss"])
    return network
