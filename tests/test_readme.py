"""The README's Python examples run as written (with fewer passes), so the front door stays true."""
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_has_the_seven_examples():
    assert len(BLOCKS) == 7 and "ConstituencyTree" in BLOCKS[6] and "SemiMarkovChain" in BLOCKS[5] and "ChainSSVM" in BLOCKS[0] and "SSVMModule" in BLOCKS[1] and "ChainSSVMHead" in BLOCKS[2]
    assert "LinearChain" in BLOCKS[3] and "DependencyTree" in BLOCKS[4]


def test_dependency_tree_example_runs():
    scope = {}
    exec(compile(BLOCKS[4], "README DependencyTree example", "exec"), scope)
    pred, mask = scope["pred"], scope["mask"]
    assert float(scope["loss"].detach()) >= 0 and scope["arc_scores"].grad is not None
    assert pred.shape == (2, 5) and bool((pred[~mask] == -1).all()) and bool((pred[mask] >= 0).all())
    assert scope["H"].shape == (2,) and bool((scope["H"] > 0).all())     # 4 and 3 words: more than one tree each
    draws = scope["draws"]
    assert draws.shape == (2, 8, 5) and bool((draws[:, :, 0] == -1).all()) and bool((draws[1, :, 4] == -1).all())
    assert bool(((draws[0, :, 1:] >= 0) & (draws[0, :, 1:] <= 4)).all())


def test_semimarkov_example_runs():
    scope = {}
    exec(compile(BLOCKS[5], "README SemiMarkovChain example", "exec"), scope)
    tags, lengths = scope["tags"], scope["lengths"]
    assert float(scope["loss"].detach()) >= 0 and scope["emissions"].grad is not None
    assert [len(t) for t in tags] == lengths.tolist() == [4, 2]
    assert all(t == "O" or t[:2] in ("B-", "I-") for row in tags for t in row)


def test_constituency_example_runs():
    """The README's span layer example: a loss with gradients on both heads, and the decoded tree debinarized to
    labeled spans inside the sentence (every binarization join gone)."""
    scope = {}
    exec(compile(BLOCKS[6], "README ConstituencyTree example", "exec"), scope)
    assert scope["span"].grad is not None and scope["label"].grad is not None
    tree = scope["tree"]
    assert all(0 <= i < j <= 4 and 1 <= lab <= 3 for i, j, lab in tree) and len(tree) <= 7


def test_linear_chain_example_runs():
    scope = {}
    exec(compile(BLOCKS[3], "README LinearChain example", "exec"), scope)
    paths, tags, mask = scope["paths"], scope["tags"], scope["mask"]
    assert float(scope["loss"]) >= 0 and paths.shape == (2, 6) and bool((paths[~mask] == -1).all())
    draws, H = scope["draws"], scope["H"]
    assert H.shape == (2,) and bool((H > 0).all()) and draws.shape == (2, 8, 6)
    assert bool((draws[:, :, ~mask[1]][1] == -1).all()) and bool((draws[0] >= 0).all())
    for row in [*paths.tolist(), *draws.reshape(-1, 6).tolist()]:     # the samples obey the constraints too
        seq = [tags[y] for y in row if y >= 0]
        assert all(not b.startswith("I-") or (a != "O" and a[2:] == b[2:]) for a, b in zip(["O"] + seq, seq))


def test_estimator_example_runs(capsys):
    code = BLOCKS[0].replace("passes=30", "passes=3").replace("ChainSSVM(passes=10)", "ChainSSVM(passes=2)")
    scope = {}
    exec(compile(code, "README estimator example", "exec"), scope)
    assert 0 < scope["est"].gap_ and len(scope["labels"]) == 3
    assert scope["search"].best_params_["lam"] in (1e-3, 1e-2, 1e-1)


@pytest.mark.filterwarnings("ignore")
def test_lightning_example_runs(tmp_path):
    code = BLOCKS[1].replace("passes=30", "passes=2").replace('"runs/ocr-small"', repr(str(tmp_path)))
    scope = {}
    exec(compile(code, "README Lightning example", "exec"), scope)
    assert scope["module"].history[-1]["gap"] > 0 and (tmp_path / "lightning_logs").is_dir()


def test_differentiable_example_runs():
    code = BLOCKS[2].replace("train_size=500", "train_size=40").replace("range(2)", "range(1)")
    scope = {}
    exec(compile(code, "README differentiable example", "exec"), scope)
    labels, test = scope["labels"], scope["test"]
    assert labels.shape == test.pos.shape and bool(((labels >= 0) == (test.pos >= 0)).all())
