"""Run CPython's own regression tests (the running interpreter's `test` package) under fastdyn.

    python tests/cpython/regrtest.py [--hook | --no-hook | --compare] [MODULE ...] [--json OUT]

For each selected module (default: MODULES below) the module's source -- a file, or a whole
directory for a package such as test_dataclasses -- is copied into a temporary directory outside
the standard library (fastdyn's path rules, python/fastdyn/api.py `_install_path_rules`, never
trace files under the stdlib, so frames of the copy are the ones traced) and run in a fresh
subprocess of this interpreter under unittest. The copy is imported under its original name
(`test.test_generators`, a submodule of the stdlib's `test` package), so `test.support` and the
helper packages (`test.typinganndata`, ...) import as usual, doctests keep their names, pickle
finds the module's classes, and the module's `load_tests` runs (unittest's loader calls it), so
the doctest-based modules run their doctests too.

Modes:
  nohook  import torch and fastdyn, then run the tests (same import side effects as hook);
  hook    the same, and fastdyn.enable() before the test module is imported (with the test knob
          fastdyn._C.set_compile_tensor_free(True): frames without a tensor op are compiled too,
          FASTDYN_CPYTHON_TENSOR_FREE=0 turns it off), so every function
          frame of the copied module (test methods, helpers, nested functions and lambdas, and
          functions defined in doctests) is a compilation candidate -- module and class bodies,
          doctest examples themselves (module-level code) and generators/coroutines are left out
          by the hook's own skip rules (eval_hook/skip_rules.cpp); fastdyn.stats() is recorded
          after the run.
  compare both (the default; the two run concurrently unless --serial), then a table of the
          per-test outcome differences, the doctest example counts, frames seen and compiled.

Every subprocess has a timeout (--timeout, 300 s): a hang is reported as status "timeout" for
the module (with faulthandler's stacks in its output) instead of a stuck run; a crash (a
segfault) as status "crash". The runner's own child-side functions are excluded from
compilation with fastdyn.skip, so only the test module's frames are traced.
--reasons [N] runs the hook child with FASTDYN_LOG=graph_breaks and prints each module's N most
common graph-break reasons (why frames_compiled is small next to frames_seen).

Importable: tests/python/test_cpython_regrtest.py uses run_module / compare / format_table.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The modules the suite runs by default (all must stay in the default selection).
MODULES = [
    "test_generators", "test_coroutines", "test_contextlib", "test_exceptions", "test_scope",
    "test_with", "test_grammar", "test_itertools", "test_functools", "test_dataclasses",
    "test_dict", "test_list", "test_class", "test_descr", "test_super", "test_keywordonlyarg",
    "test_unpack", "test_unpack_ex", "test_patma", "test_raise", "test_asyncgen", "test_enum",
    "test_typing",
]

# More modules, run by FASTDYN_CPYTHON_TESTS=all (pytest) or `regrtest.py all`: about ten more
# minutes on 2 cores.
EXTRA_MODULES = [
    "test_set", "test_tuple", "test_string", "test_userdict", "test_userlist", "test_collections",
    "test_operator", "test_property", "test_decorators", "test_funcattrs", "test_iter",
    "test_genexps", "test_listcomps", "test_setcomps", "test_dictcomps", "test_opcodes",
    "test_augassign", "test_bool", "test_int", "test_float", "test_types", "test_weakref",
    "test_copy", "test_sort", "test_deque", "test_heapq", "test_bisect", "test_abc",
    "test_contextlib_async", "test_named_expressions", "test_compare", "test_richcmp",
    "test_binop", "test_call", "test_extcall", "test_positional_only_arg", "test_fstring",
    "test_slice", "test_range", "test_enumerate", "test_exception_group", "test_except_star",
    "test_generator_stop", "test_yield_from", "test_frame", "test_traceback", "test_inspect",
    "test_sys_settrace", "test_string_literals", "test_unary", "test_pow", "test_global",
    "test_dictviews", "test_memoryview", "test_math", "test_statistics", "test_isinstance",
    "test_exception_hierarchy", "test_baseexception", "test_contains", "test_index",
    "test_ordered_dict", "test_defaultdict", "test_builtin", "test_print", "test_format",
    "test_textwrap", "test_keyword", "test_argparse", "test_json", "test_re", "test_struct",
    "test_array", "test_structseq", "test_dynamic", "test_dynamicclassattribute",
]

OUTCOMES = ("pass", "fail", "error", "skip", "expectedFailure", "unexpectedSuccess")
DEFAULT_TIMEOUT = 300
TEXT_LIMIT = 2000

INSTALL_HINT = (
    "CPython's regression-test package `test` is not importable by {exe} (Python {ver}). "
    "Debian/Ubuntu system Pythons ship it separately: `apt-get install libpython{ver}-testsuite` "
    "(scripts/setup.sh does that where it can). A pyenv Python builds it unless configured "
    "without it: reinstall with `pyenv install --force {full}`. A python.org or conda Python "
    "includes it. A machine that can install none of these (no internet): stage a copy from a "
    "local Python of the same version with scripts/stage_cpython_tests.py and put it first on "
    "PYTHONPATH.")


class TestPackageMissing(RuntimeError):
    pass


def test_package_dir():
    """Directory of the running interpreter's `test` package; TestPackageMissing if absent."""
    try:
        import test
        import test.support  # noqa: F401  (a stub `test` without support is as good as none)
    except ImportError as e:
        v = sys.version_info
        raise TestPackageMissing(
            INSTALL_HINT.format(exe=sys.executable, ver=f"{v.major}.{v.minor}",
                                full=f"{v.major}.{v.minor}.{v.micro}") + f" ({e})") from None
    tdir = os.path.dirname(os.path.abspath(test.__file__))
    if not os.path.isfile(os.path.join(tdir, "test_generators.py")):  # Debian ships test.support alone
        v = sys.version_info
        raise TestPackageMissing(
            INSTALL_HINT.format(exe=sys.executable, ver=f"{v.major}.{v.minor}",
                                full=f"{v.major}.{v.minor}.{v.micro}") + f" ({tdir} holds no test modules)")
    return tdir


def locate(name):
    """(path, is_package) of module `name` in the stdlib `test` package."""
    tdir = test_package_dir()
    pkg = os.path.join(tdir, name)
    if os.path.isfile(os.path.join(pkg, "__init__.py")):
        return pkg, True
    path = pkg + ".py"
    if os.path.isfile(path):
        return path, False
    raise FileNotFoundError(f"no module {name} in {tdir}")


def stage(name, workdir):
    """Copy module `name` (file or package directory) into workdir; returns the entry file and
    the package search path (None for a plain module)."""
    src, is_pkg = locate(name)
    tdir = os.path.dirname(src)
    # Sibling resources some modules read relative to __file__: data files (test_math's
    # ieee754.txt) and data directories are linked; `data` is copied, as test_contextlib's
    # TestChdir compares os.getcwd() inside it with the unresolved path.
    for entry in os.listdir(tdir):
        path = os.path.join(tdir, entry)
        dst = os.path.join(workdir, entry)
        if entry == "__pycache__" or os.path.exists(dst):
            continue
        if entry == "data" and os.path.isdir(path):
            shutil.copytree(path, dst)
        elif os.path.isfile(path) and not entry.endswith((".py", ".pyc")):
            os.symlink(path, dst)
        elif os.path.isdir(path) and not os.path.exists(os.path.join(path, "__init__.py")):
            os.symlink(path, dst)
    if is_pkg:
        dst = os.path.join(workdir, name)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        return os.path.join(dst, "__init__.py"), [dst]
    dst = os.path.join(workdir, name + ".py")
    shutil.copy2(src, dst)
    return dst, None


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------

def run_module(name, mode, timeout=DEFAULT_TIMEOUT, env=None, log=None):
    """Run one test module in a fresh subprocess. mode: "hook" or "nohook".

    Returns a dict: module, mode, status ("ok", "timeout", "crash"), returncode, seconds,
    outcomes {test id without the leading "test.": outcome}, texts {id: failure text},
    counts {outcome: n}, tests_run, stats (fastdyn.stats() after the run), stderr_tail.
    `log`: a FASTDYN_LOG value for the child (its stderr is kept in full as `stderr`)."""
    assert mode in ("hook", "nohook"), mode
    workdir = tempfile.mkdtemp(prefix=f"fd_regr_{name}_{mode}_")
    try:
        entry, search = stage(name, workdir)
        out = os.path.join(workdir, "result.json")
        errfile = os.path.join(workdir, "stderr.txt")
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("PYTHONHASHSEED", "0")
        if log:
            child_env["FASTDYN_LOG"] = log
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, mode, entry,
               json.dumps(search), out, str(timeout)]
        t0 = time.monotonic()
        with open(errfile, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, cwd=workdir,
                                    env=child_env, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
                status = None
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                rc = proc.wait()
                status = "timeout"
        seconds = time.monotonic() - t0
        with open(errfile, "rb") as f:
            stderr = f.read().decode("utf-8", "replace")
        res = None
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        if status is None:
            status = "ok" if (res is not None and res.get("finished")) else "crash"
        current = None
        if status != "ok" and os.path.exists(out + ".current"):
            with open(out + ".current") as f:
                current = f.read().strip()
        if res is None:
            res = {"outcomes": {}, "texts": {}, "stats": {}}
        outcomes = res.get("outcomes", {})
        counts = {k: 0 for k in OUTCOMES}
        for o in outcomes.values():
            counts[o] = counts.get(o, 0) + 1
        result = {
            "module": name, "mode": mode, "status": status, "returncode": rc,
            "seconds": round(seconds, 2), "outcomes": outcomes, "texts": res.get("texts", {}),
            "counts": counts, "tests_run": len(outcomes), "stats": res.get("stats", {}),
            "doctest_examples": sum(res.get("doctest_examples", {}).values()),
            "build": res.get("build"),
            "stderr_tail": (f"[{status} during {current}]\n" if current else "") + stderr[-4000:],
            "crashed_in": current,
        }
        if log:
            result["stderr"] = stderr
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_both(name, timeout=DEFAULT_TIMEOUT, parallel=True, log=None):
    """Run nohook and hook for one module (concurrently when parallel); returns (base, hook).
    Run again (once) when fastdyn was rebuilt between the two runs."""
    for attempt in range(2):
        if not parallel:
            base, hook = run_module(name, "nohook", timeout), run_module(name, "hook", timeout, log=log)
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(2) as ex:
                fb = ex.submit(run_module, name, "nohook", timeout)
                fh = ex.submit(run_module, name, "hook", timeout, None, log)
                base, hook = fb.result(), fh.result()
        if base.get("build") == hook.get("build") or None in (base.get("build"), hook.get("build")):
            break
    return base, hook


def compare(base, hook, expected=None):
    """Outcome differences between the modes: {test id: (base outcome, hook outcome)}, with
    the ids listed in `expected` (a dict id -> reason) left out. A module that did not finish
    in a mode is a difference under the id "<module>" (status)."""
    expected = expected or {}
    diffs = {}
    for key in sorted(set(base["outcomes"]) | set(hook["outcomes"])):
        b = base["outcomes"].get(key, "missing")
        h = hook["outcomes"].get(key, "missing")
        if b != h and key not in expected:
            diffs[key] = (b, h)
    if base.get("doctest_examples") != hook.get("doctest_examples"):
        diffs[base["module"] + ".<doctest examples>"] = (str(base.get("doctest_examples")),
                                                          str(hook.get("doctest_examples")))
    if base["status"] != hook["status"] and base["module"] not in expected:
        diffs[base["module"]] = (base["status"], hook["status"])
    return diffs


def format_table(rows):
    """rows: list of (base, hook, diffs). A per-module table."""
    hdr = (f"{'module':<22} {'tests':>6} {'dtex':>5} {'diffs':>5} {'nohook s':>9} {'hook s':>8} "
           f"{'seen':>7} {'compiled':>8} {'breaks':>7} {'graphs':>6} {'status':>14}")
    lines = [hdr, "-" * len(hdr)]
    tot = [0, 0, 0.0, 0.0, 0, 0]
    for base, hook, diffs in rows:
        st = hook.get("stats", {})
        status = base["status"] if base["status"] == hook["status"] else \
            f"{base['status']}/{hook['status']}"
        lines.append(
            f"{base['module']:<22} {base['tests_run']:>6} {base.get('doctest_examples', 0):>5} "
            f"{len(diffs):>5} "
            f"{base['seconds']:>9.1f} {hook['seconds']:>8.1f} {st.get('frames_seen', 0):>7} "
            f"{st.get('frames_compiled', 0):>8} {st.get('graph_breaks', 0):>7} "
            f"{st.get('graphs', 0):>6} {status:>14}")
        tot[0] += base["tests_run"]; tot[1] += len(diffs)
        tot[2] += base["seconds"]; tot[3] += hook["seconds"]
        tot[4] += st.get("frames_seen", 0); tot[5] += st.get("frames_compiled", 0)
    lines.append("-" * len(hdr))
    lines.append(f"{'TOTAL':<22} {tot[0]:>6} {'':>5} {tot[1]:>5} {tot[2]:>9.1f} {tot[3]:>8.1f} "
                 f"{tot[4]:>7} {tot[5]:>8}")
    for base, hook, diffs in rows:
        unfinished = {"nohook": base["status"] != "ok", "hook": hook["status"] != "ok"}
        missing = 0
        for key, (b, h) in diffs.items():
            if (h == "missing" and unfinished["hook"]) or (b == "missing" and unfinished["nohook"]):
                missing += 1  # not run: the module crashed or hung first (its own line says so)
                continue
            lines.append(f"  DIFF {key}: nohook={b} hook={h}")
            text = hook["texts"].get(key) or base["texts"].get(key)
            if key == base["module"]:
                bad = hook if hook["status"] != "ok" else base
                text = bad["stderr_tail"]
                if bad.get("crashed_in"):
                    lines.append(f"      {bad['mode']}: {bad['status']} during {bad['crashed_in']}")
            if text:
                lines.extend("      " + ln for ln in text.strip().splitlines()[-12:])
        if missing:
            lines.append(f"  ({missing} tests of {base['module']} did not run in a mode that "
                         f"did not finish)")
    return "\n".join(lines)


_BREAK_LINE = re.compile(r"^\[fastdyn\] graph_break: (?P<fn>.*?) at (?P<where>\S+?):(?P<line>-?\d+): "
                         r"(?P<reason>.*)$")


def normalize_reason(reason):
    """A break reason with its particulars (names, addresses, how it ended) taken out, so that
    reasons can be counted."""
    for tail in (" (the frame runs eagerly)", " (a continuation runs the rest)"):
        if reason.endswith(tail):
            reason = reason[:-len(tail)]
    reason = re.sub(r" \(no graph break: [^)]*\)$", "", reason)
    reason = re.sub(r" at 0x[0-9a-f.]+", "", reason)
    reason = re.sub(r"\b(attribute|name|variable|method|missing attribute|super\(\)\.)"
                    r" '[^']*'", r"\1 '*'", reason)
    reason = re.sub(r"^(missing attribute|getattr on|call of coroutine function|call of generator "
                    r"function) .*?( of| would|$)", r"\1 *\2", reason)
    reason = re.sub(r"(KeyError|name) [^ ]+ is not defined", r"\1 * is not defined", reason)
    return reason


def break_reasons(stderr, only_file=None):
    """Counts of normalized graph-break reasons in a child's FASTDYN_LOG=graph_breaks stderr,
    most common first; only_file: count only breaks in files whose name contains it."""
    counts = {}
    for line in stderr.splitlines():
        m = _BREAK_LINE.match(line)
        if not m or (only_file and only_file not in m.group("where")):
            continue
        r = normalize_reason(m.group("reason"))
        counts[r] = counts.get(r, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def load_expected():
    sys.path.insert(0, HERE)
    try:
        from expected_differences import EXPECTED_DIFFERENCES, KNOWN_BUGS
    finally:
        sys.path.remove(HERE)
    return {**EXPECTED_DIFFERENCES, **{k: "known bug: " + v for k, v in KNOWN_BUGS.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--hook", dest="mode", action="store_const", const="hook")
    g.add_argument("--no-hook", dest="mode", action="store_const", const="nohook")
    g.add_argument("--compare", dest="mode", action="store_const", const="compare")
    ap.add_argument("modules", nargs="*", help="test modules (default: MODULES; "
                    "'all': MODULES and EXTRA_MODULES)")
    ap.add_argument("--json", help="write the full results to this file")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT)
    ap.add_argument("--serial", action="store_true", help="run the two modes one after the other")
    ap.add_argument("--log", help="FASTDYN_LOG for the hook child (e.g. graph_breaks)")
    ap.add_argument("--reasons", type=int, nargs="?", const=5, default=0, metavar="N",
                    help="log graph breaks in hook mode and print each module's N most common "
                    "break reasons (default 5)")
    args = ap.parse_args(argv)
    mode = args.mode or "compare"
    if args.reasons and not args.log:
        args.log = "graph_breaks"
    if args.modules == ["all"]:
        modules = MODULES + EXTRA_MODULES
    else:
        modules = args.modules or MODULES
    try:
        test_package_dir()
    except TestPackageMissing as e:
        print(e, file=sys.stderr)
        return 2
    expected = load_expected()
    out = []
    rows = []
    failed = False
    for name in modules:
        if mode == "compare":
            base, hook = run_both(name, args.timeout, parallel=not args.serial, log=args.log)
            diffs = compare(base, hook, expected)
            rows.append((base, hook, diffs))
            out.append({"module": name, "nohook": base, "hook": hook,
                        "diffs": {k: list(v) for k, v in diffs.items()}})
            failed |= bool(diffs) or base["tests_run"] == 0
            print(f"{name}: {base['tests_run']} tests, {len(diffs)} diffs, "
                  f"nohook {base['seconds']:.1f}s, hook {hook['seconds']:.1f}s, "
                  f"frames {hook['stats'].get('frames_compiled', 0)}/"
                  f"{hook['stats'].get('frames_seen', 0)}", file=sys.stderr, flush=True)
        else:
            r = run_module(name, mode, args.timeout, log=args.log if mode == "hook" else None)
            out.append(r)
            c = r["counts"]
            print(f"{name:<22} {r['status']:>8} {r['tests_run']:>5} tests  " +
                  " ".join(f"{k}={v}" for k, v in c.items() if v) +
                  f"  {r['seconds']:.1f}s" +
                  (f"  frames {r['stats'].get('frames_compiled', 0)}/"
                   f"{r['stats'].get('frames_seen', 0)}" if mode == "hook" else ""), flush=True)
            failed |= r["status"] != "ok"
    if mode == "compare":
        print(format_table(rows))
    if args.reasons:
        for r in out:
            hook = r["hook"] if mode == "compare" else r
            if "stderr" not in hook:
                continue
            st = hook["stats"]
            reasons = break_reasons(hook["stderr"])
            print(f"{hook['module']}: frames_compiled {st.get('frames_compiled', 0)} / frames_seen "
                  f"{st.get('frames_seen', 0)}, graph_breaks {st.get('graph_breaks', 0)}; "
                  f"top break reasons:")
            for reason, n in reasons[:args.reasons]:
                print(f"  {n:>5}  {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------
# Child side: python regrtest.py --child NAME MODE ENTRY SEARCH_JSON OUT TIMEOUT
# --------------------------------------------------------------------------------------------

def _import_fastdyn():
    # Retried: while fastdyn is being rebuilt, its _C may be briefly half-written.
    for attempt in range(6):
        try:
            try:
                import fastdyn
            except ImportError:
                if os.path.join(ROOT, "python") in sys.path:
                    raise
                sys.path.insert(0, os.path.join(ROOT, "python"))
                for m in [m for m in sys.modules if m == "fastdyn" or m.startswith("fastdyn.")]:
                    del sys.modules[m]
                import fastdyn
            return fastdyn
        except ImportError:
            if attempt == 5:
                raise
            for m in [m for m in sys.modules if m == "fastdyn" or m.startswith("fastdyn.")]:
                del sys.modules[m]
            time.sleep(10)


def _child(name, mode, entry, search_json, out, timeout):
    import faulthandler
    import importlib.util
    import traceback
    import unittest

    import torch  # noqa: F401
    fastdyn = _import_fastdyn()

    # Which build of fastdyn ran (its _C's path and mtime): a rebuild between the two modes
    # makes their comparison meaningless.
    try:
        build = f"{fastdyn._C.__file__}@{os.stat(fastdyn._C.__file__).st_mtime:.0f}"
    except Exception:  # noqa: BLE001
        build = "?"

    # A hang dumps every thread's stack (to the captured stderr) shortly before the parent
    # kills the process.
    faulthandler.enable()
    faulthandler.dump_traceback_later(max(5, int(timeout) - 10), exit=False)

    outcomes, texts, doctest_examples = {}, {}, {}
    fmt = traceback.format_exception

    def key(test):
        tid = test.id()
        return tid[5:] if tid.startswith("test.") else tid

    def text(err):
        s = "".join(fmt(*err))
        return s if len(s) <= TEXT_LIMIT else s[:600] + "\n[...]\n" + s[-(TEXT_LIMIT - 600):]

    class Result(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            outcomes.setdefault(key(test), "pass")
            with open(out + ".current", "w") as f:  # names the test a crash or hang was in
                f.write(key(test))
            dt = getattr(test, "_dt_test", None)  # a doctest.DocTestCase: count its examples
            if dt is not None:
                doctest_examples[key(test)] = len(dt.examples)

        def addSuccess(self, test):
            super().addSuccess(test)
            outcomes.setdefault(key(test), "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            outcomes[key(test)] = "fail"
            texts[key(test)] = text(err)

        def addError(self, test, err):
            super().addError(test, err)
            # setUpClass/module fixtures report as _ErrorHolder "test"s.
            outcomes[key(test)] = "error"
            texts[key(test)] = text(err)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcomes[key(test)] = "skip"

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            outcomes[key(test)] = "expectedFailure"

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            outcomes[key(test)] = "unexpectedSuccess"

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                k = key(test)
                bad = "fail" if issubclass(err[0], test.failureException) else "error"
                if outcomes.get(k) in (None, "pass"):
                    outcomes[k] = bad
                texts[k] = texts.get(k, "") + f"[subtest {subtest._subDescription()}]\n" + text(err)

    def finish(finished):
        stats = {}
        try:
            stats = {k: v for k, v in fastdyn.stats().items()
                     if isinstance(v, (int, float, str, bool))}
        except Exception as e:  # noqa: BLE001
            stats = {"error": repr(e)}
        with open(out, "w") as f:
            json.dump({"finished": finished, "outcomes": outcomes, "texts": texts,
                       "stats": stats, "doctest_examples": doctest_examples,
                       "build": build}, f)

    # Only the test module's frames are compilation candidates, not the harness's.
    if mode == "hook":
        for fn in (key, text, finish):
            fastdyn.skip(fn)
        for attr in list(vars(Result)):
            v = vars(Result)[attr]
            if callable(v):
                fastdyn.skip(v)

    search = json.loads(search_json)
    modname = "test." + name
    import test as test_pkg
    if search:
        # A package's load_tests (test.support.load_package_tests) discovers its submodules
        # with the stdlib as top-level directory, which the copy is not in: import them by name
        # instead (test.<package>.<submodule>, found in the copy through the package's path).
        import fnmatch
        import test.support as support
        original_load_package_tests = support.load_package_tests

        def load_package_tests(pkg_dir, loader, standard_tests, pattern):
            if os.path.realpath(pkg_dir) != os.path.realpath(search[0]):
                return original_load_package_tests(pkg_dir, loader, standard_tests, pattern)
            for entry in sorted(os.listdir(pkg_dir)):
                if entry.endswith(".py") and fnmatch.fnmatch(entry, pattern or "test*.py"):
                    sub = importlib.import_module(f"{modname}.{entry[:-3]}")
                    standard_tests.addTests(loader.loadTestsFromModule(sub, pattern=pattern))
            return standard_tests

        support.load_package_tests = load_package_tests
        if mode == "hook":
            fastdyn.skip(load_package_tests)
    spec = importlib.util.spec_from_file_location(modname, entry,
                                                  submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    setattr(test_pkg, name, module)

    if mode == "hook":
        # Frames without a tensor op get cache entries too (a test knob: a user's program never
        # needs them), so that these tensor-free tests exercise the trace, guards, bytecode
        # rewriting and continuations rather than only the fallback.
        fastdyn._C.set_compile_tensor_free(os.environ.get("FASTDYN_CPYTHON_TENSOR_FREE", "1") != "0")
        fastdyn.enable()
    try:
        spec.loader.exec_module(module)
        suite = unittest.TestLoader().loadTestsFromModule(module)
    except BaseException:
        outcomes[name + ".<import>"] = "error"
        texts[name + ".<import>"] = traceback.format_exc()[-TEXT_LIMIT:]
        if mode == "hook":
            fastdyn.disable()
        finish(True)
        return
    result = Result()
    try:
        suite.run(result)
    finally:
        if mode == "hook":
            fastdyn.disable()
    finish(True)
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:8])
        sys.exit(0)
    sys.exit(main())
