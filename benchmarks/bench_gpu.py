"""GPU figures of the device path (needs CUDA; without it prints one skip line and exits 0).

* exact gap pass on OCR-large (6,251 words) with the torch kernels, float64 and float32, with each
  CUDA Viterbi (``fused``: the tile variant of the Triton kernel of chain/triton_viterbi.py, the
  default; ``fused-rows``: its rows variant; ``loop``);
* raw batched Viterbi throughput (words/s) vs batch size on OCR shapes (K = 26, the lengths of
  OCR-large resampled), for the plain loop over positions (the reference kernel), the same function
  under ``torch.compile(mode="reduce-overhead")`` (CUDA graphs; at two batch sizes, since every
  shape compiles anew) and both variants of the fused Triton kernel;
* mini-batch BCFW seconds per effective pass and gap vs time for tau in {64, 256, 1024, n} on the GPU,
  next to the CPU numba BCFW of the same seed measured on the same machine (OCR-large, lambda 1e-3,
  and the wall time to reach gap 0.1);
* CoNLL-2000 peak GPU memory (store, gap pass, mini-batch steps).

Writes benchmarks/results/gpu.json. ``--device cpu --quick`` runs the same code on the CPU torch
path with small sizes (a smoke test of this script, not a figure).

The JSON is rewritten after every section, so a run cut off by a time limit keeps what it measured.

Usage: python benchmarks/bench_gpu.py [--repeats 5] [--quick] [--device cuda] [--budget 60]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats):
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def decoder_setting(name):
    """Select the CUDA Viterbi of every store call (chain/padded.py reads SSVM_CUDA_VITERBI)."""
    os.environ["SSVM_CUDA_VITERBI"] = name


def gap_pass_figures(task, device, repeats, decoders):
    """Exact gap pass on the whole training set; ``gap_pass_ms`` is the default decoder's, ``by_decoder``
    every decoder's."""
    out = {}
    for dtype in (torch.float64, torch.float32):
        store = task.store(1e-3, device=device, dtype=dtype, kernels="torch")
        row = {}
        for name in decoders:
            decoder_setting(name)
            store.gap_pass()                                     # warm-up (and Triton's compile)
            row[name] = 1e3 * timed(store.gap_pass, device, repeats)
        decoder_setting(decoders[0])
        out[str(dtype).split(".")[1]] = {"gap_pass_ms": row[decoders[0]], "by_decoder": row}
    return out


def graph_step(fn):
    """``fn`` compiled with mode="reduce-overhead" (CUDA graphs), each call a new graph step: a replay
    overwrites the previous call's outputs, which the caller clones if it keeps them (the first
    device run failed with "accessing tensor output of CUDAGraphs that has been overwritten")."""
    def step(*args):
        torch.compiler.cudagraph_mark_step_begin()
        return fn(*args)
    return step


def decode_figures(task, device, repeats, batches, compile_batches):
    from ssvm_torch.chain.torch_viterbi import viterbi_loop
    from ssvm_torch.chain.triton_viterbi import fused_available, viterbi_fused
    lengths_all = task.train.lengths
    K = task.model.K
    gen = torch.Generator().manual_seed(0)
    out = {}
    compiled = None
    for B in batches:
        variants = {"loop": viterbi_loop}
        if device.type == "cuda" and B in compile_batches:       # CUDA graphs are the point of this variant
            compiled = compiled or torch.compile(viterbi_loop, mode="reduce-overhead", dynamic=False)
            variants["compiled"] = compiled
        pick = torch.randint(len(lengths_all), (B,), generator=gen)
        lengths = lengths_all[pick].to(device)
        T = int(lengths.max())
        unary = torch.randn(B, T, K, generator=gen).to(device)
        unary *= (torch.arange(T, device=device)[None, :] < lengths[:, None])[..., None]
        if fused_available(unary):
            variants["fused"] = viterbi_fused
            variants["fused-rows"] = functools.partial(viterbi_fused, variant="rows")
        first, last, trans = (torch.randn(*s, generator=gen).to(device) for s in ((K,), (K,), (K, K)))
        row = {}
        ref = None
        for name, fn in variants.items():
            try:
                if name == "compiled":                           # CUDA graphs reuse their output buffers
                    fn = graph_step(fn)
                labels = fn(unary, lengths, first, last, trans)[0].clone()   # warm-up / compile / capture
                if ref is None:
                    ref = labels
                sec = timed(lambda: fn(unary, lengths, first, last, trans), device, repeats)
                row[name] = {"ms": 1e3 * sec, "words_per_s": B / sec,
                             "tokens_per_s": float(lengths.sum()) / sec,
                             "same_labels_as_loop": bool(torch.equal(labels, ref))}
            except Exception as e:                               # noqa: BLE001
                row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        out[str(B)] = row
        print(f"decode B={B:8d}  " + "  ".join(f"{k}: {v.get('words_per_s', float('nan')) / 1e6:.2f} M words/s"
                                                 for k, v in row.items()), flush=True)
    return out


def minibatch_figures(task, device, taus, passes, target, budget_s):
    """Mini-batch BCFW with gap sampling to gap ``target`` (at most ``passes`` and ``budget_s`` solver
    seconds each); the solver's clock synchronizes CUDA at its timing boundaries (devices.device_clock)."""
    from ssvm_torch import Solver, SolverConfig
    out = {}
    runs = [("cpu-numba", 1, torch.device("cpu"), "auto")] + [(f"{device.type}-tau{t}", t, device, "torch")
                                                              for t in taus]
    for name, tau, dev, kernels in runs:
        store = task.store(1e-3, device=dev, kernels=kernels)
        cfg = SolverConfig(solver="bcfw", sampling="gap", batch_size=min(tau, store.n), passes=passes,
                           gap_check=1, seed=0, gap_threshold=target, time_budget=budget_s)
        t0 = time.perf_counter()
        hist = Solver(store, cfg).run()
        wall = time.perf_counter() - t0
        reached = next((r for r in hist if r["gap"] <= target), None)
        out[name] = {"tau": min(tau, store.n), "s_per_pass": hist[-1]["time_s"] / hist[-1]["passes"],
                     "wall_s": wall, "time_to_target_s": None if reached is None else reached["time_s"],
                     "passes_to_target": None if reached is None else reached["passes"],
                     "curve": [{"passes": r["passes"], "gap": r["gap"], "time_s": r["time_s"]} for r in hist]}
        print(f"{name:16s} {out[name]['s_per_pass']:.4f} s/pass, final gap {hist[-1]['gap']:.4g}, "
              f"time to gap {target}: {out[name]['time_to_target_s']}", flush=True)
    return out


def conll_memory(task, device):
    """Peak GPU memory of CoNLL-2000 training: the store, one exact gap pass, one pass of mini-batch steps."""
    from ssvm_torch import Solver, SolverConfig
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    store = task.store(3e-2, device=device, kernels="torch")
    store.gap_pass()
    Solver(store, SolverConfig(batch_size=min(256, store.n), passes=1, gap_check=1)).run()
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"n": task.n_train, "d": task.d, "peak_gpu_mb": None if peak is None else peak / 2 ** 20,
            "wall_s": time.perf_counter() - t0}


SECTIONS = ("gap", "decode", "conll", "minibatch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test of the script)")
    ap.add_argument("--budget", type=float, default=60.0, help="solver seconds per mini-batch run at most")
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS,
                    help="what to measure; the others are kept from an existing --out file")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "gpu.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: skipped, no CUDA device (torch %s)" % torch.__version__)
        return 0
    from ssvm_torch.chain.triton_viterbi import triton
    from ssvm_torch.outputs import atomic_write_bytes
    from ssvm_torch.tasks import load_task
    torch.set_num_threads(1)
    task = load_task("ocr-large")
    quick = args.quick
    out = Path(args.out)
    res = json.loads(out.read_text()) if out.exists() and set(args.sections) != set(SECTIONS) else {}
    res.update({"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
                "torch": torch.__version__, "cuda": torch.version.cuda,
                "triton": None if triton is None else triton.__version__, "quick": quick})
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():                                  # after every section: a cut-off run keeps what it measured
        atomic_write_bytes(out, json.dumps(res, indent=1).encode())

    if "gap" in args.sections:
        decoders = ["fused", "fused-rows", "loop"] if device.type == "cuda" and triton is not None else ["loop"]
        res["gap_pass_ocr_large"] = gap_pass_figures(task, device, args.repeats, decoders)
        print("gap pass OCR-large (ms): " + ", ".join(f"{k} {v['by_decoder']}" for k, v in
                                                     res["gap_pass_ocr_large"].items()), flush=True)
        save()
    if "decode" in args.sections:
        batches = [256, 4096] if quick else [1024, 6251, 65536, 262144, 1 << 20]
        res["decode"] = decode_figures(task, device, args.repeats, batches, compile_batches={65536})
        save()
    if "conll" in args.sections:
        conll = load_task("conll2000", train_size=200 if quick else None)
        res["conll_memory"] = conll_memory(conll, device)
        print(f"CoNLL-2000 peak GPU memory: {res['conll_memory']['peak_gpu_mb']} MB", flush=True)
        save()
    if "minibatch" in args.sections:
        # tau = 1 on the GPU is dozens of kernel launches per block step (docs/devices.md has its figure): no budget for it
        taus = [64] if quick else [64, 256, 1024, task.n_train]
        res["minibatch_ocr_large"] = minibatch_figures(task, device, taus, passes=1 if quick else 200,
                                                       target=0.1, budget_s=args.budget)
        save()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
