"""ONNX export of an eval-mode tagger whose forward is LinearChain.decode (default kernels, BIO
constraints, a padded row): torch.onnx.export(..., dynamo=True) traces the pure-torch path, and
onnxruntime gives the int64 paths the layer gives."""
import pytest
import torch

from ssvm_torch.nn import LinearChain, allowed_transitions

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
