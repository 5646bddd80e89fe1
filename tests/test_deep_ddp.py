"""The deep recipes under Lightning DDP on CPU (gloo, 2 processes): each rank's step has the loss and
the gradient of one process on the union of the ranks' batches (the module's loss is a mean over the
examples of a batch and DDP averages the ranks' gradients; dense and sparse parameters alike)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # the hybrid chunker: BiLSTM + CRF head + the sparse EmbeddingBag of the rich attributes (SparseAdam)
    "conll_deep_hybrid_crf": ["--model.train_size", "48", "--model.batch_sentences", "6", "--model.dropout", "0",
                              "--model.word_dropout", "0", "--model.attr_dropout", "0"],
    # CNN + structured hinge on OCR words, no pretraining
    "ocr_deep_hinge": ["--model.split", "small", "--model.train_size", "40", "--model.batch_words", "5",
                       "--model.pretrain_epochs", "0", "--model.dropout", "0", "--model.augment", "false"],
}


# the OCR module's letter classifier is trained in pretraining only and its chain head after it: parameters
# a step does not use, which DDP refuses unless told to look for them (docs/deep.md)
STRATEGY = {"conll_deep_hybrid_crf": "ddp", "ocr_deep_hinge": "ddp_find_unused_parameters_true"}


def module_class(recipe):
    from ssvm_torch.deep import ConllChunker, DeepChainModule
    return ConllChunker if recipe.startswith("conll") else DeepChainModule


# the OCR recipe's case (the longest of the fast tier) is slow: the CoNLL recipe checks the same claim in it
@pytest.mark.long
@pytest.mark.parametrize("recipe", [pytest.param(r, marks=pytest.mark.slow) if r == "ocr_deep_hinge" else r
                                    for r in sorted(CASES)])
def test_ddp_step_is_the_one_process_step_on_the_union_of_the_batches(tmp_path, recipe):
    # OCR's chain head starts at zero, where every labeling ties in the hinge's decoding: probe the second step
    step = 0 if recipe.startswith("conll") else 1
    env = {**os.environ, "SSVM_TORCH_PROBE_DIR": str(tmp_path), "SSVM_TORCH_PROBE_STEP": str(step),
           "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "ssvm_torch.deep", "fit", "--config", str(ROOT / "recipes" / f"{recipe}.yaml"),
           *CASES[recipe], "--model.threads", "1", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", str(step + 1),
           "--trainer.strategy", STRATEGY[recipe], "--trainer.devices", "2", "--trainer.accelerator", "cpu",
           "--trainer.callbacks+=ddp_probe.GradientProbe", "--trainer.default_root_dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert all(p["world_size"] == 2 for p in ranks)
    a, b = (set(p["batch"].tolist()) for p in ranks)
    assert a and b and not a & b                                    # two disjoint batches
    for name in ranks[0]["weights"]:                                 # DDP starts both ranks from rank 0's weights
        assert torch.equal(ranks[0]["weights"][name], ranks[1]["weights"][name]), name
    # one process, the same weights, the union of the two batches
    torch.manual_seed(0)
    module = module_class(recipe)(**{k: v for k, v in ranks[0]["hparams"].items() if not k.startswith("_")})
    module.build()                                                  # the data (and CoNLL's network)
    module.load_state_dict(ranks[0]["weights"])
    union = torch.cat([ranks[0]["batch"], ranks[1]["batch"]])
    module.zero_grad()
    module.batch_loss(union).backward()
    ref = {name: (p.grad.to_dense() if p.grad.is_sparse else p.grad) for name, p in module.named_parameters()
           if p.grad is not None}
    assert set(ref) == set(ranks[0]["grads"]) and len(ref) >= 4
    sparse = [n for n, p in module.named_parameters() if p.grad is not None and p.grad.is_sparse]
    assert bool(sparse) == recipe.startswith("conll")                # the hybrid's attribute rows are sparse
    for name, g in ref.items():
        for p in ranks:                                              # each rank holds the averaged gradient
            assert torch.allclose(p["grads"][name], g, rtol=1e-4, atol=1e-6), (name, float((p["grads"][name] - g).abs().max()))
    assert all(float(g.abs().max()) > 0 for g in ref.values())      # the checks compare something


@pytest.mark.long
def test_length_pooled_batches_are_refused_on_several_devices(tmp_path):
    """UDParser's length_pool batches are drawn whole by every process: DDP would train each rank on the same
    batches, so a fit on 2 devices with length_pool > 0 is refused by name in the launching process, before any
    rank starts or any data is loaded (the module's check_trainer, run by the CLI's before_fit)."""
    tiny = ["--model.train_size", "40", "--model.hidden", "16", "--model.word_dim", "8", "--model.char_filters", "4",
            "--model.upos_dim", "4", "--model.arc_dim", "8", "--model.rel_dim", "4", "--model.layers", "1"]
    cmd = [sys.executable, "-m", "ssvm_torch.deep", "fit", "--config", str(ROOT / "recipes" / "ud_deep_hinge.yaml"),
           *tiny, "--model.threads", "1", "--model.length_pool", "2", "--trainer.max_epochs", "1",
           "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
           "--trainer.default_root_dir", str(tmp_path / "run")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "length_pool: expected 0 when training on several devices" in done.stderr
    assert "Initializing distributed" not in done.stderr and not (tmp_path / "run").exists()
