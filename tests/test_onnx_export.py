"""ONNX export of an eval-mode tagger whose forward is LinearChain.decode (default kernels, BIO constraints, a
padded row) and of a chunker whose forward is SemiMarkovChain.decode: torch.onnx.export(..., dynamo=True) traces
the pure-torch path, and onnxruntime gives the int64 paths / segmentations the layer gives."""
import pytest
import torch

from ssvm_torch.nn import LinearChain, SemiMarkovChain, allowed_transitions

pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

LABELS = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]


class Tagger(torch.nn.Module):
    def __init__(self, n_features: int):
        super().__init__()
        self.emit = torch.nn.Linear(n_features, len(LABELS))
        self.crf = LinearChain(len(LABELS), batch_first=True, constraints=allowed_transitions("BIO", LABELS))

    def forward(self, x, mask):
        return self.crf.decode(self.emit(x), mask)


@pytest.mark.long
def test_tagger_exports_to_onnx_and_onnxruntime_gives_the_same_paths(tmp_path, capsys):
    torch.manual_seed(0)
    model = Tagger(8).eval()
    torch.nn.init.normal_(model.crf.transitions, std=2.0)            # constraints and transitions both matter
    x = torch.randn(4, 7, 8)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False                                               # a padded row
    mask[2, 0] = False                                                # a row that starts off, with a gap
    mask[2, 4] = False
    path = tmp_path / "tagger.onnx"
    torch.onnx.export(model, (x, mask), str(path), dynamo=True)
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, {names[0]: x.numpy(), names[1]: mask.numpy()})[0]
    want = model(x, mask)
    assert got.dtype.name == "int64" and want.dtype == torch.int64
    assert torch.equal(torch.from_numpy(got), want)
    assert bool((want[~mask] == -1).all()) and bool((want[mask] >= 0).all())
    # a second input through the same graph (same shapes): still the layer's paths
    x2 = torch.randn(4, 7, 8) * 3
    got2 = session.run(None, {names[0]: x2.numpy(), names[1]: mask.numpy()})[0]
    assert torch.equal(torch.from_numpy(got2), model(x2, mask))


@pytest.mark.long
def test_an_export_with_dynamic_batch_and_length_runs_any_shape(tmp_path):
    """The audit's case: an export asking for a dynamic sentence length fixed T to the example's (the
    torch Viterbi looped over range(T)); under export it now runs as two scans. Exported once at
    (4, 7), onnxruntime decodes other (B, T) shapes (T = 1 included) exactly as the eager layer does."""
    torch.manual_seed(1)
    model = Tagger(8).eval()
    torch.nn.init.normal_(model.crf.transitions, std=2.0)
    x = torch.randn(4, 7, 8)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    path = tmp_path / "tagger_dynamic.onnx"
    torch.onnx.export(model, (x, mask), str(path), dynamo=True,
                      dynamic_shapes={"x": {0: batch, 1: time}, "mask": {0: batch, 1: time}})
    session = ort.InferenceSession(str(path))
    inputs = session.get_inputs()
    assert [i.shape for i in inputs] == [["batch", "time", 8], ["batch", "time"]]
    g = torch.Generator().manual_seed(2)
    for B, T in ((2, 13), (6, 3), (3, 1)):
        x2 = torch.randn(B, T, 8, generator=g) * 2
        m2 = torch.rand(B, T, generator=g) > 0.25
        m2[0, 0] = False                                         # a row that starts off
        got = session.run(None, {inputs[0].name: x2.numpy(), inputs[1].name: m2.numpy()})[0]
        assert torch.equal(torch.from_numpy(got), model(x2, m2)), (B, T)


@pytest.mark.long
def test_the_scan_recursion_equals_the_loop_bit_for_bit():
    """viterbi_scan (what an exported graph runs) against viterbi_loop (eager): labels and scores equal,
    ties and -inf constraint scores included, lengths from 1 to T, T = 1 included."""
    from ssvm_torch.chain.torch_viterbi import viterbi_loop, viterbi_scan
    g = torch.Generator().manual_seed(3)
    for B, T, K in ((4, 7, 5), (3, 1, 4), (5, 30, 9), (2, 12, 3)):
        for ties in (False, True):
            draw = (lambda *s: torch.randint(-2, 3, s, generator=g).double()) if ties else (
                lambda *s: torch.randn(*s, generator=g, dtype=torch.float64))
            U, first, last, trans = draw(B, T, K), draw(K), draw(K), draw(K, K)
            trans = trans.masked_fill(torch.rand(K, K, generator=g) < 0.2, float("-inf"))
            lengths = torch.randint(1, T + 1, (B,), generator=g)
            a, b = viterbi_loop(U, lengths, first, last, trans), viterbi_scan(U, lengths, first, last, trans)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


class SegmentChunker(torch.nn.Module):
    """Per-word label scores -> SemiMarkovChain.decode (segments of at most 4 words, 3 labels)."""

    def __init__(self, n_features: int):
        super().__init__()
        self.emit = torch.nn.Linear(n_features, 3)
        self.seg = SemiMarkovChain(3, 4, length_scores=True)

    def forward(self, x, lengths):
        return self.seg.decode(self.seg.from_emissions(self.emit(x)), lengths=lengths)


@pytest.mark.long
def test_a_semimarkov_chunker_exports_with_dynamic_batch_and_length(tmp_path):
    """SemiMarkovChain.decode under export runs as two scans (segments/torch_semimarkov.best_scan): exported
    once at (4, 7), onnxruntime gives the eager layer's segmentations at other (B, T), T < L and empty rows
    included."""
    torch.manual_seed(4)
    model = SegmentChunker(8).eval()
    with torch.no_grad():
        model.seg.length_scores.normal_()
        model.seg.transitions.normal_(std=2.0)
    x, lengths = torch.randn(4, 7, 8), torch.tensor([7, 3, 0, 5])
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    path = tmp_path / "segments.onnx"
    torch.onnx.export(model, (x, lengths), str(path), dynamo=True,
                      dynamic_shapes={"x": {0: batch, 1: time}, "lengths": {0: batch}})
    session = ort.InferenceSession(str(path))
    inputs = session.get_inputs()
    g = torch.Generator().manual_seed(5)
    for B, T in ((4, 7), (2, 13), (6, 3), (3, 1)):
        x2 = torch.randn(B, T, 8, generator=g) * 2
        l2 = torch.randint(0, T + 1, (B,), generator=g)
        l2[0] = T
        got = session.run(None, {inputs[0].name: x2.numpy(), inputs[1].name: l2.numpy()})[0]
        want = model(x2, l2)
        assert got.dtype.name == "int64" and torch.equal(torch.from_numpy(got), want), (B, T)
        assert int(want[0, 0]) >= 0 and bool((want[l2 == 0] == -1).all())     # a full row starts; empty rows


@pytest.mark.long
def test_the_semimarkov_scan_recursion_equals_the_loop():
    """best_scan (what an exported graph runs) against best (eager): segmentations and scores equal, -inf
    segments and transitions, empty rows and T < L included."""
    from ssvm_torch.segments.torch_semimarkov import best, best_scan
    g = torch.Generator().manual_seed(6)
    for B, T, L, K in ((4, 7, 3, 3), (3, 1, 2, 2), (5, 12, 4, 3), (2, 3, 6, 4)):
        S = torch.randn(B, T, L, K, generator=g, dtype=torch.float64)
        S = S.masked_fill(torch.rand(S.shape, generator=g) < 0.2, float("-inf"))
        first, last = torch.randn(K, generator=g, dtype=torch.float64), torch.randn(K, generator=g, dtype=torch.float64)
        trans = torch.randn(K, K, generator=g, dtype=torch.float64)
        S[:, :, 0] = S[:, :, 0].nan_to_num(neginf=0.0)                    # one-position segments: a segmentation
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        lengths[0] = T
        a, b = best(S, first, last, trans, lengths), best_scan(S, first, last, trans, lengths)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


class Parser(torch.nn.Module):
    """A toy arc scorer under a DependencyTree (or span scorer under a ConstituencyTree) whose forward decodes."""

    def __init__(self, layer, spans: bool = False):
        super().__init__()
        self.proj, self.layer, self.spans = torch.nn.Linear(8, 8), layer, spans

    def forward(self, x, mask):
        scores = self.proj(x) @ x.transpose(1, 2)
        return self.layer.decode(scores, lengths=mask.sum(1)) if self.spans else self.layer.decode(scores, mask)


@pytest.mark.long
@pytest.mark.parametrize("kind", ["projective", "spans"])
def test_a_tree_layer_exports_at_a_fixed_length_and_pads(tmp_path, kind):
    """DependencyTree (projective: Eisner's torch recursion) and ConstituencyTree (the torch CKY) decode inside an
    exported graph: exported once at (3, 7), onnxruntime gives the eager layer's heads / charts for other inputs and
    other masks of that shape (shorter sentences padded to the exported length), an empty row included."""
    from ssvm_torch.nn import ConstituencyTree, DependencyTree
    torch.manual_seed(1)
    spans = kind == "spans"
    model = Parser(ConstituencyTree() if spans else DependencyTree(), spans).eval()
    x = torch.randn(3, 7, 8)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[:, -1 if spans else 0] = False          # 6 words: 7 fenceposts (spans), or the root at position 0 (arcs)
    mask[1, 4:] = False
    path = tmp_path / f"{kind}.onnx"
    torch.onnx.export(model, (x, mask), str(path), dynamo=True)
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    for trial in range(3):
        x2 = torch.randn(3, 7, 8) * (trial + 1)
        mask2 = mask.clone()
        mask2[0, 6 - 2 * trial:] = False                              # another length in the same padded shape
        if trial == 2:
            mask2[2] = False                                          # an empty row
        got = session.run(None, {names[0]: x2.numpy(), names[1]: mask2.numpy()})[0]
        assert torch.equal(torch.from_numpy(got), model(x2, mask2))


def test_a_non_projective_layer_is_refused_by_name_under_export(tmp_path):
    from ssvm_torch.nn import DependencyTree
    model = Parser(DependencyTree(projective=False)).eval()
    x, mask = torch.randn(2, 6, 8), torch.ones(2, 6, dtype=torch.bool)
    mask[:, 0] = False
    with pytest.raises(Exception, match="projective: False decodes by Chu-Liu-Edmonds on the host"):
        torch.onnx.export(model, (x, mask), str(tmp_path / "np.onnx"), dynamo=True)
