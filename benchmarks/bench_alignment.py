"""The alignment layer (ssvm_torch/align/, nn/alignment.py) on CPU against pysdtw's soft-DTW (numba, the CPU path of
a torch soft-DTW package), the same quantity: soft-DTW with gamma = 1 is -log Z of the DTW move scores
(``from_similarity(-cost)``). Per case: soft-DTW value + gradient (ours: the compiled kernels and the torch
wavefront; pysdtw's CPU Function), the best path (the hinge's oracle) and the 5 best (align.kbest), and the largest
differences of value and gradient against pysdtw (which rounds its tables to float32). torch-struct's AlignmentCRF is
tried and its failure recorded (it needs the genbmm CUDA extension). One thread (torch and numba), median of
``--repeats``.

Writes benchmarks/results/alignment.json.
Usage: python benchmarks/bench_alignment.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import torch  # noqa: E402

from ssvm_torch.align import decode, kbest, log_partition  # noqa: E402
from ssvm_torch.nn import from_similarity  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from commits import median_ms  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CASES = ((32, 64, 64), (32, 128, 128), (8, 256, 256), (4, 512, 256))


def ours(cost: torch.Tensor, kernels: str):
    c = cost.clone().requires_grad_(True)
    value = -log_partition(from_similarity(-c), kernels=kernels)
    value.sum().backward()
    return value.detach(), c.grad


def pysdtw_value_and_grad(cost: torch.Tensor):
    import pysdtw
    c = cost.clone().requires_grad_(True)
    lengths = torch.tensor([[cost.shape[1], cost.shape[2]]] * cost.shape[0])
    value = pysdtw.SoftDTW(gamma=1.0, use_cuda=False).dtw_func(c, lengths, 1.0, 0.0)
    value.sum().backward()
    return value.detach(), c.grad


def torch_struct_status() -> str:
    import torch_struct
    try:
        torch_struct.AlignmentCRF(torch.randn(1, 4, 4, 3)).partition
        return "ran"
    except Exception as e:                           # the missing extension surfaces as a NameError
        return f"{type(e).__name__}: {e}"


#: (B, N, M) of the GPU section (bench_gpu.py --sections alignment)
DEVICE_SHAPES = ((64, 128, 128), (16, 512, 512), (4, 1024, 1024))


def device_figures(device, repeats: int, shapes=DEVICE_SHAPES) -> dict:
    """bench_gpu.py's alignment section: soft-DTW value + gradient and the best path by the torch wavefront on
    ``device`` (float32), against pysdtw's CUDA kernel on a GPU (its CPU path elsewhere) and our compiled CPU
    kernels (one thread) on the same costs; medians of ``repeats`` after a warm-up, the device synchronised."""
    import pysdtw

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def ms(call):
        call()
        sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)
    out = {}
    for B, N, M in shapes:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(B, N, 8, generator=g), torch.randn(B, M, 8, generator=g)
        cpu_cost = ((x[:, :, None] - y[:, None]) ** 2).sum(-1)
        cost = cpu_cost.to(device)
        lengths = torch.tensor([[N, M]] * B)
        sdtw = pysdtw.SoftDTW(gamma=1.0, use_cuda=device.type == "cuda")

        def ref():
            c = cost.clone().requires_grad_(True)
            sdtw.dtw_func(c, lengths.to(device) if device.type == "cuda" else lengths, 1.0, 0.0).sum().backward()
            return c.grad
        row = {"wavefront_value_grad_ms": ms(lambda: ours(cost, "torch")),
               "pysdtw_value_grad_ms": ms(ref),
               "numba_cpu_value_grad_ms": ms(lambda: ours(cpu_cost, "numba")),
               "wavefront_best_path_ms": ms(lambda: decode(from_similarity(-cost), kernels="torch"))}
        row["wavefront_vs_pysdtw"] = row["pysdtw_value_grad_ms"] / row["wavefront_value_grad_ms"]
        row["largest_gradient_difference"] = float((ours(cost, "torch")[1] - ref()).abs().max())
        out[f"{B}x{N}x{M}"] = row
        print(f"alignment {B}x{N}x{M} on {device}: soft-DTW + grad wavefront {row['wavefront_value_grad_ms']:.1f} ms, "
              f"pysdtw {row['pysdtw_value_grad_ms']:.1f} ms (x{row['wavefront_vs_pysdtw']:.2f}), numba CPU "
              f"{row['numba_cpu_value_grad_ms']:.1f} ms; best path {row['wavefront_best_path_ms']:.1f} ms", flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS / "alignment.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for B, N, M in CASES:
        for dtype in (torch.float64, torch.float32):
            g = torch.Generator().manual_seed(0)
            x, y = torch.randn(B, N, 8, generator=g, dtype=dtype), torch.randn(B, M, 8, generator=g, dtype=dtype)
            cost = ((x[:, :, None] - y[:, None]) ** 2).sum(-1)
            row = {"B": B, "N": N, "M": M, "dtype": str(dtype).replace("torch.", "")}
            v_ref, g_ref = pysdtw_value_and_grad(cost)
            v_ours, g_ours = ours(cost, "numba")
            row["largest_value_difference"] = float((v_ours - v_ref).abs().max())
            row["largest_relative_value_difference"] = float(((v_ours - v_ref).abs() / v_ref.abs()).max())
            row["largest_gradient_difference"] = float((g_ours - g_ref).abs().max())
            row["pysdtw_value_grad_ms"] = median_ms(lambda: pysdtw_value_and_grad(cost), args.repeats)
            row["numba_value_grad_ms"] = median_ms(lambda: ours(cost, "numba"), args.repeats)
            row["torch_value_grad_ms"] = median_ms(lambda: ours(cost, "torch"), max(1, args.repeats // 2))
            scores = from_similarity(-cost)
            row["numba_best_path_ms"] = median_ms(lambda: decode(scores, kernels="numba"), args.repeats)
            row["torch_best_path_ms"] = median_ms(lambda: decode(scores, kernels="torch"), max(1, args.repeats // 2))
            row["kbest5_ms"] = median_ms(lambda: kbest(scores, 5), args.repeats)
            row["speedup_vs_pysdtw"] = row["pysdtw_value_grad_ms"] / row["numba_value_grad_ms"]
            rows.append(row)
            print(f"B {B} N {N} M {M} {row['dtype']}: soft-DTW + grad numba {row['numba_value_grad_ms']:.1f} ms, "
                  f"torch {row['torch_value_grad_ms']:.1f} ms, pysdtw {row['pysdtw_value_grad_ms']:.1f} ms "
                  f"(x{row['speedup_vs_pysdtw']:.2f}); best path numba {row['numba_best_path_ms']:.1f} ms, torch "
                  f"{row['torch_best_path_ms']:.1f} ms, 5 best {row['kbest5_ms']:.1f} ms; "
                  f"|dv| {row['largest_value_difference']:.1e} "
                  f"(rel {row['largest_relative_value_difference']:.1e}), "
                  f"|dg| {row['largest_gradient_difference']:.1e}",
                  flush=True)
    result = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "threads": 1, "repeats": args.repeats,
              "torch_struct_alignment": torch_struct_status(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    print(f"torch-struct AlignmentCRF: {result['torch_struct_alignment']}\nwrote {args.out}")


if __name__ == "__main__":
    main()
