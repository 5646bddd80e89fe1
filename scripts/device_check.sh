#!/usr/bin/env bash
# The prepared device check on a machine with a CUDA GPU and >= 8 cores (docs/devices.md, "Measured on a
# GPU"), each stage alone on the machine, in this order. Two runs, 14 minutes together (each stage's limit
# *_S, the install ~25 s per run; a machine's start ~30 s of the lease):
#   run 1: STAGES="tests gpu"                  <= 25 + 330 + 200 = 555 s (2026-12-04 H200, second lease: the suite
#          ran to its end in 319 s, 1,939 tests; first lease: the gpu sections 187 s: layer 40, gap 6, decode 27,
#          conll 7, trees 51 (65 in the second), spans 29, kbest 27)
#          Where only the matrix-tree and the rounds are left to show (issue 74 after 2026-12-04): two runs, the
#          second at once (the machine stays warm 30 s):
#          run A: STAGES="matrix_tree gpu contention" GPU_SECTIONS="trees alignment edge_chain pcfg"
#                 GPU_JSON_BASE=benchmarks/results/gpu.json
#                 ~ 25 + 35 + 85 + 75 = 220 s (pcfg: the PCFG's torch path against torch-struct's SentCFG on the
#                 device, two shapes, ~10 s; alignment: the wavefront against pysdtw's CUDA soft-DTW, ~10 s;
#                 edge_chain: the edge-potential chain's torch scan against torch-struct's LinearChainCRF, ~10 s) (matrix_tree with its linear-algebra backends' sweep; contention:
#                 what a shared step costs beside the other ranks, by placement, with and without its mirror)
#          run B: STAGES=rounds ROUNDS_ARGS=--pin-rebuild-too ROUNDS_S=420  ~ 25 + 400 s (P = 2, 8 as the defaults,
#                 then pinned with rebuilt mirrors, then the one-process baseline; warm-ups 45 s, each command's
#                 start ~20 s)
#          `matrix_tree` in STAGES adds the matrix-tree marginals side by side with an earlier package copied to
#          .before/ssvm_torch_before by `bash scripts/device_before.sh C` (MT_COMMIT=C; carry .before), ~10 s
#   run 2: STAGES="rounds"                     <= 20 + 250 = 270 s (whole commands, records included: one process
#          ~100 s, P = 2 ~90 s on the 2-core machine; P = 2 and 8 first, the one-process baseline last, measured
#          already on the 2026-11-27 second lease: 74.3 s; `distributed` too when time is left: + 120 s)
#          (rounds: CoNLL-2000's time to a certified gap with the shared exchange at P = 1, 2, 8, the fastest
#          exchange for BCFW and issue 56's 16-core figure; distributed: the columns exchange's mini-batch
#          passes; the minibatch stage, measured twice already, only when time is left, with
#          GPU_JSON_BASE=benchmarks/results/gpu.json: run 1's gpu.json copied there first, since $OUT starts
#          empty on every run and the sections are added to that file)
# Each run leaves at most 7 files in $OUT (the device tool returns 8).
#   tests        the test suite with CUDA visible (TEST_WORKERS xdist workers, one numba thread each; -v names
#                each test as it ends, failures.log keeps each failure's traceback as it happens);
#   gpu          bench_gpu.py's GPU_SECTIONS (default: LinearChain vs pytorch-crf, the gap pass, the decoders
#                with their launch-shape sweep, CoNLL's GPU memory, the dependency-tree kernels against
#                torch-struct and a CPU Chu-Liu-Edmonds, last the constituency CKY against SuPar and torch-struct
#                and the constituency SSVM's store (gap pass, block step; ud-ewt-spans, 2,000 sentences), then the k
#                best trees (Lawler over the device's oracles) against torch-struct's topk and the CPU's scores;
#                GPU_ARGS="--no-compile" skips the
#                torch.compile decoder, whose compile alone takes ~a minute; GPU_SECTIONS=sibling, only when named:
#                the second-order SSVM's model decoding EWT dev on the device against the CPU's compiled path,
#                after EWT's featurization, a few minutes on a fresh machine);
#   minibatch    bench_gpu.py's mini-batch section: CPU numba BCFW and GPU tau in MB_TAUS, MB_BUDGET solver s each;
#   distributed  bench_distributed.py, CoNLL-2000 at P = 1, 2, 8 processes (DIST_PROCS), exchange columns;
#   rounds       (only when named) time to a certified gap, one process against P = 2 and 8 ranks of the exchange
#                ROUNDS_EXCHANGE (default shared; bench_rounds_2core.py --procs 2 8, ROUNDS_DATASETS, default
#                conll2000, one rep): one process ~80 s to CoNLL's threshold on the 2-core machine, P = 2 ~53 s;
#                ROUNDS_ARGS=--fixed-too adds P = 2 and 8 with fixed shares of a round's steps (the exchange before
#                round sharing, side by side; ~+130 s: ROUNDS_S=400); --pin-too adds them with each rank pinned to
#                a core of its own (SSVM_SHARED_PIN=compact, ssvm_torch/distributed/affinity.py; ~+75 s);
#                --rebuild-too with the mirrors rebuilt at every check (SSVM_SHARED_MIRROR=rebuild), --pin-rebuild-too
#                pinned and rebuilt (~+75 s each);
#                --one-rank-too adds one process as a rank under torchrun (its profile: a step's cost with no
#                other rank, the baseline of the P-rank steps' cost; ~+80 s);
#   contention   (only when named) bench_step_contention.py: the shared exchange's BCFW step (CoNLL-2000) timed
#                alone and beside P - 1 = 1, 7 others, on one shared w or each rank its own copy, unpinned, pinned
#                compact, on sibling hardware threads, spread over the L3 domains, with and without the mirror
#                (~75 s): which of sharing w, the mirror's writes, the hardware threads or the domains makes a step
#                cost 62.6 us at P = 2 against ~27 alone;
#   deep         (only when named) the deep recipes on the GPU for a few epochs (s / epoch), ~80 s;
#   parser       (only when named) whole parser runs on the GPU, archived (issue 74's item 4), PARSER_S (480 s):
#                STAGES=parser PARSER_HEADS=words_tagfeed_2o_softmax_margin PARSER_SEEDS="0 1 2" bash scripts/device_check.sh,
#                then here: tar -xf parser_runs.tar && cp -r parser/archive/* benchmarks/results/ud_deep_runs/;
#                a recipe with options: PARSER_SCRIPT=train_runs.sh PARSER_PREFIX=ema_noise3_
#                PARSER_EXTRA="--model.tag_noise 0.03 --model.ema_decay 0.999" (train_runs.sh's PREFIX / EXTRA)
# Measured: H200 (first run) tests ~90% after 200 s with 12 workers next to the benchmark, distributed ~150 s
# for CoNLL and part of OCR-large; H100 (second run) tests 81% after 235 s with 15 workers (numba
# oversubscribed: since fixed), gpu 74 s (layer, gap, decode + sweep, conll, no compile), minibatch 34 s with
# MB_BUDGET=12 (neither run reached gap 0.1: the default budget is 40 s).
# Expects the project and the packages the machine lacks as wheels in .whl/ (scripts/device_wheels.sh builds it;
# pytorch-crf, the layer benchmark's reference, is kept in scripts/wheels/), writes everything under $OUT
# (default out/device); the test counts go into $OUT/gpu.json ("cuda_tests"). A slow stage costs its own
# figures only.
set -uo pipefail
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
if [ -n "${GPU_JSON_BASE:-}" ] && [ ! -f "$OUT/gpu.json" ]; then cp "$GPU_JSON_BASE" "$OUT/gpu.json"; fi
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
ncpu=$(OMP_NUM_THREADS= nproc)              # nproc obeys OMP_NUM_THREADS
# the installed wheel has no datasets: read the checkout's
export SSVM_TORCH_DATA="${SSVM_TORCH_DATA:-$PWD/datasets}"
py="${PY:-python3}"
t_start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t_start )) s] $*" | tee -a "$OUT/stages.log"; }

stamp install
# the carried wheels that the image lacks, and always the project: a carried package the image already has
# would replace the image's version (2026-12-04 H200: regex 2024.11.6 for supar under the image's transformers,
# which needs >= 2025.10.22 and broke `import lightning` through torchmetrics: 17 failed)
mapfile -t wheels < <($py - .whl/*.whl scripts/wheels/*.whl <<'PY'
import importlib.metadata as md, re, sys
for path in sys.argv[1:]:
    name = re.sub(r"[-_.]+", "-", path.rsplit("/", 1)[-1].split("-")[0]).lower()
    try:
        have = name != "ssvm-torch" and md.version(name)
    except md.PackageNotFoundError:
        have = False
    print(path) if not have else print(f"skip {path}: the image has {name} {have}", file=sys.stderr)
PY
)
[ "${SKIP_INSTALL:-0}" = "1" ] || $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "${wheels[@]}" \
  >"$OUT/install.log" 2>&1 \
  || { stamp "install into the environment failed, using --target"; \
       $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "${wheels[@]}" \
         >>"$OUT/install.log" 2>&1 && export PYTHONPATH=/tmp/site; }
# the cores' topology beside the GPU: whether the 16 are 8 physical cores with two threads each decides what
# P = 8 ranks contend for (docs/distributed.md, "Measured on 16 cores")
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; echo "cpus $ncpu"
  lscpu 2>/dev/null | grep -E "^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L3 cache|CPU max MHz)"
  lscpu -e=CPU,NODE,SOCKET,CORE,CACHE 2>/dev/null        # which CPUs are one core's threads, which share an L3
  $py -c "import torch, numba, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpu', torch.cuda.is_available(), 'numba', numba.__version__, 'lightning', lightning.__version__)"
  $py -c "import triton; print('triton', triton.__version__)"; } >"$OUT/versions.txt" 2>&1

want() { [[ " ${STAGES:-tests gpu minibatch distributed} " == *" $1 "* ]]; }

if want tests; then                    # alone: the whole suite with CUDA visible
  stamp "tests"
  per_test=""; $py -c "import pytest_timeout" 2>/dev/null && per_test="--timeout ${TEST_ONE_S:-150}"
  # -o addopts=: pyproject's -q would cancel -v, and -v names each test as it ends
  # one numba thread per worker (numba's default, one per core in every worker, oversubscribes the cores);
  # each failure's traceback lands in failures.log as it happens
  NUMBA_NUM_THREADS=1 SSVM_TORCH_FAILURE_LOG="$OUT/failures.log" \
  timeout "${TEST_S:-330}" $py -m pytest -n "${TEST_WORKERS:-14}" --dist loadfile -m "not slow" -p no:cacheprovider \
    -o addopts= $per_test -v -rfEs --durations=15 ${TEST_ARGS:-} >"$OUT/pytest.log" 2>&1
  stamp "tests rc=$?: $(grep -c ' PASSED' "$OUT/pytest.log") passed, $(grep -c ' SKIPPED' "$OUT/pytest.log") skipped, \
$(grep -c -E ' (FAILED|ERROR)' "$OUT/pytest.log") failed (-v names each test as it ends: a cut-off run still says which failed)"
  grep -E ' (FAILED|ERROR) ' "$OUT/pytest.log" >>"$OUT/stages.log"
  # the counts into gpu.json, from the -v lines (a run cut by its limit still counts what ended)
  $py - "$OUT" <<'PY' >>"$OUT/stages.log" 2>&1
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
log = (out / "pytest.log").read_text(errors="replace")
counts = {"passed": len(re.findall(r" PASSED", log)), "failed": len(re.findall(r" (?:FAILED|ERROR)", log)),
          "skipped": len(re.findall(r" SKIPPED", log)), "finished": bool(re.search(r"=+ .* in [0-9.]+s", log))}
counts["failed_tests"] = sorted(set(re.findall(r"\] (?:FAILED|ERROR) (tests/\S+)", log)))[:50]     # xdist's -v lines
gpu = out / "gpu.json"
res = json.loads(gpu.read_text()) if gpu.exists() else {}
res["cuda_tests"] = counts
gpu.write_text(json.dumps(res, indent=1))
print("cuda_tests", counts)
PY
fi

if want matrix_tree; then               # (only when named) issue 74 (3): the matrix-tree marginals, side by side
  stamp "matrix_tree: this checkout, ${MT_BEFORE:-.before} (${MT_COMMIT:-?}) and torch-struct"
  timeout "${MT_S:-90}" $py benchmarks/bench_matrix_tree.py --device cuda --before "${MT_BEFORE:-.before}" \
    --commit "${MT_COMMIT:-unknown}" --out "$OUT/matrix_tree.json" >"$OUT/matrix_tree.log" 2>&1
  stamp "matrix_tree rc=$?"
fi

if want gpu; then
  stamp "bench_gpu ${GPU_SECTIONS:-layer gap decode conll trees spans kbest alignment}"
  timeout "${GPU_S:-200}" $py benchmarks/bench_gpu.py --sections ${GPU_SECTIONS:-layer gap decode conll trees spans kbest alignment} \
    ${GPU_ARGS:---no-compile} --out "$OUT/gpu.json" \
    >>"$OUT/bench_gpu.log" 2>&1
  stamp "bench_gpu rc=$?"
fi

if want minibatch; then                # alone: its CPU baseline must not share the cores
  stamp "bench_gpu minibatch"
  timeout "${MB_S:-100}" $py benchmarks/bench_gpu.py --sections minibatch --budget "${MB_BUDGET:-40}" --taus ${MB_TAUS:-1024} \
    --out "$OUT/gpu.json" >>"$OUT/bench_gpu.log" 2>&1
  stamp "minibatch rc=$?"
fi

if want distributed; then
  stamp "bench_distributed P = ${DIST_PROCS:-1 2 8}"
  # the columns exchange (the default) against one process with the same kernels and the generic store;
  # gather / allreduce were measured on 16 cores before it (docs/distributed.md): DIST_EXCHANGES adds them
  timeout "${DIST_S:-120}" $py benchmarks/bench_distributed.py --datasets conll2000 --procs ${DIST_PROCS:-1 2 8} \
    --exchanges ${DIST_EXCHANGES:-columns} --passes 4 --out "$OUT/distributed.json" >"$OUT/distributed.log" 2>&1
  stamp "distributed rc=$?"
fi

if want contention; then               # (only when named) what a shared step costs beside P - 1 others, by placement
  stamp "contention: one step's cost at P = 1, 2, 8, shared w or private, by placement"
  timeout "${CONTENTION_S:-120}" $py benchmarks/bench_step_contention.py --procs 2 8 ${CONTENTION_ARGS:---mirror both --reps 2 --steps 10000} \
    --out "$OUT/contention.json" >"$OUT/contention.log" 2>&1
  stamp "contention rc=$?"
fi

if want rounds; then
  stamp "rounds: time to gap, P = 1, 2, 8"
  timeout "${ROUNDS_S:-250}" $py benchmarks/bench_rounds_2core.py --exchange "${ROUNDS_EXCHANGE:-shared}" \
    --datasets ${ROUNDS_DATASETS:-conll2000} --reps 1 --procs 2 8 --one-process-last ${ROUNDS_ARGS:-} \
    --out "$OUT/rounds.json" >"$OUT/rounds.log" 2>&1
  stamp "rounds rc=$?"
fi

if want deep; then
  stamp "deep recipes on the GPU"
  for run in "conll_deep_hinge --trainer.max_epochs 2" \
             "ocr_deep_hinge --model.pretrain_epochs 1 --trainer.max_epochs 3" \
             "ocr_deep_alternating --model.pretrain_epochs 1 --trainer.max_epochs 3 --model.bcfw_passes 4"; do
    set -- $run
    name=$1; shift
    timeout "${DEEP_S:-40}" $py -m ssvm_torch.deep fit --config "recipes/$name.yaml" --trainer.accelerator gpu \
      --trainer.devices 1 --trainer.default_root_dir "/tmp/deep_$name" "$@" >"$OUT/deep_$name.log" 2>&1
    stamp "deep $name rc=$?"
  done
fi
if want parser; then
  # (only when named) issue 74 (4): open parser runs trained on the GPU, PARSER_INSTANCES instances of
  # recipes/$PARSER_SCRIPT (ud_deep_all.sh, or partial50_all.sh for the UD partial-annotation runs) sharing
  # HEADS (LOSSES for partial50_all.sh) = PARSER_HEADS and SEEDS = PARSER_SEEDS: recipes/train_runs.sh's locks
  # split the list. Each finished run's four files are archived as on the CPU (config.json's "device" names the
  # GPU), all of them and the logs packed into $OUT/parser_runs.tar (the device returns 8 files). A run not
  # finished by PARSER_S is lost: its checkpoint (65 MB) does not fit the device's 16 MiB file limit. A
  # first-order run took 26-43 epochs and 12.9 s per epoch on the H100 alone; three at a time share the GPU.
  stamp "parser runs on the GPU: ${PARSER_SCRIPT:-ud_deep_all.sh} ${PARSER_HEADS:-words_tagfeed_2o_softmax_margin} seeds ${PARSER_SEEDS:-0 1 2}"
  mkdir -p "$OUT/parser"
  for i in $(seq "${PARSER_INSTANCES:-3}"); do
    # FAMILY / ARCHIVE / PREFIX / EXTRA reach recipes/train_runs.sh named directly (PARSER_SCRIPT=train_runs.sh);
    # ud_deep_all.sh and partial50_all.sh set their own
    PY="$py" RUNS=/tmp/parser_runs ARCHIVE_DIR="$OUT/parser/archive" THREADS="${PARSER_THREADS:-2}" PARTS=ud \
    FAMILY=ud_deep_ ARCHIVE=ud_deep_runs PREFIX="${PARSER_PREFIX:-}" EXTRA="${PARSER_EXTRA:-}" \
    HEADS="${PARSER_HEADS:-words_tagfeed_2o_softmax_margin}" LOSSES="${PARSER_HEADS:-words_tagfeed_2o_softmax_margin}" \
    SEEDS="${PARSER_SEEDS:-0 1 2}" TRAINER_ARGS="--trainer.accelerator gpu --trainer.devices 1" \
      timeout "${PARSER_S:-480}" bash "recipes/${PARSER_SCRIPT:-ud_deep_all.sh}" >"$OUT/parser/instance_$i.log" 2>&1 &
    sleep 5                                    # each instance takes the next unlocked run
  done
  wait
  stamp "parser: archived $(ls "$OUT/parser/archive" 2>/dev/null | tr '\n' ' ')"
  tar -cf "$OUT/parser_runs.tar" -C "$OUT" parser && rm -r "$OUT/parser"
fi
stamp done
