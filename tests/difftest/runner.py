"""Differential runner: a generated program (generator.py) runs eagerly and under fastdyn, and
everything a caller could observe must be the same.

One program = one module source defining make_state() and f(x, y, state). The source is written
to a temporary .py file (outside the standard library, which fastdyn skips) and imported under two
module names, so that its frames have a real filename and each side has its own globals. Each side
calls f once per entry of CALLS, each call on freshly made inputs and a fresh state: the first
call compiles, the second hits the cache, the third has another shape, the fourth a transposed
(non-contiguous) x, the fifth is the first shape again. The fastdyn side runs each call between
fastdyn.enable(backend=...) and fastdyn.disable() (fastdyn.reset() before the program), then
fastdyn.synchronize(), so that a later call that hits the cache runs the compiled kernels. The
backend is 'native' (fastdyn's default, fused LLVM kernels) or 'aten' (the same trace, guards,
continuations and replay, without the LLVM compile that dominates the cost); by default
(backend_for's 'mixed') every fourth seed runs 'native'.

Compared per call (a difference in any is a mismatch, named by its category):
  result          the return value: tensors (dtype, shape, strides, requires_grad, aliasing with
                  the inputs and with each other, values with tight tolerances), Python values with
                  == and their types, objects field by field, the identity structure (the same
                  object reached twice must be the same object under fastdyn too)
  exception       type, message, args and attributes of an exception escaping f, its
                  __context__/__cause__ types
  exception_line  function and line of the raising statement (the last traceback frame in the
                  program file)
  traceback       eager's program frames (function, line) must appear in order among fastdyn's
                  (continuation functions may add frames: the project's own contract, see
                  tests/python/conformance/test_exceptions.py)
  inputs          x and y after the call (in-place mutation)
  state           the state object after the call (its lists, dict, Box, ...; deep)
  print           what the program printed into state.buf
  globals         the module's globals that are values (g_n, g_list, g_t, ACCESS, ...)
  lifetime        which objects registered with state.track() were freed after the call and a
                  gc.collect() (the return value and the exception dropped first): an object
                  eager freed that fastdyn keeps alive is a leak
  backend         fastdyn.stats()["backend_failures"] > 0: a graph whose compilation failed ran on
                  aten instead (invisible to a user, a compiler bug all the same)
A crash (the worker process dies) and a hang are reported by the parent (WorkerPool).

Run as `python runner.py --worker`, it is a worker process that reads JSON requests from stdin and
writes JSON answers to stdout (see serve()). The parent side is WorkerPool / run_seeds / shrink.
"""
import ast
import gc
import importlib.util
import io
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import generator  # noqa: E402

# (n, transposed x): the shapes of the successive calls of one program
CALLS = [(4, False), (4, False), (3, False), (4, True), (4, False)]
RTOL = 1e-5
ATOL = 1e-5

CATEGORIES = ("crash", "hang", "error", "exception", "exception_line", "traceback", "result",
              "inputs", "state", "print", "globals", "lifetime", "backend")

# --------------------------------------------------------------------------- worker side

_torch = None
_fastdyn = None


def _imports():
    global _torch, _fastdyn
    if _torch is None:
        import torch
        _torch = torch
        try:
            import fastdyn
        except ImportError:
            sys.path.insert(0, os.path.join(ROOT, "python"))
            import fastdyn
        _fastdyn = fastdyn
        # Everything imported so far lives for the whole process: keep it out of the gc.collect()
        # after every call (a full collection of torch's objects costs ~50 ms).
        gc.collect()
        gc.freeze()
    return _torch, _fastdyn


def make_inputs(seed, call):
    torch, _ = _imports()
    n, transposed = CALLS[call]
    g = torch.Generator().manual_seed(seed * 131 + call)
    x = torch.randn(n, n, generator=g)
    y = torch.randn(n, n, generator=g)
    if transposed:
        x = x.t()
    return x, y


class Canon:
    """Turns values into comparable nested tuples. Tensors become ('tensor', metadata..., values)
    with their values cloned; a mutable object reached a second time becomes ('ref', k), so the
    identity structure is compared too; tensors sharing storage name the first one."""

    def __init__(self):
        self.memo = {}
        self.keep = []
        self.storages = {}

    def _seen(self, v):
        k = self.memo.get(id(v))
        if k is not None:
            return ("ref", k)
        self.memo[id(v)] = len(self.keep)
        self.keep.append(v)
        return None

    def __call__(self, v, depth=0):
        torch = _torch
        if depth > 40:
            return ("too-deep",)
        t = type(v)
        if v is None or t in (bool, int, str, bytes):
            return (t.__name__, v)
        if t is float:
            return ("float", v)
        if t is complex:
            return ("complex", v)
        if isinstance(v, torch.Tensor):
            ref = self._seen(v)
            if ref:
                return ref
            idx = self.memo[id(v)]
            share = None
            if v.numel():
                ptr = v.untyped_storage().data_ptr()
                first = self.storages.setdefault(ptr, idx)
                if first != idx:
                    share = (first, v.storage_offset())
            grad = None
            if v.is_leaf and v.requires_grad:
                grad = self(v.grad, depth + 1) if v.grad is not None else None
            return ("tensor", str(v.dtype), tuple(v.shape), v.stride(), v.requires_grad, v.is_leaf,
                    share, v.detach().clone(), grad)
        if isinstance(v, (torch.Size,)):
            return ("size", tuple(v))
        if isinstance(v, torch.dtype):
            return ("dtype", str(v))
        if t is tuple:
            return ("tuple", tuple(self(e, depth + 1) for e in v))
        if t is list:
            return self._seen(v) or ("list", tuple(self(e, depth + 1) for e in v))
        if t is dict:
            return self._seen(v) or ("dict", tuple((self(k, depth + 1), self(e, depth + 1))
                                                   for k, e in v.items()))
        if isinstance(v, (set, frozenset)):
            return (t.__name__, tuple(sorted(repr(e) for e in v)))
        if isinstance(v, io.StringIO):
            return self._seen(v) or ("stringio", v.getvalue())
        if isinstance(v, BaseException):
            ref = self._seen(v)
            if ref:
                return ref
            d = _object_dict(v)
            return ("exc", t.__qualname__, str(v), self(v.args, depth + 1),
                    tuple((k, self(e, depth + 1)) for k, e in d.items()))
        if isinstance(v, type):
            return ("type", v.__qualname__)
        if callable(v) and hasattr(v, "__code__"):
            return ("function", getattr(v, "__qualname__", "?"))
        if t.__name__ in ("weakref", "ReferenceType"):
            return ("weakref",)
        if t.__name__ == "module":
            return ("module", v.__name__)
        d = _object_dict(v)
        if d is not None:
            ref = self._seen(v)
            if ref:
                return ref
            items = tuple((k, self(e, depth + 1)) for k, e in d.items() if k != "refs" or
                          t.__name__ != "State")
            return ("obj", t.__qualname__, items)
        return ("other", t.__qualname__)


def _object_dict(v):
    try:
        d = object.__getattribute__(v, "__dict__")
    except AttributeError:
        return None
    return d if isinstance(d, dict) else None


def _floats_close(a, b):
    if math.isnan(a) and math.isnan(b):
        return True
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def diff(a, b, path="value"):
    """The first difference between two canonical values (eager `a`, fastdyn `b`), or None."""
    torch = _torch
    if a[0] != b[0]:
        return f"{path}: eager {_short(a)} != fastdyn {_short(b)}"
    kind = a[0]
    if kind == "float":
        if not _floats_close(a[1], b[1]):
            return f"{path}: eager {a[1]!r} != fastdyn {b[1]!r}"
        return None
    if kind == "tensor":
        names = ("dtype", "shape", "strides", "requires_grad", "is_leaf", "shares storage with")
        for name, ea, eb in zip(names, a[1:7], b[1:7]):
            if ea != eb:
                return f"{path}: {name}: eager {ea} != fastdyn {eb}"
        ea, eb = a[7], b[7]
        if ea.dtype.is_floating_point:
            # torch.testing.assert_close's rule (|b - a| <= atol + rtol * |a|, NaN equal to NaN),
            # without its cost (it imports torch.distributed and sympy on first use)
            close = torch.isclose(eb, ea, rtol=RTOL, atol=ATOL, equal_nan=True)
        else:
            close = eb == ea
        if not bool(close.all()):
            bad = (~close).nonzero()
            idx = tuple(bad[0].tolist())
            msg = (f"{len(bad)} of {ea.numel()} elements differ, first at {list(idx)}: "
                   f"eager {ea[idx].item()!r} fastdyn {eb[idx].item()!r}")
            return f"{path}: values differ: {msg}\n    eager   {ea.tolist()}\n    fastdyn {eb.tolist()}"
        if (a[8] is None) != (b[8] is None):
            return f"{path}.grad: eager {'None' if a[8] is None else 'set'} != fastdyn {'None' if b[8] is None else 'set'}"
        if a[8] is not None:
            return diff(a[8], b[8], path + ".grad")
        return None
    if kind in ("tuple", "list"):
        if len(a[1]) != len(b[1]):
            return f"{path}: length eager {len(a[1])} != fastdyn {len(b[1])}: eager {_short(a)} fastdyn {_short(b)}"
        for i, (ea, eb) in enumerate(zip(a[1], b[1])):
            d = diff(ea, eb, f"{path}[{i}]")
            if d:
                return d
        return None
    if kind == "dict":
        ka = [k for k, _ in a[1]]
        kb = [k for k, _ in b[1]]
        if ka != kb:
            return f"{path}: keys eager {[k[1] for k in ka]} != fastdyn {[k[1] for k in kb]}"
        for (k, ea), (_, eb) in zip(a[1], b[1]):
            d = diff(ea, eb, f"{path}[{k[1]!r}]")
            if d:
                return d
        return None
    if kind == "obj":
        if a[1] != b[1]:
            return f"{path}: type eager {a[1]} != fastdyn {b[1]}"
        return _diff_fields(a[2], b[2], path, a[1])
    if kind == "exc":
        if a[1:3] != b[1:3]:
            return f"{path}: eager {a[1]}({a[2]!r}) != fastdyn {b[1]}({b[2]!r})"
        return diff(a[3], b[3], path + ".args") or _diff_fields(a[4], b[4], path, a[1])
    if a != b:
        return f"{path}: eager {_short(a)} != fastdyn {_short(b)}"
    return None


def _diff_fields(fa, fb, path, tname):
    na = [k for k, _ in fa]
    nb = [k for k, _ in fb]
    if set(na) != set(nb):
        return (f"{path} ({tname}): attributes eager {na} != fastdyn {nb}")
    db = dict(fb)
    for k, ea in fa:
        d = diff(ea, db[k], f"{path}.{k}")
        if d:
            return d
    if na != nb:
        return f"{path} ({tname}): attribute order eager {na} != fastdyn {nb}"
    return None


def _short(c, limit=300):
    s = _render(c)
    return s if len(s) <= limit else s[:limit] + "..."


def _render(c):
    """A readable form of a canonical value."""
    if not isinstance(c, tuple) or not c:
        return repr(c)
    kind = c[0]
    if kind in ("int", "bool", "str", "NoneType", "bytes", "float", "complex"):
        return repr(c[1])
    if kind == "tensor":
        vals = c[7]
        body = vals.tolist() if vals.numel() <= 16 else f"<{vals.numel()} values>"
        return f"tensor({body}, shape={list(c[2])}{', requires_grad' if c[4] else ''})"
    if kind == "tuple":
        return "(" + ", ".join(_render(e) for e in c[1]) + ("," if len(c[1]) == 1 else "") + ")"
    if kind == "list":
        return "[" + ", ".join(_render(e) for e in c[1]) + "]"
    if kind == "dict":
        return "{" + ", ".join(f"{_render(k)}: {_render(v)}" for k, v in c[1]) + "}"
    if kind == "obj":
        return f"{c[1]}(" + ", ".join(f"{k}={_render(v)}" for k, v in c[2]) + ")"
    if kind == "exc":
        return f"{c[1]}({c[2]!r})"
    if kind == "ref":
        return f"<same object as #{c[1]}>"
    if kind == "size":
        return f"torch.Size({list(c[1])})"
    return repr(c)


def _program_frames(exc, prog_file):
    return [(fr.name, fr.lineno) for fr in traceback.extract_tb(exc.__traceback__)
            if fr.filename == prog_file]


def _chain(exc):
    out = []
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append((type(e.__cause__).__name__ if e.__cause__ is not None else None,
                    type(e.__context__).__name__ if e.__context__ is not None else None))
        e = e.__context__
    return tuple(out)


_counter = [0]
LAST_STATS = {}


def load_module(source, path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _call_plain(fn, *args):
    return fn(*args)


_BACKEND = ["native"]


def backend_for(seed, policy="mixed"):
    """fastdyn's backend for a program. 'native' (the default backend: fused LLVM kernels) costs
    an LLVM compile per new graph (~0.3 s a program on this machine with a cold kernel cache);
    'aten' runs the same trace, guards, continuations and side-effect replay without LLVM.
    'mixed' gives every fourth program 'native' and the rest 'aten'."""
    if policy == "mixed":
        return "native" if seed % 4 == 0 else "aten"
    return policy


def _call_fastdyn(fn, *args):
    _fastdyn.enable(backend=_BACKEND[0])
    try:
        return fn(*args)
    finally:
        _fastdyn.disable()


def run_side(source, seed, mode, prog_file):
    """Runs every call of CALLS on one side ('eager' or 'fastdyn'); a list of per-call records."""
    torch, fastdyn = _imports()
    _counter[0] += 1
    modname = f"difftest_{mode}_{os.getpid()}_{_counter[0]}"
    mod = load_module(source, prog_file, modname)
    caller = _call_fastdyn if mode == "fastdyn" else _call_plain
    records = []
    try:
        if mode == "fastdyn":
            fastdyn.reset()
        for call in range(len(CALLS)):
            x, y = make_inputs(seed, call)
            state = mod.make_state()
            grad_mode = torch.is_grad_enabled()
            result = exc = None
            try:
                result = caller(mod.f, x, y, state)
            except Exception as e:  # noqa: BLE001 - the program's exceptions are data
                exc = e
            finally:
                if mode == "fastdyn":
                    fastdyn.synchronize()
            rec = {}
            rec["grad_mode_leak"] = torch.is_grad_enabled() != grad_mode
            torch.set_grad_enabled(grad_mode)
            canon = Canon()
            rec["inputs"] = canon((x, y))
            rec["result"] = canon(result)
            if exc is not None:
                frames = _program_frames(exc, prog_file)
                rec["exception"] = ("raised", type(exc).__qualname__, str(exc), canon(exc.args),
                                    canon(_object_dict(exc) or {}), _chain(exc))
                rec["exception_line"] = frames[-1] if frames else None
                rec["traceback"] = tuple(frames)
                rec["exc_type"] = type(exc).__name__
            else:
                rec["exception"] = ("none",)
                rec["exception_line"] = None
                rec["traceback"] = ()
                rec["exc_type"] = None
            buf = getattr(state, "buf", None)
            rec["print"] = buf.getvalue() if isinstance(buf, io.StringIO) else None
            rec["state"] = canon(state)
            rec["globals"] = canon({k: v for k, v in mod.__dict__.items()
                                    if not k.startswith("__") and not callable(v)
                                    and type(v).__name__ != "module"})
            # lifetimes: drop what the caller would drop, then collect
            del canon
            result = exc = None
            gc.collect()
            refs = getattr(state, "refs", {})
            rec["dead"] = tuple(sorted(k for k, r in refs.items() if r() is None))
            rec["tracked"] = tuple(sorted(refs))
            records.append(rec)
            del state, x, y
    finally:
        if mode == "fastdyn":
            fastdyn.disable()
            LAST_STATS.clear()
            LAST_STATS.update(fastdyn.stats())
            fastdyn.reset()
        sys.modules.pop(modname, None)
    return records


def compare_records(eager, other):
    """[(call, category, detail)] for every difference (at most one per category and call)."""
    diffs = []
    for call, (a, b) in enumerate(zip(eager, other)):
        ea, eb = a["exception"], b["exception"]
        if ea[0] != eb[0] or ea[1:3] != eb[1:3]:
            exc_detail = f"eager {_exc_str(ea)} != fastdyn {_exc_str(eb)}"
        elif ea[0] == "raised":
            exc_detail = (diff(ea[3], eb[3], "exception.args") or diff(ea[4], eb[4], "exception.__dict__")
                          or (None if ea[5] == eb[5] else
                              f"exception (__cause__, __context__) types eager {ea[5]} != fastdyn {eb[5]}"))
        else:
            exc_detail = None
        if exc_detail:
            diffs.append((call, "exception", exc_detail))
        elif a["exception_line"] != b["exception_line"]:
            diffs.append((call, "exception_line",
                          f"{a['exc_type']} raised at line {a['exception_line']} (eager) vs line {b['exception_line']} (fastdyn)"))
        elif not _subsequence(a["traceback"], b["traceback"]):
            # fastdyn's continuation functions may add frames (the project's own contract,
            # tests/python/conformance/test_exceptions.py): eager's frames must appear in order
            diffs.append((call, "traceback",
                          f"program frames (function, line) eager {a['traceback']} are not a "
                          f"subsequence of fastdyn's {b['traceback']}"))
        for cat, path in (("result", "result"), ("inputs", "(x, y)"), ("state", "state"),
                          ("globals", "globals")):
            d = diff(a[cat], b[cat], path)
            if d:
                diffs.append((call, cat, d))
        if a["print"] != b["print"]:
            diffs.append((call, "print", f"eager printed {a['print']!r}, fastdyn {b['print']!r}"))
        if a["dead"] != b["dead"]:
            kept = sorted(set(a["dead"]) - set(b["dead"]))
            freed = sorted(set(b["dead"]) - set(a["dead"]))
            detail = []
            if kept:
                detail.append(f"freed by eager but alive under fastdyn: {kept}")
            if freed:
                detail.append(f"alive in eager but freed under fastdyn: {freed}")
            diffs.append((call, "lifetime", "; ".join(detail)))
        if b["grad_mode_leak"] != a["grad_mode_leak"]:
            diffs.append((call, "state", "grad mode after the call differs"))
    return diffs


def _subsequence(want, got):
    it = iter(got)
    return all(f in it for f in want)


def _exc_str(e):
    return "no exception" if e[0] == "none" else f"{e[1]}({e[2]!r})"


def _prog_path(tag):
    d = os.path.join(tempfile.gettempdir(), "fastdyn_difftest")
    os.makedirs(d, exist_ok=True)
    _counter[0] += 1
    return os.path.join(d, f"prog_{os.getpid()}_{_counter[0]}_{tag}.py")


def compare_program(source, seed=0, other_mode="fastdyn", other_source=None, backend="native"):
    """Runs `source` eagerly and under `other_mode` ('fastdyn', or 'eager' for self-tests, where
    `other_source` may be a deliberately different program) with fastdyn's `backend`; a JSON-able
    answer."""
    t0 = time.perf_counter()
    _BACKEND[0] = backend
    path = _prog_path(str(seed))
    other_path = path
    with open(path, "w") as fh:
        fh.write(source)
    if other_source is not None:
        other_path = path[:-3] + "_other.py"
        with open(other_path, "w") as fh:
            fh.write(other_source)
    try:
        try:
            eager = run_side(source, seed, "eager", path)
        except Exception:  # noqa: BLE001 - a program that does not load
            return {"status": "error", "detail": traceback.format_exc(limit=3),
                    "seconds": time.perf_counter() - t0}
        try:
            other = run_side(other_source or source, seed, other_mode, other_path)
        except Exception:  # noqa: BLE001
            return {"status": "mismatch", "categories": ["error"],
                    "diffs": [[-1, "error", "the fastdyn side failed outside the program:\n" + traceback.format_exc(limit=5)]],
                    "seconds": time.perf_counter() - t0,
                    "eager_exceptions": [r["exc_type"] for r in eager]}
        diffs = compare_records(eager, other)
        failures = LAST_STATS.get("backend_failures", 0) if other_mode == "fastdyn" else 0
        if failures:
            diffs.append((-1, "backend", f"{failures} graph(s) fell back to aten because compiling "
                          "them failed (fastdyn.stats()['backend_failures'])"))
    finally:
        for p in {path, other_path}:
            try:
                os.unlink(p)
            except OSError:
                pass
    cats = sorted({c for _, c, _ in diffs}, key=CATEGORIES.index)
    return {"status": "mismatch" if diffs else "ok", "categories": cats, "backend": backend,
            "diffs": [list(d) for d in diffs],
            "eager_exceptions": [r["exc_type"] for r in eager],
            "other_exceptions": [r["exc_type"] for r in other],
            "tracked": sum(len(r["tracked"]) for r in eager),
            "seconds": time.perf_counter() - t0}


def serve():
    """Worker loop: one JSON request per line on stdin, one JSON answer per line on the original
    stdout (fd 1 is pointed at stderr, so stray prints cannot corrupt the protocol)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _imports()
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "seed":
                src = generator.generate(req["seed"])
                ans = compare_program(src, req["seed"],
                                      backend=backend_for(req["seed"], req.get("backend", "mixed")))
            elif op == "source":
                ans = compare_program(req["source"], req.get("seed", 0), req.get("other_mode", "fastdyn"),
                                      req.get("other_source"), req.get("backend", "native"))
            elif op == "exec":   # self-tests of crash detection
                exec(req["code"], {})
                ans = {"status": "ok"}
            else:
                ans = {"status": "error", "detail": f"unknown op {op!r}"}
        except Exception:  # noqa: BLE001
            ans = {"status": "error", "detail": traceback.format_exc()}
        ans["id"] = req.get("id")
        out.write(json.dumps(ans) + "\n")


# --------------------------------------------------------------------------- parent side

class Worker:
    """One worker process; a crash or a hang is an answer, and the next request starts a new one."""

    def __init__(self, timeout=120.0, env=None):
        self.timeout = timeout
        self.env = env
        self.proc = None
        self.log = None

    def _start(self):
        self.log = tempfile.TemporaryFile(mode="w+b")
        env = dict(os.environ)
        env.setdefault("PYTHONHASHSEED", "0")
        env.setdefault("OMP_NUM_THREADS", "1")
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, cwd=ROOT)
        ready = self._read(300.0)
        if not ready or not ready.get("ready"):
            raise RuntimeError("difftest worker did not start:\n" + self._log_tail())

    def _log_tail(self, n=3000):
        if not self.log:
            return ""
        self.log.seek(0)
        data = self.log.read().decode(errors="replace")
        return data[-n:]

    def _read(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return {"eof": True}
            buf += chunk
            if buf.endswith(b"\n"):
                return json.loads(buf.decode().splitlines()[-1])

    def request(self, req):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        ans = self._read(self.timeout)
        if ans is None:          # hang
            self.proc.kill()
            self.proc.wait()
            tail = self._log_tail()
            self.proc = None
            return {"status": "mismatch", "categories": ["hang"],
                    "diffs": [[-1, "hang", f"no answer within {self.timeout:.0f} s\n{tail}"]],
                    "seconds": time.perf_counter() - t0}
        if ans.get("eof"):       # crash
            rc = self.proc.wait()
            tail = self._log_tail()
            self.proc = None
            return {"status": "mismatch", "categories": ["crash"],
                    "diffs": [[-1, "crash", f"worker died with return code {rc}\n{tail}"]],
                    "returncode": rc, "seconds": time.perf_counter() - t0}
        return ans

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class WorkerPool:
    def __init__(self, jobs=2, timeout=120.0):
        self.workers = [Worker(timeout) for _ in range(max(1, jobs))]

    def map(self, requests, on_answer=None):
        """Answers of `requests` (in order), spread over the workers."""
        answers = [None] * len(requests)
        lock = threading.Lock()
        nxt = [0]

        def loop(w):
            while True:
                with lock:
                    i = nxt[0]
                    if i >= len(requests):
                        return
                    nxt[0] += 1
                ans = w.request(requests[i])
                answers[i] = ans
                if on_answer:
                    with lock:
                        on_answer(requests[i], ans)

        threads = [threading.Thread(target=loop, args=(w,)) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return answers

    def close(self):
        for w in self.workers:
            w.close()


def run_seeds(seeds, pool, on_answer=None, backend="mixed"):
    answers = pool.map([{"op": "seed", "seed": s, "backend": backend} for s in seeds], on_answer)
    for s, a in zip(seeds, answers):
        a["seed"] = s
    return answers


# --------------------------------------------------------------------------- shrinking

_STMT_FIELDS = ("body", "orelse", "finalbody", "handlers")


def _stmt_lists(tree):
    out = []
    for node in ast.walk(tree):
        for field in _STMT_FIELDS:
            lst = getattr(node, field, None)
            if isinstance(lst, list) and lst and isinstance(lst[0], (ast.stmt, ast.excepthandler)):
                out.append((node, field))
    return out


def _list_candidates(source, li):
    """Smaller variants of statement list `li` of `source`, biggest cuts first: chunks of
    statements removed (halves, quarters, ... single statements), then compound statements
    replaced by their bodies."""
    try:
        lists = _stmt_lists(ast.parse(source))
    except SyntaxError:
        return
    if li >= len(lists):
        return
    n = len(getattr(*lists[li]))
    size = max(1, n // 2)
    while size >= 1:
        for start in range(n - size, -1, -size):
            yield ("delete", li, start, size)
        if size == 1:
            break
        size //= 2
    for i in range(n - 1, -1, -1):
        yield ("unwrap", li, i, 1)


def _apply(source, cand):
    op, li, start, size = cand
    tree = ast.parse(source)
    lists = _stmt_lists(tree)
    if li >= len(lists):
        return None
    node, field = lists[li]
    lst = getattr(node, field)
    if start + size > len(lst):
        return None
    if op == "delete":
        new = lst[:start] + lst[start + size:]
        if not new and field == "body":
            new = [ast.Pass()]
        if not new and field == "handlers" and not node.finalbody:
            return None
    else:
        s = lst[start]
        if isinstance(s, ast.If):
            repl = s.body + s.orelse
        elif isinstance(s, (ast.For, ast.While, ast.With)):
            repl = s.body
        elif isinstance(s, ast.Try):
            repl = s.body + s.finalbody
        else:
            return None
        new = lst[:start] + repl + lst[start + 1:]
    setattr(node, field, new)
    try:
        out = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
        compile(out, "<shrink>", "exec")
    except Exception:  # noqa: BLE001
        return None
    return out if out != source else None


def shrink(source, keep, max_seconds=600.0, log=None):
    """Deletes statements and unwraps blocks while keep(candidate_source) holds (to a fixpoint, or
    until max_seconds); returns the smallest program found."""
    t0 = time.monotonic()
    best = ast.unparse(ast.parse(source)) + "\n"
    if not keep(best):
        best = source
    rejected = set()
    tries = 0

    def timeout():
        return time.monotonic() - t0 > max_seconds

    changed = True
    while changed and not timeout():
        changed = False
        li = 0
        while li < len(_stmt_lists(ast.parse(best))) and not timeout():
            progress = True
            while progress and not timeout():
                progress = False
                for cand in _list_candidates(best, li):
                    if timeout():
                        break
                    new = _apply(best, cand)
                    if new is None or new in rejected:
                        continue
                    tries += 1
                    if keep(new):
                        best = new
                        changed = progress = True
                        if log:
                            log(f"  shrink: {len(best.splitlines())} lines after {tries} tries")
                        break
                    rejected.add(new)
            li += 1
    return best


def keep_predicate(worker, answer, seed=0):
    """keep(src): src still shows a mismatch of the answer's first category, and neither side
    raises an exception type that the original program did not raise (deleting a definition
    must not turn the program into a NameError or AttributeError)."""
    cats = answer.get("categories", [])
    target = cats[0] if cats else None
    allowed = set(answer.get("eager_exceptions") or []) | {None}
    allowed_other = allowed | set(answer.get("other_exceptions") or [])

    backend = answer.get("backend", "native")

    def keep(src):
        ans = worker.request({"op": "source", "source": src, "seed": seed, "backend": backend})
        if target in ("crash", "hang"):
            return target in ans.get("categories", [])
        if ans.get("status") != "mismatch" or target not in ans.get("categories", []):
            return False
        return (set(ans.get("eager_exceptions") or []) <= allowed
                and set(ans.get("other_exceptions") or []) <= allowed_other)
    return keep


# --------------------------------------------------------------------------- reproducers

REPRO_DRIVER = r'''

# ---------------------------------------------------------------- driver: eager, then fastdyn
# (appended after the program, so the program's line numbers are the ones reported above)
import copy as _copy
import gc as _gc
import traceback as _tb
import torch
import fastdyn

_CALLS = {calls!r}
_SEED = {seed}
_BACKEND = {backend!r}
_G0 = {{k: _copy.deepcopy(v) for k, v in list(globals().items())
       if k in ('g_n', 'g_list', 'g_t', 'ACCESS')}}


def _inputs(call):
    n, transposed = _CALLS[call]
    g = torch.Generator().manual_seed(_SEED * 131 + call)
    x = torch.randn(n, n, generator=g)
    y = torch.randn(n, n, generator=g)
    return (x.t() if transposed else x), y


def _call(use_fastdyn, *args):
    if use_fastdyn:
        fastdyn.enable(backend=_BACKEND)
    try:
        return f(*args)
    finally:
        fastdyn.disable()
        fastdyn.synchronize()


def _run(use_fastdyn):
    for k, v in _G0.items():
        globals()[k] = _copy.deepcopy(v)
    fastdyn.reset()
    lines = []
    for call in range(len(_CALLS)):
        x, y = _inputs(call)
        state = make_state()
        try:
            r, e = _call(use_fastdyn, x, y, state), None
        except Exception as exc:
            r, e = None, exc
        out = [f"call {{call}}:"]
        if e is not None:
            where = [(fr.name, fr.lineno) for fr in _tb.extract_tb(e.__traceback__) if fr.filename == __file__]
            out.append(f"  raised {{type(e).__name__}}({{e}}) at {{where[-1:]}}")
        else:
            out.append(f"  returned {{r!r}}")
            if isinstance(r, tuple):
                out.append(f"  returned objects' fields: {{[vars(v) for v in r if hasattr(v, '__dict__')]}}")
            elif hasattr(r, '__dict__'):
                out.append(f"  returned object's fields: {{vars(r)}}")
        out.append(f"  x, y after: {{x.tolist()}}, {{y.tolist()}}")
        if hasattr(state, '__dict__'):
            out.append(f"  state: {{ {{k: v for k, v in vars(state).items() if k not in ('refs', 'buf')}} }}")
            if hasattr(state, 'buf'):
                out.append(f"  printed: {{state.buf.getvalue()!r}}")
        if _G0:
            out.append(f"  globals: {{ {{k: globals()[k] for k in _G0}} }}")
        r = e = None
        _gc.collect()
        refs = getattr(state, 'refs', {{}})
        if refs:
            out.append(f"  tracked objects freed after the call: {{sorted(k for k, w in refs.items() if w() is None)}}")
        lines.append("\n".join(out))
    return lines


torch.set_printoptions(precision=4)
_eager = _run(False)
_fd = _run(True)
for _a, _b in zip(_eager, _fd):
    if _a == _b:
        print("SAME    ", _a.replace("\n", "\n         "))
    else:
        print("EAGER   ", _a.replace("\n", "\n         "))
        print("FASTDYN ", _b.replace("\n", "\n         "))
'''


def reproducer(source, seed, answer):
    """A standalone script: the program, then a driver that runs it eagerly and under fastdyn
    and prints both, then (as comments) what the runner found."""
    tail = [f"# fastdyn differential-test reproducer: seed {seed}",
            "# mismatch: " + ", ".join(answer.get("categories", []))]
    for call, cat, detail in answer.get("diffs", [])[:6]:
        for i, line in enumerate(str(detail).splitlines()[:4]):
            prefix = f"call {call} {cat}: " if i == 0 else "      "
            tail.append("#   " + prefix + line[:300])
    return (source + REPRO_DRIVER.format(calls=CALLS, seed=seed, backend=answer.get("backend", "native"))
            + "\n" + "\n".join(tail) + "\n")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        serve()
    else:
        # python runner.py SEED [native|aten|mixed]: run one program in this process, print the answer
        s = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        src = generator.generate(s)
        print(src)
        print(json.dumps(compare_program(src, s, backend=backend_for(s, sys.argv[2] if len(sys.argv) > 2
                                                                   else "mixed")), indent=1))
