#!/usr/bin/env bash
# Builds .venv/ with the package (editable) and its test extras. Needs python3 >= 3.11 and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: python3 >= 3.11 is required (found: $("$py" --version 2>&1 || echo none))" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,bench]"
echo "bootstrap: .venv ready ($(.venv/bin/python --version))"
