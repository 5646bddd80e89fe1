"""Parse CoNLL-U files with a trained neural UD parser:

    python -m ssvm_torch.deep.ud_parse --model RUN/parser.pt --input IN.conllu[.gz] --output OUT.conllu[.gz]

``RUN`` is the run directory of ``python -m ssvm_torch.deep fit --config recipes/ud_deep_<head>.yaml``
(:mod:`ssvm_torch.deep.ud_parser`; its ``parser.pt`` holds the best dev epoch's weights, the vocabularies and
the hyper-parameters). The network reads each word's FORM and, when the parser was trained with
``upos_input`` (the recipes' default), its UPOS: that column must then be filled (gold, or a tagger's), and
an empty one (``_``) is refused naming the line. The HEAD and DEPREL columns of the basic tree are replaced
by the parser's (DEPREL: the universal relation, what the parser predicts); every other line and column is
written as it was read (line ends as ``\\n``): comments, multiword-token ranges (``3-4``) and empty nodes
(``8.1``). Trees are decoded as the run was trained: projective (Eisner) or not (Chu-Liu-Edmonds), one
word under the root; ``--decode mbr`` picks the tree of highest expected LAS under the model instead of the
best-scoring one (default: the parser's own ``decode``, :mod:`ssvm_torch.deep.ud_decode`). ``--nbest k`` writes
every sentence once per tree of its k best (best first; for reranking), each block with the comments
``# nbest_rank``, ``# nbest_score`` and ``# nbest_log_prob`` (the tree CRF of the parser's scores) and its
``# sent_id`` suffixed ``.nbest<r>`` (:func:`~ssvm_torch.deep.ud_files.written_nbest`).

A words-only parser (``tags: predicted``, ``recipes/ud_deep_words_softmax_margin.yaml``) reads FORM alone and
writes UPOS as well; it also reads plain text, one whitespace-tokenized sentence per line (``--input-format
text``), and writes CoNLL-U with ID, FORM, UPOS, HEAD and DEPREL filled, each sentence's ``# sent_id`` the
number of its line in the text (blank lines are skipped); one trained with an XPOS head (``xpos``) writes XPOS
too. A progress bar shows on a terminal's
stderr from 500 sentences on. A second-order parser refuses a sentence of more than 400 words by its line
(its memory grows as n^3: a line that holds a whole document would exhaust it); ``--max-words`` sets the limit.

From Python: ``parse_sentences(load_parser("RUN/parser.pt"), [[("Dogs", "NOUN"), ("bark", "VERB")]])`` returns the
heads (0 = the root) and relations of each sentence (and, for a words-only parser, the predicted ``upos``; with
an XPOS head, ``xpos``).

When the input's HEAD columns hold a single-root tree for every sentence (a treebank's dev or test file), the
command also reports UAS and LAS against them (HEAD integers that are not trees are named, not scored), by CoNLL 2018's definitions (every word, punctuation included; LAS on the
universal part of DEPREL).
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..atomic import atomic_write_bytes
from ..data.ud import UPOS_TAGS, Treebank
from ..devices import parse_device
from ..errors import SSVMInputError, check, check_choice, run_cli
from ..outputs import load_torch
from .ud_files import ConlluFile, input_trees, read_words, text_words, written
from .ud_decode import DECODES, attachment_scores, decode_split, tree_layer
from .ud_network import HEADS, build_network
from .ud_tagging import TAG_LOSSES
from .ud_text import UDVocab, make_split

PARSER_KEYS = ("state_dict", "vocab", "hparams")
VOCAB_KEYS = ("words", "word_counts", "chars", "upos", "rels")
# the hyper-parameters the network and the tree layer of a parser.pt are built from (build_network, tree_layer)
NETWORK_SIZES = ("word_dim", "char_dim", "char_filters", "upos_dim", "hidden", "layers", "arc_dim", "rel_dim")
NETWORK_FLAGS = ("projective", "upos_input")
#: from this many sentences a parse shows a progress bar on stderr (a terminal's)
PROGRESS_MIN = 500
#: the longest sentence a second-order parser decodes unless told otherwise: its sibling scores hold (n + 1)^3
#: floats per sentence (258 MB at 400 words, 4 GB at 1,000), so a line holding a whole document would exhaust
#: the memory rather than fail by name; a first-order parser's arc scores grow as n^2 and have no limit
MAX_WORDS_SECOND_ORDER = 400


@dataclass
class TrainedParser:
    """A parser.pt loaded for decoding: the network (eval mode), its vocabularies, hyper-parameters, tree layer and
    decode (its hyper-parameters' ``decode``: ``"max"`` or ``"mbr"``, :mod:`ssvm_torch.deep.ud_decode`; ``"max"`` for
    a parser.pt written before the option)."""

    network: torch.nn.Module
    vocab: UDVocab
    hparams: dict
    tree: torch.nn.Module
    decode: str = "max"


def load_parser(path, device=None) -> TrainedParser:
    """The ``parser.pt`` at ``path`` (integrity checked by its SHA-256 manifest, loaded without pickle), its
    network on ``device``; a file that is not a UD parser's is refused naming what it lacks."""
    device = parse_device(device if device is not None else "cpu")     # before the file: "cuda" without one, refused
    obj = load_torch(path, "model", "a parser.pt (of python -m ssvm_torch.deep fit --config recipes/ud_deep_<head>.yaml)")
    missing = [k for k in PARSER_KEYS if k not in obj] + [f"vocab.{k}" for k in VOCAB_KEYS
                                                         if isinstance(obj.get("vocab"), dict) and k not in obj["vocab"]]
    if missing:
        raise SSVMInputError(f"model: {path} is not a UD parser's parser.pt (it lacks {', '.join(missing)}; "
                             "python -m ssvm_torch.deep fit --config recipes/ud_deep_<head>.yaml writes one)")
    check_parser_fields(obj, path)
    hp = obj["hparams"]
    # the XPOS vocabulary: in a parser.pt since the XPOS head (check_parser_fields: present when it has one)
    vocab = UDVocab(**{k: list(obj["vocab"][k]) for k in VOCAB_KEYS}, xpos=list(obj["vocab"].get("xpos", [])))
    try:
        network = build_network(hp, vocab)
        network.load_state_dict(obj["state_dict"])
    except (KeyError, RuntimeError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SSVMInputError(f"model: {path}: its weights do not fit the network of its hyper-parameters "
                             f"({first[:200]})") from None
    network.to(device).eval()
    check_choice(hp.get("decode", "max"), "decode", DECODES)
    tree = tree_layer(hp["loss"], hp["projective"], hp.get("first_child", False))
    return TrainedParser(network, vocab, dict(hp), tree, hp.get("decode", "max"))


def check_parser_fields(obj: dict, path) -> None:
    """Refuse a parser.pt whose fields could not have been written by a run, naming the first bad one: the
    file is untrusted (its manifest proves it intact, not that a run wrote it), and a wrong type would
    otherwise fail deep inside the network's construction. ``hparams``: the head's ``loss`` (one of
    :data:`~ssvm_torch.deep.ud_parser.HEADS`), the flags :data:`NETWORK_FLAGS` true or false, the sizes
    :data:`NETWORK_SIZES` ints >= 1, ``dropout`` in [0, 1), ``order`` 1 or 2 (absent: 1) and, second order,
    ``sib_dim`` an int >= 1 (``first_child`` true or false, false unless second order); ``tag_feed`` and
    ``xpos`` true or false, and false unless ``tags`` is predicted (with ``xpos``, ``vocab['xpos']`` checked
    like the other vocabularies); ``vocab``: lists of distinct strings (``word_counts``: of ints, one per word);
    ``state_dict``: tensors by name, finite weights."""
    def bad(field: str, expected: str, got) -> SSVMInputError:
        return SSVMInputError(f"model: {path}: {field} is {str(got)[:60]!r}, expected {expected} (a file a run "
                              "of recipes/ud_deep_<head>.yaml writes has it)")
    hp, vocab, weights = obj["hparams"], obj["vocab"], obj["state_dict"]
    for field, value in (("hparams", hp), ("vocab", vocab), ("state_dict", weights)):
        if not isinstance(value, dict):
            raise bad(field, "a dict", type(value).__name__)
    missing = [k for k in ("loss", *NETWORK_FLAGS, *NETWORK_SIZES, "dropout") if k not in hp]
    if missing:
        raise SSVMInputError(f"model: {path}: hparams lacks {', '.join(missing)} (a file a run of "
                             "recipes/ud_deep_<head>.yaml writes has them)")
    if hp["loss"] not in HEADS:
        raise bad("hparams['loss']", f"one of {', '.join(HEADS)}", hp["loss"])
    for k in NETWORK_FLAGS:
        if not isinstance(hp[k], bool):
            raise bad(f"hparams[{k!r}]", "true or false", hp[k])
    for k in NETWORK_SIZES:
        if not (isinstance(hp[k], int) and not isinstance(hp[k], bool) and hp[k] >= 1):
            raise bad(f"hparams[{k!r}]", "an int >= 1", hp[k])
    if not (isinstance(hp["dropout"], (int, float)) and 0 <= hp["dropout"] < 1):
        raise bad("hparams['dropout']", "a probability in [0, 1)", hp["dropout"])
    tags = hp.get("tags", "gold")                     # before the words-only parser: gold tags
    if tags not in ("gold", "predicted"):
        raise bad("hparams['tags']", "'gold' or 'predicted'", tags)
    if tags == "predicted":
        if hp.get("tag_loss") not in TAG_LOSSES:
            raise bad("hparams['tag_loss']", f"one of {', '.join(TAG_LOSSES)}", hp.get("tag_loss"))
        if not (isinstance(hp.get("tag_dim"), int) and not isinstance(hp.get("tag_dim"), bool) and hp["tag_dim"] >= 1):
            raise bad("hparams['tag_dim']", "an int >= 1 (a words-only parser's tagger)", hp.get("tag_dim"))
    for flag in ("tag_feed", "xpos"):
        if not isinstance(hp.get(flag, False), bool) or (hp.get(flag, False) and tags != "predicted"):
            raise bad(f"hparams[{flag!r}]", "true or false, and false unless tags is 'predicted'", hp.get(flag))
    order = hp.get("order", 1)                        # a parser.pt written before the second order has none
    if order not in (1, 2) or isinstance(order, bool):
        raise bad("hparams['order']", "1 or 2", order)
    if order == 2 and not (isinstance(hp.get("sib_dim"), int) and not isinstance(hp.get("sib_dim"), bool)
                           and hp["sib_dim"] >= 1):
        raise bad("hparams['sib_dim']", "an int >= 1 (a second-order parser's sibling scorer)", hp.get("sib_dim"))
    first_child = hp.get("first_child", False)        # absent before the first-child parts: False
    if not isinstance(first_child, bool) or (first_child and order != 2):
        raise bad("hparams['first_child']", "true or false, and false unless order is 2", first_child)
    for k in VOCAB_KEYS + (("xpos",) if hp.get("xpos", False) else ()):
        items, kind = vocab.get(k), (int if k == "word_counts" else str)
        if not (isinstance(items, (list, tuple)) and items and all(isinstance(x, kind) for x in items)):
            raise bad(f"vocab[{k!r}]", f"a non-empty list of {kind.__name__}s", type(items).__name__
                      if not isinstance(items, (list, tuple)) else items[:3])
    if len(vocab["word_counts"]) != len(vocab["words"]):
        raise bad("vocab['word_counts']", f"one count per word ({len(vocab['words'])})",
                  f"{len(vocab['word_counts'])} counts")
    for k in VOCAB_KEYS + (("xpos",) if hp.get("xpos", False) else ()):
        if k != "word_counts" and len(set(vocab[k])) != len(vocab[k]):
            seen, repeated = set(), None
            for x in vocab[k]:
                if x in seen:
                    repeated = x
                    break
                seen.add(x)
            raise bad(f"vocab[{k!r}]", "distinct entries (an id per entry)", f"{repeated!r} repeated")
    odd = next((k for k, v in weights.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))), None)
    if odd is not None:
        raise bad(f"state_dict[{odd!r}]", "a tensor named by a string", type(weights[odd]).__name__)
    broken = next((k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
    if broken is not None:
        raise SSVMInputError(f"model: {path}: state_dict[{broken!r}] holds NaN or infinite weights (a run's parser.pt "
                             "has finite ones: the file was written by a diverged run or altered)")


def word_treebank(name: str, sentences: list) -> Treebank:
    """``sentences`` (lists of (form, upos) pairs) as a :class:`~ssvm_torch.data.ud.Treebank` with placeholder
    trees (every head 0), the input of :func:`~ssvm_torch.deep.ud_text.make_split`."""
    flat = [w for sent in sentences for w in sent]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])]).astype(np.int64)
    return Treebank(name, [f for f, _ in flat], ["_"] * len(flat), [u for _, u in flat], ["_"] * len(flat),
                    ["_"] * len(flat), np.zeros(len(flat), dtype=np.int64), offsets,
                    np.arange(len(flat), dtype=np.int64))


def word_limit(parser: TrainedParser, max_words: int | None) -> int | None:
    """The longest sentence ``parser`` decodes: ``max_words`` when given, else :data:`MAX_WORDS_SECOND_ORDER`
    for a second-order parser and no limit (None) for a first-order one."""
    check(max_words is None or (isinstance(max_words, int) and not isinstance(max_words, bool) and max_words >= 1),
          "max_words", "None or an int >= 1 (words per sentence)", max_words)
    if max_words is not None:
        return max_words
    return MAX_WORDS_SECOND_ORDER if parser.hparams.get("order", 1) == 2 else None


def check_lengths(parser: TrainedParser, lengths: list, limit: int | None, name) -> None:
    """Refuse the first sentence longer than ``limit`` words, named by ``name(i)`` (its index or input line)."""
    if limit is None:
        return
    i = next((i for i, n in enumerate(lengths) if n > limit), None)
    if i is None:
        return
    n = lengths[i]
    why = (f" (a second-order parser's sibling scores take (n + 1)^3 floats: {4 * (n + 1) ** 3 / 2 ** 30:.1f} GiB for "
           "this one)" if parser.hparams.get("order", 1) == 2 else "")
    raise SSVMInputError(f"{name(i)}: a sentence of {n} words, over the limit of {limit} words per sentence{why}; "
                         "split it, or raise the limit (max_words, --max-words)")


def parse_sentences(parser: TrainedParser, sentences: list, device=None, chunk: int = 128,
                    max_words: int | None = None, decode: str | None = None, nbest: int = 1) -> dict:
    """Heads (0 = the root) and universal relations of ``sentences``, each a list of (form, upos) pairs (the
    UPOS ignored by a parser trained without it): ``{"heads": [[int, ...], ...], "labels": [[str, ...], ...],
    "heads_argmax": ...}`` in their order (:func:`~ssvm_torch.deep.ud_decode.decode_split`). A sentence longer
    than ``max_words`` (default: :data:`MAX_WORDS_SECOND_ORDER` for a second-order parser, no limit for a
    first-order one) is refused by name before anything is decoded. ``decode``: ``"max"`` or ``"mbr"`` (None: the
    parser's own). ``nbest=k > 1``: also ``"nbest"``, each sentence's k best trees as (heads, relations, score,
    log-probability) (:func:`~ssvm_torch.deep.ud_decode.decode_split`)."""
    check(isinstance(sentences, (list, tuple)) and len(sentences) > 0, "sentences", "a non-empty list of sentences",
          type(sentences).__name__ if not isinstance(sentences, (list, tuple)) else "an empty list")
    for i, sent in enumerate(sentences):
        ok = (isinstance(sent, (list, tuple)) and len(sent) > 0
              and all(isinstance(w, (list, tuple)) and len(w) == 2 and isinstance(w[0], str) and w[0]
                      and isinstance(w[1], str) for w in sent))
        check(ok, f"sentences[{i}]", "a non-empty list of (form, upos) pairs of strings (a non-empty form)",
              repr(sent)[:80])
    check(isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1, "chunk",
          "an int >= 1 (sentences per forward pass)", chunk)
    check_lengths(parser, [len(s) for s in sentences], word_limit(parser, max_words), lambda i: f"sentences[{i}]")
    if parser.hparams["upos_input"]:
        for i, sent in enumerate(sentences):
            bad = next((j for j, (_, u) in enumerate(sent) if u not in UPOS_TAGS), None)
            if bad is not None:
                raise SSVMInputError(f"sentences[{i}][{bad}]: UPOS {sent[bad][1]!r} is not one of UD's 17 universal "
                                     f"tags ({', '.join(UPOS_TAGS)}); this parser reads each word's UPOS "
                                     "(upos_input true)")
    split = make_split("sentences", word_treebank("sentences", sentences), parser.vocab)
    return decode_split(parser.network, parser.tree, split, parser.vocab.rels, parse_device(device or "cpu"), chunk,
                        parser.vocab.upos, progress=len(sentences) >= PROGRESS_MIN, xpos_names=parser.vocab.xpos,
                        decode=decode or ("max" if nbest > 1 else parser.decode), nbest=nbest)


def file_sentences(doc: ConlluFile, upos_needed: bool) -> list:
    """The (form, upos) pairs of every sentence of ``doc``. ``upos_needed`` (a parser that reads UPOS): an empty
    UPOS, or one that is not among UD's 17 universal tags (an XPOS in the column, lower case), is refused naming
    its line; a universal tag the parser never saw in training reads as unknown, like an unseen word."""
    if upos_needed:
        for sent in doc.words:
            for k in sent:
                tag = doc.lines[k].split("\t")[3]
                if tag in ("", "_"):
                    raise SSVMInputError(f"input: {doc.path}:{k + 1}: the UPOS column is empty; this parser reads "
                                         "every word's UPOS (it was trained with upos_input true): fill it (gold or a "
                                         "tagger's)")
                if tag not in UPOS_TAGS:
                    raise SSVMInputError(f"input: {doc.path}:{k + 1}: UPOS {tag!r} is not one of UD's 17 universal "
                                         f"tags ({', '.join(UPOS_TAGS)}); the column must hold universal POS tags "
                                         "(not XPOS)")
    return [[tuple(doc.lines[k].split("\t")[1:4:2]) for k in sent] for sent in doc.words]


def parse_file(parser: TrainedParser, doc: ConlluFile, device=None, chunk: int = 128,
               max_words: int | None = None, decode: str | None = None, nbest: int = 1) -> dict:
    """:func:`parse_sentences` of every sentence of ``doc``; a sentence over the word limit is named by its
    first line in the input."""
    limit = word_limit(parser, max_words)
    check_lengths(parser, [len(s) for s in doc.words], limit, lambda i: f"input: {doc.path}:{doc.line_of(i)}")
    return parse_sentences(parser, file_sentences(doc, bool(parser.hparams["upos_input"])), device, chunk, limit,
                           decode, nbest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ssvm_torch.deep.ud_parse", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="the parser.pt of a run of recipes/ud_deep_<head>.yaml")
    p.add_argument("--input", required=True, help="a CoNLL-U file (.gz read as gzip), or text with --input-format text")
    p.add_argument("--input-format", choices=("conllu", "text"), default="conllu",
                   help="conllu, or text: one whitespace-tokenized sentence per line (a words-only parser's input)")
    p.add_argument("--output", required=True, help="the CoNLL-U file to write (.gz written as gzip)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:k]")
    p.add_argument("--batch", type=int, default=128, help="sentences per forward pass")
    p.add_argument("--decode", choices=DECODES, default=None,
                   help="max: the best tree; mbr: the tree of highest expected LAS (None: the parser's own, max for "
                        "one trained before the option)")
    p.add_argument("--nbest", type=int, default=1,
                   help="write each sentence once per tree of its k best (decode max), with its rank, score and "
                        "log-probability as comments")
    p.add_argument("--threads", type=int, default=None, help="torch threads (None: torch's default)")
    p.add_argument("--max-words", type=int, default=None,
                   help=f"the longest sentence to decode (None: {MAX_WORDS_SECOND_ORDER} words for a second-order "
                        "parser, whose memory grows as n^3; no limit for a first-order one)")
    return p


def run(args) -> dict:
    check(isinstance(args.batch, int) and args.batch >= 1, "batch", "an int >= 1", args.batch)
    check(args.threads is None or args.threads >= 1, "threads", "None or an int >= 1", args.threads)
    check(args.nbest >= 1, "nbest", "an int >= 1 (trees per sentence)", args.nbest)
    if args.nbest > 1 and args.decode == "mbr":
        raise SSVMInputError(f"nbest: {args.nbest} ranks trees by score (decode max); --decode mbr picks one tree")
    output = Path(args.output)
    if output.resolve() == Path(args.input).resolve():
        raise SSVMInputError(f"output: {args.output} is the input file; write the parse to another path")
    if output.is_dir():
        raise SSVMInputError(f"output: {args.output} is a directory; expected a file path (e.g. {output / 'parsed.conllu'})")
    if not output.resolve().parent.is_dir():
        raise SSVMInputError(f"output: the folder of {args.output} does not exist; create it first")
    try:                                                  # before the parse: a folder it cannot write into
        fd, probe = tempfile.mkstemp(prefix=".ud-parse-probe.", dir=output.resolve().parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise SSVMInputError(f"output: cannot write into {output.resolve().parent} ({e.strerror or e})") from None
    device = parse_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    parser = load_parser(args.model, device)
    if args.input_format == "text" and parser.hparams["upos_input"]:
        raise SSVMInputError(f"input_format: 'text' has no UPOS, and {args.model} reads every word's gold UPOS (trained "
                             "with upos_input true); use a words-only parser (tags: predicted) or CoNLL-U with UPOS")
    doc = text_words(args.input) if args.input_format == "text" else read_words(args.input)
    t0 = time.perf_counter()
    pred = parse_file(parser, doc, device, args.batch, args.max_words, args.decode, args.nbest)
    seconds = time.perf_counter() - t0
    data = written(doc, pred)
    atomic_write_bytes(args.output, gzip.compress(data, mtime=0) if str(args.output).endswith(".gz") else data)
    n, w = len(doc.words), sum(len(s) for s in doc.words)
    report = {"sentences": n, "words": w, "seconds": seconds, "nbest": args.nbest}
    trees = "" if args.nbest == 1 else f", {sum(len(t) for t in pred['nbest'])} trees (up to {args.nbest} each)"
    print(f"parsed {n} sentences ({w} words) in {seconds:.2f} s ({n / max(seconds, 1e-9):.0f} sentences/s){trees}; "
          f"wrote {args.output}", flush=True)
    gold, why = input_trees(doc)
    if gold is not None:
        report["uas"], report["las"] = attachment_scores(gold[0], gold[1], pred["heads"], pred["labels"])
        print(f"against the input's own trees: UAS {report['uas']:.2f}, LAS {report['las']:.2f} (every word, "
              "punctuation included; LAS on the universal relations" + ("; the best tree of each sentence"
                                                                          if args.nbest > 1 else "") + ")", flush=True)
    elif why is not None:
        print(why, flush=True)
    return report


def main(argv=None) -> int:
    return run_cli("python -m ssvm_torch.deep.ud_parse", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
