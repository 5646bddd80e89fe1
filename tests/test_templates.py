"""Feature templates: the vectorized featurization against the attribute-string reference, hand-written
expectations for every column family, the frequency cut-off, user templates, the on-disk cache."""
import collections
import gzip
import shutil

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from ssvm_torch import SSVMInputError
from ssvm_torch.data import data_dir
from ssvm_torch.data.conll import build_chain_data, load_conll2000, read_conll
from ssvm_torch.data.templates import RICH, SHA_PEREIRA, Template, featurize, get_template, word_shape

SENT = [("McDonald's", "NNP", "B-NP"), ("1,200", "CD", "I-NP"), ("well-known", "JJ", "I-NP"), (".", ".", "O")]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SSVM_TORCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def raw():
    return read_conll(data_dir() / "conll2000_train.txt.gz"), read_conll(data_dir() / "conll2000_test.txt.gz")


def string_reference(template, train, other, min_count=1):
    """Dictionary by dict.setdefault over the attribute strings of the training tokens (cut-off by a
    Counter), then build_chain_data: the slow path the engine must reproduce."""
    counts = collections.Counter(a for s in train for attrs in template.attributes(s) for a in attrs)
    index = {}
    for s in train:
        for attrs in template.attributes(s):
            for a in attrs:
                if counts[a] >= min_count:
                    index.setdefault(a, len(index))
    tags = sorted({t for s in train for _, _, t in s})
    return (build_chain_data(train, index, tags, "tr", False, template),
            build_chain_data(other, index, tags, "te", True, template), len(index))


@pytest.mark.long
@pytest.mark.parametrize("template,min_count", [(SHA_PEREIRA, 1), (RICH, 1), (RICH, 3)])
def test_engine_reproduces_the_string_reference(raw, template, min_count):
    train, test = raw[0][:300], raw[1][:100]
    (a, b), n_attr, _ = featurize(template, [train, test], min_count)
    ref_tr, ref_te, n_ref = string_reference(template, train, test, min_count)
    assert n_attr == n_ref                                  # same d
    for design, ref in ((a, ref_tr), (b, ref_te)):         # same rows, same attribute ids
        assert np.array_equal(design.crow, ref.X.crow_indices().numpy())
        assert np.array_equal(design.cols, ref.X.col_indices().numpy())


_COLUMNS = ["w", "p", "lw", "shape", "pre1", "pre3", "suf2", "suf4", "cap", "digit", "hyphen", "punct"]


@st.composite
def chain_templates(draw):
    """1-5 distinct items of 1-3 distinct ``column[offset]`` parts, offsets -2..2, and 0-2 edge items."""
    items = set()
    for k in range(draw(st.integers(1, 5)) + draw(st.integers(0, 2))):
        parts = draw(st.lists(st.tuples(st.sampled_from(_COLUMNS), st.integers(-2, 2)), min_size=1, max_size=3,
                              unique=True))
        items.add(("edge:" if k >= 5 or draw(st.integers(0, 4)) == 0 else "") + "|".join(f"{c}[{o}]" for c, o in parts))
    if all(i.startswith("edge:") for i in items):
        items.add("w[0]")
    return Template.parse(" ".join(sorted(items)), name="drawn")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=chain_templates(), min_count=st.sampled_from([1, 2, 3]), start=st.integers(0, 2000))
def test_drawn_templates_reproduce_the_string_reference(raw, template, min_count, start):
    """Drawn templates (any columns, windows up to two tokens away, conjunctions) on a drawn stretch of CoNLL-2000:
    the compiled dictionary and rows are the attribute strings' (ids in first-occurrence order), the edge attributes'
    too."""
    train, test = raw[0][start:start + 60], raw[1][start // 4:start // 4 + 20]
    (a, b), n_attr, n_edge = featurize(template, [train, test], min_count)
    ref_tr, ref_te, n_ref = string_reference(template, train, test, min_count)
    assert n_attr == n_ref
    for design, ref in ((a, ref_tr), (b, ref_te)):
        assert np.array_equal(design.crow, ref.X.crow_indices().numpy())
        assert np.array_equal(design.cols, ref.X.col_indices().numpy())
    if not template.edge_items:
        return
    counts = collections.Counter(x for s in train for attrs in template.attributes(s, edge=True) for x in attrs)
    index = {}
    for s in train:
        for attrs in template.attributes(s, edge=True):
            for x in attrs:
                if counts[x] >= min_count:
                    index.setdefault(x, len(index))
    assert n_edge == len(index)
    for design, split in ((a, train), (b, test)):
        rows = [sorted(index[x] for x in attrs if x in index)
                for s in split for attrs in template.attributes(s, edge=True)]
        assert np.array_equal(design.edge_cols, np.array([c for r in rows for c in r], dtype=design.edge_cols.dtype))
        assert np.array_equal(np.diff(design.edge_crow), [len(r) for r in rows])


def test_a_min_count_that_leaves_no_attribute_is_refused_with_the_largest_count(raw):
    with pytest.raises(SSVMInputError, match=r"min_count: expected at most \d+ .* got 100000: no attribute is left"):
        featurize(SHA_PEREIRA, [raw[0][:20]], 100000)


def test_sha_pereira_on_all_of_conll_matches_the_published_layout():
    train, test = load_conll2000()
    assert train.X.shape == (211727, 335672) and train.n == 8936 and test.n == 2012
    assert train.X.values().numel() == 3790567                      # attributes of the string-built map
    assert train.meta["featurization"]["n_attributes"] == 335672


def test_hand_written_attributes_of_every_column_family():
    t = Template.parse("pre1[0] pre2[0] pre4[0] suf1[0] suf3[0] lw[0] shape[0] cap[0] digit[0] hyphen[0] punct[0]")
    attrs = t.attributes(SENT)
    assert attrs[0] == ["pre1[0]=M", "pre2[0]=Mc", "pre4[0]=McDo", "suf1[0]=s", "suf3[0]=d's", "lw[0]=mcdonald's",
                        "shape[0]=XxXx'x", "cap[0]=1", "digit[0]=0", "hyphen[0]=0", "punct[0]=0"]
    assert attrs[1][6:] == ["shape[0]=d,d", "cap[0]=0", "digit[0]=1", "hyphen[0]=0", "punct[0]=0"]
    assert attrs[2][6:] == ["shape[0]=x-x", "cap[0]=0", "digit[0]=0", "hyphen[0]=1", "punct[0]=0"]
    assert attrs[3] == ["pre1[0]=.", "pre2[0]=.", "pre4[0]=.", "suf1[0]=.", "suf3[0]=.", "lw[0]=.", "shape[0]=.",
                        "cap[0]=0", "digit[0]=0", "hyphen[0]=0", "punct[0]=1"]
    conj = Template.parse("w[-1]|p[0] shape[0]|shape[1] suf2[1]").attributes(SENT)
    assert conj[0] == ["shape[0]|shape[1]=XxXx'x|d,d", "suf2[1]=00"]
    assert conj[2] == ["w[-1]|p[0]=1,200|JJ", "shape[0]|shape[1]=x-x|.", "suf2[1]=."]
    assert conj[3] == ["w[-1]|p[0]=well-known|."]                  # windows leaving the sentence give nothing
    assert word_shape("U.S.") == "X.X." and word_shape("IBM") == "X" and word_shape("") == ""


def test_named_templates():
    assert len(SHA_PEREIRA.items) == 19 and not SHA_PEREIRA.edge_items
    rich_edges = get_template("rich-edges")
    assert rich_edges.items == RICH.items and rich_edges.edge_items == ((("p", 0),), (("w", 0),))
    assert get_template(RICH.text()).key() == RICH.key()                  # a template is its items


def test_user_template_string_and_column_functions(raw):
    vowels = Template.parse(["w[0]", "nv[0]|p[0]"], columns={"nv": lambda w: str(sum(c in "aeiou" for c in w.lower()))})
    assert vowels.attributes(SENT)[0] == ["w[0]=McDonald's", "nv[0]|p[0]=2|NNP"]
    tagged = Template.parse("p[0] coarse[0]", columns={"coarse": ("p", lambda p: p[:2])})
    assert tagged.attributes(SENT)[0] == ["p[0]=NNP", "coarse[0]=NN"]
    (a,), n, _ = featurize(vowels, [raw[0][:100]])
    ref, _, n_ref = string_reference(vowels, raw[0][:100], raw[0][:1])
    assert n == n_ref and np.array_equal(a.cols, ref.X.col_indices().numpy())
    # the cache key follows the function's code, not only the column name
    other = Template.parse(["w[0]", "nv[0]|p[0]"], columns={"nv": lambda w: str(len(w))})
    assert other.key() != vowels.key() and other.text() == vowels.text()


@pytest.mark.parametrize("spec,field", [("w[0] x[1]", "x[1]"), ("w[0]|p", "'p'"), ("", "features"),
                                        ("w[0] w[0]", "listed twice"), ("nosuch", "features")])
def test_bad_templates_are_refused_by_name(spec, field):
    with pytest.raises(SSVMInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        get_template(spec)


def test_bad_columns_and_cutoff_are_refused():
    with pytest.raises(SSVMInputError, match="column 'w'"):
        Template.parse("w[0]", columns={"w": str.upper})
    with pytest.raises(SSVMInputError, match="fn must return str"):
        featurize(Template.parse("n[0]", columns={"n": len}), [[SENT]])
    with pytest.raises(SSVMInputError, match="min_count"):
        featurize(SHA_PEREIRA, [[SENT]], min_count=0)


def test_cutoff_reports_the_smaller_dictionary():
    full, _ = load_conll2000(train_size=400, features="rich")
    cut, cut_test = load_conll2000(train_size=400, features="rich", min_count=2)
    assert cut.X.shape[1] == cut.meta["featurization"]["n_attributes"] < full.X.shape[1] // 2
    assert cut_test.X.shape[1] == cut.X.shape[1]


@pytest.mark.long
def test_cache_hits_and_is_invalidated_by_template_options_and_data(tmp_path, monkeypatch):
    a, _ = load_conll2000(train_size=60)
    assert not a.meta["featurization"]["cached"]
    b, _ = load_conll2000(train_size=60)
    assert b.meta["featurization"]["cached"] and torch.equal(a.X.col_indices(), b.X.col_indices())
    assert not load_conll2000(train_size=60, features="rich")[0].meta["featurization"]["cached"]
    assert not load_conll2000(train_size=60, min_count=2)[0].meta["featurization"]["cached"]
    assert not load_conll2000(train_size=60, heldout=0.2)[0].meta["featurization"]["cached"]
    # the same sentences with one word changed: a new key, a new design
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(data_dir() / "conll2000_test.txt.gz", data)
    lines = gzip.open(data_dir() / "conll2000_train.txt.gz", "rt").read().splitlines()
    lines[0] = "the DT B-NP"                  # a word seen later: the first-occurrence order changes
    with gzip.open(data / "conll2000_train.txt.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    monkeypatch.setenv("SSVM_TORCH_DATA", str(data))
    c, _ = load_conll2000(train_size=60)
    assert not c.meta["featurization"]["cached"]
    sents = read_conll(data / "conll2000_train.txt.gz")[:60]
    ref, _, _ = string_reference(SHA_PEREIRA, sents, sents[:1])
    assert torch.equal(c.X.crow_indices(), ref.X.crow_indices()) and torch.equal(c.X.col_indices(), ref.X.col_indices())
    assert not torch.equal(c.X.col_indices(), a.X.col_indices())


def test_damaged_cache_is_rebuilt_with_a_warning(tmp_path):
    a, _ = load_conll2000(train_size=40)
    (path,) = list((tmp_path / "cache").glob("*.npz"))
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.warns(UserWarning, match="damaged"):
        b, _ = load_conll2000(train_size=40)
    assert not b.meta["featurization"]["cached"] and torch.equal(a.X.col_indices(), b.X.col_indices())
    assert load_conll2000(train_size=40)[0].meta["featurization"]["cached"]       # rewritten whole


def test_heldout_split_keeps_the_test_file_out(raw):
    fit, dev = load_conll2000(train_size=200, heldout=0.1)
    assert (fit.n, dev.n) == (180, 20) and dev.name == "conll2000-dev"
    assert dev.meta["tags"] == [[t[2] for t in s] for s in raw[0][180:200]]
    ref, ref_dev, _ = string_reference(SHA_PEREIRA, raw[0][:180], raw[0][180:200])
    assert torch.equal(dev.X.col_indices(), ref_dev.X.col_indices())
    with pytest.raises(SSVMInputError, match="heldout"):
        load_conll2000(train_size=200, heldout=0.9)
