#!/usr/bin/env bash
# Test suite: creates or reuses .venv, then runs pytest (slow tests excluded unless SSVM_SLOW=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
if [ "${SSVM_SLOW:-0}" = "1" ]; then marks=(); else marks=(-m "not slow"); fi
exec "$venv/bin/python" -m pytest "${marks[@]}" "$@"
