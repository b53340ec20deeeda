#!/usr/bin/env bash
# Builds fastdyn and runs the whole suite on the accelerator machine (Python 3.12, CUDA torch, no
# LLVM, no internet), writing logs under $OUT. GoogleTest is not installed there: copy Debian's
# sources here first (`cp -r /usr/src/googletest .gtest`, ignored through .git/info/exclude) and
# name `.gtest` in the device call's carry list. CPython's `test` package, missing there too: stage
# it with `python scripts/stage_cpython_tests.py <a local python3.12>` and carry `.cpython-test`.
# Usage there: `bash scripts/device_test.sh`.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/fastdyn-device-out}
mkdir -p "$OUT"
PY=$(command -v python3)
jobs=$(nproc)
bdir=build/$($PY -c 'import sys; print(f"py{sys.version_info.major}{sys.version_info.minor}")')
{ $PY --version; $PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; } 2>&1 | tee "$OUT/versions.log"

gtest_args=()
if [ -d .gtest ]; then
  (cmake -S .gtest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
     -DCMAKE_INSTALL_PREFIX=/tmp/gtest && cmake --build /tmp/gtest-build -j "$jobs" \
     && cmake --install /tmp/gtest-build) > "$OUT/gtest.log" 2>&1 || echo "googletest build failed (see gtest.log)"
  gtest_args=(-DGTest_ROOT=/tmp/gtest)
fi

cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" -DFASTDYN_BUILD_TESTS=ON "${gtest_args[@]}" \
  > "$OUT/build.log" 2>&1 && cmake --build "$bdir" -j "$jobs" >> "$OUT/build.log" 2>&1
build_rc=$?
tail -3 "$OUT/build.log"
echo "build rc=$build_rc"
[ $build_rc -eq 0 ] || exit $build_rc

ctest --test-dir "$bdir" -j "$jobs" > "$OUT/ctest.log" 2>&1
echo "ctest rc=$?"; grep -E "tests passed|tests failed|\(Failed\)" "$OUT/ctest.log" | head -20

export PATH="$PWD/python/fastdyn/bin:$PATH" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# CPython's `test` package, which this machine's Python lacks: a staged copy when carried
# (scripts/stage_cpython_tests.py; carry .cpython-test).
staged=.cpython-test/${bdir#build/}
if ! $PY -c 'import test.test_generators' >/dev/null 2>&1 && [ -d "$staged/test" ]; then
  export PYTHONPATH="$PWD/$staged:$PYTHONPATH"
  echo "CPython tests: staged copy $staged"
fi
# pytest-xdist where installed (the accelerator machine has it): the suite runs in about 2.5 min on
# 12 workers there, instead of not fitting one 10-minute device call.
xdist=()
$PY -c 'import xdist' >/dev/null 2>&1 && xdist=(-n "$(( jobs > 12 ? 12 : jobs ))")
$PY -m pytest tests/python "${xdist[@]}" -p no:cacheprovider -q -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -25 "$OUT/pytest.log"

# The cuda backend, and mode="reduce-overhead", against eager and inductor on this GPU
# (bench/gpu_kernels.py, bench/cuda_graphs.py; numbers go in README).
if [ "${DEVICE_BENCH:-1}" = 1 ]; then
  $PY bench/gpu_kernels.py --out "$OUT/bench" > "$OUT/bench_cuda.log" 2>&1
  echo "bench rc=$?"; tail -20 "$OUT/bench_cuda.log"
  $PY bench/cuda_graphs.py --out "$OUT/bench" > "$OUT/bench_cuda_graphs.log" 2>&1
  echo "bench cuda_graphs rc=$?"; tail -8 "$OUT/bench_cuda_graphs.log"
fi
