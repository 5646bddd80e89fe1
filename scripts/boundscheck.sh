#!/usr/bin/env bash
# What CI tests (the quick and long tiers) with every numba kernel compiled with bounds checks (docs/design.md,
# "Tests"): an index out of bounds becomes an IndexError in the test that made it. The checked kernels are cached
# in a folder of their own ($SSVM_BOUNDSCHECK_CACHE, default ~/.cache/ssvm_torch/numba-boundscheck), never in the
# package's __pycache__.
# Extra arguments go to pytest (e.g. tests/test_ud_data.py).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export NUMBA_BOUNDSCHECK=1
export SSVM_LONG="${SSVM_LONG:-1}"
export NUMBA_CACHE_DIR="${SSVM_BOUNDSCHECK_CACHE:-$HOME/.cache/ssvm_torch/numba-boundscheck}"
mkdir -p "$NUMBA_CACHE_DIR"
exec bash "$root/scripts/test.sh" "$@"
