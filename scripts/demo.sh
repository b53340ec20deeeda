#!/usr/bin/env bash
# Quick start 1: set everything up, then run the demo model under the native launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
fastdyn run examples/demo_transformer.py
