#!/usr/bin/env bash
# Render a fastdyn HTML report (python/fastdyn/report_html.py) in headless Chromium and save a PNG.
#   usage: bash scripts/report_screenshot.sh report.html out.png [WIDTH,HEIGHT]
# Installs Debian's chromium (apt-get, needs root) when it is missing.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 report.html out.png [WIDTH,HEIGHT (default 1400,2200)]" >&2
  exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1400,2200}
[ -f "$report" ] || { echo "$0: no such file: $1" >&2; exit 2; }
if ! command -v chromium >/dev/null 2>&1; then
  echo "$0: chromium is missing; installing Debian's chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
rm -f "$out"
# Chromium writes the PNG to --screenshot's path; its own chatter (dbus, GPU) goes to stderr.
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$size" --screenshot="$out" "file://$report" 2>/tmp/report_screenshot.$$.log || {
  cat /tmp/report_screenshot.$$.log >&2; rm -f /tmp/report_screenshot.$$.log; exit 1; }
rm -f /tmp/report_screenshot.$$.log
[ -s "$out" ] || { echo "$0: chromium wrote no screenshot to $out" >&2; exit 1; }
echo "$out"
