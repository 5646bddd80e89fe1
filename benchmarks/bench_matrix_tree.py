"""Non-projective log Z + its gradient (the arc marginals, the matrix-tree theorem) through the API users call,
``dependency_log_partition(S, projective=False)`` and ``.backward()``, on one device: this checkout against an
earlier package side by side in one process (``--before DIR --commit C``, benchmarks/commits.py) and
torch-struct's ``NonProjectiveDependencyCRF`` (partition and marginals, float32 as it computes them), at the
shapes of issue 74's item 3 (B 256, n 40 and 100); on CUDA also this checkout's torch path beside its Triton
kernel (``SSVM_CUDA_MATRIX_TREE=torch``; the kernel takes float32 sentences of up to 64 words). Each round times every side once, in a rotated order, each
sample a back-to-back loop of at least 10 ms (bench_gpu.timed_rounds); the median of the rounds is reported,
with the largest difference of the sides' gradients.

On CUDA the shapes also time the linear algebra alone (``linalg`` in the JSON): the direct path's LU of the
(B, n, n) Laplacian and its inverse (``lu_factor_ex`` + ``lu_solve`` with the identity, as
``ssvm_torch.trees.matrix_tree._direct`` does, or ``inv_ex``) in float32 and float64 under each of torch's
CUDA linear-algebra backends (``torch.backends.cuda.preferred_linalg_library``: the default heuristic,
cusolver, magma where built), and this checkout's whole path under each: at n 100 the float64 path beat
torch-struct by 1.01-1.03x only (2026-12-04, H200), and which library factors 256 matrices of 100 fastest
decides whether it can do better.

Usage: python benchmarks/bench_matrix_tree.py [--device cuda] [--before DIR --commit C] [--rounds 7]
       [--no-linalg] [--out benchmarks/results/matrix_tree.json]
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


def with_backend(fn, backend: str):
    """``fn`` run with torch's preferred CUDA linear-algebra library set to ``backend`` (restored after)."""
    def run():
        before = torch.backends.cuda.preferred_linalg_library()
        torch.backends.cuda.preferred_linalg_library(backend)
        try:
            return fn()
        finally:
            torch.backends.cuda.preferred_linalg_library(before)
    return run


def cuda_backends(device) -> list[str]:
    """The preferred-library settings to time: default, cusolver, and magma where this torch has it (none but
    the default off CUDA, where the setting does nothing)."""
    if device.type != "cuda":
        return ["default"]
    return ["default", "cusolver"] + (["magma"] if torch.cuda.has_magma else [])


def linalg_sweep(pkg, S, lengths, device, rounds: int) -> dict:
    """Milliseconds of the direct path's factorisation and inverse alone, and of the whole log Z + backward,
    under each CUDA linear-algebra backend (module docstring); the backend's name in every key."""
    B, N, _ = S.shape
    fns = {}
    for dtype in (torch.float32, torch.float64):
        tag = str(dtype).split(".")[1]
        L = torch.randn(B, N - 1, N - 1, device=device, dtype=dtype).abs() / N
        L.diagonal(dim1=1, dim2=2).add_(1.0)               # diagonally dominant, as the Laplacian's columns
        eye = torch.eye(N - 1, device=device, dtype=dtype).expand(B, -1, -1)

        def lu_solve(L=L, eye=eye):
            LU, piv, _ = torch.linalg.lu_factor_ex(L)
            return torch.linalg.lu_solve(LU, piv, eye)
        for backend in cuda_backends(device):
            fns[f"lu_solve_{tag}_{backend}"] = with_backend(lu_solve, backend)
            fns[f"inv_ex_{tag}_{backend}"] = with_backend(lambda L=L: torch.linalg.inv_ex(L)[0], backend)
            fns[f"now_path_{tag}_{backend}"] = with_backend(gradient_fn(pkg, S.to(dtype), lengths), backend)
    for fn in fns.values():
        fn()
    return {k: 1e3 * v for k, v in timed_rounds(fns, device, rounds).items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--shapes", nargs="+", default=[f"{b}x{n}" for b, n in SHAPES],
                   help="B x n shapes (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/matrix_tree.json"))
    p.add_argument("--no-linalg", action="store_true", help="skip the linear-algebra backends' sweep (CUDA)")
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
        if device.type == "cuda" and not args.no_linalg:
            row["linalg_ms"] = linalg_sweep(pkgs["now"], S, lengths, device, args.rounds)
            print("  linalg: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(row["linalg_ms"].items())), flush=True)
        out["shapes"][shape] = row
        print(f"B={B} n={n}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items())
              + f"; now float32 x{row['now_float32_vs_torch_struct']:.2f} torch-struct", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
