#!/usr/bin/env bash
# Builds fastdyn with AddressSanitizer + UndefinedBehaviorSanitizer into build/sanitize-py3XX
# (RelWithDebInfo, -DFASTDYN_SANITIZE=address,undefined) and runs the GoogleTests (ctest) and a
# part of pytest under them, then prints every sanitizer report with the test that triggered it.
# Exit status: 1 if any sanitizer reported, else 2 if a test failed, else 0.
# On 2 cores: the first build ~27 min (later ones rebuild what changed), ctest ~3 min, the
# default pytest selection ~9-10 min.
#
#   scripts/sanitize.sh                          build, ctest, the default pytest selection
#   scripts/sanitize.sh tests/python/test_x.py   ... pytest on these arguments instead
#   SANITIZE_STAGES="build pytest" scripts/sanitize.sh   only these stages (of: build ctest pytest)
#   FASTDYN_SANITIZE=address scripts/sanitize.sh         another -fsanitize= list
#   PYTHON=python3.12 scripts/sanitize.sh                another interpreter (build/sanitize-py312)
#
# The sanitized _C and launcher go to build/sanitize-py3XX/python/fastdyn (the FASTDYN_PACKAGE_DIR
# of pymodule/CMakeLists.txt, which symlinks the package's .py files next to them), never to
# python/fastdyn: pytest imports that copy through PYTHONPATH. CPython, torch and LLVM are not
# instrumented: Python runs with the (shared) sanitizer runtimes in LD_PRELOAD, and leak checking
# is off (CPython, torch and LLVM keep memory until exit on purpose). Python objects are allocated
# with malloc (PYTHONMALLOC=malloc), so that ASan also sees overflows of CPython objects.
# Every report leaves a file under build/sanitize-py3XX/sanitizer-logs (log_path: one file per
# reporting process, subprocesses of tests included; for UBSan see san_env below), and the
# process that reported dies. scripts/sanitize_pytest.py records which test was running; after a
# report kills pytest, the selection goes on after that test. pytest runs with --capture=sys, so
# that UBSan's messages on stderr reach build/sanitize-py3XX/sanitizer-logs/pytest.out.
# Reports from inside torch, LLVM or CPython (none so far) belong in scripts/asan.supp / ubsan.supp.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
PYEXE=$($PY -c 'import sys; print(sys.executable)') || exit 2
tag=$($PY -c 'import sys; print(f"py{sys.version_info.major}{sys.version_info.minor}")')
B=$ROOT/build/sanitize-$tag
SAN=${FASTDYN_SANITIZE:-address,undefined}
JOBS=${SANITIZE_JOBS:-2}
STAGES=${SANITIZE_STAGES:-build ctest pytest}
LOGS=$B/sanitizer-logs
# The default pytest selection: tests/python but for
# - test_cpython_regrtest.py: 23 CPython test modules, each run twice in subprocesses (over
#   6 minutes alone under ASan on 2 cores; run it explicitly, FASTDYN_CPYTHON_TESTS picks modules);
# - test_leaks.py's 10,000-call check (its time). ASan's quarantine (256 MiB of freed memory held
#   back to catch use-after-free) grows the RSS without a leak, so under ASan the leak tests check
#   reference counts, live tensors and gc objects, not the RSS (test_leaks.py skips that part).
DEFAULT_PYTEST=(
  tests/python
  --ignore=tests/python/test_cpython_regrtest.py
  --deselect=tests/python/test_leaks.py::test_compiled_path_10000_calls_do_not_leak
)
if [ $# -gt 0 ]; then PYTEST_ARGS=("$@"); else PYTEST_ARGS=("${DEFAULT_PYTEST[@]}"); fi

# --------------------------------------------------------------------------- the runtimes
# gcc's shared sanitizer runtimes: libasan.so/libubsan.so are in Debian's libgcc-<N>-dev (a
# dependency of gcc-<N>), the libraries themselves in libasan<M>/libubsan1.
CC=${CC:-gcc}; CXX=${CXX:-g++}
runtime() { local f; f=$($CC -print-file-name="$1"); [ -e "$f" ] && readlink -f "$f"; }
if ! runtime libasan.so >/dev/null || ! runtime libubsan.so >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  pkg="libgcc-$($CC -dumpversion | cut -d. -f1)-dev"
  echo "sanitize.sh: $CC has no libasan.so/libubsan.so; installing $pkg" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg"
fi
PRELOAD=""
case ",$SAN," in *,address,*) PRELOAD=$(runtime libasan.so) || { echo "no libasan.so" >&2; exit 2; } ;; esac
case ",$SAN," in *,undefined,*)
  u=$(runtime libubsan.so) || { echo "no libubsan.so" >&2; exit 2; }
  PRELOAD=${PRELOAD:+$PRELOAD:}$u ;;
esac
SYMBOLIZER=$(command -v llvm-symbolizer || ls /usr/lib/llvm-19/bin/llvm-symbolizer 2>/dev/null || true)
[ -n "$SYMBOLIZER" ] && export ASAN_SYMBOLIZER_PATH=$SYMBOLIZER UBSAN_SYMBOLIZER_PATH=$SYMBOLIZER

# Options of every instrumented process. detect_leaks=0: LLVM, torch and CPython are not
# instrumented and keep allocations alive until exit.
# NB: gcc's libubsan beside libasan prints its reports to stderr whatever log_path says (and a
# report captured by a test's subprocess.run would be lost), so UBSan aborts (abort_on_error) and
# ASan, which handles SIGABRT (handle_abort), writes a report of that abort with the full stack
# (__ubsan_handle_<check>_abort, then the code that did it) to the log files: every UBSan report
# leaves a file. The UBSan message itself (what overflowed, which values) stays on stderr.
ASAN_BASE="detect_leaks=0:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2"
ASAN_BASE+=":handle_abort=1:suppressions=$ROOT/scripts/asan.supp"
UBSAN_BASE="print_stacktrace=1:halt_on_error=1:abort_on_error=1:report_error_type=1"
UBSAN_BASE+=":suppressions=$ROOT/scripts/ubsan.supp"
# $1: a directory for the reports of the processes that get these options.
san_env() {
  echo "ASAN_OPTIONS=$ASAN_BASE${1:+:log_path=$1/asan:log_exe_name=1}"
  echo "UBSAN_OPTIONS=$UBSAN_BASE${1:+:log_path=$1/ubsan:log_exe_name=1}"
}

declare -A TIME
failed_tests=()

# --------------------------------------------------------------------------- build
if [[ " $STAGES " == *" build "* ]]; then
  t0=$SECONDS
  mkdir -p "$B"
  # The build runs the GoogleTest executables (gtest_discover_tests): reports go to the terminal.
  # CC/CXX only matter on the first configure: gcc, whose default sanitizer runtime is shared.
  if ! env CC="$CC" CXX="$CXX" $(san_env) cmake -S . -B "$B" -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE="$PYEXE" \
        -DFASTDYN_SANITIZE="$SAN" -DFASTDYN_PACKAGE_DIR="$B/python/fastdyn" \
     || ! env $(san_env) cmake --build "$B" -j "$JOBS"; then
    echo "sanitize.sh: the sanitized build failed" >&2
    exit 2
  fi
  TIME[build]=$((SECONDS - t0))
fi

rm -rf "$LOGS"; mkdir -p "$LOGS/ctest" "$LOGS/pytest"

# --------------------------------------------------------------------------- ctest
if [[ " $STAGES " == *" ctest "* ]]; then
  t0=$SECONDS
  echo "=== ctest under $SAN ==="
  env $(san_env "$LOGS/ctest") ctest --test-dir "$B" -j "$JOBS" --output-on-failure --timeout 1200 \
    2>&1 | tee "$LOGS/ctest.out"
  ctest_rc=${PIPESTATUS[0]}
  if [ "$ctest_rc" -ne 0 ] && [ -s "$B/Testing/Temporary/LastTestsFailed.log" ]; then
    while IFS=: read -r _ name; do failed_tests+=("ctest: $name"); done \
      < "$B/Testing/Temporary/LastTestsFailed.log"
  elif [ "$ctest_rc" -ne 0 ]; then
    failed_tests+=("ctest: exit status $ctest_rc")
  fi
  TIME[ctest]=$((SECONDS - t0))
fi

# --------------------------------------------------------------------------- pytest
crashed=()
progress=$LOGS/pytest.progress
if [[ " $STAGES " == *" pytest "* ]]; then
  t0=$SECONDS
  echo "=== pytest under $SAN: ${PYTEST_ARGS[*]} ==="
  : > "$progress"
  rm -rf "$B/kernel-cache"
  # ASan's redzones make C frames 2-3x larger: the hook's C frames of 1000 nested Python calls
  # (test_deep_and_infinite_recursion_under_enable) overflow a default 8 MiB stack under ASan
  # before Python's recursion limit raises RecursionError.
  [ "$(ulimit -s)" = unlimited ] || [ "$(ulimit -s)" -ge 32768 ] || ulimit -s 32768
  py_env=(env $(san_env "$LOGS/pytest") LD_PRELOAD="$PRELOAD" PYTHONMALLOC=malloc
          PYTHONPATH="$B/python:$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}"
          FASTDYN_CACHE_DIR="$B/kernel-cache" SANITIZE_LOG_DIR="$LOGS/pytest"
          SANITIZE_PROGRESS="$progress")
  where=$("${py_env[@]}" "$PYEXE" -c 'import fastdyn; print(fastdyn._C.__file__)' 2>&1 | tail -1)
  if [[ "$where" != "$B/python/fastdyn/"* ]]; then
    echo "sanitize.sh: python does not import the sanitized fastdyn._C: $where" >&2
    failed_tests+=("pytest: import of the sanitized fastdyn failed")
  else
    resume=""
    for attempt in $(seq 1 "${SANITIZE_MAX_RESTARTS:-25}"); do
      # --verbosity=1 names each test as it starts (pyproject's addopts has -q); --capture=sys
      # leaves UBSan's reports on the real stderr (capfd/capsys still capture where a test asks).
      "${py_env[@]}" SANITIZE_RESUME_AFTER="$resume" "$PYEXE" -m pytest --verbosity=1 \
        --capture=sys -p sanitize_pytest -p no:cacheprovider "${PYTEST_ARGS[@]}" 2>&1 \
        | tee -a "$LOGS/pytest.out"
      rc=${PIPESTATUS[0]}
      last=$(tail -n 1 "$progress")
      if [[ "$last" == "start "* ]]; then      # pytest died in this test: go on after it
        resume=${last#start }
        crashed+=("$resume")
        echo "sanitize.sh: pytest died in $resume; going on after it" | tee -a "$LOGS/pytest.out"
        continue
      fi
      [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || failed_tests+=("pytest: exit status $rc (see $LOGS/pytest.out)")
      break
    done
    while read -r line; do failed_tests+=("pytest: $line"); done \
      < <(grep -E '^(FAILED|ERROR) ' "$LOGS/pytest.out" | sort -u)
  fi
  TIME[pytest]=$((SECONDS - t0))
fi

# --------------------------------------------------------------------------- summary
# UBSan's own messages (stderr, see san_env): from ctest's log and pytest's output, to show next
# to the report of the abort they caused.
msgs=$LOGS/ubsan-messages.txt
{ [[ " $STAGES " != *" ctest "* ]] || cat "$B/Testing/Temporary/LastTest.log"
  [[ " $STAGES " != *" pytest "* ]] || cat "$LOGS/pytest.out"
} 2>/dev/null | grep -oE '[^ ]+:[0-9]+:[0-9]+: runtime error: .*' | sort -u > "$msgs"

echo
echo "==================================== sanitize.sh summary ($SAN, $B)"
for s in build ctest pytest; do [ -n "${TIME[$s]:-}" ] && printf '%-7s %4d s\n' "$s" "${TIME[$s]}"; done
ours="$ROOT/(runtime|codegen|symbolic|eval_hook|pymodule|tests)/"
# Frames of the sanitizer runtimes and of the abort/raise that a report goes through.
noise='libsanitizer/|__ubsan_|__sanitizer::|__asan_|__interceptor_|nptl/pthread_kill|raise\.c|abort\.c|libc\.so\.6\+'
nreports=0; ignored=()
while read -r f; do
  [ -n "$f" ] || continue
  name=$(basename "$f")
  kind=$(grep -m1 -oE 'ERROR: AddressSanitizer: [A-Za-z-]+' "$f" | sed 's/^ERROR: //')
  check=$(grep -m1 -oE '__ubsan_handle_[a-z0-9_]+' "$f" | sed -E 's/^__ubsan_handle_//; s/_abort$//')
  [ -z "$check" ] || kind="UndefinedBehaviorSanitizer: $check"
  if [ "$kind" = "AddressSanitizer: ABRT" ] && [ -z "$check" ] && grep -q ' in os_abort ' "$f"; then
    ignored+=("$f (os.abort() called by the test itself)"); continue
  fi
  nreports=$((nreports + 1))
  case "$f" in
    "$LOGS/pytest/"*)  # a subprocess of a test, or pytest itself (the test it was running, if any)
      test=$(grep -F " $name" "$progress" 2>/dev/null | sed -E 's/^report (.*) [^ ]+$/\1/' | head -1)
      [ -n "$test" ] || test=$(awk -v pid="${name##*.}" '$1 == "pid" { cur = $2 }
        $1 == "start" && cur == pid { t = substr($0, 7) } $1 == "end" && cur == pid { t = "" }
        END { print t }' "$progress")
      [ -n "$test" ] || test="(pytest outside a test: collection or interpreter exit)" ;;
    *)  # ctest: the GoogleTest case on the report's stack, else the executable
      test=$(grep -oE '[A-Za-z0-9_]+_Test::TestBody' "$f" | head -1)
      t=${name#*.}; test="ctest ${t%.*}${test:+: $test}" ;;
  esac
  # Whose code: the first frame outside the sanitizer runtime, else the first of fastdyn's below.
  top=$(grep -E '^ *#[0-9]+ ' "$f" | grep -vE "$noise" | head -1 | sed -E 's/^ *(#[0-9]+) 0x[0-9a-f]+ in /\1 /')
  first=$(grep -m1 -E "^ *#[0-9]+ .*$ours" "$f" | sed -E 's/^ *(#[0-9]+) 0x[0-9a-f]+ in /\1 /')
  if echo "$top" | grep -qE "$ours"; then where="fastdyn: $top"
  elif [ -n "$first" ]; then where="outside fastdyn: $top; fastdyn's first frame: $first"
  else where="outside fastdyn (torch/LLVM/CPython/libc): $top"; fi
  echo
  echo "---- report $nreports: $kind"
  echo "     file:  $f"
  echo "     test:  $test"
  echo "     where: $where"
  loc=$(echo "$top" | grep -oE '[^ /]+:[0-9]+$' || true)
  [ -z "$loc" ] || grep -E "(^|/)$loc:[0-9]+: runtime error" "$msgs" | sed 's/^/     ubsan: /'
  head -n 45 "$f" | sed 's/^/     | /'
done < <(find "$LOGS/ctest" "$LOGS/pytest" -type f | sort)
echo
[ "${#ignored[@]}" -eq 0 ] || printf 'not counted: %s\n' "${ignored[@]}"
[ "${#crashed[@]}" -eq 0 ] || printf 'pytest died in: %s\n' "${crashed[@]}"
if [ "${#failed_tests[@]}" -gt 0 ]; then
  echo "failed tests (${#failed_tests[@]}):"; printf '  %s\n' "${failed_tests[@]}"
fi
if [ "$nreports" -gt 0 ]; then
  echo "sanitize.sh: $nreports sanitizer report(s) (files under $LOGS)"
  exit 1
elif [ "${#failed_tests[@]}" -gt 0 ]; then
  echo "sanitize.sh: no sanitizer reports, but tests failed"
  exit 2
fi
echo "sanitize.sh: no sanitizer reports, all tests passed"
