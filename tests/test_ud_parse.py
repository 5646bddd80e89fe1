"""Parsing CoNLL-U files with a trained neural parser (ssvm_torch.deep.ud_parse): the dev file parsed from the
run's parser.pt scores what the run recorded on dev, every line other than HEAD / DEPREL is written as read
(comments, multiword ranges, empty nodes), blank heads get trees, and bad files are refused in one line."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ssvm_torch.data.ud import UD_EWT, read_conllu
from ssvm_torch.data.types import data_file
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.deep.__main__ import main as deep_main
from ssvm_torch.deep.ud_files import text_words
from ssvm_torch.deep.ud_parse import load_parser, main as parse_main, parse_sentences
from ssvm_torch.outputs import load_torch, save_torch
from test_ud_deep import RECIPES, TINY

SMALL = """# sent_id = a-1
# text = Don't stop now.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t_\t_\t_\t_
2\tn't\tnot\tPART\tRB\t_\t_\t_\t_\t_
3\tstop\tstop\tVERB\tVB\t_\t_\t_\t_\t_
3.1\tyou\tyou\tPRON\tPRP\t_\t_\t_\t_\t_
4\tnow\tnow\tADV\tRB\t_\t_\t_\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t_\t_\t_\t_

# sent_id = a-2
1\tHello\thello\tINTJ\tUH\t_\t_\t_\t_\t_
"""


def tiny_run(root, recipe: str, *options) -> Path:
    """The run directory of a two-epoch fit of ``recipe`` on the tiny treebank slice, under ``root``."""
    args = ["fit", "--config", str(RECIPES / recipe), *TINY, *options,
            "--trainer.max_epochs", "2", "--trainer.default_root_dir", str(root)]
    assert deep_main(args) == 0
    return sorted(root.glob("lightning_logs/version_*"))[-1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One tiny non-projective CRF run (its parser.pt and results.json) selected on the whole dev split."""
    return tiny_run(tmp_path_factory.mktemp("parser"), "ud_deep_crf.yaml", "--model.projective", "false",
                    "--model.dev_size", "null")


def fields(path) -> list:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f]


@pytest.mark.long
def test_the_dev_file_parsed_from_parser_pt_scores_the_runs_dev_figures(run_dir, tmp_path, capsys):
    dev = data_file(UD_EWT["dev"])
    out = tmp_path / "dev.conllu.gz"
    assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(dev), "--output", str(out)]) == 0
    said = capsys.readouterr().out
    results = json.loads((run_dir / "results.json").read_text())
    assert f"UAS {results['dev_uas']:.2f}, LAS {results['dev_las']:.2f}" in said
    parsed, gold = read_conllu(out), read_conllu(dev)            # the strict reader: every sentence is a tree
    assert parsed.n == gold.n == 2001 and parsed.forms == gold.forms and parsed.upos == gold.upos
    assert (parsed.heads != gold.heads).any()                   # the heads are the parser's, not the file's
    before, after = fields(dev), fields(out)
    assert len(before) == len(after)
    for a, b in zip(before, after):                             # only HEAD and DEPREL of word lines change
        if len(a) == 10 and a[0].isdigit():
            assert a[:6] == b[:6] and a[8:] == b[8:]
        else:
            assert a == b


def test_blank_heads_get_trees_and_ranges_comments_and_empty_nodes_stay(run_dir, tmp_path, capsys):
    src, out = tmp_path / "in.conllu", tmp_path / "out.conllu"
    src.write_text(SMALL)
    assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(src), "--output", str(out)]) == 0
    assert "UAS" not in capsys.readouterr().out                   # no trees in the input: nothing to score
    before, after = fields(src), fields(out)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        if len(a) == 10 and a[0].isdigit():
            assert a[:6] == b[:6] and a[8:] == b[8:] and b[6].isdigit() and b[7] != "_"
        else:
            assert a == b                                         # comments, 1-2, 3.1 and blank lines as read
    tb = read_conllu(out)                                         # single-root trees over words 1..n
    assert tb.n == 2 and tb.lengths.tolist() == [5, 1] and tb.heads.tolist()[-1] == 0


# parser.pt files a run could not have written (saved with a valid manifest): each refused naming the field
EDITED = {"unknown-head": (lambda o: o["hparams"].update(loss="perceptron"), "hparams['loss'] is 'perceptron'"),
          "size-as-text": (lambda o: o["hparams"].update(hidden="200"), "hparams['hidden'] is '200', expected an int"),
          "no-flag": (lambda o: o["hparams"].pop("projective"), "hparams lacks projective"),
          "xpos-without-tagger": (lambda o: o["hparams"].update(xpos=True),
                                  "hparams['xpos'] is 'True', expected true or false, and false unless tags is"),
          "first-child-first-order": (lambda o: o["hparams"].update(first_child=True),
                                      "hparams['first_child'] is 'True', expected true or false, and false unless "
                                      "order is 2"),
          "vocab-a-list": (lambda o: o.update(vocab=list(o["vocab"])), "vocab is 'list', expected a dict"),
          "rels-numbers": (lambda o: o["vocab"].update(rels=[1, 2]), "vocab['rels'] is '[1, 2]'"),
          "counts-short": (lambda o: o["vocab"].update(word_counts=o["vocab"]["word_counts"][:-1]),
                           "expected one count per word"),
          "weights-a-list": (lambda o: o.update(state_dict=[]), "state_dict is 'list', expected a dict"),
          "upos-repeated": (lambda o: o["vocab"].update(upos=o["vocab"]["upos"] + o["vocab"]["upos"][-1:]),
                            "vocab['upos'] is "),
          "nan-weights": (lambda o: o["state_dict"]["arc_U"].fill_(float("nan")),
                          "state_dict['arc_U'] holds NaN or infinite weights")}


@pytest.mark.parametrize("case", ["no-upos", "nine-fields", "id-order", "not-a-parser", "damaged", "same-file",
                                  "missing", "empty", "no-folder", "xpos-in-upos", "lower-case-upos", "output-a-folder",
                                  "output-unwritable", *EDITED])
def test_bad_files_are_refused_in_one_line(run_dir, tmp_path, capsys, case):
    model, src, out = run_dir / "parser.pt", tmp_path / "in.conllu", tmp_path / "out.conllu"
    text, expected = SMALL, None
    if case == "no-upos":
        text, expected = SMALL.replace("\tstop\tstop\tVERB\t", "\tstop\tstop\t_\t"), "in.conllu:6: the UPOS column is empty"
    elif case == "nine-fields":
        text, expected = SMALL.replace("\tSpaceAfter=No", ""), "in.conllu:8: expected 10 tab-separated fields"
    elif case == "id-order":
        text, expected = SMALL.replace("5\t.\t.", "6\t.\t."), "expected word ID 5"
    elif case == "not-a-parser":
        model = save_torch(tmp_path / "model.pt", {"w": torch.zeros(3)})
        expected = "is not a UD parser's parser.pt (it lacks state_dict, vocab, hparams"
    elif case == "damaged":
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0xFF
        model = tmp_path / "damaged.pt"
        model.write_bytes(bytes(data))
        expected = ("is damaged", "is not a readable ssvm_torch file")     # the manifest's SHA-256, or the zip's CRC
    elif case in EDITED:
        obj = load_torch(model, "model")
        edit, expected = EDITED[case]
        edit(obj)
        model = save_torch(tmp_path / "edited.pt", obj)
    elif case == "same-file":
        out, expected = src, "is the input file"
    elif case == "missing":
        src, expected = tmp_path / "nowhere.conllu", "does not exist"
    elif case == "empty":
        text, expected = "# only a comment\n\n", "holds no sentence"
    elif case == "no-folder":
        out, expected = tmp_path / "nowhere" / "out.conllu", "the folder of"
    elif case == "xpos-in-upos":
        text = SMALL.replace("\tstop\tstop\tVERB\t", "\tstop\tstop\tVB\t")
        expected = "in.conllu:6: UPOS 'VB' is not one of UD's 17 universal tags"
    elif case == "lower-case-upos":
        text, expected = SMALL.replace("\tnow\tnow\tADV\t", "\tnow\tnow\tadv\t"), "in.conllu:8: UPOS 'adv' is not"
    elif case == "output-a-folder":
        out, expected = tmp_path, "is a directory; expected a file path"
    elif case == "output-unwritable":
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        out, expected = locked / "out.conllu", "output: cannot write into"
        if os.access(locked, os.W_OK):                           # root writes anywhere: nothing to refuse
            pytest.skip("this user can write into a read-only folder (root)")
    if case != "missing":
        src.write_text(text)
    assert parse_main(["--model", str(model), "--input", str(src), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and any(e in err[0] for e in ((expected,) if isinstance(expected, str) else expected)), err
    assert case in ("same-file", "output-a-folder") or not Path(out).exists()


def test_the_python_api_parses_what_the_command_writes(run_dir, tmp_path):
    src, out = tmp_path / "in.conllu", tmp_path / "out.conllu"
    src.write_text(SMALL)
    assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(src), "--output", str(out)]) == 0
    words = [[(a[1], a[3]) for a in fields(src) if len(a) == 10 and a[0].isdigit() and int(a[0]) <= 5][:5],
             [("Hello", "INTJ")]]
    pred = parse_sentences(load_parser(run_dir / "parser.pt"), words)
    written = [a for a in fields(out) if len(a) == 10 and a[0].isdigit()]
    assert [int(a[6]) for a in written] == pred["heads"][0] + pred["heads"][1]
    assert [a[7] for a in written] == pred["labels"][0] + pred["labels"][1]
    with pytest.raises(SSVMInputError, match=r"sentences\[1\]: expected a non-empty list of \(form, upos\) pairs"):
        parse_sentences(load_parser(run_dir / "parser.pt"), [[("a", "DET")], [("b",)]])


def test_head_columns_that_are_not_trees_are_named_not_scored(run_dir, tmp_path, capsys):
    """The input's HEAD integers scored only when every sentence's heads are a single-root tree: a cycle, two
    roots, a head out of range or all zeros are named in one line instead; a HEAD that is a digit to Python but
    not an integer (superscript two) is not a tree either (it made a traceback after the output was written)."""
    tree = SMALL.replace("\tAUX\tVBP\t_\t_\t_", "\tAUX\tVBP\t_\t3\taux").replace(
        "\tPART\tRB\t_\t_\t_", "\tPART\tRB\t_\t3\tadvmod").replace(
        "\tVERB\tVB\t_\t_\t_", "\tVERB\tVB\t_\t0\troot").replace(
        "\tADV\tRB\t_\t_\t_", "\tADV\tRB\t_\t3\tadvmod").replace(
        "\tPUNCT\t.\t_\t_\t_", "\tPUNCT\t.\t_\t3\tpunct").replace(
        "\tINTJ\tUH\t_\t_\t_", "\tINTJ\tUH\t_\t0\troot")
    cases = {"tree": (tree, "against the input's own trees: UAS"),
             "cycle": (tree.replace("\tVERB\tVB\t_\t0\troot", "\tVERB\tVB\t_\t1\troot"), "a cycle"),
             "two-roots": (tree.replace("\tADV\tRB\t_\t3\tadvmod", "\tADV\tRB\t_\t0\tadvmod"),
                           "not exactly one word attached to the root"),
             "out-of-range": (tree.replace("\tADV\tRB\t_\t3\tadvmod", "\tADV\tRB\t_\t9\tadvmod"),
                              "a head out of [0, n]"),
             "all-zero": (tree.replace("\t_\t3\t", "\t_\t0\t"), "not exactly one word attached to the root"),
             "superscript": (tree.replace("\tADV\tRB\t_\t3\tadvmod", "\tADV\tRB\t_\t\u00b2\tadvmod"), None)}
    for name, (text, said) in cases.items():
        src, out = tmp_path / f"{name}.conllu", tmp_path / f"{name}.out.conllu"
        src.write_text(text)
        assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(src), "--output", str(out)]) == 0, name
        printed = capsys.readouterr()
        assert "Traceback" not in printed.err and out.is_file()
        if name == "tree":
            assert said in printed.out
        elif said is None:
            assert "own trees" not in printed.out and "not a tree" not in printed.out, (name, printed.out)
        else:
            assert "own trees" not in printed.out and "HEAD values that are not a tree" in printed.out and said in printed.out, \
                (name, printed.out)


def test_a_byte_order_mark_is_read_and_the_api_refuses_by_name(run_dir, tmp_path):
    """A UTF-8 byte-order mark before the first line is not part of it; parse_sentences refuses a chunk of 0, a
    UPOS outside the parser's tags and a CUDA device on a machine without one, each naming the field."""
    src, out = tmp_path / "bom.conllu", tmp_path / "out.conllu"
    src.write_bytes("\ufeff".encode("utf-8") + SMALL.replace("# sent_id = a-1\n", "").encode("utf-8"))
    assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(src), "--output", str(out)]) == 0
    parser = load_parser(run_dir / "parser.pt")
    with pytest.raises(SSVMInputError, match="chunk: expected an int >= 1"):
        parse_sentences(parser, [[("a", "DET")]], chunk=0)
    with pytest.raises(SSVMInputError, match=r"sentences\[0\]\[1\]: UPOS 'NN' is not one of UD's 17"):
        parse_sentences(parser, [[("a", "DET"), ("dog", "NN")]])
    if not torch.cuda.is_available():
        with pytest.raises(SSVMInputError, match="device: 'cuda' requested but no CUDA device is available"):
            load_parser(run_dir / "parser.pt", device="cuda")


# the second-order words-only run (23 s to train) is slow-tier: a second-order run's parse-back stays in the fast
# tier (test_ud_deep's tiny second-order runs) and so do the words-only outputs (the two first-order runs here)
@pytest.fixture(scope="module", params=["words", "words_tagfeed",
                                        pytest.param("words_tagfeed_2o", marks=pytest.mark.slow)])
def words_run(request, tmp_path_factory):
    """One tiny words-only run (tags predicted by the LinearChain head, no gold UPOS input), its scorers reading
    the BiLSTM states only or (tagfeed) the predicted tags too; the second-order recipe (its sibling scorer
    reading the tags too) as issue 72's runs train it. The first-order tag-feed run trains with tag noise (a share of
    the fed tags replaced, training only): what it writes and parses must not depend on it; the plain words run has
    an XPOS head too (a second tagger, its tags written and scored)."""
    option = {"words_tagfeed": ["--model.tag_noise", "0.05"], "words": ["--model.xpos", "true"]}.get(request.param, [])
    return tiny_run(tmp_path_factory.mktemp(request.param), f"ud_deep_{request.param}_softmax_margin.yaml",
                    "--model.tag_dim", "8", *option)


@pytest.mark.long
def test_a_words_only_run_records_tags_and_parses_plain_text_to_its_own_figures(words_run):
    """The run's outputs carry the UPOS accuracy (dev per epoch, test) and the predicted tags; ud_parse --input-format
    text on the test sentences' words (one per line) writes tags, heads and relations that score the run's own test
    UPOS, UAS and LAS against the gold file (benchmarks/bench_ud_parse_text.py, the check of issue 72's runs)."""
    import importlib.util
    results = json.loads((words_run / "results.json").read_text())
    history = json.loads((words_run / "history.json").read_text())
    pred = torch.load(words_run / "test_predictions.pt", weights_only=True)
    assert "dev_upos" in history[-1] and 0 <= results["test_upos"] <= 100 and len(pred["upos"]) == 2077
    config = json.loads((words_run / "config.json").read_text())
    assert ("dev_xpos" in history[-1] and "test_xpos" in results and len(pred["xpos"]) == 2077) == config["xpos"]
    assert config["tags"] == "predicted" and config["upos_input"] is False
    spec = importlib.util.spec_from_file_location("bench_ud_parse_text",
                                                  RECIPES.parent / "benchmarks" / "bench_ud_parse_text.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = bench.check(words_run)
    assert row["equal"] and row["text"]["sentences"] == 2077 and ("test_xpos" in row["text"]) == config["xpos"], row
    assert row["text"]["test_las"] == pytest.approx(results["test_las"], abs=1e-9)
    # --keep: the file's rows of other runs (folders gone on a new machine) stay, this run's row is replaced
    out = words_run.parent / "parse_text.json"
    other = {**row, "run": "/gone/run"}
    out.write_text(json.dumps({"runs": [other, {**row, "equal": False}]}))
    def runs():                                 # the rows without their parse timings
        return [(r["run"], r["equal"], {k: v for k, v in r["text"].items() if k != "parse_seconds"})
                for r in json.loads(out.read_text())["runs"]]
    assert bench.main([str(words_run), "--out", str(out), "--keep"]) == 0
    scores = {k: v for k, v in row["text"].items() if k != "parse_seconds"}
    assert runs() == [("/gone/run", True, scores), (row["run"], True, scores)]
    assert bench.main([str(words_run), "--out", str(out)]) == 0
    assert runs() == [(row["run"], True, scores)]


def test_a_run_decoded_by_expected_las_parses_its_text_to_its_own_figures(words_run, tmp_path):
    """benchmarks/redecode_ud_run.py: the same weights, dev and test decoded with decode "mbr" into a run folder of
    their own, whose parser.pt makes ud_parse decode that way (its text parse scores the folder's test figures) and
    whose results keep the run's own under "as_trained"; ``--decode max`` on it parses as the run was trained."""
    import importlib.util
    bench = {}
    for name in ("redecode_ud_run", "bench_ud_parse_text"):
        spec = importlib.util.spec_from_file_location(name, RECIPES.parent / "benchmarks" / f"{name}.py")
        bench[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench[name])
    source = json.loads((words_run / "results.json").read_text())
    out = tmp_path / "mbr"
    results = bench["redecode_ud_run"].redecode(words_run, out, "mbr")
    assert results["as_trained"]["test_las"] == source["test_las"] and results["decode"] == "mbr"
    assert json.loads((out / "config.json").read_text())["decode"] == "mbr"
    assert load_parser(out / "parser.pt").decode == "mbr" and load_parser(words_run / "parser.pt").decode == "max"
    row = bench["bench_ud_parse_text"].check(out)
    assert row["equal"] and row["text"]["test_las"] == pytest.approx(results["test_las"], abs=1e-9), row
    from ssvm_torch.data.ud import load_ud_ewt
    test = load_ud_ewt("test")
    words = [[(w[0], "_") for w in test.sentence(i)] for i in range(test.n)]
    as_trained = torch.load(words_run / "test_predictions.pt", weights_only=True)
    again = parse_sentences(load_parser(out / "parser.pt"), words, decode="max")
    assert (again["heads"], again["labels"]) == (as_trained["heads"], as_trained["labels"])


def test_the_results_script_recomputes_a_words_only_runs_upos_and_refuses_a_wrong_one(words_run, tmp_path):
    """benchmarks/bench_ud_deep.py recomputes the test UPOS accuracy from test_predictions.pt's tags against the
    gold file (issue 72), files the run under its words-only head and refuses a results.json that disagrees."""
    import importlib.util
    import shutil
    spec = importlib.util.spec_from_file_location("bench_ud_deep", RECIPES.parent / "benchmarks" / "bench_ud_deep.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    config = json.loads((words_run / "config.json").read_text())
    d = tmp_path / "archive" / "run_s0"
    d.mkdir(parents=True)
    for name in ("config.json", "results.json", "history.json", "test_predictions.pt"):
        shutil.copy(words_run / name, d / name)
    results = json.loads((words_run / "results.json").read_text())
    pred = torch.load(words_run / "test_predictions.pt", weights_only=True)
    gold = [r[3] for r in fields(data_file(UD_EWT["test"])) if len(r) == 10 and r[0].isdigit()]
    tags = [t for sentence in pred["upos"] for t in sentence]
    want = 100.0 * sum(a == b for a, b in zip(gold, tags)) / len(gold)
    (row,) = bench.report(d.parent, draws=10)["heads"]
    head = ("noise5_" if config.get("tag_noise", 0) == 0.05 else "") + ("xpos_" if config["xpos"] else "") + "words_" + \
        ("tagfeed_" if config["tag_feed"] else "") + ("2o_" if config["order"] == 2 else "") + "softmax_margin"
    assert row["head"] == head and len(tags) == len(gold)
    assert row["test_upos"]["mean"] == pytest.approx(want, abs=1e-9) == results["test_upos"]
    if config["xpos"]:               # the XPOS head's tags, recomputed against the gold file's XPOS column
        gold_x = [r[4] for r in fields(data_file(UD_EWT["test"])) if len(r) == 10 and r[0].isdigit()]
        tags_x = [t for sentence in pred["xpos"] for t in sentence]
        want_x = 100.0 * sum(a == b for a, b in zip(gold_x, tags_x)) / len(gold_x)
        assert row["test_xpos"]["mean"] == pytest.approx(want_x, abs=1e-9) == results["test_xpos"]
    else:
        assert row["test_xpos"] is None
    (d / "results.json").write_text(json.dumps({**results, "test_upos": results["test_upos"] + 0.5}))
    with pytest.raises(SystemExit, match="UPOS recomputed"):
        bench.report(d.parent, draws=10)


@pytest.mark.long
def test_no_gold_column_but_form_changes_a_words_only_parse(words_run, tmp_path):
    """The test file with every column but ID and FORM scrambled (UPOS, XPOS, LEMMA, FEATS, HEAD, DEPREL, DEPS,
    MISC shuffled across words) parses to the same UPOS (XPOS, with an XPOS head), heads and relations as the file
    itself, under both decodes."""
    import random
    src = data_file(UD_EWT["test"])
    rows = fields(src)
    words = [i for i, a in enumerate(rows) if len(a) == 10 and a[0].isdigit()]
    rng = random.Random(0)
    scrambled = [list(a) for a in rows]
    for col in (2, 3, 4, 5, 6, 7, 8, 9):
        values = [rows[i][col] for i in words]
        rng.shuffle(values)
        for i, v in zip(words, values):
            scrambled[i][col] = v
    noisy = tmp_path / "noisy.conllu"
    noisy.write_text("\n".join("\t".join(a) for a in scrambled) + "\n")
    model = str(words_run / "parser.pt")
    cols = (3, 4, 6, 7) if load_parser(words_run / "parser.pt").hparams.get("xpos") else (3, 6, 7)
    for decode in ("max", "mbr"):                    # either decode: the marginals read no gold column either
        a, b = tmp_path / f"a_{decode}.conllu", tmp_path / f"b_{decode}.conllu"
        assert parse_main(["--model", model, "--input", str(src), "--output", str(a), "--decode", decode]) == 0
        assert parse_main(["--model", model, "--input", str(noisy), "--output", str(b), "--decode", decode]) == 0
        pa = [r for r in fields(a) if len(r) == 10 and r[0].isdigit()]
        pb = [r for r in fields(b) if len(r) == 10 and r[0].isdigit()]
        assert [[r[c] for c in cols] for r in pa] == [[r[c] for c in cols] for r in pb]


def test_text_input_keeps_each_sentences_line_number_as_its_sent_id(tmp_path):
    """Blank lines hold no sentence and are skipped, so each sentence of a text input carries its line's number
    (as sed and wc count lines: CRLF ends, a form feed inside a line is whitespace, not a line end) as
    ``# sent_id`` and its words as ``# text``; the word lines are ID and FORM only."""
    src = tmp_path / "in.txt"
    src.write_bytes("Dogs  bark .\r\n\r\n   \nCats\x0csleep\n\nThey rest".encode("utf-8"))
    doc = text_words(src)
    assert doc.origins == [1, 4, 6] and [doc.line_of(i) for i in range(3)] == [1, 4, 6]
    comments = [line for line in doc.lines if line.startswith("#")]
    assert comments == ["# sent_id = 1", "# text = Dogs bark .", "# sent_id = 4", "# text = Cats sleep",
                        "# sent_id = 6", "# text = They rest"]
    assert [[doc.lines[k].split("\t")[:2] for k in sent] for sent in doc.words] == [
        [["1", "Dogs"], ["2", "bark"], ["3", "."]], [["1", "Cats"], ["2", "sleep"]], [["1", "They"], ["2", "rest"]]]
    assert all(doc.lines[k].split("\t")[2:] == ["_"] * 8 for sent in doc.words for k in sent)


def test_text_input_needs_a_words_only_parser(run_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("Dogs bark .\n")
    assert parse_main(["--model", str(run_dir / "parser.pt"), "--input", str(text), "--input-format", "text",
                       "--output", str(tmp_path / "out.conllu")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "input_format: 'text' has no UPOS" in err


def test_a_second_order_parser_refuses_an_over_long_sentence_by_its_line(words_run, tmp_path, capsys):
    """A second-order parser's sibling scores grow as n^3: a line of 401 words (over MAX_WORDS_SECOND_ORDER) is
    refused by its input line before anything is decoded, and parsed once --max-words admits it; the Python API
    refuses it by index; a first-order parser has no limit by default."""
    from ssvm_torch.deep.ud_parse import MAX_WORDS_SECOND_ORDER
    n = MAX_WORDS_SECOND_ORDER + 1
    text = tmp_path / "in.txt"
    text.write_text("Dogs bark .\n\n" + " ".join(["dogs", "bark", "and"] * (n // 3) + ["cats"] * (n % 3)) + "\n")
    model, out = str(words_run / "parser.pt"), tmp_path / "out.conllu"
    args = ["--model", model, "--input", str(text), "--input-format", "text", "--output", str(out)]
    second = json.loads((words_run / "config.json").read_text())["order"] == 2
    parser = load_parser(model)
    sentences = [[("Dogs", "_"), ("bark", "_")], [("w", "_")] * n]
    if second:
        assert parse_main(args) == 2 and not out.exists()
        err = capsys.readouterr().err.strip()
        # the long sentence is the text's line 3 (a blank line 2 between), named as the user's file numbers it
        assert err.count("\n") == 0 and f"{out.parent / 'in.txt'}:3: a sentence of {n} words" in err, err
        assert f"over the limit of {MAX_WORDS_SECOND_ORDER} words" in err and "GiB" in err
        with pytest.raises(SSVMInputError, match=rf"sentences\[1\]: a sentence of {n} words"):
            parse_sentences(parser, sentences)
    assert parse_main(args + ["--max-words", str(n)]) == 0
    assert len([r for r in fields(out) if len(r) == 10 and r[0].isdigit()]) == 3 + n
    assert [r[0] for r in fields(out) if r[0].startswith("# sent_id")] == ["# sent_id = 1", "# sent_id = 3"]
    assert len(parse_sentences(parser, sentences, max_words=n)["heads"][1]) == n
    with pytest.raises(SSVMInputError, match="max_words: expected None or an int >= 1"):
        parse_sentences(parser, sentences, max_words=0)
    if not second:
        assert len(parse_sentences(parser, sentences)["heads"][1]) == n


def test_nbest_writes_each_sentence_once_per_tree_best_first(run_dir, tmp_path, capsys):
    """--nbest 3: every sentence once per tree of its 3 best (the one-word sentence has one tree), rank 1 the
    1-best parse, scores non-increasing, log-probabilities of distinct trees summing to at most 1 (to 1 for the
    one-word sentence), ranges / empty nodes / comments kept in each copy, sent_ids unique; --nbest 0 and
    --nbest with --decode mbr refused in one line."""
    src, one, out = tmp_path / "in.conllu", tmp_path / "one.conllu", tmp_path / "three.conllu"
    src.write_text(SMALL)
    model = ["--model", str(run_dir / "parser.pt"), "--input", str(src)]
    assert parse_main(model + ["--output", str(one)]) == 0
    assert parse_main(model + ["--output", str(out), "--nbest", "3"]) == 0
    assert "4 trees (up to 3 each)" in capsys.readouterr().out
    tb, best = read_conllu(out), read_conllu(one)                  # the strict reader: every block is a tree
    assert tb.n == 4 and tb.lengths.tolist() == [5, 5, 5, 1]
    assert tb.heads[:5].tolist() == best.heads[:5].tolist() and tb.heads[-1] == 0
    trees = [tuple(tb.heads[5 * r:5 * r + 5].tolist()) for r in range(3)]
    assert len(set(trees)) == 3
    lines = out.read_text().split("\n")
    comment = lambda key: [float(x.split("= ")[1]) for x in lines if x.startswith(f"# nbest_{key} =")]  # noqa: E731
    assert comment("rank") == [1, 2, 3, 1]
    scores, logp = comment("score"), comment("log_prob")
    assert scores[0] >= scores[1] >= scores[2] and all(p <= 1e-6 for p in logp)
    assert sum(np.exp(logp[:3])) <= 1 + 1e-6 and abs(logp[3]) < 1e-5
    assert [x for x in lines if x.startswith("# sent_id")] == ["# sent_id = a-1.nbest1", "# sent_id = a-1.nbest2",
                                                                "# sent_id = a-1.nbest3", "# sent_id = a-2.nbest1"]
    assert sum(x.startswith("1-2\tDon't") for x in lines) == sum(x.startswith("3.1\tyou") for x in lines) == 3
    api = parse_sentences(load_parser(run_dir / "parser.pt"), [[("Dogs", "NOUN"), ("bark", "VERB")]], nbest=5)
    ranked = api["nbest"][0]
    assert len(ranked) == 2 and ranked[0][0] == api["heads"][0] and ranked[0][2] >= ranked[1][2]   # 2 single-root trees
    assert abs(float(np.logaddexp(ranked[0][3], ranked[1][3]))) < 1e-5          # all the trees: probability 1
    for bad, said in ((["--nbest", "0"], "nbest: expected an int >= 1"),
                      (["--nbest", "2", "--decode", "mbr"], "nbest: 2 ranks trees by score")):
        assert parse_main(model + ["--output", str(tmp_path / "x.conllu"), *bad]) != 0
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1
