#!/usr/bin/env bash
# Create or reuse the project's virtual environment (.venv) and install the package into it.
# Re-installs only when pyproject.toml or constraints.txt changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SSVM_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[env] creating $venv" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.ssvm-torch-stamp"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[env] installing ssvm-torch[dev] with constraints.txt (torch pinned to the CPU wheel)" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -c "$root/constraints.txt" -e "$root[dev]" >&2
  echo "$want" > "$stamp"
fi
echo "$venv"
