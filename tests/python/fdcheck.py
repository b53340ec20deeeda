"""Shared helpers of the end-to-end pytest suite: import fastdyn, compare fastdyn with eager.

`check(fn, *args, graphs=1)` is the workhorse of the suite. It runs `fn` eagerly on cloned inputs,
then through `fastdyn.jit(fn)` twice (the compile call and the cached call), and demands that
fastdyn's results are indistinguishable from eager: the same values, dtypes, shapes, strides,
requires_grad, the same aliasing between outputs and inputs, and the same in-place effects on the
inputs. It then asks `fastdyn.explain` for the graph count.

The import of fastdyn is guarded so that, while the package is broken or unbuilt, every test that
needs it fails with the import error (conftest.py's autouse fixture does that) instead of the whole
suite dying at collection, and the tests that only check the suite itself still run.
"""
import dis
import os
import sys
import traceback
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import fastdyn  # noqa: F401
    IMPORT_ERROR = None
except ImportError:
    # Not installed (pip install -e .): fall back to the source tree, where CMake puts _C.
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.modules.pop("fastdyn", None)
    try:
        import fastdyn  # noqa: F401
        IMPORT_ERROR = None
    except Exception:  # a missing _C or a broken symbol: report it in every test
        fastdyn = None
        IMPORT_ERROR = traceback.format_exc()
except Exception:
    fastdyn = None
    IMPORT_ERROR = traceback.format_exc()


# --------------------------------------------------------------------------- cloning inputs

def clone_tensor(t):
    """A copy of `t` with the same sizes, strides (non-dense and expanded ones included), dtype
    and requires_grad, so that fastdyn sees exactly the layout eager saw."""
    src = t.detach()
    if any(st == 0 and n > 1 for st, n in zip(src.stride(), src.shape)):
        # An expanded tensor: copy the un-expanded base and expand it again.
        index = tuple(slice(0, 1) if st == 0 else slice(None)
                      for st in src.stride())
        out = clone_tensor(src[index]).detach().expand(src.shape)
    else:
        out = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=src.device)
        out.copy_(src)
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def clone_tree(obj):
    if isinstance(obj, torch.Tensor):
        return clone_tensor(obj)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(clone_tree(o) for o in obj)
    if isinstance(obj, list):
        return [clone_tree(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    return obj


def tensors_of(obj):
    """Tensors of a nested structure, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in tensors_of(o)]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensors_of(obj[k])]
    return []


# --------------------------------------------------------------------------- comparing results

def assert_same(got, expected, what="output", check_strides=True, rtol=None, atol=None):
    """fastdyn's `got` must be indistinguishable from eager's `expected`."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: expected a tensor, got {type(got)}"
        assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != eager {expected.dtype}"
        assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)} != eager {tuple(expected.shape)}"
        assert got.device == expected.device, f"{what}: device {got.device} != eager {expected.device}"
        if check_strides:
            assert got.stride() == expected.stride(), (
                f"{what}: strides {got.stride()} != eager {expected.stride()}")
        assert got.requires_grad == expected.requires_grad, (
            f"{what}: requires_grad {got.requires_grad} != eager {expected.requires_grad}")
        torch.testing.assert_close(got.detach(), expected.detach(), equal_nan=True,
                                   rtol=rtol, atol=atol, check_stride=False,
                                   msg=lambda m: f"{what}: values differ from eager\n{m}")
        return
    assert type(got) is type(expected), f"{what}: type {type(got).__name__} != eager {type(expected).__name__}"
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), f"{what}: length {len(got)} != eager {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what}[{i}]", check_strides, rtol, atol)
        return
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), f"{what}: keys {got.keys()} != eager {expected.keys()}"
        for k in expected:
            assert_same(got[k], expected[k], f"{what}[{k!r}]", check_strides, rtol, atol)
        return
    assert got == expected, f"{what}: {got!r} != eager {expected!r}"


def aliasing(outputs, inputs):
    """Which output tensors share storage with, or are, which input tensors (and each other)."""
    outs, ins = tensors_of(outputs), tensors_of(inputs)

    def ptr(t):
        return t.untyped_storage().data_ptr()
    # Storage sharing (views) and object identity (`return x`, `x.add_(y)` returns x itself).
    return ([[(ptr(o) == ptr(i), o is i) for i in ins] for o in outs],
            [[(ptr(a) == ptr(b), a is b) for b in outs] for a in outs])


# --------------------------------------------------------------------------- the check

def stats_delta(before, after):
    return {k: after[k] - before[k] for k in before}


def _seeded(seed):
    if seed is not None:
        torch.manual_seed(seed)


def check(fn, *args, graphs=1, breaks=0, kwargs=None, check_strides=True, rtol=None, atol=None,
          seed=None):
    """Run `fn` eagerly and through fastdyn; they must agree, and fastdyn must find `graphs`
    graphs and `breaks` graph breaks. Where eager raises, fastdyn must raise the same error.
    With `seed`, every run starts from torch.manual_seed(seed) and must leave the default
    generator where eager left it (random ops draw from the same stream as eager).
    Returns the eager result."""
    kwargs = kwargs or {}
    eager_args, eager_kwargs = clone_tree(args), clone_tree(kwargs)
    _seeded(seed)
    try:
        expected = fn(*eager_args, **eager_kwargs)
    except Exception as error:  # then fastdyn must raise the same error, every time
        check_same_error(fn, args, kwargs, error, graphs, eager_args)
        return error
    eager_rng = torch.get_rng_state() if seed is not None else None
    eager_alias = aliasing(expected, (eager_args, eager_kwargs))

    jitted = fastdyn.jit(fn)
    for call in ("compile call", "cached call"):
        run_args, run_kwargs = clone_tree(args), clone_tree(kwargs)
        _seeded(seed)
        before = fastdyn.stats()
        got = jitted(*run_args, **run_kwargs)
        delta = stats_delta(before, fastdyn.stats())
        if seed is not None:
            assert torch.equal(torch.get_rng_state(), eager_rng), (
                f"{fn.__name__}: {call}: the random generator is not where eager left it "
                "(a different number of draws)")
        assert_same(got, expected, f"{fn.__name__}: {call}: output", check_strides, rtol, atol)
        assert_same(run_args, eager_args, f"{fn.__name__}: {call}: positional inputs after the call",
                    check_strides, rtol, atol)
        assert_same(run_kwargs, eager_kwargs, f"{fn.__name__}: {call}: keyword inputs after the call",
                    check_strides, rtol, atol)
        assert aliasing(got, (run_args, run_kwargs)) == eager_alias, (
            f"{fn.__name__}: {call}: outputs alias inputs differently from eager "
            f"(pairs of (shares storage, is the same object)):\n"
            f"{aliasing(got, (run_args, run_kwargs))}\n!= eager {eager_alias}")
        check_call_stats(fn, call, delta, graphs, breaks, args, kwargs)

    _seeded(seed)
    report = fastdyn.explain(fn, *clone_tree(args), **clone_tree(kwargs))
    check_report(fn, report, graphs, breaks)
    return expected


def check_call_stats(fn, call, delta, graphs, breaks, args=(), kwargs=None):
    """The per-call counters: a frame without breaks compiles once on the first call and hits the
    cache on the second; a frame with breaks compiles at least once (the frame, then its
    continuations) and the second call neither misses nor compiles."""
    first = call in ("compile call", "first call")
    if not graphs:
        # Nothing to compile (or a frame left to eager): still, a later call must not compile.
        assert first or delta["frames_compiled"] == 0, (
            f"{fn.__name__}: the second call compiled again: {delta}")
        return
    if first:
        if breaks:
            ok = delta["frames_compiled"] >= 1
        else:
            ok = delta["frames_compiled"] == 1 and delta["cache_misses"] == 1
            if not ok and delta["frames_compiled"] >= 1:  # breaks before any op: uncounted, with continuations
                ok = bool(fastdyn.explain(fn, *clone_tree(args), **clone_tree(kwargs or {})).breaks_before_any_op)
        assert ok, (f"{fn.__name__}: the first call should compile the frame: {delta}\n"
                    f"{fastdyn.explain(fn, *clone_tree(args), **clone_tree(kwargs or {}))}")
    elif breaks:
        assert delta["cache_hits"] >= 1 and delta["cache_misses"] == 0 and \
            delta["frames_compiled"] == 0, (
                f"{fn.__name__}: the second call should hit the caches: {delta}")
    else:
        ok = delta["cache_hits"] == 1 and delta["cache_misses"] == 0 and delta["frames_compiled"] == 0
        if not ok and delta["cache_hits"] > 1 and delta["cache_misses"] == 0 and delta["frames_compiled"] == 0:
            # breaks before any op (uncounted): the frame's and its continuations' entries hit
            ok = bool(fastdyn.explain(fn, *clone_tree(args), **clone_tree(kwargs or {})).breaks_before_any_op)
        assert ok, f"{fn.__name__}: the second call should hit the cache: {delta}"


def check_report(fn, report, graphs, breaks):
    """fastdyn.explain's counts: `graphs` graphs (each with its op counts) and `breaks` breaks,
    each break with a reason and a source line."""
    name = getattr(fn, "__name__", type(fn).__name__)
    assert report.graph_count == graphs, (
        f"{name}: graph_count {report.graph_count} != {graphs}\n{report}")
    assert report.graph_break_count == breaks, (
        f"{name}: graph_break_count {report.graph_break_count} != {breaks}\n{report}")
    assert len(report.op_counts) == graphs, f"{name}: op_counts per graph\n{report}"
    for b in report.break_reasons:
        assert b.reason and b.lineno > 0, f"{name}: a break without reason or line: {b}"


# --------------------------------------------------------------------------- caller-visible mutation

def assert_same_object(got, expected, what="value", rtol=None, atol=None, _depth=0):
    """Like assert_same, for Python objects too: namedtuples, sets, dataclasses and plain user
    objects (compared field by field through vars()). Used to check that mutations of objects the
    caller can see are replayed exactly as eager made them."""
    assert _depth < 20, f"{what}: structure too deep (a cycle?)"
    if isinstance(expected, torch.Tensor):
        assert_same(got, expected, what, True, rtol, atol)
        return
    assert type(got) is type(expected), (
        f"{what}: type {type(got).__name__} != eager {type(expected).__name__}")
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), f"{what}: length {len(got)} != eager {len(expected)}: {got!r}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same_object(g, e, f"{what}[{i}]", rtol, atol, _depth + 1)
    elif isinstance(expected, dict):
        assert list(got.keys()) == list(expected.keys()), (
            f"{what}: keys {list(got.keys())} != eager {list(expected.keys())} (order included)")
        for k in expected:
            assert_same_object(got[k], expected[k], f"{what}[{k!r}]", rtol, atol, _depth + 1)
    elif isinstance(expected, (set, frozenset)):
        assert got == expected, f"{what}: {got!r} != eager {expected!r}"
    elif isinstance(expected, torch.nn.Module):
        # Fresh modules (check_fresh) are equal when their mode and state are.
        assert got.training == expected.training, f"{what}: training {got.training} != eager"
        assert_same_object(dict(got.state_dict(keep_vars=True)),
                           dict(expected.state_dict(keep_vars=True)),
                           f"{what}.state_dict()", rtol, atol, _depth + 1)
    elif isinstance(expected, (types.FunctionType, types.ModuleType, type)):
        assert got is expected, f"{what}: {got!r} is not eager's {expected!r}"
    elif hasattr(expected, "__dict__"):
        assert_same_object(vars(got), vars(expected), f"{what}.__dict__", rtol, atol, _depth + 1)
    else:
        assert got == expected, f"{what}: {got!r} != eager {expected!r}"


def check_fresh(fn, make_args, graphs=1, breaks=0, seed=0, rtol=None, atol=None):
    """Run `fn(*make_args())` eagerly and through fastdyn (compile call, cached call), each run
    on freshly made arguments from the same seed, and compare the results AND the arguments
    afterwards, Python objects included (lists, dicts, sets, user objects, dataclasses): a
    mutation the caller can see must be replayed exactly. Then checks graph and break counts.
    Returns (eager result, eager arguments after the call)."""
    torch.manual_seed(seed)
    eager_args = list(make_args())
    expected = fn(*eager_args)
    eager_alias = aliasing(expected, eager_args)
    jitted = fastdyn.jit(fn)
    for call in ("compile call", "cached call"):
        torch.manual_seed(seed)
        run_args = list(make_args())
        got, delta = call_with_stats(jitted, *run_args)
        assert_same_object(got, expected, f"{fn.__name__}: {call}: output", rtol, atol)
        assert_same_object(run_args, eager_args, f"{fn.__name__}: {call}: arguments after the call",
                           rtol, atol)
        assert aliasing(got, run_args) == eager_alias, (
            f"{fn.__name__}: {call}: outputs alias inputs differently from eager")
        check_call_stats(fn, call, delta, graphs, breaks, tuple(make_args()))
    torch.manual_seed(seed)
    check_report(fn, fastdyn.explain(fn, *make_args()), graphs, breaks)
    return expected, eager_args


def check_same_error(fn, args, kwargs, error, graphs, eager_args):
    """fastdyn raises eager's `error`, and leaves the inputs as eager left them (an in-place op
    before the error applied exactly once)."""
    jitted = fastdyn.jit(fn)
    for call in ("first call", "second call"):
        run_args = clone_tree(args)
        try:
            jitted(*run_args, **clone_tree(kwargs))
        except Exception as got:
            assert_same(run_args, eager_args, f"{fn.__name__}: {call}: inputs after the error")
            assert type(got) is type(error) and str(got) == str(error), (
                f"{fn.__name__}: {call}: raised {type(got).__name__}({got}) where eager raised "
                f"{type(error).__name__}({error})")
        else:
            raise AssertionError(f"{fn.__name__}: {call}: eager raised {type(error).__name__}({error}), "
                                 "fastdyn did not")
    report = fastdyn.explain(fn, *clone_tree(args), **clone_tree(kwargs))
    assert report.graph_count == graphs, f"{fn.__name__}: graph_count {report.graph_count} != {graphs}\n{report}"


# --------------------------------------------------------------------------- bytecode facts

JUMP_OPCODES = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_ALLOWED_GLOBAL_TYPES = (types.ModuleType, torch.Tensor, int, float, bool, type(None), tuple,
                         torch.dtype, torch.device, torch.Size)


def straight_line_problems(fn):
    """Why `fn` is not straight-line in the sense of the issue (no jumps, no calls of Python-level
    functions other than torch's), as a list of strings; empty when it is."""
    problems = []
    codes = [fn.__code__]
    codes += [c for c in fn.__code__.co_consts if isinstance(c, types.CodeType)]
    if len(codes) > 1:
        problems.append("defines a nested function, lambda or comprehension")
    for ins in dis.get_instructions(fn):
        if ins.opcode in JUMP_OPCODES:
            problems.append(f"jump {ins.opname} on line {ins.positions.lineno}")
        if ins.opname == "LOAD_GLOBAL":
            name = ins.argval
            if name not in fn.__globals__:
                problems.append(f"reads builtin {name}")
            elif not isinstance(fn.__globals__[name], _ALLOWED_GLOBAL_TYPES):
                problems.append(f"reads global {name} of type {type(fn.__globals__[name]).__name__}")
    return problems


def line_of(fn, marker):
    """The absolute line number of the line of `fn` that contains `marker` (a comment)."""
    import inspect
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} must appear once in {fn.__name__}"
    return hits[0]


def call_with_stats(fn, *args, **kwargs):
    """(result, stats delta) of one call."""
    before = fastdyn.stats()
    out = fn(*args, **kwargs)
    return out, stats_delta(before, fastdyn.stats())
