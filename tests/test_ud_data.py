"""UD English-EWT and the CoNLL-U reader (ssvm_torch.data.ud), the arc featurization (data/arc_features.py)
against its string reference, and the DependencyData container."""
from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from ssvm_torch.data import arc_features
from ssvm_torch.data.arc_features import COLUMNS, ArcTemplate, code_columns, column_values, featurize
from ssvm_torch.data.trees import DependencyData, load_ud_dependencies
from ssvm_torch.data.types import data_file
from ssvm_torch.data.ud import UD_EWT, Treebank, load_ud_ewt, read_conllu, universal
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.trees import is_tree


@pytest.fixture(scope="module")
def ewt():
    return {s: load_ud_ewt(s) for s in UD_EWT}


def test_ewt_counts_as_documented(ewt):
    """datasets/README.md's table: sentences, syntactic words, non-projective trees, longest sentence; every
    tree single-rooted."""
    counts = {s: (tb.n, len(tb.forms), int(tb.lengths.max())) for s, tb in ewt.items()}
    assert counts == {"train": (12544, 204577, 159), "dev": (2001, 25147, 75), "test": (2077, 25094, 81)}
    for split, nonproj in (("train", 288), ("dev", 31), ("test", 26)):
        tb = ewt[split]
        heads = DependencyData(torch.from_numpy(tb.offsets), torch.from_numpy(tb.heads),
                               torch.zeros(len(tb.forms), dtype=torch.int64),
                               torch.from_numpy(np.concatenate([[0], np.cumsum(tb.lengths ** 2)])),
                               torch.zeros(int((tb.lengths ** 2).sum()) + 1, dtype=torch.int64),
                               torch.zeros(0, dtype=torch.int32), 1).padded_heads()
        L = torch.from_numpy(tb.lengths)
        assert bool(is_tree(heads, L, multiroot=False).all())
        assert int((~is_tree(heads, L, multiroot=False, projective=True)).sum()) == nonproj


def test_reader_matches_the_conllu_package(ewt):
    conllu = pytest.importorskip("conllu")
    with gzip.open(data_file(UD_EWT["dev"]), "rt", encoding="utf-8") as f:
        sents = conllu.parse(f.read())
    tb = ewt["dev"]
    k = 0
    assert len(sents) == tb.n
    for i, s in enumerate(sents):
        words = [t for t in s if isinstance(t["id"], int)]
        assert len(words) == tb.lengths[i] and s.metadata["sent_id"] == tb.sent_ids[i]
        for t in words:
            assert (t["form"], t["lemma"], t["upos"], t["xpos"], t["head"], t["deprel"]) == \
                (tb.forms[k], tb.lemmas[k], tb.upos[k], tb.xpos[k], int(tb.heads[k]), tb.deprels[k])
            k += 1


GOOD = ("# sent_id = s1\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
        "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n"
        "3.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_\n\n")


def _write(tmp_path, text, name="x.conllu"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reader_skips_multiword_tokens_and_empty_nodes(tmp_path):
    tb = read_conllu(_write(tmp_path, GOOD))
    assert tb.n == 1 and tb.forms == ["do", "n't", "go"] and tb.heads.tolist() == [3, 3, 0]
    assert tb.lines.tolist() == [3, 4, 5] and tb.sent_ids == ["s1"] and universal("nsubj:pass") == "nsubj"


@pytest.mark.parametrize("bad,line,message", [
    (GOOD.replace("3\tadvmod", "7\tadvmod"), 4, r"HEAD: expected a word index in \[0, 3\]"),
    (GOOD.replace("\t3\taux", "\t2\taux").replace("2\tn't\tnot\tPART\tRB\t_\t3", "2\tn't\tnot\tPART\tRB\t_\t1"), 3,
     r"not a dependency tree: expected a tree, but words \[1, 2\] form a cycle"),
    (GOOD.replace("\t0\troot", "\t2\troot"), 3, "expected exactly one word with HEAD 0"),
    (GOOD.replace("\t3\taux", "\tx\taux"), 3, "HEAD: expected an integer"),
    (GOOD.replace("2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_", "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_"), 4,
     "expected 10 tab-separated fields"),
    (GOOD.replace("1\tdo\t", "5\tdo\t"), 3, "ID: expected word 1 of the sentence, got 5"),
    (GOOD.replace("1\tdo\t", "one\tdo\t"), 3, "ID: expected an integer word index"),
    (GOOD.replace("\t3\tadvmod", "\t2\tadvmod"), 4, "word 2 heads itself"),
    # digits str.isdigit accepts and the format does not: int("²") raised ValueError, "١" (Arabic-Indic 1) read as 1
    (GOOD.replace("\t3\taux", "\t\u00b2\taux"), 3, "HEAD: expected an integer"),
    (GOOD.replace("1\tdo\t", "\u0661\tdo\t"), 3, "ID: expected an integer word index"),
    (GOOD.replace("1-2\tdon't", "\u00b2-2\tdon't"), 2, "ID: expected an integer word index"),
])
def test_malformed_conllu_ends_in_one_line_naming_the_line(tmp_path, bad, line, message):
    path = _write(tmp_path, bad)
    with pytest.raises(SSVMInputError, match=message) as err:
        read_conllu(path)
    text = str(err.value)
    assert text.startswith(f"{path}:{line}: ") and "\n" not in text


def test_damaged_files_are_refused(tmp_path):
    gz = tmp_path / "x.conllu.gz"
    gz.write_bytes(gzip.compress(GOOD.encode())[:-20])
    with pytest.raises(SSVMInputError, match="damaged or unreadable"):
        read_conllu(gz)
    with pytest.raises(SSVMInputError, match="holds no sentences"):
        read_conllu(_write(tmp_path, "# only a comment\n\n"))
    with pytest.raises(SSVMInputError, match="expected UTF-8"):
        (tmp_path / "b.conllu").write_bytes(GOOD.encode().replace(b"go", b"g\xff"))
        read_conllu(tmp_path / "b.conllu")


def assert_designs_are_the_string_reference(template, train, other, min_count=1):
    """Every arc's feature ids are the features of its reference strings (ArcTemplate.arc_strings) that the training
    gold arcs have ``min_count`` times or more, under one consistent id <-> string map (the compiled keys,
    dictionary and lookup agree with strings)."""
    def sentences(tb):
        return [[(tb.forms[k], tb.upos[k], tb.xpos[k], tb.lemmas[k]) for k in range(tb.offsets[i], tb.offsets[i + 1])]
                for i in range(tb.n)]
    counts = Counter()
    for i, sent in enumerate(sentences(train)):
        s = int(train.offsets[i])
        for m in range(1, len(sent) + 1):
            counts.update(template.arc_strings(sent, int(train.heads[s + m - 1]), m))
    gold = {f for f, c in counts.items() if c >= min_count}
    if not gold:                       # nothing to learn: refused by name (which setting leaves no feature)
        field = "min_count" if counts else "template"
        with pytest.raises(SSVMInputError, match=f"{field}: expected .*: no feature"):
            featurize(template, [train, other], min_count=min_count)
        return
    (d_train, d_other), d, per_item = featurize(template, [train, other], min_count=min_count)
    assert d == len(gold) and sum(per_item.values()) == d
    # each arc carries exactly the ids of its reference strings that gold arcs have: intersecting over the arcs
    # that have a string gives the ids it can be; a perfect matching of strings to ids within those sets is a
    # consistent string <-> id map (strings that always occur together share their candidates)
    pinned = {}
    for tb, design in ((train, d_train), (other, d_other)):
        assert int(design.ptr[-1]) == len(design.ids) and int(design.tptr[-1]) == len(design.tids)
        for i, sent in enumerate(sentences(tb)):
            n = len(sent)
            for m in range(1, n + 1):
                for h in range(n + 1):
                    if h == m:
                        continue
                    a = int(design.arc_off[i]) + (m - 1) * n + (h if h < m else h - 1)
                    t = int(tb.offsets[i]) + i + h                      # the head token: its features are shared
                    ids = design.ids[design.ptr[a]:design.ptr[a + 1]].tolist() + \
                        design.tids[design.tptr[t]:design.tptr[t + 1]].tolist()
                    known = [f for f in template.arc_strings(sent, h, m) if f in gold]
                    assert len(ids) == len(known) == len(set(ids))
                    for f in known:
                        pinned[f] = pinned.get(f, set(ids)) & set(ids)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching
    names = sorted(pinned)
    rows = [r for r, f in enumerate(names) for _ in pinned[f]]
    cols = [j for f in names for j in sorted(pinned[f])]
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), d))
    assert len(names) == d and (maximum_bipartite_matching(graph, perm_type="column") >= 0).all()


def test_featurization_equals_the_string_reference(ewt):
    # two between items: an arc's keys outnumber its items by up to twice the words between
    template = ArcTemplate.parse("hw|hp mp hp|mp|att hu|bu|mu bp hp+1|mp-1|dir hl|ml mf|hf hu|mu|nu|dir", name="test")
    assert_designs_are_the_string_reference(template, ewt["train"].subset(range(40)), ewt["dev"].subset(range(10)))


_PARTS = ([f"{w}{c}{o}" for w in "hm" for c in "wfpul" for o in ("", "+1", "-1")] + [f"n{c}" for c in "wfpul"]
          + ["att", "dir"])


@st.composite
def arc_templates(draw):
    """A template of 1-5 distinct items, each 1-3 distinct parts, a between part (at most one per item) in some."""
    items = set()
    for _ in range(draw(st.integers(1, 5))):
        parts = draw(st.lists(st.sampled_from(_PARTS), min_size=1, max_size=3, unique=True))
        if draw(st.booleans()):
            parts.append("b" + draw(st.sampled_from("wfpul")))
        items.add("|".join(parts))
    return ArcTemplate.parse(sorted(items), name="drawn")


@pytest.mark.long
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=arc_templates(), min_count=st.sampled_from([1, 2]), start=st.integers(0, 500))
def test_any_template_equals_the_string_reference(ewt, template, min_count, start):
    """Drawn templates (items of head / modifier columns with offsets, near, att, dir and between parts, in any
    mix) on a drawn stretch of training sentences: the compiled featurization is the string reference."""
    assert_designs_are_the_string_reference(template, ewt["train"].subset(range(start, start + 12)),
                                            ewt["dev"].subset(range(start, start + 4)), min_count)


def test_a_template_no_gold_arc_has_is_refused_by_name(ewt):
    """hw|bw on training sentences 90-101 (short lines of a review: no gold arc spans a word) has no key at all: the
    refusal names the template, not min_count (it said "min_count: expected at most 0, got 1"). Found by the
    drawn-template test below."""
    template = ArcTemplate.parse("hw|bw", name="between-only")
    train = ewt["train"].subset(range(90, 102))
    with pytest.raises(SSVMInputError, match="template: expected items that some gold arc of the 12 training "
                                             "sentences has, got 'between-only'"):
        featurize(template, [train], min_count=1)
    assert_designs_are_the_string_reference(template, train, ewt["dev"].subset(range(90, 94)))


def test_a_template_of_between_items_only_gets_every_known_value(ewt):
    """Four between items: an arc's ids outnumber the items by up to four times the words between it (the bound
    the arc design once grew its buffer by counted one item's words only, and the design overran it). Each arc
    carries exactly its reference strings that the gold arcs have."""
    template = ArcTemplate.parse("bu bp bl bw", name="between")
    train = ewt["train"].subset(range(40))
    (design,), d, _ = featurize(template, [train], min_count=1)
    assert int(design.ptr[-1]) == len(design.ids) and len(design.tids) == 0
    sents = [[(train.forms[k], train.upos[k], train.xpos[k], train.lemmas[k])
              for k in range(train.offsets[i], train.offsets[i + 1])] for i in range(train.n)]
    gold = {f for i, sent in enumerate(sents) for m in range(1, len(sent) + 1)
            for f in template.arc_strings(sent, int(train.heads[int(train.offsets[i]) + m - 1]), m)}
    assert d == len(gold)
    for i, sent in enumerate(sents[:8]):
        n = len(sent)
        for m in range(1, n + 1):
            for h in range(n + 1):
                if h != m:
                    a = int(design.arc_off[i]) + (m - 1) * n + (h if h < m else h - 1)
                    known = [f for f in template.arc_strings(sent, h, m) if f in gold]
                    assert int(design.ptr[a + 1] - design.ptr[a]) == len(known)


@pytest.mark.long
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm")
def test_a_between_words_item_featurizes_within_the_memory_of_its_sentences():
    """The gold keys' buffer is bounded by the words between an arc's ends, not by the column's 20k forms: 3,000
    training sentences with ``hp|bw|mp`` featurize under 2 GB of address space beyond what the process holds
    (the radix bound asked for ~16 GB, and EWT's whole training split for 65 GB: a MemoryError)."""
    code = """if True:
        import resource, sys
        from ssvm_torch.data.arc_features import ArcTemplate, featurize
        from ssvm_torch.data.ud import load_ud_ewt
        tr = load_ud_ewt("train").subset(range(3000))
        featurize(ArcTemplate.parse("hp|mp hp|bw|mp", name="x"), [tr.subset(range(5))])     # compiled before the limit
        held = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (held + 2 * 2 ** 30, resource.RLIM_INFINITY))
        (design,), d, _ = featurize(ArcTemplate.parse("hp|mp hp|bw|mp", name="x"), [tr], designs_of=[0])
        print(d, int(design.ptr[-1]) == len(design.ids))"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    d, whole = r.stdout.split()
    assert int(d) > 1000 and whole == "True"


def test_a_min_count_that_leaves_no_feature_is_refused_with_the_largest_count(ewt):
    """Arcs and fenceposts: a min_count above every training count is refused naming it and the count that would
    keep one feature (not an empty design that a later check calls n_features 0)."""
    from ssvm_torch.data.span_data import featurize as fencepost_featurize
    train = ewt["train"].subset(range(20))
    with pytest.raises(SSVMInputError, match=r"min_count: expected at most \d+ .* got 100000: no feature is left"):
        featurize(ArcTemplate.parse("hp|mp", name="t"), [train], min_count=100000)
    sentences = [(train.forms[a:b], train.upos[a:b]) for a, b in zip(train.offsets[:-1], train.offsets[1:])]
    with pytest.raises(SSVMInputError, match=r"min_count: expected at most \d+ .* got 100000: no feature is left"):
        fencepost_featurize(sentences, None, 100000)


def test_container_subset_and_refusals():
    from conftest import random_dependency_data
    data = random_dependency_data(np.random.default_rng(0), 6, 20, lmin=1, lmax=5)
    sub = data.subset([4, 1])
    assert sub.n == 2 and torch.equal(sub.lengths, data.lengths[[4, 1]])
    for k, i in enumerate([4, 1]):
        n = int(data.lengths[i])
        a, b = int(data.arc_off[i]), int(sub.arc_off[k])
        assert torch.equal(data.ids[data.ptr[a]:data.ptr[a + n * n]], sub.ids[sub.ptr[b]:sub.ptr[b + n * n]])
    assert torch.equal(sub.padded_heads()[0, 1:int(data.lengths[4]) + 1],
                       data.heads[data.offsets[4]:data.offsets[5]])
    bad = data.heads.clone()
    bad[0] = 1 if int(data.lengths[0]) > 1 else 0
    with pytest.raises(SSVMInputError, match="sentence 0 is not a dependency tree|expected"):
        DependencyData(data.offsets, torch.where(torch.arange(len(bad)) == 0, torch.tensor(1), data.heads), data.labels,
                       data.arc_off, data.ptr, data.ids, data.n_features)
    with pytest.raises(SSVMInputError, match="ids: expected feature ids"):
        DependencyData(data.offsets, data.heads, data.labels, data.arc_off, data.ptr, data.ids, 3)


def test_a_split_left_unbuilt_changes_no_other_design(ewt):
    """featurize(designs_of=...) builds the chosen splits' designs only (load_ud_dependencies never featurizes the
    split it does not evaluate): each built design equals, array for array, the one of the call building all."""
    # two between items: an arc's keys outnumber its items by up to twice the words between
    template = ArcTemplate.parse("hw|hp mp hp|mp|att hu|bu|mu bp hp+1|mp-1|dir hl|ml mf|hf hu|mu|nu|dir", name="test")
    tbs = [ewt["train"].subset(range(60)), ewt["dev"].subset(range(15)), ewt["test"].subset(range(15))]
    every, d, per_item = featurize(template, tbs, min_count=1)
    some, d_some, per_item_some = featurize(template, tbs, min_count=1, designs_of=(0, 2))
    assert some[1] is None and d_some == d and per_item_some == per_item
    for k in (0, 2):
        for field in ("arc_off", "ptr", "ids", "tptr", "tids"):
            a, b = getattr(every[k], field), getattr(some[k], field)
            assert a.dtype == b.dtype and np.array_equal(a, b), (k, field)
    for bad in ((1, 2), (0, 3)):
        with pytest.raises(SSVMInputError, match="designs_of: expected indices into the 3 treebanks including 0"):
            featurize(template, tbs, designs_of=bad)


def test_threads_build_the_one_call_design(ewt, monkeypatch):
    """threaded_arc_design cuts a split's sentences into runs of about equal arc counts, one compiled call per run
    on its own thread, and joins the runs' rows: with a run of a few sentences per thread (MIN_ARCS_PER_THREAD 1),
    on 2, 3 or 7 threads every design is, array for array, the one-call design (one thread)."""
    template = ArcTemplate.parse("hw|hp mp hp|mp|att hu|bu|mu bp hp+1|mp-1|dir", name="test")
    tbs = [ewt["train"].subset(range(60)), ewt["dev"].subset(range(25))]
    one, d, per_item = featurize(template, tbs, threads=1)
    monkeypatch.setattr(arc_features, "MIN_ARCS_PER_THREAD", 1)
    for threads in (2, 3, 7):
        got, d_got, per_item_got = featurize(template, tbs, threads=threads)
        assert d_got == d and per_item_got == per_item
        for k in (0, 1):
            for field in ("arc_off", "ptr", "ids", "tptr", "tids"):
                a, b = getattr(one[k], field), getattr(got[k], field)
                assert a.dtype == b.dtype and np.array_equal(a, b), (threads, k, field)
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(SSVMInputError, match="threads: expected None or an int >= 1"):
            featurize(template, tbs, threads=bad)


def test_column_codes_follow_the_sorted_distinct_values(ewt):
    """code_columns numbers each column's distinct strings in sorted order (as np.unique does: the feature ids of
    a cached design or a saved model depend on it), from 3 on (0-2 root, BOS, EOS), over all the treebanks."""
    tbs = [ewt["train"].subset(range(50)), ewt["dev"].subset(range(20))]
    codes, radix = code_columns(tbs)
    values = [column_values(tb) for tb in tbs]
    for c, col in enumerate(COLUMNS):
        uniq, inv = np.unique(np.asarray(values[0][col] + values[1][col], dtype=str), return_inverse=True)
        assert radix[c] == len(uniq) + 3
        assert np.array_equal(np.concatenate([codes[0][:, c], codes[1][:, c]]), inv + 3)


def test_loader_splits_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SSVM_TORCH_CACHE", str(tmp_path))
    train, dev = load_ud_dependencies("basic", evaluate_on="dev", train_size=300)
    assert train.n == 300 and dev.n == 2001 and not train.meta["featurization"]["cached"]
    again, dev_again = load_ud_dependencies("basic", evaluate_on="dev", train_size=300)
    assert again.meta["featurization"]["cached"] and torch.equal(dev_again.ids, dev.ids)
    # the test split was never featurized for the dev run: it is built (and cached) on its own, with the same
    # training design and dictionary
    other, test = load_ud_dependencies("basic", evaluate_on="test", train_size=300)
    assert not other.meta["featurization"]["cached"] and test.n == 2077
    assert torch.equal(other.ids, train.ids) and other.n_features == train.n_features
    assert load_ud_dependencies("basic", evaluate_on="test", train_size=300)[0].meta["featurization"]["cached"]
    assert train.meta["label_names"] == sorted(train.meta["label_names"]) and "root" in train.meta["label_names"]
    with pytest.raises(SSVMInputError, match="evaluate_on: expected 'dev' or 'test'"):
        load_ud_dependencies("basic", evaluate_on="train")
    with pytest.raises(SSVMInputError, match="features: expected one of"):
        load_ud_dependencies("mcdonal")
    assert isinstance(load_ud_ewt("dev"), Treebank)


def test_a_split_is_read_once_per_file_version_and_each_call_gets_its_own_copy(tmp_path, monkeypatch):
    """load_ud_ewt keeps what it read (per process, keyed by path, size and mtime): two calls return equal
    treebanks that share no list or array, so a caller's change never reaches the next call; a file
    written again (another size or mtime) is checked and read again, a damaged one refused."""
    import os
    import shutil
    import ssvm_torch.data.ud as ud
    data = tmp_path / "data"
    (data / "ud_english_ewt").mkdir(parents=True)
    name = UD_EWT["dev"]
    shutil.copy(data_file(name), data / name)
    sums = data_file("SHA256SUMS").read_text().splitlines()
    (data / "SHA256SUMS").write_text("\n".join(line for line in sums if line.endswith(name)) + "\n")
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    reads = []
    real = ud.read_conllu
    monkeypatch.setattr(ud, "read_conllu", lambda path: reads.append(path) or real(path))
    a = load_ud_ewt("dev")
    b = load_ud_ewt("dev")
    assert len(reads) == 1 and a.n == b.n == 2001
    assert a.forms == b.forms and np.array_equal(a.heads, b.heads) and a.sent_ids == b.sent_ids
    for field in ("forms", "lemmas", "upos", "xpos", "deprels", "heads", "offsets", "lines", "sent_ids"):
        assert getattr(a, field) is not getattr(b, field), field
    a.forms[0] = "changed"
    a.heads[0] = 7
    c = load_ud_ewt("dev")
    assert c.forms[0] == b.forms[0] != "changed" and c.heads[0] == b.heads[0] != 7 and len(reads) == 1
    raw = gzip.decompress((data / name).read_bytes()).decode().replace("\t1\tThe\t", "\t1\tA\t", 1)
    with gzip.open(data / name, "wt", encoding="utf-8") as f:    # another version: checked again, refused by its sum
        f.write(raw)
    os.utime(data / name, ns=(1, 1))
    with pytest.raises(SSVMInputError, match="damaged"):
        load_ud_ewt("dev")
    monkeypatch.delenv("SSVM_TORCH_DATA")
    shutil.copy(data_file(name), data / name)                   # the good file again, a new mtime: read again
    os.utime(data / name, ns=(2, 2))
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    assert load_ud_ewt("dev").forms == b.forms and len(reads) == 2
