#!/usr/bin/env bash
# Extra-P vs Joulecast model search: regenerates tests/fixtures/extrap/*.txt
# and docs/extrap-comparison.md. Rerunnable; see tests/extrap/README.md.
#
#   EXTRAP_VENV=DIR          venv to create or reuse (default: target/extrap-venv, git-ignored)
#   PYTHON=python3.11        interpreter that creates the venv (default: python3)
#   JOULECAST_SKIP_BUILD=1   skip `cargo build --release` (use the binary as it is)
#   EXTRAP_REPEAT, JOULECAST_REPEAT   timing repeats (defaults in compare.py)
# Extra arguments go to compare.py (e.g. --strict, --check-fixtures).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${EXTRAP_VENV:-$repo/target/extrap-venv}"
requirements="$repo/tests/extrap/requirements.txt"
extrap_version="$(sed -n 's/^extrap==//p' "$requirements")"

if [ ! -x "$venv/bin/python" ]; then
    echo "compare.sh: creating venv $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import sys, extrap; sys.exit(extrap.__version__ != '$extrap_version')" 2>/dev/null; then
    echo "compare.sh: installing Extra-P $extrap_version into $venv" >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$requirements"
fi

if [ "${JOULECAST_SKIP_BUILD:-0}" != 1 ]; then
    (cd "$repo" && cargo build --release)
fi

exec "$venv/bin/python" "$repo/tests/extrap/compare.py" --repo "$repo" "$@"
