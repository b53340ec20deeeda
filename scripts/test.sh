#!/usr/bin/env bash
# Quick start 2: set everything up, then run the whole test suite (GoogleTest via ctest, pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
build_dir=build/$($PY -c 'import sys; print(f"py{sys.version_info.major}{sys.version_info.minor}")')
ctest --test-dir "$build_dir" --output-on-failure -j2
$PY -m pytest tests/python -p no:cacheprovider
