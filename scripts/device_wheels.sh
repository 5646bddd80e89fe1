#!/usr/bin/env bash
# Build .whl/ for scripts/device_check.sh: the project's wheel and the runtime / test packages that the
# GPU machine's image lacks (its image has torch, triton, numba, lightning, scipy, onnx, pytest-xdist, ...;
# see docs/devices.md), for its Python 3.12 on x86-64. pytorch-crf travels in scripts/wheels/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p .whl
rm -f .whl/ssvm_torch-*.whl
py="${PY:-.venv/bin/python}"
$py -m pip wheel -q --no-deps -w .whl .
$py -m pip wheel -q --no-deps -w .whl seqeval==1.2.2            # an sdist only on the registry
# SuPar (the second-order trees' reference: supar.structs needs only nltk, dill and regex beside torch)
$py -m pip download -q --no-deps -d .whl supar==1.1.4 nltk==3.9.1 dill==0.4.0 pysdtw==0.0.5   # pysdtw: the alignment reference
for p in regex==2024.11.6 PyMaxflow==1.3.2 jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 torch-struct==0.5 \
         qpsolvers==4.13.0 daqp==0.11.0 clarabel==0.11.1 python-crfsuite==0.9.12 highspy==1.15.1; do
  $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$p"
done
ls .whl
