#!/usr/bin/env bash
# One prepared run on a machine with a CUDA GPU and >= 8 cores (docs/devices.md, "Measured on a GPU"),
# each stage alone on the machine, in this order (STAGES picks some, e.g. STAGES="tests gpu minibatch"
# in a first call and STAGES=distributed in a second):
#   tests        the test suite with CUDA visible (TEST_WORKERS xdist workers, -v: failures named as they happen);
#   gpu          bench_gpu.py: the gap pass, the decoders, CoNLL's GPU memory;
#   minibatch    bench_gpu.py's mini-batch section (MB_BUDGET solver seconds per run);
#   distributed  bench_distributed.py at P = 1, 2, 4, 8 processes;
#   deep         the deep recipes on the GPU for a few epochs (s / epoch).
# On 2026-11-26 (H200): tests ~90% done after 200 s with 12 workers next to the benchmark; gpu ~190 s
# (the compiled decoder's compile included); minibatch 61 s with MB_BUDGET=12; distributed ~150 s
# (CoNLL, then OCR-large cut at P = 4); deep ~80 s. Each stage has its own time limit (*_S).
# Expects the project and the packages the machine lacks as wheels in .whl/ (pip wheel --no-deps -w .whl .),
# writes everything under $OUT (default out/device). Each stage has its own time limit, so a slow
# stage costs its own figures only.
set -uo pipefail
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
# the installed wheel has no datasets: read the checkout's
export SSVM_TORCH_DATA="${SSVM_TORCH_DATA:-$PWD/datasets}"
py="${PY:-python3}"
t_start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t_start )) s] $*" | tee -a "$OUT/stages.log"; }

stamp install
[ "${SKIP_INSTALL:-0}" = "1" ] || $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl >"$OUT/install.log" 2>&1 \
  || { stamp "install into the environment failed, using --target"; \
       $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
         >>"$OUT/install.log" 2>&1 && export PYTHONPATH=/tmp/site; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
  $py -c "import torch, numba, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpu', torch.cuda.is_available(), 'numba', numba.__version__, 'lightning', lightning.__version__)"
  $py -c "import triton; print('triton', triton.__version__)"; } >"$OUT/versions.txt" 2>&1

want() { [[ " ${STAGES:-tests gpu minibatch distributed deep} " == *" $1 "* ]]; }

if want tests; then                    # alone: the whole suite with CUDA visible
  stamp "tests"
  timeout "${TEST_S:-300}" $py -m pytest -n "${TEST_WORKERS:-14}" --dist loadfile -m "not slow" -p no:cacheprovider \
    -v -rfEs --durations=15 --junitxml="$OUT/junit.xml" >"$OUT/pytest.log" 2>&1
  stamp "tests rc=$?: $(grep -c ' PASSED' "$OUT/pytest.log") passed, $(grep -c ' SKIPPED' "$OUT/pytest.log") skipped, \
$(grep -c ' FAILED' "$OUT/pytest.log") failed (-v names each test as it ends: a cut-off run still says which failed)"
  grep -E ' (FAILED|ERROR) ' "$OUT/pytest.log" >>"$OUT/stages.log"
fi

if want gpu; then
  stamp "bench_gpu gap, decode, conll"
  timeout "${GPU_S:-200}" $py benchmarks/bench_gpu.py --sections gap decode conll --out "$OUT/gpu.json" \
    >>"$OUT/bench_gpu.log" 2>&1
  stamp "bench_gpu rc=$?"
fi

if want minibatch; then                # alone: its CPU baseline must not share the cores
  stamp "bench_gpu minibatch"
  timeout "${MB_S:-150}" $py benchmarks/bench_gpu.py --sections minibatch --budget "${MB_BUDGET:-25}" \
    --out "$OUT/gpu.json" >>"$OUT/bench_gpu.log" 2>&1
  stamp "minibatch rc=$?"
fi

if want distributed; then
  stamp "bench_distributed P = 1 2 4 8"
  timeout "${DIST_S:-150}" $py benchmarks/bench_distributed.py --datasets conll2000 ocr-large --procs 1 2 4 8 \
    --passes 4 --out "$OUT/distributed.json" >"$OUT/distributed.log" 2>&1
  stamp "distributed rc=$?"
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
stamp done
