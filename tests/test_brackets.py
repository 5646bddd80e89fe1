"""The Penn-Treebank bracket reader (ssvm_torch.data.brackets): words, tags and labeled spans after the usual
preprocessing (empty elements, function tags, unary chains, the outermost bracket), and its refusals."""
import pytest
import torch

from ssvm_torch.data.brackets import read_brackets
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.spans import binarize, chart_faults, chart_from_spans

PTB = """( (S (NP-SBJ-1 (DT The) (NN cat))
      (VP (VBD sat) (NP (-NONE- *-1))
          (PP-LOC (IN on) (NP (DT the) (NN mat))))
      (. .)) )
(TOP (S (VP (VB Go))))
(S (NP-SBJ (-NONE- *)) (VP (VB Stop) (NP (-LRB- -LRB-) (NN it) (-RRB- -RRB-))))
"""


def test_reads_words_tags_and_spans():
    first, second, third = read_brackets(PTB)
    assert first.words == ["The", "cat", "sat", "on", "the", "mat", "."]
    assert first.tags == ["DT", "NN", "VBD", "IN", "DT", "NN", "."]
    # NP-SBJ-1 -> NP, PP-LOC -> PP; the trace and the NP it leaves empty are gone
    assert first.spans == [(0, 7, "S"), (0, 2, "NP"), (2, 6, "VP"), (3, 6, "PP"), (4, 6, "NP")]
    assert second.words == ["Go"] and second.spans == [(0, 1, "S+VP")]          # TOP dropped, unary chain joined
    assert third.words == ["Stop", "-LRB-", "it", "-RRB-"] and third.tags[1] == "-LRB-"
    assert third.spans == [(0, 4, "S+VP"), (1, 4, "NP")]                        # the empty subject is gone
    for tree in (first, second, third):
        labels = {lab: k + 1 for k, lab in enumerate(sorted({s[2] for s in tree.spans}))}
        n = len(tree.words)
        binary = binarize([(i, j, labels[lab]) for i, j, lab in tree.spans], n, fill=0)
        chart = chart_from_spans([binary], n + 1, labeled=True)
        assert chart_faults(chart >= 0, torch.tensor([n])).tolist() == [0]


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT The) (NN cat))", "unbalanced brackets"),
    ("(S (NP (DT The))) )", "closes no bracket"),
    ("(S The (NP (NN cat)))", "a bracket after the word 'The' of a preterminal"),
    ("(S (NP (DT The) cat))", "the word 'cat' is not alone under a label"),
    ("(S (NP))", "an empty bracket"),
    ("(S ((DT The) (NN cat)) (VP (VB sat)))", "a constituent with no label"),
    ("cat (S (NN cat))", "expected '(' to open tree 0"),
    ("(S (NN cat) (VP (VB sat)))\n(S (NN dog) x)", "tree 1"),
])
def test_refusals_name_the_tree_and_offset(text, message):
    with pytest.raises(SSVMInputError, match="brackets") as info:
        read_brackets(text)
    assert message in str(info.value)
