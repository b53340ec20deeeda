"""Probing which torch-level calls a program makes, and whether fastdyn captures each one alone
(shared by tests/python/test_hf_models.py and bench/models_ops.py).

- CallRecorder (a TorchFunctionMode) records every torch-level call (torch.*, torch.nn.functional.*,
  Tensor methods and operators) with its arguments, written back as Python source the way model
  code spells it (`t0.view(c0)`, `t0[:, None]`, `t0 & t1`), tensors as parameters t0, t1...
  and objects without a literal (devices, torch.Size) as globals c0, c1...
- AtenRecorder (a TorchDispatchMode) records the ATen overloads eager runs.
- replay() runs one recorded call as a tiny generated function under fastdyn.jit(fullgraph=True)
  (backend aten by default: the op table alone; "native" adds the fused code generator) on inputs with the recorded tensors' exact geometry (dtype, sizes, strides, storage offset), and
  compares values, dtypes, sizes and strides with eager.
Calls that are Python-level by nature (Tensor.__bool__, properties such as .shape) are kept apart
(PYTHON_LEVEL): they are symbolic/'s business, not the op table's.
"""
import collections

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

# Python-level protocol calls: symbolic/ handles them (or breaks), there is no family to add.
PYTHON_LEVEL = {"torch.Tensor.__bool__", "torch.Tensor.shape.__get__", "torch.Tensor.dtype.__get__",
                "torch.Tensor.device.__get__", "torch.Tensor.ndim.__get__", "torch.Tensor.size", "torch.Tensor.dim",
                "torch.Tensor.is_floating_point", "torch.Tensor.requires_grad.__get__", "torch.Tensor.numel",
                "torch.Tensor.item", "torch.Tensor.tolist", "torch.Tensor.__len__", "torch.Tensor.__iter__",
                "_set_grad_enabled", "torch.Tensor.is_contiguous", "torch.Tensor.data_ptr",
                "torch.Tensor.element_size", "torch.Tensor.get_device", "torch.Tensor.is_cuda.__get__",
                "torch.Tensor.layout.__get__", "torch.Tensor.T.__get__"}
BINARY_DUNDERS = {"__and__": "&", "__or__": "|", "__xor__": "^", "__eq__": "==", "__ne__": "!=", "__lt__": "<",
                  "__le__": "<=", "__gt__": ">", "__ge__": ">=", "__add__": "+", "__sub__": "-", "__mul__": "*",
                  "__truediv__": "/", "__floordiv__": "//", "__mod__": "%", "__pow__": "**", "__matmul__": "@",
                  "__lshift__": "<<", "__rshift__": ">>"}
REFLECTED = {"__radd__": "+", "__rsub__": "-", "__rmul__": "*", "__rtruediv__": "/", "__rpow__": "**",
             "__rfloordiv__": "//", "__rmod__": "%", "__rand__": "&", "__ror__": "|"}
INPLACE_DUNDERS = {f"__i{k[2:]}": v for k, v in BINARY_DUNDERS.items()
                   if v in ("&", "|", "^", "+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>")}
UNARY_DUNDERS = {"__neg__": "-", "__invert__": "~", "__pos__": "+", "__abs__": "abs"}


class _Source:
    """Turns recorded arguments into Python source, collecting tensors as parameters t0, t1..."""

    def __init__(self):
        self.tensors = []
        self.constants = {}  # objects without a literal (devices, sizes): read as globals, as
                             # model code reads them from attributes or other values

    def constant(self, v):
        name = f"c{len(self.constants)}"
        self.constants[name] = v
        return name

    def expr(self, v, in_index=False):
        if isinstance(v, torch.Tensor):
            for i, t in enumerate(self.tensors):
                if t is v:
                    return f"t{i}"
            self.tensors.append(v)
            return f"t{len(self.tensors) - 1}"
        if isinstance(v, slice) and in_index:
            parts = ["" if p is None else self.expr(p) for p in (v.start, v.stop, v.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if parts[2] else "")
        if isinstance(v, slice):
            return f"slice({self.expr(v.start)}, {self.expr(v.stop)}, {self.expr(v.step)})"
        if v is Ellipsis:
            return "..."
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, (torch.device, torch.Size)):
            return self.constant(v)
        if isinstance(v, float):
            return f"float({repr(v)!r})" if v != v or v in (float("inf"), float("-inf")) else repr(v)
        if isinstance(v, (list, tuple)):
            inner = ", ".join(self.expr(x, in_index) for x in v)
            if isinstance(v, list):
                return f"[{inner}]"
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, torch.memory_format):
            return str(v)
        raise TypeError(f"cannot write {type(v).__name__} as source")

    def index(self, idx):
        if isinstance(idx, tuple):
            return ", ".join(self.expr(x, in_index=True) for x in idx) if idx else "()"
        return self.expr(idx, in_index=True)

    def call(self, name, func, args, kwargs):
        """The function body that makes the same call the way model code spells it: `return
        <expression>`, or a statement for the in-place protocols (`t0[i] = t1`, `t0 += t1`)."""
        short = name.rsplit(".", 1)[-1]
        if name.startswith("torch.Tensor."):
            if short in BINARY_DUNDERS:
                return f"return {self.expr(args[0])} {BINARY_DUNDERS[short]} {self.expr(args[1])}"
            if short in REFLECTED:
                return f"return {self.expr(args[1])} {REFLECTED[short]} {self.expr(args[0])}"
            if short in INPLACE_DUNDERS:
                target = self.expr(args[0])
                return f"{target} {INPLACE_DUNDERS[short]}= {self.expr(args[1])}\n    return {target}"
            if short in UNARY_DUNDERS:
                op = UNARY_DUNDERS[short]
                return f"return abs({self.expr(args[0])})" if op == "abs" else f"return {op}{self.expr(args[0])}"
            if short == "__getitem__":
                return f"return {self.expr(args[0])}[{self.index(args[1])}]"
            if short == "__setitem__":
                target = self.expr(args[0])
                return f"{target}[{self.index(args[1])}] = {self.expr(args[2])}\n    return {target}"
            head = f"{self.expr(args[0])}.{short}"
            args = args[1:]
        else:
            head = name
        parts = [self.expr(a) for a in args] + [f"{k}={self.expr(v)}" for k, v in kwargs.items()]
        return f"return {head}({', '.join(parts)})"


class CallRecorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []          # (name, source, tensors) of calls with a replayable form
        self.python_level = collections.Counter()
        self.unwritable = collections.Counter()
        self.counts = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = resolve_name(func) or getattr(func, "__qualname__", repr(func))
        self.counts[name] += 1
        if name in PYTHON_LEVEL:
            self.python_level[name] += 1
        else:
            src = _Source()
            try:
                text = src.call(name, func, args, kwargs)
                self.calls.append((name, text, list(src.tensors), dict(src.constants)))
            except TypeError as e:
                self.unwritable[f"{name}: {e}"] += 1
        return func(*args, **kwargs)


class AtenRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def same_geometry_copy(t):
    """A fresh tensor with t's dtype, sizes, strides, offset and values (its own storage)."""
    storage = t.untyped_storage().clone()
    out = torch.empty(0, dtype=t.dtype)
    out.set_(storage, t.storage_offset(), t.size(), t.stride())
    return out


def geometry(t):
    return (t.dtype, tuple(t.shape), tuple(t.stride()))


def flatten(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in flatten(x)]
    return [v]


def replay(fastdyn, text, tensors, constants, backend="aten"):
    """None when fastdyn captures the call as one graph with eager's results, else why not.
    The default backend, aten, runs the recorded ATen ops one by one: a failure is then the op
    table's (binding, metadata rule); backend="native" also checks the fused code generator."""
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    scope = {"torch": torch, **constants}
    exec(f"def f({params}):\n    {text}\n", scope)
    f = scope["f"]
    # Random ops (dropout in training, randn) draw from the same stream in eager and fastdyn.
    torch.manual_seed(0)
    try:
        expected = f(*[same_geometry_copy(t) for t in tensors])
    except Exception as e:  # noqa: BLE001 - eager itself fails (recorded args not replayable)
        return f"eager replay failed: {type(e).__name__}: {e}"
    fastdyn.reset()
    args = [same_geometry_copy(t) for t in tensors]
    torch.manual_seed(0)
    try:
        got = fastdyn.jit(f, backend=backend, fullgraph=True)(*args)
    except fastdyn.GraphBreakError as e:
        return f"break: {e.reason}"
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}: {e}"
    for g, x in zip(flatten(got), flatten(expected)):
        if isinstance(x, torch.Tensor):
            if not isinstance(g, torch.Tensor) or geometry(g) != geometry(x):
                return f"mismatch: {geometry(g) if isinstance(g, torch.Tensor) else g} vs {geometry(x)}"
            # Floats within the models' tolerance (a fused kernel may sum in another order).
            close = x.is_floating_point() and torch.allclose(g, x, rtol=1e-5, atol=1e-5, equal_nan=True)
            if not torch.equal(g, x) and not close:
                return "mismatch: values differ"
        elif g != x:
            return f"mismatch: {g!r} vs {x!r}"
    return None


def record(fn):
    """Runs fn() under no_grad with both recorders; returns (CallRecorder, AtenRecorder)."""
    calls, aten = CallRecorder(), AtenRecorder()
    with torch.no_grad(), calls, aten:
        fn()
    return calls, aten


def distinct_calls(calls):
    """The recorded calls, each distinct (source, constants, input geometry) once, in order."""
    seen = set()
    for name, text, tensors, constants in calls.calls:
        key = (text, tuple(geometry(t) for t in tensors), repr(constants))
        if key not in seen:
            seen.add(key)
            yield name, text, tensors, constants


def describe(text, tensors, constants):
    """`return t0.view(c0)  with float32[16, 64], c0=torch.Size([2, 8, 64])`."""
    text = text.replace("\n    ", "; ")
    consts = "".join(f", {k}={v!r}" for k, v in constants.items())
    return f"{text}  with " + ", ".join(f"{str(t.dtype)[6:]}{list(t.shape)}" for t in tensors) + consts


def uncaptured(fastdyn, fn, backend="aten"):
    """{"callable: why": example} for every distinct torch-level call of fn() that fastdyn does
    not capture alone exactly as eager runs it (empty when all are)."""
    calls, _ = record(fn)
    out = {}
    for name, text, tensors, constants in distinct_calls(calls):
        why = replay(fastdyn, text, tensors, constants, backend)
        if why:
            out.setdefault(f"{name}: {why}", describe(text, tensors, constants))
    for u in calls.unwritable:
        out.setdefault(f"unwritable {u}", "")
    return out
