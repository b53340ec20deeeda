#!/usr/bin/env bash
# Installs everything fastdyn needs on a fresh Debian machine and builds it.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v apt-get >/dev/null 2>&1; then
  need=""
  for p in cmake ninja-build g++ libgtest-dev llvm-19-dev libsleef-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
  done
  if [ -n "$need" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need
  fi
fi

# NB: torch==2.13.0 is the CPU build on this machine's disk; a plain `torch` pulls a CUDA build.
$PY -m pip install -q -r requirements.txt
$PY -m pip install -q --no-build-isolation -e .

# Put the native launcher on PATH next to the interpreter.
bindir=$($PY -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
ln -sf "$PWD/python/fastdyn/bin/fastdyn" "$bindir/fastdyn"
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi   # pyenv reaches bin/ through shims
if ! command -v fastdyn >/dev/null 2>&1 && [ -w /usr/local/bin ]; then
  ln -sf "$PWD/python/fastdyn/bin/fastdyn" /usr/local/bin/fastdyn
fi
echo "fastdyn: setup done ($($PY -c 'import torch; print("torch", torch.__version__)'))"

# CPython's regression-test package `test` (tests/python/test_cpython_regrtest.py runs parts of it
# under fastdyn). Debian's system Pythons ship it as libpython3.X-testsuite; other Pythons
# (pyenv, python.org, conda) include it unless built without it, and never see Debian's package.
if ! $PY -c 'import test.test_generators' >/dev/null 2>&1; then
  pyver=$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pyprefix=$($PY -c 'import sys; print(sys.base_prefix)')
  if [ "$pyprefix" = "/usr" ] && command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "libpython$pyver-testsuite" || true
  fi
  if ! $PY -c 'import test.test_generators' >/dev/null 2>&1; then
    echo "WARNING: $PY (Python $pyver, prefix $pyprefix) has no CPython test package: the tests of" >&2
    echo "  tests/python/test_cpython_regrtest.py will fail. A Debian system Python needs" >&2
    echo "  'apt-get install libpython$pyver-testsuite'; a pyenv Python does not see Debian's package:" >&2
    echo "  reinstall it with its test suite ('pyenv install --force <version>')." >&2
  fi
fi
