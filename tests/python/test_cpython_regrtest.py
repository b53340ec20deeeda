"""CPython's own regression tests, run with and without fastdyn.enable().

One test per module of the running interpreter's `test` package (tests/cpython/regrtest.py
copies the module outside the stdlib so that fastdyn traces it, and runs it in a fresh
subprocess per mode). The per-test outcome maps of the two modes must be equal, except for the
differences listed (with a reason) in tests/cpython/expected_differences.py.

Selection: FASTDYN_CPYTHON_TESTS unset or "default" runs regrtest.MODULES (the 23 modules the
suite must cover, about 2 minutes on 2 cores with both modes running concurrently); "all" adds
regrtest.EXTRA_MODULES (about 10 minutes more); a comma-separated list runs those modules (any
module of the `test` package, file or package); "none" runs nothing.
FASTDYN_CPYTHON_SERIAL=1 runs the two modes one after the other instead of concurrently.
"""
import importlib.util
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNNER = os.path.join(os.path.dirname(_HERE), "cpython", "regrtest.py")

_spec = importlib.util.spec_from_file_location("fastdyn_cpython_regrtest", _RUNNER)
regrtest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regrtest)


def _selection():
    sel = os.environ.get("FASTDYN_CPYTHON_TESTS", "default").strip()
    if sel in ("", "default"):
        return list(regrtest.MODULES)
    if sel == "all":
        return list(regrtest.MODULES) + list(regrtest.EXTRA_MODULES)
    if sel == "none":
        return []
    return [m.strip() for m in sel.split(",") if m.strip()]


@pytest.mark.parametrize("module", _selection())
def test_cpython_module(module):
    try:
        regrtest.test_package_dir()
    except regrtest.TestPackageMissing as e:
        pytest.fail(str(e), pytrace=False)
    expected = regrtest.load_expected()
    parallel = os.environ.get("FASTDYN_CPYTHON_SERIAL", "0") in ("", "0")
    base, hook = regrtest.run_both(module, parallel=parallel)
    diffs = regrtest.compare(base, hook, expected)
    st = hook["stats"]
    print(f"\n{module}: {base['tests_run']} tests, nohook {base['seconds']:.1f}s, "
          f"hook {hook['seconds']:.1f}s, frames_compiled {st.get('frames_compiled', 0)} / "
          f"frames_seen {st.get('frames_seen', 0)}, graph_breaks {st.get('graph_breaks', 0)}")
    assert base["status"] == "ok", (
        f"{module} without fastdyn did not finish ({base['status']}, rc {base['returncode']}):\n"
        + base["stderr_tail"])
    assert base["tests_run"] > 0, f"{module}: no tests ran\n" + base["stderr_tail"]
    assert hook["status"] == "ok", (
        f"{module} under fastdyn.enable() did not finish ({hook['status']}, "
        f"rc {hook['returncode']}):\n" + hook["stderr_tail"])
    assert hook["tests_run"] == base["tests_run"], (
        f"{module}: {base['tests_run']} tests without fastdyn, {hook['tests_run']} with")
    assert hook["returncode"] == base["returncode"], (
        f"{module}: exit status {base['returncode']} without fastdyn, {hook['returncode']} with:\n"
        + hook["stderr_tail"])
    assert "frames_seen" in st and st["frames_seen"] > 0, (
        f"{module}: fastdyn.enable() saw no frames of the copied module: {st}")
    assert not diffs, regrtest.format_table([(base, hook, diffs)])
    # Listed differences: say which still differ, and which no longer do (a fixed known bug, whose
    # entry must go).
    for key, reason in expected.items():
        if not key.startswith(module + "."):
            continue
        b, h = base["outcomes"].get(key, "missing"), hook["outcomes"].get(key, "missing")
        print(f"  listed difference {key}: {'still differs' if b != h else 'NO LONGER DIFFERS'} ({reason})")
