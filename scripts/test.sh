#!/usr/bin/env bash
# Test suite: creates or reuses .venv, runs ruff (pyflakes rules), then pytest (slow tests excluded unless SSVM_SLOW=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
# static check first: unused names and syntax errors fail the run (pyflakes rules)
"$venv/bin/ruff" check --select F,E9 --quiet ssvm_torch tests benchmarks
if [ "${SSVM_SLOW:-0}" = "1" ]; then marks=(); else marks=(-m "not slow"); fi
exec "$venv/bin/python" -m pytest "${marks[@]}" "$@"
