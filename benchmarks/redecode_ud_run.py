"""A trained UD parser run decoded another way (issue 72): the same weights (the run's ``parser.pt``, selected on
dev under the decode it trained with), dev and test decoded again with ``--decode`` (``mbr``: the tree of highest
expected LAS, :func:`ssvm_torch.deep.ud_decode.expected_las_heads`), written as a run folder of its own in the
training runs' format, so that ``bench_ud_deep.py`` files it as a head ("mbr_<head>") and pairs it with the same
runs decoded as trained, and ``bench_ud_parse_text.py`` parses its text with ``ud_parse`` (its ``parser.pt`` says
the decode).

Written to OUT: ``config.json`` (the run's, with ``"decode"`` and ``"decoded_from"``: the source folder),
``results.json`` (dev and test figures under the new decode; the source's under ``"as_trained"``; the best epoch
and everything else the source's), ``history.json`` (the source's: epochs were selected under its decode),
``test_predictions.pt`` and ``parser.pt`` (the same weights, ``hparams["decode"]`` set).

Usage: python benchmarks/redecode_ud_run.py RUN_DIR OUT_DIR [--decode mbr] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from ssvm_torch.atomic import atomic_write_bytes
from ssvm_torch.deep.ud_decode import DECODES, decode_split, split_scores
from ssvm_torch.deep.ud_parse import load_parser
from ssvm_torch.deep.ud_text import load_ud_parsing
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.outputs import load_torch, save_torch

SCORES = ("uas", "las", "upos", "xpos", "uas_argmax")


def redecode(run: Path, out: Path, decode: str) -> dict:
    """Decode ``run``'s dev and test with ``decode``, write ``out`` (the module docstring); returns its results."""
    missing = [f for f in ("config.json", "results.json", "history.json") if not (run / f).is_file()]
    if missing:
        raise SSVMInputError(f"run: {run} lacks {', '.join(missing)}; expected a finished run's folder "
                             "(lightning_logs/version_0)")
    parser = load_parser(run / "parser.pt")
    hp = parser.hparams
    corpus = load_ud_parsing(hp["word_min_count"], hp.get("train_size"), hp.get("dev_size"))
    if corpus.vocab.state() != parser.vocab.state():
        raise SystemExit(f"{run}: the treebank's vocabulary is not the one parser.pt was trained with")
    source = json.loads((run / "results.json").read_text())
    results = {**source, "as_trained": {k: source[k] for k in source if k.startswith(("dev_", "test_"))}}
    preds = {}
    for name in ("dev", "test"):
        split = getattr(corpus, name)
        t0 = time.perf_counter()
        preds[name] = decode_split(parser.network, parser.tree, split, parser.vocab.rels, "cpu", 128, parser.vocab.upos,
                                   xpos_names=parser.vocab.xpos, decode=decode)
        seconds = time.perf_counter() - t0
        scores = split_scores(split, preds[name])
        results.update({f"{name}_{k}": scores[k] for k in SCORES if k in scores and f"{name}_{k}" in source})
        if name == "test":
            results.update(test_argmax_not_tree_pct=scores["argmax_not_tree"], test_sentences_per_s=split.n / seconds)
    results["decode"] = decode
    out.mkdir(parents=True, exist_ok=True)
    config = {**json.loads((run / "config.json").read_text()), "decode": decode, "decoded_from": run.parent.parent.name
              if run.name.startswith("version_") else run.name}
    atomic_write_bytes(out / "config.json", json.dumps(config, indent=1).encode())
    atomic_write_bytes(out / "results.json", json.dumps(results, indent=1).encode())
    shutil.copyfile(run / "history.json", out / "history.json")
    test = preds["test"]
    save_torch(out / "test_predictions.pt", {"heads": test["heads"], "labels": test["labels"],
                                             **{k: test[k] for k in ("upos", "xpos") if k in test}})
    weights = load_torch(run / "parser.pt", "model", "a parser.pt")
    save_torch(out / "parser.pt", {**weights, "hparams": {**weights["hparams"], "decode": decode}})
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run's folder (lightning_logs/version_0: parser.pt, results.json, ...)")
    ap.add_argument("out", type=Path, help="the folder to write the re-decoded run into")
    ap.add_argument("--decode", choices=DECODES, default="mbr")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.threads < 1:
        raise SystemExit(f"--threads: expected an int >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    try:
        r = redecode(args.run, args.out, args.decode)
    except SSVMInputError as e:                 # a missing or damaged run folder: one line, no traceback
        raise SystemExit(f"redecode_ud_run.py: {e}") from None
    before = r["as_trained"]
    print(f"{args.run}: {args.decode}: dev UAS {r['dev_uas']:.2f} LAS {r['dev_las']:.2f} (as trained "
          f"{before['dev_uas']:.2f} / {before['dev_las']:.2f}); test UAS {r['test_uas']:.2f} LAS {r['test_las']:.2f} "
          f"(as trained {before['test_uas']:.2f} / {before['test_las']:.2f}); wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
