"""A words-only parser run on plain text (issue 72, "Must show"): the UD English-EWT test sentences' words written
one whitespace-tokenized sentence per line, parsed by ``python -m ssvm_torch.deep.ud_parse --input-format text``
from the run's ``parser.pt``, and the output scored against the shipped gold test file by CoNLL 2018's
definitions (UPOS accuracy; UAS / LAS over every word, LAS on the universal part of DEPREL). The figures must be
the run's own test figures (its ``results.json``): nothing but the words reaches the parser, and the command
users run decodes as the training run's final test evaluation did.

The archive (``benchmarks/results/ud_deep_runs/``) keeps no weights, so the check reads the run directories
themselves (``recipes/train_runs.sh``'s ``$RUNS/<name>/lightning_logs/version_0``).

Usage: python benchmarks/bench_ud_parse_text.py RUN_DIR [RUN_DIR ...] [--out benchmarks/results/ud_parse_text.json]
       [--keep]
``--keep`` keeps the file's rows of other runs (a run folder that is gone, e.g. on a new machine, cannot be parsed
again) and replaces those of the runs given.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ssvm_torch.data.ud import load_ud_ewt, read_conllu, universal
from ssvm_torch.deep.ud_parse import main as parse_main
from ssvm_torch.deep.ud_decode import attachment_scores
from ssvm_torch.deep.ud_tagging import tag_accuracy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ud_parse_text.json"


def words_text(split) -> str:
    """One line per sentence: its words joined by single spaces (the text a user would hand in)."""
    return "\n".join(" ".join(split.forms[int(split.offsets[i]):int(split.offsets[i + 1])])
                     for i in range(split.n)) + "\n"


def text_parse_scores(parser_pt: Path, workdir: Path) -> dict:
    """UPOS (and, for a parser with an XPOS head, XPOS) accuracy, UAS and LAS of ``ud_parse --input-format text`` on
    the test sentences' words."""
    test = load_ud_ewt("test")
    text, out = workdir / "test.txt", workdir / "test.conllu"
    text.write_text(words_text(test))
    t0 = time.perf_counter()
    if parse_main(["--model", str(parser_pt), "--input", str(text), "--input-format", "text",
                   "--output", str(out)]) != 0:
        raise SystemExit(f"{parser_pt}: ud_parse refused the text (its message above)")
    seconds = time.perf_counter() - t0
    parsed = read_conllu(out)
    if parsed.n != test.n or parsed.lengths.tolist() != test.lengths.tolist():
        raise SystemExit(f"{out}: {parsed.n} sentences parsed, expected the test file's {test.n} with its lengths")
    cut = [(int(test.offsets[i]), int(test.offsets[i + 1])) for i in range(test.n)]
    gold_heads = [[w[4] for w in test.sentence(i)] for i in range(test.n)]
    gold_rels = [[universal(w[5]) for w in test.sentence(i)] for i in range(test.n)]
    uas, las = attachment_scores(gold_heads, gold_rels, [parsed.heads[a:b].tolist() for a, b in cut],
                                 [parsed.deprels[a:b] for a, b in cut])
    upos = tag_accuracy([test.upos[a:b] for a, b in cut], [parsed.upos[a:b] for a, b in cut])
    out = {"test_upos": upos, "test_uas": uas, "test_las": las, "sentences": test.n, "parse_seconds": seconds}
    if any(x != "_" for x in parsed.xpos):              # an XPOS head wrote them (else the column stays empty)
        out["test_xpos"] = tag_accuracy([test.xpos[a:b] for a, b in cut], [parsed.xpos[a:b] for a, b in cut])
    return out


def check(run_dir: Path) -> dict:
    """The run's text-parse figures beside its results.json; ``equal`` when all agree to 1e-9 (UPOS, UAS, LAS, and
    XPOS for a run with an XPOS head)."""
    results = json.loads((run_dir / "results.json").read_text())
    if "test_upos" not in results:
        raise SystemExit(f"{run_dir}: results.json has no test_upos: not a finished words-only run "
                         "(--model.tags predicted)")
    with tempfile.TemporaryDirectory() as tmp:
        got = text_parse_scores(run_dir / "parser.pt", Path(tmp))
    own = {k: results[k] for k in ("test_upos", "test_xpos", "test_uas", "test_las") if k in results}
    return {"run": str(run_dir), "text": got, "results_json": own,
            "equal": set(got) >= set(own) and all(abs(got[k] - own[k]) <= 1e-9 for k in own)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories with parser.pt and results.json")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", action="store_true", help="keep the output file's rows of runs not given")
    args = ap.parse_args(argv)
    rows = [check(d) for d in args.runs]
    kept = []
    if args.keep and args.out.is_file():
        given = {r["run"] for r in rows}
        kept = [r for r in json.loads(args.out.read_text())["runs"] if r["run"] not in given]
    for r in rows:
        t, o = r["text"], r["results_json"]
        print(f"{r['run']}: text UPOS {t['test_upos']:.2f} UAS {t['test_uas']:.2f} LAS {t['test_las']:.2f}; "
              f"results.json {o['test_upos']:.2f} / {o['test_uas']:.2f} / {o['test_las']:.2f}: "
              f"{'equal' if r['equal'] else 'DIFFERENT'} ({t['parse_seconds']:.1f} s)")
    args.out.write_text(json.dumps({"runs": kept + rows}, indent=1))
    print(f"wrote {args.out}" + (f" ({len(kept)} rows kept)" if kept else ""))
    return 0 if all(r["equal"] for r in kept + rows) else 1


if __name__ == "__main__":
    sys.exit(main())
