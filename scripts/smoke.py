"""Smoke test of an installed wheel (scripts/wheel_smoke.sh runs it outside the repository): the
package comes from site-packages, its version from the wheel's metadata; a 5-pass OCR-small run
through the installed ssvm-train, an estimator fit/predict, the nn layers (chain, semi-Markov)
forward/backward/decode."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import ssvm_torch
from ssvm_torch import MulticlassSSVM
from ssvm_torch.nn import LinearChain, SemiMarkovChain, allowed_transitions

where = Path(ssvm_torch.__file__).resolve()
assert "site-packages" in where.parts, f"ssvm_torch imported from {where}, not from the installed wheel"
assert ssvm_torch.__version__ != "0+unknown", ssvm_torch.__version__
assert (where.parent / "py.typed").is_file()
with tempfile.TemporaryDirectory() as out:
    exe = Path(sys.executable).parent / "ssvm-train"
    subprocess.run([str(exe), "--dataset", "ocr-small", "--passes", "5", "--gap-check", "5", "--quiet",
                    "--out", out], check=True)
    last = json.loads((Path(out) / "history.json").read_text())[-1]
    assert last["passes"] >= 5 and last["gap"] > 0 and last["test_error"] < 0.6, last
rng = np.random.default_rng(0)
y = np.array(["a", "b", "c"])[rng.integers(0, 3, 60)]
X = rng.normal(size=(60, 3)) + 3 * (y[:, None] == np.array(["a", "b", "c"])[None]).astype(float)
est = MulticlassSSVM(passes=10).fit(X, y)
assert est.score(X, y) > 0.9 and set(est.predict(X)) <= {"a", "b", "c"}
tags = ["B-NP", "I-NP", "O"]
layer = LinearChain(3, batch_first=True, loss="hinge", constraints=allowed_transitions("BIO", tags))
em = torch.randn(2, 5, 3, requires_grad=True)
loss = layer(em, torch.tensor([[0, 1, 2, 0, 1], [2, 2, 0, 1, 1]]), reduction="mean")
loss.backward()
assert em.grad is not None and len(layer.decode(em.detach(), as_lists=True)) == 2
semi = SemiMarkovChain(3, 2, loss="crf")                       # the compiled segment kernels of the wheel
seg = semi.from_emissions(em.detach().double().requires_grad_(True))
semi.double()(seg, torch.tensor([[0, -1, 2, 1, -1], [2, 0, -1, 1, 1]])).backward()
assert tuple(semi.decode(seg.detach()).shape) == (2, 5) and semi.transitions.grad is not None
print(f"smoke test passed: ssvm_torch {ssvm_torch.__version__} from {where.parent}")
