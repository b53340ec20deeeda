"""The launchers: `fastdyn run script.py` (native, pymodule/launcher) and `python -m fastdyn`.

Both promise to be indistinguishable from `python script.py args...` except that fastdyn is
enabled. So every test runs a small script in fresh subprocesses, once under plain python (the
reference) and once per launcher mode, and compares what a user can observe: sys.argv, __name__,
__file__, sys.path[0], sys.executable, stdout, stderr, exit status, tracebacks. One test proves
that the launchers really enable fastdyn (and that FASTDYN_DISABLE=1 really does not).

Modes: "native" (the executable next to the package, python/fastdyn/bin/fastdyn),
"native-disabled" (the same with FASTDYN_DISABLE=1: the launcher's mechanics without the JIT,
testable even while fastdyn itself does not import), "python-m" and "python-m-run"
(`python -m fastdyn [run]`). A mode is skipped, with the reason, when the launcher is not built
or the fastdyn package does not import.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from fdcheck import IMPORT_ERROR, ROOT, fastdyn

# These tests run fastdyn only in subprocesses; conftest's per-test fastdyn reset is not needed.
pytestmark = pytest.mark.no_fastdyn

PKG_DIR = (os.path.dirname(os.path.abspath(fastdyn.__file__)) if fastdyn is not None
           else os.path.join(ROOT, "python", "fastdyn"))
LAUNCHER = os.path.join(PKG_DIR, "bin", "fastdyn")
TIMEOUT_S = 180

MODES = {
    # name: (command prefix, extra environment, needs the native launcher, needs fastdyn)
    "native": ([LAUNCHER, "run"], {}, True, True),
    "native-disabled": ([LAUNCHER, "run"], {"FASTDYN_DISABLE": "1"}, True, False),
    "python-m": ([sys.executable, "-m", "fastdyn"], {}, False, True),
    "python-m-run": ([sys.executable, "-m", "fastdyn", "run"], {}, False, True),
    "python-m-disabled": ([sys.executable, "-m", "fastdyn"], {"FASTDYN_DISABLE": "1"}, False,
                          True),
}
COMMON_MODES = ["native", "native-disabled", "python-m"]


def _skip_unless_available(needs_launcher, needs_fastdyn):
    if needs_launcher and not os.access(LAUNCHER, os.X_OK):
        pytest.skip(f"native launcher not built: {LAUNCHER} "
                    "(ninja -C <build dir> fastdyn_launcher)")
    if needs_fastdyn and fastdyn is None:
        last = IMPORT_ERROR.strip().splitlines()[-1] if IMPORT_ERROR else "unknown error"
        pytest.skip(f"import fastdyn fails ({last}); the launchers cannot enable it")


def _env(extra=()):
    env = dict(os.environ)
    for name in ("FASTDYN_DISABLE", "FASTDYN_LOG", "PYTHONSTARTUP", "PYTHONINSPECT"):
        env.pop(name, None)
    # Every run, plain python included, sees the package the test process imports.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(PKG_DIR), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _run(argv, cwd, extra_env=()):
    return subprocess.run(argv, cwd=cwd, env=_env(extra_env), capture_output=True,
                          encoding="utf-8", errors="replace", timeout=TIMEOUT_S)


_references = {}


def run_python(script, args, cwd):
    """The reference: `python script args...`, run once per script, arguments and directory."""
    key = (str(cwd), script, tuple(args))
    if key not in _references:
        _references[key] = _run([sys.executable, script, *args], cwd)
    return _references[key]


def run_mode(mode, script, args, cwd):
    prefix, extra_env, needs_launcher, needs_fastdyn = MODES[mode]
    _skip_unless_available(needs_launcher, needs_fastdyn)
    return _run([*prefix, script, *args], cwd, extra_env)


def write(path, source):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """One directory with every test script, shared so that each reference run happens once."""
    root = tmp_path_factory.mktemp("scripts")
    write(root / "my dir" / "helper.py", "VALUE = 42\n")
    write(root / "my dir" / "info.py", INFO_SCRIPT)
    write(root / "exit.py", EXIT_SCRIPT)
    write(root / "boom.py", RAISE_SCRIPT)
    write(root / "bad.py", "x = 1\nprint('x'\n")
    write(root / "math_script.py", TENSOR_SCRIPT)
    return root


def assert_same_run(got, want):
    assert got.stdout == want.stdout
    assert got.stderr == want.stderr
    assert got.returncode == want.returncode


# --------------------------------------------------------------------------- what a script sees

INFO_SCRIPT = """\
    import sys
    import helper  # found only through sys.path[0], the script's own directory
    import __main__
    print("argv", sys.argv)
    print("name", __name__)
    print("file", __file__)
    print("path0", sys.path[0])
    print("executable", sys.executable)
    print("globals", list(globals()))
    print("__main__ is this module", __main__.__dict__ is globals())
    print("spec", __spec__, "package", __package__, "cached", __cached__)
    print("loader", type(__loader__).__name__, __loader__.name, __loader__.path)
    print("helper", helper.VALUE)
    if __name__ == "__main__":
        print("ran as main")
"""
# Options after the script belong to it; spaces, non-ASCII, "-", "--" and "" pass through.
INFO_ARGS = ["--lr", "3e-4", "a b", "\u00fcn\u00ef", "-", "--", ""]


@pytest.mark.parametrize("mode", COMMON_MODES + ["python-m-run"])
def test_script_sees_what_python_gives_it(mode, scripts):
    script = os.path.join("my dir", "info.py")  # relative, from a different working directory
    want = run_python(script, INFO_ARGS, scripts)
    assert want.returncode == 0, want.stderr
    assert "ran as main" in want.stdout and "helper 42" in want.stdout
    assert_same_run(run_mode(mode, script, INFO_ARGS, scripts), want)


# --------------------------------------------------------------------------- exit status

EXIT_SCRIPT = """\
    import sys
    print("before exit", flush=True)
    arg = sys.argv[1]
    sys.exit(int(arg) if arg.isdigit() else arg)
"""


@pytest.mark.parametrize("exit_arg", ["3", "a message"])
@pytest.mark.parametrize("mode", COMMON_MODES)
def test_sys_exit_passes_through(mode, exit_arg, scripts):
    want = run_python("exit.py", [exit_arg], scripts)
    assert want.returncode == (3 if exit_arg == "3" else 1)
    assert_same_run(run_mode(mode, "exit.py", [exit_arg], scripts), want)


# --------------------------------------------------------------------------- uncaught exceptions

RAISE_SCRIPT = """\
    import torch


    def inner(x):
        y = x * 2 + 1
        return y.view(7)  # a shape error inside a frame that fastdyn captures


    def outer():
        try:
            inner(torch.ones(2, 3))
        except RuntimeError as e:
            raise ValueError("bad value") from e


    print("started", flush=True)
    outer()
"""
FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@pytest.mark.parametrize("mode", COMMON_MODES)
def test_uncaught_exception_shows_only_user_frames(mode, scripts):
    want = run_python("boom.py", [], scripts)
    got = run_mode(mode, "boom.py", [], scripts)
    assert want.returncode == 1
    assert got.returncode == 1
    assert got.stdout == want.stdout == "started\n"
    frames = FRAME_RE.findall(got.stderr)
    assert frames == FRAME_RE.findall(want.stderr)
    # The cause (caught in outer, raised in inner), then the ValueError (<module> -> outer).
    assert [name for _, _, name in frames] == ["outer", "inner", "<module>", "outer"]
    assert {file for file, _, _ in frames} == {str(scripts / "boom.py")}, "a non-user frame"
    assert "runpy" not in got.stderr
    assert got.stderr.splitlines()[-1] == "ValueError: bad value"
    assert got.stderr == want.stderr


# The native launcher compiles nothing itself (Py_RunMain does); python -m fastdyn does.
@pytest.mark.parametrize("mode", ["native-disabled", "python-m"])
def test_syntax_error_is_reported_like_python(mode, scripts):
    want = run_python("bad.py", [], scripts)
    assert want.returncode == 1 and "SyntaxError" in want.stderr
    assert "Traceback" not in want.stderr
    assert_same_run(run_mode(mode, "bad.py", [], scripts), want)


@pytest.mark.parametrize("mode", COMMON_MODES)
def test_missing_script_is_reported_like_python(mode, scripts):
    want = run_python("missing.py", [], scripts)
    got = run_mode(mode, "missing.py", [], scripts)
    assert want.returncode == 2
    assert got.returncode == 2
    assert got.stdout == ""
    # "<program>: can't open file '/abs/missing.py': [Errno 2] ..."; the program is argv[0].
    tail = want.stderr[want.stderr.index(": can't open file"):]
    assert str(scripts / "missing.py") in tail
    assert got.stderr.endswith(tail) and got.stderr.count("\n") == 1


# --------------------------------------------------------------------------- tensor math

TENSOR_SCRIPT = """\
    import json
    import sys

    import torch


    def block(x, w, b):
        h = torch.nn.functional.linear(x, w, b)
        h = torch.nn.functional.layer_norm(h, h.shape[-1:])
        return torch.softmax(h @ h.T, dim=-1) * 2 + h.relu().sum(dim=1, keepdim=True)


    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    for _ in range(3):
        out = block(x, w, b)
    print(out.dtype, tuple(out.shape))
    print(" ".join(f"{v:.4f}" for v in out.flatten().tolist()))
    fd = sys.modules.get("fastdyn")
    print("FASTDYN_STATS", json.dumps(fd.stats() if fd else None, default=str), file=sys.stderr)
"""


def _stats(run):
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("FASTDYN_STATS "), run.stderr
    return json.loads(line[len("FASTDYN_STATS "):])


@pytest.mark.parametrize("mode", COMMON_MODES + ["python-m-disabled"])
def test_tensor_math_matches_python_and_fastdyn_is_enabled(mode, scripts):
    want = run_python("math_script.py", [], scripts)
    assert want.returncode == 0, want.stderr
    assert _stats(want) is None  # plain python never imports fastdyn
    got = run_mode(mode, "math_script.py", [], scripts)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    stats = _stats(got)
    if mode == "native-disabled":
        assert stats is None, "FASTDYN_DISABLE=1: the native launcher must not import fastdyn"
    elif mode == "python-m-disabled":
        assert stats["frames_seen"] == 0, f"FASTDYN_DISABLE=1 but fastdyn saw frames: {stats}"
    else:
        assert stats["frames_seen"] > 0, f"the launcher did not enable fastdyn: {stats}"


# --------------------------------------------------------------------------- command line

def _version():
    with open(os.path.join(PKG_DIR, "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


@pytest.mark.parametrize("args, returncode, stream, expected", [
    ([], 2, "stderr", "usage: fastdyn run"),
    (["run"], 2, "stderr", "usage: fastdyn run"),
    (["frobnicate", "x.py"], 2, "stderr", "unknown command 'frobnicate'"),
    (["run", "--bogus", "x.py"], 2, "stderr", "unknown option '--bogus'"),
    (["--help"], 0, "stdout", "usage: fastdyn run"),
    (["--version"], 0, "stdout", None),
])
def test_native_command_line(args, returncode, stream, expected, tmp_path):
    _skip_unless_available(needs_launcher=True, needs_fastdyn=False)
    got = _run([LAUNCHER, *args], tmp_path)
    assert got.returncode == returncode
    other = got.stdout if stream == "stderr" else got.stderr
    assert other == ""
    text = getattr(got, stream)
    if expected is None:
        assert text.startswith(f"fastdyn {_version()} ("), text
        assert sys.version.split()[0] in text
    else:
        assert expected in text


@pytest.mark.parametrize("args, returncode, stream, expected", [
    ([], 2, "stderr", "usage: python -m fastdyn"),
    (["--version"], 0, "stdout", None),
])
def test_python_m_command_line(args, returncode, stream, expected, tmp_path):
    _skip_unless_available(needs_launcher=False, needs_fastdyn=True)
    got = _run([sys.executable, "-m", "fastdyn", *args], tmp_path)
    assert got.returncode == returncode
    text = getattr(got, stream)
    if expected is None:
        assert text.startswith(f"fastdyn {_version()} ("), text
    else:
        assert expected in text
