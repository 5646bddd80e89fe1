#!/usr/bin/env bash
# Test suite: creates or reuses .venv, runs ruff (pyflakes rules), then pytest in SSVM_TEST_WORKERS processes
# (pytest-xdist, default 2; 0 = in this process), one test file per process so that each file's tests keep their
# order. Tiers (pyproject's markers): by default the quick tier (neither long nor slow); SSVM_LONG=1 adds the
# long tests (what CI runs: .ci/run); SSVM_SLOW=1 runs every test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
# static check first: unused names and syntax errors fail the run (pyflakes rules)
"$venv/bin/ruff" check --select F,E9 --quiet ssvm_torch tests benchmarks
if [ "${SSVM_SLOW:-0}" = "1" ]; then marks=()
elif [ "${SSVM_LONG:-0}" = "1" ]; then marks=(-m "not slow")
else marks=(-m "not slow and not long"); fi
workers="${SSVM_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then par=(); else par=(-n "$workers" --dist loadfile); fi
exec "$venv/bin/python" -m pytest "${par[@]}" "${marks[@]}" "$@"
