"""Every structured layer's calls under ``torch.inference_mode()``, the mode Lightning's validation, test and predict
loops run in by default: marginals, entropies, KL divergences and MBR decodes are gradients of log Z, and under
inference mode they raised ("element 0 of tensors does not require grad", "Inference tensors cannot be saved for
backward") on the torch paths of every layer (the GPU's paths) and on the compiled paths of the constituency and
alignment layers. Each call must give under inference mode what it gives under ``torch.no_grad()``
(ssvm_torch/grad_mode.py). Under ``torch.autocast`` (mixed-precision training) the same calls must give their
float32 results: the chain's torch recursion ran its matrix products in bfloat16 there, and the backward that its
marginals take too."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch.chain import chain_marginals, edge_chain
from ssvm_torch.nn import ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment, SemiMarkovChain

B, T = 3, 5
LENGTHS = torch.tensor([4, 1, 3])


def _cases(kernels):
    """{name: (layer, scores, gold or None (its decode), keyword inputs)}, every layer with a row of one word."""
    g = torch.Generator().manual_seed(0)
    return {
        "chain": (LinearChain(3, batch_first=True, loss="crf", kernels=kernels), torch.randn(B, T, 3, generator=g),
                  torch.randint(0, 3, (B, T), generator=g), {"mask": torch.arange(T)[None] < LENGTHS[:, None]}),
        "projective": (DependencyTree(loss="crf", kernels=kernels), torch.randn(B, T, T, generator=g), None,
                       {"lengths": LENGTHS}),
        "non-projective": (DependencyTree(projective=False, loss="crf", kernels=kernels),
                           torch.randn(B, T, T, generator=g), None, {"lengths": LENGTHS}),
        "second-order": (DependencyTree(loss="crf", kernels=kernels), torch.randn(B, T, T, generator=g), None,
                         {"lengths": LENGTHS, "sib_scores": torch.randn(B, T, T, T, generator=g)}),
        "constituency": (ConstituencyTree(loss="crf", kernels=kernels), torch.randn(B, T, T, generator=g), None,
                         {"lengths": LENGTHS}),
        "semi-markov": (SemiMarkovChain(3, 2, loss="crf", kernels=kernels), torch.randn(B, T, 2, 3, generator=g),
                        None, {"lengths": LENGTHS}),
        "alignment": (MonotonicAlignment(loss="crf", kernels=kernels), torch.randn(B, T, 4, 3, generator=g), None,
                      {"x_lengths": LENGTHS, "y_lengths": torch.tensor([4, 1, 2])}),
    }


def _other(kw):
    """q's second-order scores for a KL of the second-order layer (both models of one order), else nothing."""
    return {"other_sib_scores": kw["sib_scores"].flip(0)} if "sib_scores" in kw else {}


CALLS = {
    "forward": lambda layer, S, gold, kw: layer(S, gold, reduction="none", **kw),
    "log_partition": lambda layer, S, gold, kw: layer.log_partition(S, **kw),
    "marginals": lambda layer, S, gold, kw: layer.marginals(S, **kw),
    "entropy": lambda layer, S, gold, kw: layer.entropy(S, **kw),
    "kl": lambda layer, S, gold, kw: layer.kl(S, S.flip(0), **kw, **_other(kw)),
    "cross_entropy": lambda layer, S, gold, kw: layer.cross_entropy(S, S.flip(0), **kw, **_other(kw)),
    "decode": lambda layer, S, gold, kw: layer.decode(S, **kw),
    "mbr": lambda layer, S, gold, kw: layer.decode(S, mbr=True, **kw),
    "sample": lambda layer, S, gold, kw: layer.sample(S, n=2, generator=torch.Generator().manual_seed(1), **kw),
}


def _every_call(kernels):
    """(what, call, layer, scores, gold, keyword inputs) for every call of every layer kind."""
    for name, (layer, S, gold, kw) in _cases(kernels).items():
        if gold is None:
            gold = layer.decode(S, **{k: v for k, v in kw.items() if k != "sib_scores"})
        for call_name, call in CALLS.items():
            yield f"{name} {call_name}", call, layer, S, gold, kw


def _assert_same(got, expected, what: str) -> None:
    """Equal results (tuples element by element), none of them carrying a graph."""
    got, expected = (x if isinstance(x, tuple) else (x,) for x in (got, expected))
    for a, b in zip(got, expected, strict=True):
        assert not a.requires_grad, what
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=what)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_every_layer_call_under_inference_mode_equals_no_grad(kernels):
    for what, call, layer, S, gold, kw in _every_call(kernels):
        with torch.no_grad():
            expected = call(layer, S, gold, kw)
        with torch.inference_mode():
            # the inputs made in inference mode too, as a validation step's network output is
            got = call(layer, S.clone(), gold, {k: v.clone() for k, v in kw.items()})
        _assert_same(got, expected, what)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_the_functional_marginals_under_inference_mode(kernels):
    """The chain package's own marginals (the edge chain's, the lengths-based chain's) are gradients of log Z too."""
    g = torch.Generator().manual_seed(2)
    edges, lengths = torch.randn(B, T - 1, 3, 3, generator=g), torch.tensor([5, 2, 3])
    unary, first, last, trans = (torch.randn(B, T, 3, generator=g), torch.randn(3, generator=g),
                                 torch.randn(3, generator=g), torch.randn(3, 3, generator=g))
    with torch.no_grad():
        expected = (edge_chain.marginals(edges, lengths, kernels=kernels),
                    chain_marginals(unary, lengths, first, last, trans))
    with torch.inference_mode():
        got = (edge_chain.marginals(edges.clone(), lengths.clone(), kernels=kernels),
               chain_marginals(unary.clone(), lengths.clone(), first.clone(), last.clone(), trans.clone()))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_every_layer_call_under_autocast_equals_float32(kernels):
    for what, call, layer, S, gold, kw in _every_call(kernels):
        with torch.no_grad():
            expected = call(layer, S, gold, kw)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = call(layer, S, gold, kw)
        _assert_same(got, expected, what)
