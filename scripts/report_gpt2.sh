#!/usr/bin/env bash
# The GPT-2 report, seen as a user sees it (issue 23): runs tests/python/hf_zoo.py's tiny GPT-2
# (random weights, nothing downloaded) under fastdyn.enable() with a report recording, writes
# the report, and renders it in headless Chromium (scripts/report_screenshot.sh).
#   usage: bash scripts/report_gpt2.sh [out_dir (default /tmp/fastdyn_gpt2_report)]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/fastdyn_gpt2_report}
mkdir -p "$out"
PYTHONPATH=tests/python${PYTHONPATH:+:$PYTHONPATH} python3 - "$out/gpt2_report.html" <<'PY'
import sys
import torch
import fastdyn
import hf_zoo

model, inputs = hf_zoo.build("gpt2")
fastdyn.start_report()
with torch.no_grad():
    expected = model(**inputs).logits
    fastdyn.enable()
    got = model(**inputs).logits
    fastdyn.disable()
torch.testing.assert_close(got, expected)
print(fastdyn.report(sys.argv[1]))
PY
bash scripts/report_screenshot.sh "$out/gpt2_report.html" "$out/top.png" 1400,2400
bash scripts/report_screenshot.sh "$out/gpt2_report.html" "$out/full.png" 1400,16000
