#!/usr/bin/env bash
# The environment of the model suite (bench/model_suite.py): timm and torchvision need a torch
# whose build their C++ operators load beside, which the project's CPU torch 2.13.0 is not (PyPI's
# torchvision is a CUDA build). This makes a venv under .suite/ with the pair this machine's disk
# holds (torch 2.14.1 + torchvision 0.29.1, a CUDA build that runs on the CPU), timm and the
# project's transformers, and builds fastdyn against that torch into .suite/pkg/fastdyn (its own
# build tree; the project's editable build is untouched). Idempotent; a second run only rebuilds.
# Usage: bash scripts/suite_env.sh   then   .suite/venv/bin/python bench/model_suite.py
set -euo pipefail
cd "$(dirname "$0")/.."
S=${FASTDYN_SUITE_DIR:-$PWD/.suite}
mkdir -p "$S"
[ -x "$S/venv/bin/python" ] || python3 -m venv "$S/venv"
PY=$S/venv/bin/python
$PY -m pip install -q --upgrade pip
$PY -m pip install -q -r scripts/suite_requirements.txt
cmake -S . -B "$S/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" \
  -DFASTDYN_BUILD_TESTS=OFF -DFASTDYN_PACKAGE_DIR="$S/pkg/fastdyn" > "$S/configure.log"
cmake --build "$S/build" -j "${FASTDYN_BUILD_JOBS:-2}" --target _C
echo "suite env: $($PY -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__)')"
