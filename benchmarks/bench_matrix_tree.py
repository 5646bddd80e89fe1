"""Non-projective log Z + its gradient (the arc marginals, the matrix-tree theorem) through the API users call,
``dependency_log_partition(S, projective=False)`` and ``.backward()``, on one device: this checkout against an
earlier package side by side in one process (``--before DIR --commit C``, benchmarks/commits.py) and
torch-struct's ``NonProjectiveDependencyCRF`` (partition and marginals, float32 as it computes them), at the
shapes of issue 74's item 3 (B 256, n 40 and 100); on CUDA also this checkout's torch path beside its Triton
kernel (``SSVM_CUDA_MATRIX_TREE=torch``; the kernel takes float32 sentences of up to 64 words). Each round times every side once, in a rotated order, each
sample a back-to-back loop of at least 10 ms (bench_gpu.timed_rounds); the median of the rounds is reported,
with the largest difference of the sides' gradients.

Usage: python benchmarks/bench_matrix_tree.py [--device cuda] [--before DIR --commit C] [--rounds 7]
       [--out benchmarks/results/matrix_tree.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import timed_rounds, with_env  # noqa: E402
from bench_trees import patch_torch_struct, to_torch_struct  # noqa: E402
from commits import add_before_options, before_and_now  # noqa: E402

SHAPES = ((256, 40), (256, 100))


def gradient_fn(pkg, S, lengths):
    """A callable running log Z + backward with ``pkg``'s trees API; returns the gradient."""
    def run():
        x = S.clone().requires_grad_(True)
        pkg.trees.dependency_log_partition(x, lengths=lengths, projective=False).sum().backward()
        return x.grad
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--shapes", nargs="+", default=[f"{b}x{n}" for b, n in SHAPES],
                   help="B x n shapes (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/matrix_tree.json"))
    add_before_options(p, required=False)
    args = p.parse_args()
    device = torch.device(args.device)
    pkgs = before_and_now(args.before) if args.before else {"now": __import__("ssvm_torch")}
    ts = patch_torch_struct()
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
           "torch": torch.__version__, "rounds": args.rounds, "commit_before": args.commit, "shapes": {}}
    for shape in args.shapes:
        B, n = (int(v) for v in shape.split("x"))
        g = torch.Generator().manual_seed(B + n)
        S = torch.randn(B, n + 1, n + 1, generator=g).to(device)       # float32, as a neural parser's scores
        lengths = torch.full((B,), n, device=device)
        T = to_torch_struct(S)

        def torch_struct_run():
            d = ts.NonProjectiveDependencyCRF(T.clone(), multiroot=False)
            d.partition
            return d.marginals
        fns = {f"{name}_float32": gradient_fn(pkg, S, lengths) for name, pkg in pkgs.items()}
        if device.type == "cuda":         # this checkout's torch path beside its Triton kernel (the default)
            fns["now_float32_torch_path"] = with_env(gradient_fn(pkgs["now"], S, lengths), "SSVM_CUDA_MATRIX_TREE",
                                                     "torch")
        fns.update({f"{name}_float64": gradient_fn(pkg, S.double(), lengths) for name, pkg in pkgs.items()})
        fns["torch_struct_float32"] = torch_struct_run
        grads = {k: fn() for k, fn in fns.items() if not k.startswith("torch_struct")}       # warm-up, kept
        ms = {k: 1e3 * v for k, v in timed_rounds(fns, device, args.rounds).items()}
        ref = grads["now_float64"].double()
        row = {"ms": ms, "max_abs_gradient_diff_to_now_float64": {k: float((v.double() - ref).abs().max())
                                                                    for k, v in grads.items()}}
        row["now_float32_vs_torch_struct"] = ms["torch_struct_float32"] / ms["now_float32"]
        if "before_float32" in ms:
            row["now_vs_before_float32"] = ms["before_float32"] / ms["now_float32"]
            row["now_vs_before_float64"] = ms["before_float64"] / ms["now_float64"]
        out["shapes"][shape] = row
        print(f"B={B} n={n}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items())
              + f"; now float32 x{row['now_float32_vs_torch_struct']:.2f} torch-struct", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
