"""Minimum-Bayes-risk against max decoding for trained CoNLL-2000 chunkers: the same weights (a run's
``chunker.pt``, selected on dev under the decode it trained with), dev and test decoded both ways
(``ConllChunker(decode=...)``: the layers' ``decode(..., mbr=True)``, docs/nn.md and docs/segments.md).

For each run folder given: dev and test chunk F1 under ``max`` and ``mbr`` (seqeval, conlleval mode, the test F1 of
``max`` checked against the run's own results.json), the decoder a user would pick (the better dev F1: nothing is
chosen on test), a paired bootstrap over test sentences of mbr - max (``--draws``; Koehn 2004), and the decode's
seconds per 1,000 test sentences (median of ``--repeats``, one thread). The run's small files and both test
predictions are archived under ``benchmarks/results/conll_mbr_runs/<name>/`` (``--archive``) so the F1s
recompute from the repository; the weights stay in the run folder.

Usage: python benchmarks/bench_conll_mbr.py NAME=RUN_DIR [NAME=RUN_DIR ...] [--archive]
Writes benchmarks/results/conll_mbr.json.
"""
from __future__ import annotations

import argparse
import inspect
import json
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

from ssvm_torch.deep import ConllChunker
from ssvm_torch.outputs import load_torch, save_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_conll_deep import chunk_counts, f1_of, paired_bootstrap  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DECODES = ("max", "mbr")


def load_chunker(run: Path) -> ConllChunker:
    """The run's chunker (its hyper-parameters, corpus and best dev weights), in eval mode, on the CPU."""
    saved = load_torch(run / "chunker.pt", "model", "a chunker.pt")
    params = inspect.signature(ConllChunker.__init__).parameters     # Lightning adds keys of its own (_class_path)
    chunker = ConllChunker(**{**{k: v for k, v in saved["hparams"].items() if k in params}, "decode": "max"})
    chunker.build()
    if chunker.corpus.vocab.state() != saved["vocab"]:
        raise SystemExit(f"{run}: the corpus's vocabulary is not the one chunker.pt was trained with")
    chunker.tagger.load_state_dict(saved["state_dict"])
    chunker.tagger.eval()
    return chunker


def decoded(chunker: ConllChunker, split, decode: str, repeats: int = 1) -> tuple[list, float]:
    """(BIO tag lists of ``split`` under ``decode``, the median seconds of ``repeats`` decodings)."""
    chunker.hparams.decode = decode
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tags = chunker.predict(split)
        seconds.append(time.perf_counter() - t0)
    return tags, statistics.median(seconds)


def one_run(name: str, run: Path, draws: int, repeats: int, archive: bool) -> dict:
    chunker = load_chunker(run)
    source = json.loads((run / "results.json").read_text())
    row = {"name": name, "run": str(run), "loss": chunker.hparams.loss, "structure": chunker.hparams.structure,
           "best_epoch": source["best_epoch"]}
    counts, preds = {}, {}
    for decode in DECODES:
        for split in ("dev", "test"):
            data = getattr(chunker.corpus, split)
            tags, seconds = decoded(chunker, data, decode, repeats if split == "test" else 1)
            counts[decode, split] = chunk_counts(data.gold, tags)
            row[f"{split}_f1_{decode}"] = f1_of(counts[decode, split])
            if split == "test":
                preds[decode] = tags
                row[f"test_s_per_1000_{decode}"] = 1000 * seconds / data.n
    if abs(row["test_f1_max"] - source["test_f1"]) > 1e-9:
        raise SystemExit(f"{run}: test F1 decoded again {row['test_f1_max']:.4f} != results.json "
                         f"{source['test_f1']:.4f}")
    row["chosen_on_dev"] = max(DECODES, key=lambda d: row[f"dev_f1_{d}"])
    row["mbr_minus_max"] = paired_bootstrap([counts["mbr", "test"]], [counts["max", "test"]], draws)
    row["changed_test_sentences"] = sum(a != b for a, b in zip(preds["mbr"], preds["max"]))
    if archive:
        dest = RESULTS / "conll_mbr_runs" / name
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("config.json", "history.json", "results.json"):
            shutil.copyfile(run / f, dest / f)
        for decode in DECODES:         # one str object per tag name: the pickle stores each once
            save_torch(dest / f"test_predictions_{decode}.pt",
                       {"predictions": [[sys.intern(t) for t in s] for s in preds[decode]]})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=RUN_DIR: a finished chunker run's folder (chunker.pt, results.json)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--archive", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path, "chunker.pt").is_file():
            raise SystemExit(f"runs: expected NAME=RUN_DIR with RUN_DIR/chunker.pt, got {spec!r}")
        r = one_run(name, Path(path), args.draws, args.repeats, args.archive)
        b = r["mbr_minus_max"]
        print(f"{name}: dev F1 max {r['dev_f1_max']:.2f} / mbr {r['dev_f1_mbr']:.2f} (chosen: {r['chosen_on_dev']}); "
              f"test F1 max {r['test_f1_max']:.2f} / mbr {r['test_f1_mbr']:.2f}, mbr - max {b['observed_diff']:+.2f} "
              f"[{b['ci95'][0]:+.2f}, {b['ci95'][1]:+.2f}], p {b['p_value']:.3f}; {r['changed_test_sentences']} test "
              f"sentences changed; decode {r['test_s_per_1000_max']:.2f} / {r['test_s_per_1000_mbr']:.2f} s per 1,000",
              flush=True)
        rows.append(r)
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1},
           "runs": rows}
    (RESULTS / "conll_mbr.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
