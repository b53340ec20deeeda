"""`python -m fastdyn [run] script.py [args...]`: run a script as __main__ with fastdyn enabled.

The pure-Python twin of the native launcher (pymodule/launcher/main.cpp). The native one hands
CPython the command line `python script.py ...` and lets Py_RunMain do the rest; here we are
already inside an interpreter that ran runpy and this package, so we redo by hand what python's
main() does for a script, and hide our own frames:

- sys.argv is [script, *args] with script as typed; sys.path[0] is the directory of the script
  after resolving symlinks (left alone under -P, as python does);
- the script runs in a fresh module installed as sys.modules["__main__"], with the globals python
  gives a script (__file__ is the script joined to the working directory, not normalised);
- a missing script prints python's message and exits with status 2;
- SystemExit passes through unchanged; any other uncaught exception goes to sys.excepthook with a
  traceback that starts at the script's own frame (no runpy or fastdyn frames), and the process
  exits with status 1 — or dies of SIGINT after a KeyboardInterrupt, as python does.

FASTDYN_DISABLE=1 (any value but empty or "0") runs the script without calling enable().
"""
import atexit
import builtins
import importlib.machinery
import os
import signal
import sys
import types

USAGE = """\
usage: python -m fastdyn [run] [--report out.html] [--] script.py [args...]
       python -m fastdyn --help | --version

Runs script.py as __main__, exactly like `python script.py args...`, with the fastdyn JIT
enabled (fastdyn.enable()).

  --report out.html   write an HTML report of graphs, breaks, recompiles and kernels when the
                      script exits (the same as FASTDYN_REPORT=out.html)

environment:
  FASTDYN_DISABLE=1   run the script without enabling fastdyn (for A/B comparisons)
  FASTDYN_LOG=graph_breaks,recompiles,guards,graphs,code   diagnostics on stderr
"""

# Exit status for command-line misuse, as python uses for a bad option or a missing script.
USAGE_EXIT = 2


def disabled_by_env():
    """True when FASTDYN_DISABLE asks to run without the JIT (same rule as the native launcher)."""
    return os.environ.get("FASTDYN_DISABLE", "") not in ("", "0")


def main(argv=None):
    """Entry point of `python -m fastdyn`; returns an exit status or raises SystemExit."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "run":
        args = args[1:]
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if args and args[0] in ("-V", "--version"):
        from . import __version__
        print(f"fastdyn {__version__} (Python {sys.version.split()[0]}, {sys.executable})")
        return 0
    if args and (args[0] == "--report" or args[0].startswith("--report=")):
        path = args[0][len("--report="):] if "=" in args[0] else (args[1] if len(args) > 1 else "")
        if not path:
            return _usage_error("--report needs the report's file name")
        args = args[1:] if "=" in args[0] else args[2:]
        os.environ["FASTDYN_REPORT"] = path
        from . import _report
        _report.install_from_environment()
    if args and args[0] == "--":
        args = args[1:]
    elif args and args[0].startswith("-"):
        return _usage_error(
            f"unknown option '{args[0]}' (options for the script go after its name)")
    if not args:
        return _usage_error("missing the script to run")
    return run_script(args[0], args[1:])


def run_script(script, args):
    """Runs `script` as __main__ with sys.argv = [script, *args]; see the module docstring."""
    # python joins a relative script name to the working directory without normalising it.
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        program = sys.orig_argv[0] if sys.orig_argv else sys.executable
        sys.stderr.write(f"{program}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}\n")
        return USAGE_EXIT

    if not disabled_by_env():
        from . import enable
        enable()

    sys.argv[:] = [script, *args]
    if not sys.flags.safe_path:
        path0 = os.path.dirname(os.path.realpath(script))
        if sys.path:
            sys.path[0] = path0  # python -m put the working directory there
        else:
            sys.path.insert(0, path0)
    module = _fresh_main_module(path)
    sys.modules["__main__"] = module

    try:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: B036 — reported as python's top level would
        _report_uncaught(exc)
    return 0


def _usage_error(message):
    sys.stderr.write(f"fastdyn: {message}\n{USAGE}")
    return USAGE_EXIT


def _fresh_main_module(path):
    """A module with the globals, in the order, that python gives a script run as __main__."""
    module = types.ModuleType("__main__")
    module.__annotations__ = {}
    module.__builtins__ = builtins
    module.__file__ = path
    module.__cached__ = None
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    return module


def _report_uncaught(exc):
    """Prints `exc` like python's top level, from the script's frame on, and exits."""
    tb = exc.__traceback__
    # The traceback starts at the frame that caught it, ours; the script's frames follow. A
    # compile error has none of them, and python shows it without a traceback.
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if hasattr(sys, "last_exc"):  # 3.12
        sys.last_exc = exc
    sys.excepthook(type(exc), exc, tb)
    if isinstance(exc, KeyboardInterrupt):
        # python exits by re-raising SIGINT on itself after its shutdown, so that the parent
        # sees a death by signal; do the same after the atexit handlers and a flush.
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(1)
