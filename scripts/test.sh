#!/usr/bin/env bash
# Test suite: creates or reuses .venv, runs ruff (pyflakes rules), then pytest (slow tests excluded unless SSVM_SLOW=1)
# in SSVM_TEST_WORKERS processes (pytest-xdist, default 2; 0 = in this process), one test file per
# process so that each file's tests keep their order.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
# static check first: unused names and syntax errors fail the run (pyflakes rules)
"$venv/bin/ruff" check --select F,E9 --quiet ssvm_torch tests benchmarks
if [ "${SSVM_SLOW:-0}" = "1" ]; then marks=(); else marks=(-m "not slow"); fi
workers="${SSVM_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then par=(); else par=(-n "$workers" --dist loadfile); fi
exec "$venv/bin/python" -m pytest "${par[@]}" "${marks[@]}" "$@"
