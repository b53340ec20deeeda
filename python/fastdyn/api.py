"""The public API of fastdyn. Everything here forwards to the C++ core in fastdyn._C."""
import atexit
import functools
import inspect
import os
import sys
import sysconfig
import warnings

import torch

from . import _C, _cuda_graphs

# fastdyn's threads (the background kernel compiler, and the JIT engine that may still be
# starting, see codegen/llvm/jit_engine.h's prewarm) end before the process's static destructors.
atexit.register(_C.shutdown_threads)

__all__ = ["GraphBreakError", "ExplainOutput", "BreakReason", "enable", "disable", "jit",
           "explain", "stats", "reset", "skip", "synchronize", "set_background_compile"]


def set_background_compile(enabled):
    """Tiered compilation, on by default (or FASTDYN_BACKGROUND_COMPILE=0 at start-up for off).

    On: a new graph's llvm_cpu kernels compile on a background thread; the call that traced it,
    and the calls until the kernels are ready (typically 10-100 ms later), run the graph op by op
    on ATen, with eager's results. Off: the tracing call waits for its kernels, so every call of
    the graph runs them. Process-wide; affects graphs compiled from now on."""
    _C.set_background_compile(bool(enabled))


def synchronize():
    """Wait until every kernel compile running in the background has finished, so that the next
    call of each compiled graph runs its kernels (benchmarks, tests)."""
    _C.synchronize()


class GraphBreakError(RuntimeError):
    """Raised when fullgraph=True and fastdyn cannot capture a frame as one graph."""

    def __init__(self, reason, filename="", lineno=-1):
        super().__init__(f"{reason} (at {filename}:{lineno})")
        self.reason = reason
        self.filename = filename
        self.lineno = lineno


_C.set_graph_break_error(GraphBreakError)


def _install_path_rules():
    # Never trace the standard library, torch or fastdyn; keep site-packages (user libraries
    # such as transformers live there).
    skip = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
            os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__))]
    keep = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    skip = [os.path.join(p, "") for p in skip]
    keep = [os.path.join(p, "") for p in keep]
    # torch.nn's layers are user-level model code (Sequential.forward, Linear.forward): trace
    # them; Module.__call__'s machinery in module.py stays out.
    nn_modules = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "")
    keep.append(nn_modules)
    skip.append(os.path.join(nn_modules, "module.py"))
    # torch.optim's optimizers too: optimizer.step() is traced (its state read by parameter,
    # its first step run as written while it makes that state) into one graph of in-place
    # updates. The learning-rate schedulers and SWA helpers stay out. Only where a native backend
    # takes the graph (llvm_cpu, or cuda, whose kernels fuse across parameters): op by op on
    # ATen the step would lose to torch.optim's own multi-tensor kernels, so it runs as written.
    optim = os.path.join(os.path.dirname(torch.__file__), "optim", "")
    keep.append(optim)
    skip += [os.path.join(optim, "lr_scheduler.py"), os.path.join(optim, "swa_utils.py")]
    _C.set_path_rules(skip, keep, [optim])


_install_path_rules()


def enable(backend="native", fullgraph=False, dynamic=None, mode=None):
    """Make every Python frame of the process a compilation candidate.

    dynamic: None (automatic: sizes are specialised at a first compile, and a dim seen with
    another size later becomes a size symbol, so one graph serves every size), True (every dim
    of more than one element is a symbol from the start), False (every size is specialised).
    mode: None or "default", or "reduce-overhead": a graph on CUDA tensors is captured as a CUDA
    graph after two warm-up calls and replayed while its guards hold (one graph per set of
    sizes, at most 8 per entry; inputs that move between calls are copied into static buffers;
    outputs are fresh tensors). Graphs on the CPU are unaffected."""
    _C.enable(backend, bool(fullgraph), dynamic, mode)


def disable():
    """Stop compiling new frames (frames already running are unaffected)."""
    _C.disable()


def jit(fn_or_module=None, *, backend="native", fullgraph=False, dynamic=None, mode=None):
    """Compile a function or nn.Module on call. Usable as @jit or @jit(backend=..., fullgraph=...,
    dynamic=..., mode=...); dynamic and mode as for enable()."""
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"fastdyn.jit: dynamic must be True, False or None, got {dynamic!r}")
    if fn_or_module is None:
        return functools.partial(jit, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode)
    if isinstance(fn_or_module, torch.nn.Module):
        return _JitModule(fn_or_module, backend, fullgraph, dynamic, mode)
    if not callable(fn_or_module):
        raise TypeError(f"fastdyn.jit: expected a function or torch.nn.Module, got {type(fn_or_module).__name__}")
    kind = _not_compiled_kind(fn_or_module)
    if kind:
        # Its body runs on each next()/await, outside any call of a wrapper: nothing to compile.
        warnings.warn(f"fastdyn.jit: {getattr(fn_or_module, '__qualname__', fn_or_module)!s} is {kind}, which "
                      "fastdyn does not compile; it runs as written (jit accepts plain functions, methods "
                      "and nn.Modules)", UserWarning, stacklevel=2)
        return fn_or_module
    wrapper = _C.jit(fn_or_module, backend, bool(fullgraph), dynamic, mode)
    try:
        functools.update_wrapper(wrapper, fn_or_module)
    except (AttributeError, TypeError):
        pass
    return wrapper


def mark_dynamic(t, dim):
    """Make dim `dim` (an int or a list of ints) of tensor `t` a size symbol from the first
    compile that sees `t` as an input: one graph then serves every size of that dim (2 or more;
    sizes 0 and 1 stay specialised). Ignored under dynamic=False."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fastdyn.mark_dynamic: expected a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, "_fastdyn_dynamic_dims", ()))
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or not -t.dim() <= d < t.dim():
            raise IndexError(f"fastdyn.mark_dynamic: dim {d!r} is out of range for a tensor of {t.dim()} dims")
        marked.add(d % t.dim())
    t._fastdyn_dynamic_dims = marked


def _not_compiled_kind(fn):
    target = inspect.unwrap(fn.__func__ if inspect.ismethod(fn) else fn)
    if inspect.isasyncgenfunction(target):
        return "an async generator function"
    if inspect.iscoroutinefunction(target):
        return "a coroutine function"
    if inspect.isgeneratorfunction(target):
        return "a generator function"
    return None


class _JitModule(torch.nn.Module):
    """A module whose forward runs under fastdyn; parameters stay the original module's."""

    def __init__(self, module, backend, fullgraph, dynamic, mode):
        super().__init__()
        self._orig_mod = module
        self._fastdyn_call = _C.jit(module.__call__, backend, bool(fullgraph), dynamic, mode)

    def forward(self, *args, **kwargs):
        return self._fastdyn_call(*args, **kwargs)

    # Called directly, not through nn.Module.__call__: the wrapped module's own call runs its
    # hooks, global ones included, and running them for this wrapper too would apply them twice.
    __call__ = forward

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)


class BreakReason:
    __slots__ = ("reason", "filename", "lineno")

    def __init__(self, reason, filename, lineno):
        self.reason, self.filename, self.lineno = reason, filename, lineno

    def __repr__(self):
        return f"BreakReason({self.reason!r}, {self.filename}:{self.lineno})"


class ExplainOutput:
    """What fastdyn would do with one call: graphs, breaks (with source lines), ops, guards, and
    what the backend made of each graph (`code`: for llvm_cpu the fused kernels in loop IR, with
    the extern ATen calls between them; for aten the op list)."""

    def __init__(self, report, fn_name):
        self.fn_name = fn_name
        self.graph_count = report["graph_count"]
        self.graph_break_count = report["graph_break_count"]
        # The breaks counted (each ends a graph), as Dynamo's explain lists them; a break with
        # nothing recorded before it splits no graph: listed apart (its continuation is compiled).
        self.break_reasons = [BreakReason(*b[:3]) for b in report["breaks"] if b[3]]
        self.breaks_before_any_op = [BreakReason(*b[:3]) for b in report["breaks"] if not b[3]]
        self.op_counts = [dict(c) for c in report["op_counts"]]
        self.guards = list(report["guards"])
        self.graphs = list(report["graphs"])
        self.graph_inputs = [list(i) for i in report["graph_inputs"]]  # per graph: each input's source
        self.code = list(report["code"])

    def __str__(self):
        lines = [f"fastdyn.explain({self.fn_name}): {self.graph_count} graph(s), "
                 f"{self.graph_break_count} graph break(s)"]
        for b in self.break_reasons:
            lines.append(f"  break: {b.reason} ({b.filename}:{b.lineno})")
        for b in self.breaks_before_any_op:
            lines.append(f"  break before any op (no graph split): {b.reason} ({b.filename}:{b.lineno})")
        for i, (ops, text, code) in enumerate(zip(self.op_counts, self.graphs, self.code)):
            lines.append(f"  graph {i}: {sum(ops.values())} op(s): " +
                         ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
            lines.extend("    " + line for line in text.rstrip().splitlines())
            lines.append(f"  code of graph {i}:")
            lines.extend("    " + line for line in code.rstrip().splitlines())
        if self.guards:
            lines.append("  guards:")
            lines.extend("    " + g for g in self.guards)
        return "\n".join(lines)

    __repr__ = __str__

    def graph_modules(self):
        """Each graph as a torch.fx.GraphModule of ATen ops (fx_export.py says what it holds);
        each placeholder's meta["source"] says where the frame read that input (L['x'],
        L['self']._modules['0']._parameters['weight'])."""
        from .fx_export import graph_module
        return [graph_module(text, sources) for text, sources in zip(self.graphs, self.graph_inputs)]


def explain(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) once under fastdyn, from a clean cache (as after reset()), and
    reports every graph compiled and every graph break met, with reasons, files and lines — like
    torch._dynamo.explain. An exception raised by fn is swallowed; the report covers what ran."""
    target = fn
    if isinstance(target, _JitModule):
        target = target._orig_mod
    inner = _C.jit_target(target)
    if inner is not None:
        target = inner
    if not callable(target):
        raise TypeError(f"fastdyn.explain: expected a callable, got {type(fn).__name__}")
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return ExplainOutput(_C.explain(target, tuple(args), dict(kwargs)), name)


def stats():
    """Counters since the last reset(): frames_seen, frames_compiled, cache_hits, cache_misses,
    recompiles, graph_breaks, graphs, compile_seconds (on the calling thread), sizes_compiled
    (sizes that a graph with size symbols was specialised to and compiled for), backend_failures
    (graphs that ran on aten because compiling them failed: a bug; FASTDYN_STRICT=1 raises
    instead), and for tiered
    compilation background_compiles (graphs whose kernels the background threads built),
    background_pending (still compiling) and background_compile_seconds (those threads' time,
    summed; FASTDYN_COMPILE_THREADS sets how many there are).
    Unless the backend is aten (where LLVM is built in), the kernel cache's: kernel_compiles (by
    LLVM), kernel_memory_hits (already compiled in this process: reset() keeps compiled kernels),
    kernel_disk_hits (loaded from FASTDYN_CACHE_DIR), kernel_cache_rejected (corrupt or foreign
    cache files ignored) and kernel_memory_evictions (kernels the in-memory cache, bounded by
    FASTDYN_KERNEL_CACHE_SIZE kernels, default 4096, let go; one still in use stays loaded).
    With mode="reduce-overhead": cuda_graph_captures, cuda_graph_replays, cuda_graph_recaptures
    (an input read in place came at another address), cuda_graph_input_copies (inputs copied into
    a graph's buffers, summed over replays) and cuda_graph_skipped (graphs not captured;
    FASTDYN_LOG=code says why)."""
    d = dict(_C.stats())
    d.update(_cuda_graphs.stats())
    return d


def reset():
    """Wait for background compiles, then forget every compiled entry and zero the counters."""
    _C.reset()
    _cuda_graphs.reset_stats()


def set_recompile_limit(n):
    """How many compiled entries (one per distinct set of guards: shapes, dtypes, values the
    code relied on) a function keeps; default 8, also FASTDYN_RECOMPILE_LIMIT. Past it, a call
    that matches no entry runs eagerly, once warned (naming the guard that failed); calls that
    match an entry keep running compiled."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"fastdyn.set_recompile_limit: expected a positive int, got {n!r}")
    _C.set_recompile_limit(n)


def recompile_limit():
    """The current recompile limit (set_recompile_limit)."""
    return _C.recompile_limit()


def skip(fn):
    """Never compile fn itself (what it calls is still compiled)."""
    _C.mark_skip(fn)
    return fn
