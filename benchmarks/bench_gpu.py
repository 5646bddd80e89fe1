"""GPU figures of the device path (needs CUDA; without it prints one skip line and exits 0).

* exact gap pass on OCR-large (6,251 words) with the torch kernels, float64 and float32, with each
  CUDA Viterbi (``fused``: the Triton kernel of chain/triton_viterbi.py with the variant its measured
  rule picks, the default; ``fused-tile`` / ``fused-rows`` / ``fused-transposed``: one variant; ``loop``);
* raw batched Viterbi throughput (words/s) vs batch size on OCR shapes (K = 26, the lengths of
  OCR-large resampled), for the plain loop over positions (the reference kernel), the same function
  under ``torch.compile(mode="reduce-overhead")`` (CUDA graphs; at B = 65,536, since every shape
  compiles anew) and the fused Triton kernel (the default rule, each variant, the default without sorting
  the chains by length, and a sweep of sequences per program, warps and the rows loop unrolled at B = 1,024,
  6,251, 65,536 and 2^20: the figures behind the rule);
* mini-batch BCFW seconds per effective pass and gap vs time for tau in {64, 256, 1024, n} on the GPU,
  next to the CPU numba BCFW of the same seed measured on the same machine (OCR-large, lambda 1e-3,
  and the wall time to reach gap 0.1);
* CoNLL-2000 peak GPU memory (store, gap pass, mini-batch steps);
* ``layer``: :class:`ssvm_torch.nn.LinearChain` against pytorch-crf on the same device, same float32
  inputs, full masks, at (B, T, K) in {(64, 50, 9), (512, 50, 9), (4096, 50, 9), (512, 50, 45)}, and a padded
  batch at (512, 50, 9) (lengths uniform in 1..50, key ``512_50_9_padded``):
  decode, hinge + backward (ours) vs NLL + backward (pytorch-crf), CRF + backward both; ours with the
  default kernels (the fused Triton kernels on CUDA) and with ``kernels="torch"`` (the torch loop);
* ``trees``: the dependency-tree kernels (ssvm_torch.trees) on the same device, float32, B = 256 sentences of
  n = 40 and of n = 100: projective best tree and log Z + backward (the Triton Eisner kernels on CUDA, and
  ``ours_torch`` with ``SSVM_CUDA_EISNER=loop``, the torch recursions) against torch-struct's ``DependencyCRF``,
  non-projective log Z + marginals against ``NonProjectiveDependencyCRF`` (ours: the Triton matrix-tree kernel
  on CUDA; ``ours_torch_path`` with ``SSVM_CUDA_MATRIX_TREE=torch``, ``ours_float64`` float64 scores), and the
  non-projective best tree
  (Chu-Liu-Edmonds on the host, one copy each way) against a per-sentence Python Chu-Liu-Edmonds with a rerun
  per root on the CPU (SuPar's method; timed on 32 of the sentences and scaled to B, it is linear in B); and
  ``second_order`` of each shape: the adjacent-sibling best tree and log Z + backward (the Triton kernels of
  ssvm_torch/trees/triton_sibling.py, ``ours_torch`` the torch recursions) against SuPar 1.1.4's
  ``Dependency2oCRF`` on the same device;
* ``spans``: the constituency-tree operations (ssvm_torch.spans, the torch CKY on CUDA), float32, B = 256 sentences
  of n = 40 and 64 of n = 100: log Z + backward and the best tree against SuPar 1.1.4's ``ConstituencyCRF`` and
  torch-struct's ``TreeCRF`` on the same device;
* ``pcfg``: PCFGs (ssvm_torch.spans.pcfg, the torch path), float32 grammars of NT 30 / T 60, B 32 of 20 words and
  B 16 of 40: log Z + backward, the best tree and entropy + backward against torch-struct's ``SentCFG`` on the same
  device (``bench_pcfg.device_figures``);
* ``kbest``: the k best trees on the device (Lawler's partition over the Triton Eisner / torch CKY oracles, what
  CUDA runs: ssvm_torch/trees/lawler.py), float32, 32 sentences of 40 words, k in {2, 10}: projective dependency
  trees and spans against torch-struct's ``topk`` on the same device, the scores checked against the CPU's
  compiled k best (float64) first.

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


def timed_rounds(fns: dict, device, repeats, min_sample_s: float = 0.01) -> dict:
    """Median seconds per call of each callable of ``fns`` over ``repeats`` rounds that call every one, in an
    order rotated each round: a variant timed alone right after its warm-up ran slower than the same
    launch shape timed later (the 2026-11-27 H100 runs, docs/devices.md), so alternation keeps the
    clock's and the allocator's drift from landing on one variant. Each sample runs a callable back to back
    for at least ``min_sample_s`` (the count from one timed call): single sub-millisecond calls between two
    synchronisations put two identical launches (the default decode and fused-rows-b16-w4-s) far apart
    (docs/devices.md, "H200, 2026-12-04")."""
    names = list(fns)
    inner = {}
    for name in names:
        sync(device)
        t0 = time.perf_counter()
        fns[name]()
        sync(device)
        inner[name] = max(1, min(1000, int(min_sample_s / max(time.perf_counter() - t0, 1e-7)) + 1))
    times = {k: [] for k in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                fns[name]()
            sync(device)
            times[name].append((time.perf_counter() - t0) / inner[name])
    return {k: statistics.median(v) for k, v in times.items()}


def decoder_setting(name):
    """Select the CUDA Viterbi of every store call (chain/padded.py reads SSVM_CUDA_VITERBI)."""
    os.environ["SSVM_CUDA_VITERBI"] = name


def gap_pass_figures(task, device, repeats, decoders):
    """Exact gap pass on the whole training set; ``gap_pass_ms`` is the default decoder's, ``by_decoder``
    every decoder's."""
    out = {}
    for dtype in (torch.float64, torch.float32):
        store = task.store(1e-3, device=device, dtype=dtype, kernels="torch")
        def with_decoder(name):
            def run():
                decoder_setting(name)
                store.gap_pass()
            return run
        fns = {name: with_decoder(name) for name in decoders}
        for fn in fns.values():
            fn()                                                 # warm-up (and Triton's compile)
        row = {name: 1e3 * sec for name, sec in timed_rounds(fns, device, repeats).items()}
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


def decode_figures(task, device, repeats, batches, compile_batches, sweep_batches=()):
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
            variants["fused-tile"] = functools.partial(viterbi_fused, variant="tile")
            variants["fused-rows"] = functools.partial(viterbi_fused, variant="rows")
            variants["fused-transposed"] = functools.partial(viterbi_fused, variant="transposed")
            # the default with its chains taken in batch order (SORT_FROM_B sorts a call's chains from 2^16 on)
            variants["fused-unsorted"] = functools.partial(viterbi_fused, sort=False)
            if B in sweep_batches:                               # the kernels' launch shape, measured
                # the default (ROWS_BLOCK_B / ROWS_WARPS, rows 16/4 from the 2026-11-27 H100 run), its best
                # neighbours there (rows 16/2, 32/4, 64/4 and tile 4/4 lost everywhere), the rows loop
                # unrolled ("-u") and the transposed tile, neither measured yet; all sorted by length ("-s")
                for variant, bb, warps, unroll in (("tile", 8, 8, False), ("rows", 8, 4, False),
                                                   ("rows", 16, 4, False), ("rows", 8, 4, True), ("rows", 16, 4, True),
                                                   ("transposed", 4, 4, False), ("transposed", 8, 4, False),
                                                   ("transposed", 16, 8, False)):
                    variants[f"fused-{variant}{'-u' if unroll else ''}-b{bb}-w{warps}-s"] = functools.partial(
                        viterbi_fused, variant=variant, block_b=bb, num_warps=warps, unroll=unroll, sort=True)
        first, last, trans = (torch.randn(*s, generator=gen).to(device) for s in ((K,), (K,), (K, K)))
        row, ready = {}, {}
        ref = None
        for name, fn in variants.items():
            try:
                if name == "compiled":                           # CUDA graphs reuse their output buffers
                    fn = graph_step(fn)
                labels = fn(unary, lengths, first, last, trans)[0].clone()   # warm-up / compile / capture
                if ref is None:
                    ref = labels
                row[name] = {"same_labels_as_loop": bool(torch.equal(labels, ref))}
                ready[name] = functools.partial(fn, unary, lengths, first, last, trans)
            except Exception as e:                               # noqa: BLE001
                row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        for name, sec in timed_rounds(ready, device, repeats).items():
            row[name].update({"ms": 1e3 * sec, "words_per_s": B / sec, "tokens_per_s": float(lengths.sum()) / sec})
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


def with_env(fn, name: str, value: str):
    """``fn`` run with the environment variable ``name`` set to ``value`` (restored after): the torch paths that
    the Triton kernels replace on CUDA (``SSVM_CUDA_EISNER=loop``, ``SSVM_CUDA_MATRIX_TREE=torch``)."""
    def run():
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn()
        finally:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
    return run


def timed_adaptive(fn, device, repeats, budget_s=3.0):
    """Median seconds of ``fn`` over up to ``repeats`` calls after one warm-up, fewer where one call
    takes long (pytorch-crf's decode reads every back-pointer to the host, one sync each)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - t0
    return timed(fn, device, max(1, min(repeats, int(budget_s / max(first, 1e-9)))))


# (B, T, K, padded): padded rows have lengths drawn uniformly from 1..T (prefix masks, as a padded batch of
# sentences), the key "<B>_<T>_<K>_padded"; the others full masks
LAYER_SHAPES = ((64, 50, 9, False), (512, 50, 9, False), (512, 50, 9, True), (4096, 50, 9, False),
                (512, 50, 45, False))


def layer_figures(device, repeats, shapes=LAYER_SHAPES):
    """LinearChain vs pytorch-crf (same parameters, same float32 inputs, same masks): milliseconds per
    decode, per loss + backward; the results are checked equal (paths, NLL) before timing."""
    from torchcrf import CRF
    from ssvm_torch.nn import LinearChain
    out = {}
    for B, T, K, padded in shapes:
        g = torch.Generator().manual_seed(B + K)
        E = torch.randn(B, T, K, generator=g).to(device)
        tags = torch.randint(K, (B, T), generator=g).to(device)
        lengths = torch.randint(1, T + 1, (B,), generator=g) if padded else torch.full((B,), T)
        mask = (torch.arange(T)[None, :] < lengths[:, None]).to(device)
        ref = CRF(K, batch_first=True).to(device)
        ours = {(loss, kern): LinearChain(K, batch_first=True, loss=loss, kernels=kern).to(device)
                for loss in ("hinge", "crf") for kern in ("auto", "torch")}
        for lay in ours.values():
            lay.load_state_dict(ref.state_dict())
        Eg = E.clone().requires_grad_()

        def step(loss_fn):
            def run():
                Eg.grad = None
                loss_fn().backward()
            return run
        same_paths = ([[y for y in path if y >= 0] for path in ours["hinge", "auto"].decode(E, mask).cpu().tolist()]
                      == ref.decode(E, mask))
        with torch.no_grad():
            nll_gap = float((ours["crf", "auto"](E, tags, mask) + ref(E, tags, mask)).abs() / B)
        ms = lambda fn: 1e3 * timed_adaptive(fn, device, repeats)          # noqa: E731
        row = {"decode_ms": {"ours": ms(lambda: ours["hinge", "auto"].decode(E, mask)),
                             "ours_torch": ms(lambda: ours["hinge", "torch"].decode(E, mask)),
                             "pytorch_crf": ms(lambda: ref.decode(E, mask))},
               "hinge_backward_ms": {"ours": ms(step(lambda: ours["hinge", "auto"](Eg, tags, mask))),
                                     "ours_torch": ms(step(lambda: ours["hinge", "torch"](Eg, tags, mask))),
                                     "pytorch_crf_nll": ms(step(lambda: -ref(Eg, tags, mask)))},
               "crf_backward_ms": {"ours": ms(step(lambda: ours["crf", "auto"](Eg, tags, mask))),
                                   "ours_torch": ms(step(lambda: ours["crf", "torch"](Eg, tags, mask))),
                                   "pytorch_crf": ms(step(lambda: -ref(Eg, tags, mask)))},
               "same_paths_as_pytorch_crf": same_paths, "nll_abs_diff_per_row": nll_gap}
        for key in ("decode_ms", "hinge_backward_ms", "crf_backward_ms"):
            theirs = row[key]["pytorch_crf_nll" if key == "hinge_backward_ms" else "pytorch_crf"]
            row[key]["speedup"] = theirs / row[key]["ours"]
        out[f"{B}_{T}_{K}" + ("_padded" if padded else "")] = row
        print(f"layer B={B} T={T} K={K}{' padded' if padded else ''}: " + ", ".join(f"{k} {v['ours']:.3f} ms (x{v['speedup']:.1f}, torch loop "
                                                       f"{v['ours_torch']:.3f})" for k, v in row.items()
                                                       if isinstance(v, dict))
              + f", same paths {same_paths}, |NLL diff| {nll_gap:.2e}", flush=True)
    return out


TREE_SHAPES = ((256, 40), (256, 100))


def second_order_figures(S, lengths, g, device, ms, torch_loop) -> dict:
    """The second-order (adjacent-sibling) operations on ``device`` against SuPar 1.1.4's Dependency2oCRF
    (the best tree; log Z + backward of both score tensors), and the torch recursions the Triton kernels
    replace; the two decoders' trees compared. {"supar": "not installed"} without SuPar."""
    try:
        from supar.structs import Dependency2oCRF
    except ImportError:
        return {"supar": "not installed"}
    from ssvm_torch.trees import dependency_decode, dependency_log_partition
    B, N, _ = S.shape
    SB = torch.randn(B, N, N, N, generator=g).to(device)

    def ours_logz():
        x, y = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
        dependency_log_partition(x, lengths=lengths, sib_scores=y).sum().backward()

    def supar_logz():
        x, y = S.clone().requires_grad_(True), SB.clone().requires_grad_(True)
        Dependency2oCRF((x, y), lengths).log_partition.sum().backward()

    decode = lambda: dependency_decode(S, lengths=lengths, sib_scores=SB)          # noqa: E731
    agree = bool(torch.equal(decode().clamp(min=0), Dependency2oCRF((S, SB), lengths).argmax))
    row = {"decode_ms": {"ours": ms(decode), "supar": ms(lambda: Dependency2oCRF((S, SB), lengths).argmax),
                         "ours_torch": torch_loop(decode)},
           "logz_backward_ms": {"ours": ms(ours_logz), "supar": ms(supar_logz), "ours_torch": torch_loop(ours_logz)},
           "decoders_agree": agree}
    for v in row.values():
        if isinstance(v, dict):
            v["speedup"] = v["supar"] / v["ours"]
    return row


def tree_figures(device, repeats, shapes=TREE_SHAPES):
    """Milliseconds of the tree operations against torch-struct and the CPU reference (module docstring),
    the two decoders checked to agree before timing."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_trees import patch_torch_struct, supar_style_mst, to_torch_struct
    from ssvm_torch.trees import dependency_decode, dependency_log_partition
    ts = patch_torch_struct()
    out = {}
    for B, n in shapes:
        g = torch.Generator().manual_seed(B + n)
        S = torch.randn(B, n + 1, n + 1, generator=g).to(device)
        T = to_torch_struct(S)
        lengths = torch.full((B,), n, device=device)
        host = S.double().cpu().numpy()

        def ours_logz():
            x = S.clone().requires_grad_(True)
            dependency_log_partition(x, lengths=lengths).sum().backward()

        def ts_logz():
            x = T.clone().requires_grad_(True)
            ts.DependencyCRF(x, multiroot=False).partition.sum().backward()

        def ours_nonproj():
            x = S.clone().requires_grad_(True)
            dependency_log_partition(x, lengths=lengths, projective=False).sum().backward()

        def ours_nonproj64():                    # float64 scores: the float64 path (trees/matrix_tree.py)
            x = S.double().requires_grad_(True)
            dependency_log_partition(x, lengths=lengths, projective=False).sum().backward()

        def ts_nonproj():
            d = ts.NonProjectiveDependencyCRF(T.clone(), multiroot=False)
            d.partition
            d.marginals
        sub = min(B, 32)
        ours_np = dependency_decode(S.double(), lengths=lengths, projective=False)[:sub].cpu().numpy()
        ref = np.stack([supar_style_mst(host[b], n) for b in range(sub)])
        ms = lambda fn: 1e3 * timed_adaptive(fn, device, repeats)          # noqa: E731
        cle = 1e3 * timed(lambda: [supar_style_mst(host[b], n) for b in range(sub)], torch.device("cpu"), 1) * B / sub
        torch_loop = lambda fn: ms(with_env(fn, "SSVM_CUDA_EISNER", "loop"))       # noqa: E731 the torch recursions
        torch_path = lambda fn: ms(with_env(fn, "SSVM_CUDA_MATRIX_TREE", "torch"))  # noqa: E731 matrix-tree's torch
        decode = lambda: dependency_decode(S, lengths=lengths)          # noqa: E731
        row = {"proj_decode_ms": {"ours": ms(decode),
                                  "torch_struct": ms(lambda: ts.DependencyCRF(T.clone(), multiroot=False).argmax),
                                  "ours_torch": torch_loop(decode)},
               "proj_logz_backward_ms": {"ours": ms(ours_logz), "torch_struct": ms(ts_logz),
                                         "ours_torch": torch_loop(ours_logz)},
               "nonproj_marginals_ms": {"ours": ms(ours_nonproj), "torch_struct": ms(ts_nonproj),
                                        "ours_float64": ms(ours_nonproj64), "ours_torch_path": torch_path(ours_nonproj)},
               "nonproj_decode_ms": {"ours": ms(lambda: dependency_decode(S, lengths=lengths, projective=False)),
                                     "cpu_cle": cle},
               "nonproj_decoders_agree": bool((ours_np[:, 1:] == ref[:, 1:]).all())}
        for v in row.values():
            if isinstance(v, dict):
                other = next(k for k in v if k not in ("ours", "ours_torch"))
                v["speedup"] = v[other] / v["ours"]
        row["second_order"] = second_order_figures(S, lengths, g, device, ms, torch_loop)
        out[f"{B}_{n}"] = row
        print(f"trees B={B} n={n}: " + ", ".join(f"{k} {v['ours']:.2f} ms (x{v['speedup']:.1f})" for k, v in row.items()
                                              if isinstance(v, dict) and "ours" in v), flush=True)
        so = row["second_order"]
        if "decode_ms" in so:
            print(f"trees B={B} n={n} second order: decode {so['decode_ms']['ours']:.2f} ms (x{so['decode_ms']['speedup']:.1f} "
                  f"SuPar), log Z + backward {so['logz_backward_ms']['ours']:.2f} ms "
                  f"(x{so['logz_backward_ms']['speedup']:.1f}), trees agree {so['decoders_agree']}", flush=True)
    return out


SPAN_SHAPES = ((256, 40), (64, 100))
KBEST_POINTS = ((32, 40, 2), (32, 40, 10))


def kbest_figures(device, repeats, points=KBEST_POINTS):
    """Milliseconds of the k best trees on ``device`` against torch-struct's topk there; the device's k scores
    against the CPU compiled k best in float64 (module docstring)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_spans import inclusive
    from bench_trees import patch_torch_struct, to_torch_struct
    from ssvm_torch.spans import span_decode
    from ssvm_torch.trees import dependency_decode
    ts = patch_torch_struct()
    out = {}
    for B, n, k in points:
        g = torch.Generator().manual_seed(B + n + k)
        S, P = (torch.randn(B, n + 1, n + 1, generator=g) for _ in range(2))
        dev_S, dev_P = S.to(device), P.to(device)
        T, I = to_torch_struct(dev_S), inclusive(P).to(device)
        diff = {"projective": float((dependency_decode(dev_S.double(), nbest=k, return_scores=True)[1].cpu()
                                     - dependency_decode(S.double(), nbest=k, return_scores=True)[1]).abs().max()),
                "spans": float((span_decode(dev_P.double(), nbest=k, return_scores=True)[1].cpu()
                                - span_decode(P.double(), nbest=k, return_scores=True)[1]).abs().max())}
        ms = lambda fn: 1e3 * timed_adaptive(fn, device, repeats)          # noqa: E731
        row = {"projective_ms": {"ours": ms(lambda: dependency_decode(dev_S, nbest=k)),
                                 "torch_struct": ms(lambda: ts.DependencyCRF(T.clone().requires_grad_(True),
                                                                              multiroot=False).topk(k))},
               "spans_ms": {"ours": ms(lambda: span_decode(dev_P, nbest=k)),
                            "torch_struct": ms(lambda: ts.TreeCRF(I.clone().requires_grad_(True)).topk(k))},
               "max_score_difference_cpu_float64": diff}
        for v in row.values():
            if "ours" in v:
                v["speedup"] = v["torch_struct"] / v["ours"]
        out[f"{B}_{n}_{k}"] = row
        print(f"kbest B={B} n={n} k={k}: projective {row['projective_ms']['ours']:.1f} ms "
              f"(x{row['projective_ms']['speedup']:.1f} torch-struct), spans {row['spans_ms']['ours']:.1f} ms "
              f"(x{row['spans_ms']['speedup']:.1f}); |score - CPU| {max(diff.values()):.1e}", flush=True)
    return out


def span_figures(device, repeats, shapes=SPAN_SHAPES):
    """Milliseconds of the constituency-tree operations (ssvm_torch.spans: the torch CKY, what CUDA runs) against
    SuPar's ConstituencyCRF and torch-struct's TreeCRF on the same device, float32: log Z + backward and the
    best tree, the best trees' scores compared first."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_spans import inclusive
    from bench_trees import patch_torch_struct
    from supar.structs import ConstituencyCRF
    from ssvm_torch.spans import span_decode, span_log_partition, span_score
    ts = patch_torch_struct()
    out = {}
    for B, n in shapes:
        g = torch.Generator().manual_seed(B + n)
        S = torch.randn(B, n + 1, n + 1, generator=g).to(device)
        T = inclusive(S.cpu()).to(device)
        lengths = torch.full((B,), n, device=device)

        def ours_logz():
            x = S.clone().requires_grad_(True)
            span_log_partition(x, lengths=lengths).sum().backward()

        def supar_logz():
            x = S.clone().requires_grad_(True)
            ConstituencyCRF(x, lengths).log_partition.sum().backward()

        def ts_logz():
            x = T.clone().requires_grad_(True)
            ts.TreeCRF(x, lengths=lengths).partition.sum().backward()
        best = span_score(S.double(), span_decode(S.double(), lengths=lengths), lengths=lengths)
        ref = ConstituencyCRF(S.double(), lengths).max.detach()
        ms = lambda fn: 1e3 * timed_adaptive(fn, device, repeats)          # noqa: E731
        row = {"logz_backward_ms": {"ours": ms(ours_logz), "supar": ms(supar_logz), "torch_struct": ms(ts_logz)},
               "decode_ms": {"ours": ms(lambda: span_decode(S, lengths=lengths)),
                             "supar": ms(lambda: ConstituencyCRF(S, lengths).argmax),
                             "torch_struct": ms(lambda: ts.TreeCRF(T.clone().requires_grad_(True),
                                                                   lengths=lengths).argmax)},
               "max_best_score_difference_supar_float64": float((best - ref).abs().max())}
        for v in row.values():
            if isinstance(v, dict):
                v["speedup_supar"], v["speedup_torch_struct"] = v["supar"] / v["ours"], v["torch_struct"] / v["ours"]
        out[f"{B}_{n}"] = row
        print(f"spans B={B} n={n}: " + ", ".join(f"{k} {v['ours']:.2f} ms (x{v['speedup_supar']:.1f} SuPar, "
                                              f"x{v['speedup_torch_struct']:.1f} torch-struct)"
                                              for k, v in row.items() if isinstance(v, dict)), flush=True)
    return out



def span_ssvm_figures(device, repeats, train_size):
    """The constituency SSVM's store on the device (``ud-ewt-spans``, the first ``train_size`` training sentences,
    kernels="torch": the torch CKY): one exact gap pass and one BCFW block step (milliseconds, float64 and float32),
    the CPU's compiled store beside them for the ratio."""
    from ssvm_torch.tasks import load_task
    problem = load_task("ud-ewt-spans", train_size=train_size)
    blocks = list(range(min(200, problem.n_train)))
    out = {"sentences": problem.n_train}

    def figures(store):
        def steps():
            for i in blocks:
                corner = store.fw_corner(i)
                if corner.sqnorm > 0 and corner.gap > 0:
                    store.fw_move(i, corner, min(1.0, corner.gap / (store.lam * corner.sqnorm)))
        steps()                                                   # warm-up, and a point away from w = 0
        dev = store.w.device
        return {"gap_pass_ms": 1e3 * timed_adaptive(store.gap_pass, dev, repeats),
                "step_ms": 1e3 * timed_adaptive(steps, dev, max(1, repeats // 2)) / len(blocks)}
    out["cpu_compiled_float64"] = figures(problem.store(1e-3))
    for dtype in (torch.float64, torch.float32):
        out[f"{device.type}_torch_{str(dtype).split('.')[1]}"] = figures(
            problem.store(1e-3, device=device, dtype=dtype, kernels="torch"))
    print("span SSVM (ms): " + ", ".join(f"{k} gap pass {v['gap_pass_ms']:.0f}, step {v['step_ms']:.2f}"
                                          for k, v in out.items() if isinstance(v, dict)), flush=True)
    return out

def sibling_ssvm_figures(device, repeats, train_size, dev_size):
    """The second-order dependency SSVM's model on the device (``ud-ewt --trees second-order``; its torch sibling
    scores and the device's second-order Eisner), float64: a few BCFW passes on the CPU's compiled store over the
    first ``train_size`` training sentences, then the first ``dev_size`` dev sentences decoded on the device and
    on the CPU (milliseconds; the share of heads that agree, 1.0 but for ties)."""
    from ssvm_torch.solvers import SolverConfig, make_solver
    from ssvm_torch.tasks import load_task
    problem = load_task("ud-ewt", trees="second-order", heldout="dev", train_size=train_size)
    store = problem.store(3e-3)
    make_solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=4, gap_check=4, seed=0)).run()
    w = store.w.detach().clone()
    dev = problem.test.subset(torch.arange(min(dev_size, problem.test.n)))
    model = problem.model
    cpu = model.predict_flat(w, dev)
    on_device = dev.to(device)
    torch_model = model.with_kernels("torch")
    heads = torch_model.predict_flat(w.to(device), on_device).cpu()
    out = {"sentences": dev.n, "heads_agree": float((heads == cpu).double().mean()),
           "device_ms": 1e3 * timed_adaptive(lambda: torch_model.predict_flat(w.to(device), on_device), device,
                                             repeats),
           "cpu_compiled_ms": 1e3 * timed_adaptive(lambda: model.predict_flat(w, dev), torch.device("cpu"), repeats),
           "dev_uas_cpu": 100.0 * float((cpu == dev.heads).double().mean())}
    print(f"sibling SSVM decode of {dev.n} dev sentences: {device.type} {out['device_ms']:.0f} ms, CPU compiled "
          f"{out['cpu_compiled_ms']:.0f} ms, heads agree {out['heads_agree']:.4f}", flush=True)
    return out


SECTIONS = ("gap", "decode", "conll", "minibatch", "layer", "trees", "spans", "kbest", "sibling", "alignment",
            "edge_chain", "pcfg")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test of the script)")
    ap.add_argument("--budget", type=float, default=60.0, help="solver seconds per mini-batch run at most")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile decoder (its compile is slow)")
    ap.add_argument("--taus", type=int, nargs="+", default=None,
                    help="mini-batch sizes of the GPU runs (default 64 256 1024 n; 0 = n)")
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

    def section(name, fn):
        """Run one section; an exception is recorded under errors[name] and the next section runs."""
        if name not in args.sections:
            return
        t0 = time.perf_counter()
        try:
            fn()
            res.get("errors", {}).pop(name, None)
        except Exception as e:                   # noqa: BLE001 - a device run must keep the other sections
            import traceback
            traceback.print_exc()
            res.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"[:2000]
        res.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 1)    # the device check's budget
        print(f"section {name}: {res['section_s'][name]} s", flush=True)
        save()

    def gap():
        decoders = (["fused", "fused-tile", "fused-rows", "fused-transposed", "loop"]
                    if device.type == "cuda" and triton is not None
                    else ["loop"])
        res["gap_pass_ocr_large"] = gap_pass_figures(task, device, args.repeats, decoders)
        print("gap pass OCR-large (ms): " + ", ".join(f"{k} {v['by_decoder']}" for k, v in
                                                     res["gap_pass_ocr_large"].items()), flush=True)

    def decode():
        batches = [256, 4096] if quick else [1024, 6251, 65536, 1 << 20]
        res["decode"] = decode_figures(task, device, args.repeats, batches,
                                       compile_batches=set() if args.no_compile else {65536},
                                       sweep_batches=set() if quick else {1024, 6251, 65536, 1 << 20})

    def conll():
        res["conll_memory"] = conll_memory(load_task("conll2000", train_size=200 if quick else None), device)
        print(f"CoNLL-2000 peak GPU memory: {res['conll_memory']['peak_gpu_mb']} MB", flush=True)

    def layer():
        shapes = ((64, 20, 9, False), (64, 20, 9, True), (256, 20, 45, False)) if quick else LAYER_SHAPES
        res["layer"] = layer_figures(device, max(args.repeats, 20), shapes)

    def trees():
        res["trees"] = tree_figures(device, args.repeats, ((8, 12), (8, 20)) if quick else TREE_SHAPES)

    def sibling():                # not in the device check's default sections: EWT's featurization takes minutes
        res["sibling_ssvm"] = sibling_ssvm_figures(device, args.repeats, 100 if quick else 2000, 50 if quick else 500)

    def spans():
        res["spans"] = span_figures(device, args.repeats, ((8, 12), (4, 20)) if quick else SPAN_SHAPES)
        res["span_ssvm"] = span_ssvm_figures(device, args.repeats, 100 if quick else 2000)

    def pcfg():
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_pcfg import device_figures
        res["pcfg"] = device_figures(device, args.repeats, lambda fn: timed_adaptive(fn, device, args.repeats),
                                     ((4, 10, 6, 8),) if quick else ((32, 20, 30, 60), (16, 40, 30, 60)))

    def kbest():
        res["kbest"] = kbest_figures(device, args.repeats, ((4, 10, 3),) if quick else KBEST_POINTS)

    def alignment():
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_alignment import device_figures
        res["alignment"] = device_figures(device, args.repeats, ((4, 32, 32), (2, 64, 48)) if quick else
                                          ((64, 128, 128), (16, 512, 512), (4, 1024, 1024)))

    def edge_chain():
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_edge_chain import device_figures
        res["edge_chain"] = (device_figures(device, args.repeats, ((8, 12, 5), (2, 30, 9))) if quick else
                             device_figures(device, args.repeats))          # its DEVICE_SHAPES

    def minibatch():
        # tau = 1 on the GPU is dozens of kernel launches per block step (docs/devices.md has its figure): no budget for it
        taus = [64] if quick else [64, 256, 1024, task.n_train]
        if args.taus:
            taus = [t or task.n_train for t in args.taus]
        res["minibatch_ocr_large"] = minibatch_figures(task, device, taus, passes=1 if quick else 2000,
                                                       target=0.1, budget_s=args.budget)

    for name, fn in (("layer", layer), ("gap", gap), ("decode", decode), ("conll", conll), ("minibatch", minibatch),
                     ("trees", trees), ("spans", spans), ("kbest", kbest), ("sibling", sibling), ("alignment", alignment),
                     ("edge_chain", edge_chain), ("pcfg", pcfg)):
        section(name, fn)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
