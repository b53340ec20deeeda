"""Random small Python programs that mix tensor ops with Python constructs, for differential
testing of fastdyn against eager (see runner.py).

`generate(seed)` returns the source text of a module. It is deterministic: the same seed gives the
same text (one `random.Random(seed)`, no other source of randomness). The module defines

    make_state()        a fresh `State` (side-effect targets: lists, a dict, a Box, a StringIO,
                        a weight requiring grad, and `track(name, obj)`, which registers a weakref
                        so that the runner can compare object lifetimes)
    f(x, y, state)      the program: x and y are float32 tensors of one square shape (n, n)

plus fixed helper classes (PRELUDE: a plain class with methods and a property, a dataclass, an
Exception subclass with an attribute, a context manager recording enter/exit, a class with a
user-defined __getattribute__, one with __getattr__, a callable counter) and a few generated
helper functions `h0, h1, ...`, which f calls.

The body of f mixes, at random positions and nestings: tensor ops (pointwise, reductions, matmul,
views, indexing, cat, where, comparisons, in-place ops on locals and on the inputs), Python int and
float arithmetic, attribute reads and writes (read-before-write, setattr/getattr/hasattr, del),
dataclass instances built in the frame and written after construction, list/dict/tuple building
and mutation, unpacking with a starred target, comprehensions, closures with `nonlocal`, globals
read and written, try/except/else/finally, custom exceptions (caught and escaping f), `with`
blocks (a recording context manager, torch.no_grad()), for/while loops with break/continue, and
graph-breaking calls (print to a StringIO, .item() feeding a branch, .tolist(), len(str(...)),
id() comparisons, int()/float()/bool() of tensors).

Programs are deterministic at run time: no randomness, no id() values or addresses in any output,
no iteration over sets. Variables are block-scoped by the generator (a name made inside a block is
used only inside it), so programs rarely fail on unbound names; what they do raise (on purpose, or
an IndexError of an out-of-range shape) must be raised identically under fastdyn.
"""
import random

PRELUDE = '''\
import dataclasses
import io
import math
import weakref

import torch
import torch.nn.functional as F


class State:
    """Side-effect targets of one call; make_state() makes a fresh one for every call."""

    def __init__(self):
        self.out = []
        self.log = []
        self.d = {}
        self.buf = io.StringIO()
        self.box = Box(0)
        self.w = torch.tensor(0.5, requires_grad=True)
        self.refs = {}

    def track(self, name, obj):
        self.refs[name] = weakref.ref(obj)
        return obj


def make_state():
    return State()


class Box:
    tag = 'box'

    def __init__(self, n, v=None):
        self.n = n
        self.v = v

    def bump(self, k=1):
        old = self.n
        self.n = old + k
        return old

    def scale(self, t):
        self.calls = getattr(self, 'calls', 0) + 1
        return t * self.n

    @property
    def double(self):
        self.reads = getattr(self, 'reads', 0) + 1
        return self.n * 2

    def report(self, buf):
        print('box', self.n, file=buf)
        return self.n


@dataclasses.dataclass
class Rec:
    a: int
    b: object = None
    tag: str = 'r'


class MyError(Exception):
    def __init__(self, code, msg='boom'):
        super().__init__(f'{msg}:{code}')
        self.code = code


class Ctx:
    def __init__(self, state, name, swallow=False):
        self.state = state
        self.name = name
        self.swallow = swallow

    def __enter__(self):
        self.state.log.append(('enter', self.name))
        return self

    def __exit__(self, et, ev, tb):
        self.state.log.append(('exit', self.name, None if et is None else et.__name__))
        return self.swallow


ACCESS = []


class Spy:
    def __init__(self, n):
        self.n = n

    def __getattribute__(self, name):
        ACCESS.append(name)
        return object.__getattribute__(self, name)


class Lazy:
    def __init__(self):
        self.hits = 0

    def __getattr__(self, name):
        return len(name)


class Counter:
    def __init__(self, start=0):
        self.hits = start

    def __call__(self, t):
        self.hits += 1
        return t + self.hits


g_n = 0
g_list = []
g_t = None
'''

# Kinds of values the generator keeps in its scopes.
T = "T"      # float tensor of the inputs' shape (n, n)
S = "S"      # 0-dim float tensor
B = "B"      # bool tensor (n, n)
I = "I"      # Python int
F = "F"      # Python float
L = "L"      # list of mixed Python values (ints, floats, strings, tensors)
TL = "TL"    # non-empty list of T tensors
D = "D"      # dict with str keys
O = "O"      # Box
R = "R"      # Rec (dataclass)
P = "P"      # Spy (user-defined __getattribute__)
Z = "Z"      # Lazy (__getattr__)
C = "C"      # Counter (callable object)
FN = "FN"    # closure: tensor -> tensor

GLOBALS = ("g_n", "g_list", "g_t")


class Var:
    __slots__ = ("name", "kind", "fn", "assignable")

    def __init__(self, name, kind, fn, assignable=True):
        self.name, self.kind, self.fn, self.assignable = name, kind, fn, assignable


class Frame:
    """Where statements are being generated: which function, loop, nesting."""

    def __init__(self, fn, has_state=True, in_loop=False, depth=0, is_f=False, inner=False):
        self.fn = fn
        self.has_state = has_state
        self.in_loop = in_loop
        self.depth = depth
        self.is_f = is_f
        self.inner = inner

    def child(self, **kw):
        fr = Frame(self.fn, self.has_state, self.in_loop, self.depth + 1, self.is_f, self.inner)
        for k, v in kw.items():
            setattr(fr, k, v)
        return fr


def indent(lines, n=1):
    pad = "    " * n
    return [pad + l for l in lines]


class ProgramGenerator:
    def __init__(self, seed, max_stmts=None):
        self.seed = seed
        self.r = random.Random(seed)
        self.counter = 0
        self.scopes = []
        self.helpers = []          # names of generated helper functions
        self.max_stmts = max_stmts if max_stmts is not None else self.r.randint(8, 28)
        self.budget = 0
        # A profile decides which constructs appear. fastdyn runs a frame eagerly where a graph
        # break meets a loop, a try/with block or a cell variable, so profiles that avoid those
        # combinations keep the compiled paths (graphs, continuations, side-effect replay) covered.
        #   pure:   no graph-breaking construct, no state, no globals, no closures: f is mostly
        #           one graph that builds and returns tensors, objects, dataclasses, containers
        #   graph:  no graph-breaking call (mutations of the caller's containers still break)
        #   linear: graph breaks, but not inside loops, and no try/with/closures
        #   all:    everything, anywhere
        x = self.r.random()
        self.profile = ("pure" if x < 0.2 else "graph" if x < 0.45 else "linear" if x < 0.75
                        else "all")

    # ------------------------------------------------------------------ names and scopes
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def define(self, name, kind, fr, assignable=True):
        self.scopes[-1].append(Var(name, kind, fr.fn, assignable))
        return name

    def visible(self, kind, fr=None, assignable=False):
        out = []
        for scope in self.scopes:
            for v in scope:
                if v.kind != kind:
                    continue
                if assignable and (not v.assignable or fr is None or v.fn != fr.fn):
                    continue
                out.append(v)
        return out

    def pick(self, kind, fr=None, assignable=False):
        vs = self.visible(kind, fr, assignable)
        return self.r.choice(vs).name if vs else None

    def chance(self, p):
        return self.r.random() < p

    def rich(self):
        """Constructs that make fastdyn run a whole frame eagerly when any break occurs in it
        (cell variables from comprehensions and lambdas over locals, starred unpacking, abs() of
        an int): only in the profiles that have breaks anyway."""
        return self.profile in ("linear", "all")

    def brk(self, fr):
        """May a graph-breaking construct appear here?"""
        if self.profile in ("graph", "pure"):
            return False
        if self.profile == "linear":
            return not fr.in_loop
        return True

    # ------------------------------------------------------------------ expressions
    def tvar(self):
        return self.pick(T)

    def tensor(self, fr, d=0):
        r = self.r
        a = self.tvar()
        if d >= 2 or self.chance(0.25):
            return a
        b = self.tvar()
        sub = lambda: self.tensor(fr, d + 1)  # noqa: E731
        opts = [
            lambda: f"({sub()} + {sub()})",
            lambda: f"({sub()} * {sub()})",
            lambda: f"({sub()} - {b})",
            lambda: f"torch.relu({sub()})",
            lambda: f"{a}.relu()",
            lambda: f"torch.sin({sub()})",
            lambda: f"{a}.cos()",
            lambda: f"torch.exp({a}.clamp(-4, 4))",
            lambda: f"torch.tanh({sub()})",
            lambda: f"{a}.abs()",
            lambda: f"(-{a})",
            lambda: f"({a} @ {b})",
            lambda: f"torch.matmul({a}, {b}) * 0.25",
            lambda: f"{a}.t()",
            lambda: f"{a}.transpose(0, 1)",
            lambda: f"{a}.reshape(-1).reshape({a}.shape)",
            lambda: f"{a}.reshape({a}.shape[1], -1)",
            lambda: f"{a}.contiguous()",
            lambda: f"{a}.clone()",
            lambda: f"({a} + {a}[0])",
            lambda: f"({a} * {b}[:, 1:2])",
            lambda: f"torch.cat([{a}[1:], {a}[:1]], 0)",
            lambda: f"torch.cat([{a}, {b}], 1)[:, :{a}.shape[1]]",
            lambda: f"torch.where({self.boolt(fr, d + 1)}, {a}, {b})",
            lambda: f"torch.where({a} > 0, {a}, {b} * 0.5)",
            lambda: f"({sub()} + {self.num(fr)})",
            lambda: f"({sub()} * {self.num(fr)})",
            lambda: f"({a} * {self.scalar(fr, d + 1)})",
            lambda: f"({a} + {a}.sum(0, keepdim=True))",
            lambda: f"({a}.mean(1, keepdim=True) - {a})",
            lambda: f"torch.stack([{a}, {b}]).sum(0)",
            lambda: f"torch.zeros_like({a})",
            lambda: f"torch.ones({a}.shape) * {self.num(fr)}",
            lambda: f"{a}[:, [1, 0] + list(range(2, {a}.shape[1]))]",
            lambda: f"{a}.flip(0)",
            lambda: f"torch.maximum({a}, {b})",
            lambda: f"{a}.softmax({r.choice([0, 1, -1])})",
            lambda: f"{a}.cumsum({r.choice([0, 1])})",
            lambda: f"({sub()}).pow(2)",
            lambda: f"({sub()} / ({b}.abs() + 1))",
            lambda: f"{a}.masked_fill({a} < 0, {self.num(fr)})",
            lambda: f"{a}.unsqueeze(0).squeeze(0)",
            lambda: f"{a}.view({a}.shape[0], -1)" if r.random() < 0.5 else f"{a}.expand({a}.shape)",
            lambda: f"({a}.double() * 2).float()",
            lambda: f"({a} + {a}.long().sum())",
            lambda: f"F.gelu({a})" if r.random() < 0.5 else f"F.layer_norm({a}, ({a}.shape[-1],))",
            lambda: f"{a}.clamp(min={self.flt_lit()})",
        ]
        if fr.has_state:
            opts.append(lambda: f"({a} * state.w)")
        if self.helpers and not fr.inner and fr.fn == "f":
            opts.append(lambda: f"{r.choice(self.helpers)}({sub()}, {b}, state)")
            opts.append(lambda: f"{r.choice(self.helpers)}({sub()}, state=state, b={b})")
        o = self.pick(O)
        if o:
            opts.append(lambda: f"{o}.scale({a})")
        c = self.pick(C)
        if c:
            opts.append(lambda: f"{c}({a})")
        fn = self.pick(FN)
        if fn:
            opts.append(lambda: f"{fn}({sub()})")
        tl = self.pick(TL)
        if tl:
            opts.append(lambda: f"torch.stack({tl}).sum(0)")
            opts.append(lambda: f"{tl}[-1]")
        return r.choice(opts)()

    def flt_lit(self):
        return self.r.choice(["0.5", "-0.25", "1.5", "-1.0"])

    def scalar(self, fr, d=0):
        a, b = self.tvar(), self.tvar()
        opts = [
            f"{a}.sum()", f"{a}.mean()", f"({a} * {b}).sum()", f"{a}[0, 1]", f"{a}.max()",
            f"{a}.norm()", f"torch.dot({a}[0], {b}[1])", f"{a}.abs().min()",
            f"{a}[{a} > 0].sum()", f"{a}.double().mean().float()", f"{a}.amax()",
            f"sum(t.sum() for t in ({a}, {b}))",
        ]
        s = self.pick(S)
        if s:
            opts += [s, f"({s} * 2)", f"({s} + {a}.sum())"]
        return self.r.choice(opts)

    def boolt(self, fr, d=0):
        a, b = self.tvar(), self.tvar()
        opts = [f"({a} > {b})", f"({a} < 0)", f"({a} >= {self.scalar(fr, d + 1)})",
                f"(({a} > 0) & ({b} < 0))", f"({a} == {a})", f"{a}.isnan()",
                f"torch.logical_or({a} > 1, {b} < -1)"]
        bv = self.pick(B)
        if bv:
            opts += [f"~{bv}", f"({bv} | ({a} > 0.5))", bv]
        return self.r.choice(opts)

    def num(self, fr):
        """A Python int or float expression."""
        return self.integer(fr) if self.chance(0.6) else self.flt(fr)

    def integer(self, fr, d=0):
        r = self.r
        if d >= 2 or self.chance(0.3):
            iv = self.pick(I)
            return iv if iv and self.chance(0.7) else str(r.randint(0, 5))
        sub = lambda: self.integer(fr, d + 1)  # noqa: E731
        a = self.tvar()
        opts = [
            lambda: f"({sub()} + {sub()})", lambda: f"({sub()} * {sub()} % 7)",
            lambda: f"({sub()} - 1)", lambda: f"({sub()} // 2)", lambda: f"({sub()} % 3)",
            lambda: f"{a}.shape[0]", lambda: f"{a}.dim()", lambda: f"({a}.numel() // 4)",
            lambda: f"max({sub()}, {sub()})", lambda: f"min({sub()}, 3)",
            lambda: f"abs({sub()})" if self.rich() else f"max({sub()}, 0)",
            lambda: f"len(str({sub()}))",
        ]
        if self.brk(fr):
            opts += [lambda: f"int({self.boolt(fr, d + 1)}.sum())", lambda: f"int({a}.argmax())"]
        if (fr.is_f or fr.fn == "f") and self.profile != "pure":
            opts.append(lambda: "g_n")
        for kind, tmpl in ((L, "len({})"), (D, "len({})"), (O, "{}.n"), (R, "{}.a"), (P, "{}.n"),
                           (Z, "{}.width"), (C, "{}.hits"), (TL, "len({})")):
            v = self.pick(kind)
            if v:
                opts.append(lambda v=v, tmpl=tmpl: tmpl.format(v))
        o = self.pick(O)
        if o:
            opts += [lambda: f"{o}.bump({r.randint(1, 3)})", lambda: f"{o}.double",
                     lambda: f"getattr({o}, 'extra', -1) if isinstance(getattr({o}, 'extra', -1), int) else 0"]
        if fr.has_state:
            opts += [lambda: "state.box.n", lambda: "len(state.out)", lambda: "len(state.log)"]
            if o and self.brk(fr):
                opts.append(lambda: f"{o}.report(state.buf)")
        return r.choice(opts)()

    def flt(self, fr):
        r = self.r
        s = self.scalar(fr)
        opts = [f"{r.choice([0.5, 1.5, -0.25, 2.0])}", f"float({self.integer(fr)}) / 3",
                f"math.sqrt(abs({self.integer(fr)}))" if self.rich() else f"float({self.integer(fr)}) * 0.5"]
        if self.brk(fr):
            opts += [f"{s}.item()", f"float({s})", f"round({s}.item(), 3)",
                     f"math.sqrt(abs({s}.item()))"]
        fv = self.pick(F)
        if fv:
            opts += [fv, f"({fv} + {self.integer(fr)} * 0.5)", f"({fv} * 2.0)", f"round({fv}, 2)"]
        return r.choice(opts)

    def value(self, fr):
        """Anything storable: ints, floats, strings, tensors, tuples."""
        r = self.r.random()
        if r < 0.3:
            return self.integer(fr)
        if r < 0.4:
            return self.flt(fr)
        if r < 0.5:
            return repr(self.r.choice(["a", "bb", "ccc", "k"]))
        if r < 0.8:
            return self.tensor(fr, 1)
        if r < 0.9:
            return f"({self.integer(fr)}, {self.tensor(fr, 2)})"
        return self.scalar(fr)

    def cond(self, fr):
        """A condition: on Python values (trace-time), on shapes, or on tensor data (a graph break)."""
        r = self.r
        a = self.tvar()
        opts = [
            lambda: f"{self.integer(fr)} > {r.randint(0, 4)}",
            lambda: f"{a}.shape[0] == {r.choice([3, 4])}",
            lambda: f"{self.integer(fr)} % 2 == 0",
            lambda: f"id({a}) == id({self.tvar()})",
            lambda: f"{a} is {self.tvar()}",
            lambda: f"len(str({self.integer(fr)})) > 1",
            lambda: f"{a}.requires_grad",
        ]
        if self.brk(fr):
            opts += [
                lambda: f"{self.scalar(fr)}.item() > {r.choice([0, 0.5, -0.5])}",
                lambda: f"{self.scalar(fr)} > 0",
                lambda: f"bool(({a} > 0).any())",
                lambda: f"float({self.scalar(fr)}) < {r.choice([0, 1.0])}",
            ]
        for kind, tmpl in ((L, "len({}) > 2"), (D, "'k' in {}"), (O, "hasattr({}, 'extra')"),
                           (R, "{}.a > 1"), (F, "{} > 0.1")):
            v = self.pick(kind)
            if v:
                opts.append(lambda v=v, tmpl=tmpl: tmpl.format(v))
        if fr.has_state:
            opts.append(lambda: f"len(state.out) > {r.randint(0, 3)}")
        return r.choice(opts)()

    # ------------------------------------------------------------------ statements
    def block(self, fr, n):
        self.scopes.append([])
        lines = []
        for k in range(n):
            if k and self.budget <= 0:
                break
            lines += self.statement(fr)
        self.scopes.pop()
        return lines or ["pass"]

    def nstmts(self, fr):
        return self.r.randint(1, 3 if fr.depth < 2 else 2)

    def statement(self, fr):
        self.budget -= 1
        r = self.r
        table = [
            (10, self.s_tensor_assign),
            (4, self.s_inplace),
            (2, self.s_input_inplace),
            (2, self.s_setitem),
            (3, self.s_scalar_assign),
            (3, self.s_int_assign),
            (2, self.s_float_assign),
            (2, self.s_aug_int),
            (3, self.s_reassign_tensor),
            (3, self.s_new_box),
            (5, self.s_box_ops),
            (3, self.s_rec),
            (2, self.s_spy),
            (1, self.s_lazy),
            (1, self.s_counter),
            (4, self.s_state_mut),
            (3, self.s_list),
            (3, self.s_list_ops),
            (2, self.s_tensor_list),
            (2, self.s_dict),
            (3, self.s_dict_ops),
            (2, self.s_tuple_unpack),
            (2, self.s_comprehension),
            (3 if self.profile == "all" else 0, self.s_closure),
            (2, self.s_global),
            (3, self.s_print),
            (2, self.s_tolist),
            (2, self.s_track),
            (2, self.s_del),
            (1, self.s_backward),
            (1, self.s_error_prone),
            (1 if self.profile != "linear" else 0, self.s_maybe_unbound),
        ]
        if fr.depth < 3 and self.budget > 1:
            table += [
                (4, self.s_if),
                (3, self.s_for),
                (1, self.s_while),
                (3 if self.profile != "linear" else 0, self.s_try),
                (2 if self.profile != "linear" else 0, self.s_with),
                (1, self.s_no_grad),
            ]
        if fr.in_loop:
            table += [(2, self.s_break_continue)]
        table += [(2, self.s_raise)]
        if not fr.inner and fr.depth > 0:
            table += [(1, self.s_return)]
        if fr.fn == "f" and fr.depth < 2 and not fr.inner and self.brk(fr):
            table += [(1, self.s_local_dataclass)]
        total = sum(w for w, _ in table)
        x = r.uniform(0, total)
        for w, fn in table:
            x -= w
            if x <= 0:
                out = fn(fr)
                if out is not None:
                    return out
                break
        return self.s_tensor_assign(fr)

    # --- tensors
    def s_tensor_assign(self, fr):
        name = self.fresh("t")
        e = self.tensor(fr)
        self.define(name, T, fr)
        return [f"{name} = {e}"]

    def s_reassign_tensor(self, fr):
        v = self.pick(T, fr, assignable=True)
        if not v:
            return None
        return [f"{v} = {self.tensor(fr, 1)}"]

    def s_inplace(self, fr):
        v = self.pick(T, fr)
        if not v:
            return None
        op = self.r.choice(["add_", "mul_", "sub_", "add_", "relu_", "clamp_"])
        if op == "relu_":
            return [f"{v}.relu_()"]
        if op == "clamp_":
            return [f"{v}.clamp_(-2, 2)"]
        arg = self.tensor(fr, 1) if self.chance(0.5) else self.num(fr)
        if op == "mul_" and self.chance(0.5):
            arg = self.r.choice(["0.5", "2", "-1"])
        return [f"{v}.{op}({arg})"]

    def s_input_inplace(self, fr):
        v = self.r.choice(["x", "y"]) if fr.fn == "f" and not fr.inner else self.tvar()
        op = self.r.choice([f"{v}.add_({self.num(fr)})", f"{v}.mul_(0.5)",
                            f"{v}[0].add_(1)", f"{v}.t()[1].mul_(2)",
                            f"{v}.copy_({self.tensor(fr, 1)})"])
        return [op]

    def s_setitem(self, fr):
        v = self.pick(T, fr)
        idx = self.r.choice(["0", "1", ":, 0", "1:, 1", "-1", "0, 0", "..., -1"])
        rhs = self.r.choice([self.num(fr), self.scalar(fr), f"{self.tvar()}[0, 0]"])
        if self.chance(0.3):
            return [f"{v}[{idx}] += {rhs}"]
        return [f"{v}[{idx}] = {rhs}"]

    def s_scalar_assign(self, fr):
        name = self.fresh("s")
        e = self.scalar(fr)
        self.define(name, S, fr)
        return [f"{name} = {e}"]

    def s_backward(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        return [f"({self.tvar()} * state.w).sum().backward()"]

    # --- Python numbers
    def s_int_assign(self, fr):
        name = self.fresh("i")
        e = self.integer(fr)
        self.define(name, I, fr)
        return [f"{name} = {e}"]

    def s_float_assign(self, fr):
        name = self.fresh("v")
        e = self.flt(fr)
        self.define(name, F, fr)
        return [f"{name} = {e}"]

    def s_aug_int(self, fr):
        v = self.pick(I, fr, assignable=True)
        if not v:
            return None
        op = self.r.choice(["+=", "-=", "*="])
        return [f"{v} {op} {self.integer(fr, 1)}", f"{v} = {v} % 11"] if op == "*=" else \
            [f"{v} {op} {self.integer(fr, 1)}"]

    # --- objects
    def s_new_box(self, fr):
        name = self.fresh("o")
        v = self.r.choice(["None", self.tvar(), self.tensor(fr, 1)])
        e = f"Box({self.integer(fr)}, {v})"
        if fr.has_state and self.chance(0.4):
            e = f"state.track('{name}', {e})"
        self.define(name, O, fr)
        return [f"{name} = {e}"]

    def s_box_ops(self, fr):
        objs = [v.name for v in self.visible(O)]
        if fr.has_state:
            objs += ["state.box"] * 2
        if not objs:
            return None
        o = self.r.choice(objs)
        r = self.r
        k = r.randint(1, 3)
        opts = [
            # read before write: the value read must be the old one
            lambda: self._rbw(fr, o),
            lambda: self._rbw(fr, o),
            lambda: [f"{o}.n += {k}"],
            lambda: [f"{o}.n = {self.integer(fr)}"],
            lambda: [f"{o}.v = {self.tensor(fr, 1)}"],
            lambda: [f"setattr({o}, 'extra', {self.value(fr)})"],
            lambda: [f"if hasattr({o}, 'extra'):", f"    del {o}.extra"],
            lambda: [f"{o}.extra = {self.integer(fr)}"],
            lambda: [f"{o}.tag = 'b{k}'"],
            lambda: self._getattr(fr, o),
            lambda: self._bump(fr, o),
            lambda: [f"{o}.n = {o}.double + {o}.n"],
            lambda: [f"{o}.v = {o}.scale({self.tvar()})"],
        ]
        out = r.choice(opts)()
        return out

    def _rbw(self, fr, o):
        old = self.fresh("old")
        lines = [f"{old} = {o}.n", f"{o}.n += {self.r.randint(1, 3)}"]
        if fr.has_state and self.chance(0.7):
            lines.append(f"state.out.append({old})")
        else:
            self.define(old, I, fr)
        if self.chance(0.3):
            oldv = self.fresh("oldv")
            lines += [f"{oldv} = {o}.v", f"{o}.v = {self.tensor(fr, 1)}"]
            if fr.has_state:
                lines.append(f"state.out.append({oldv})")
        return lines

    def _getattr(self, fr, o):
        name = self.fresh("i")
        self.define(name, I, fr)
        return [f"{name} = getattr({o}, 'n', 0) + (1 if hasattr({o}, 'extra') else 0)"]

    def _bump(self, fr, o):
        name = self.fresh("i")
        self.define(name, I, fr)
        return [f"{name} = {o}.bump({self.r.randint(1, 3)})"]

    def s_rec(self, fr):
        rs = self.visible(R)
        r = self.r
        if rs and self.chance(0.6):
            v = r.choice(rs).name
            opts = [
                [f"{v}.a = {self.integer(fr)}"],
                [f"{v}.a += 1"],
                [f"{v}.b = {self.tensor(fr, 1)}"],
                [f"{v}.tag = {v}.tag + 'x'"],
                [f"{self.fresh('old')} = {v}.a", f"{v}.a = {v}.a + 2"],
                # rebinding the name is only allowed in the function that defined it
                [f"{v} = dataclasses.replace({v}, a={self.integer(fr)})"]
                if v in [w.name for w in self.visible(R, fr, assignable=True)] else [f"{v}.a -= 1"],
            ]
            lines = r.choice(opts)
            if fr.has_state and self.chance(0.5):
                lines = lines + [f"state.out.append({v})"]
            return lines
        name = self.fresh("r")
        args = [self.integer(fr)]
        if self.chance(0.7):
            args.append(self.tensor(fr, 1) if self.chance(0.7) else self.value(fr))
        e = f"Rec({', '.join(args)})"
        if fr.has_state and self.chance(0.3):
            e = f"state.track('{name}', {e})"
        self.define(name, R, fr)
        lines = [f"{name} = {e}"]
        if self.chance(0.5):
            lines.append(f"{name}.a = {self.integer(fr)}")
        if fr.has_state and self.chance(0.4):
            lines.append(f"state.out.append({name})")
        return lines

    def s_local_dataclass(self, fr):
        cls = self.fresh("DC")
        name = self.fresh("r")
        lines = ["@dataclasses.dataclass", f"class {cls}:", "    a: int", "    b: object = None",
                 "    tag: str = 'l'", f"{name} = {cls}({self.integer(fr)}, {self.tensor(fr, 1)})",
                 f"{name}.a += {self.r.randint(1, 3)}"]
        self.define(name, R, fr)   # has .a, .b and .tag like Rec
        if fr.has_state:
            lines.append(f"state.out.append(({name}.a, {name}.tag))")
        return lines

    def s_spy(self, fr):
        if self.profile == "pure":
            return None
        ps = self.visible(P)
        if ps and self.chance(0.6):
            p = self.r.choice(ps).name
            return self.r.choice([
                [f"{p}.n = {p}.n + 1"],
                [f"{self.fresh('t')} = {self.tvar()} * {p}.n"],
                [f"{p}.m = {self.integer(fr)}"],
            ])
        name = self.fresh("p")
        lines = [f"{name} = Spy({self.integer(fr)})"]
        self.define(name, P, fr)
        if self.chance(0.15):
            # reads through the user-defined __getattribute__ around a write: each read must run it
            t = self.fresh("t")
            lines += [f"{name}.n = {name}.n + {self.r.randint(1, 3)}",
                      f"{t} = {self.tvar()} * {name}.n"]
            self.define(t, T, fr)
        return lines

    def s_lazy(self, fr):
        if self.profile == "pure":
            return None
        name = self.fresh("z")
        self.define(name, Z, fr)
        return [f"{name} = Lazy()"]

    def s_counter(self, fr):
        name = self.fresh("c")
        self.define(name, C, fr)
        return [f"{name} = Counter({self.r.randint(0, 3)})"]

    def s_state_mut(self, fr):
        if not fr.has_state:
            return None
        r = self.r
        key = r.choice(["'a'", "'b'", "'k'", "'t'"])
        opts = [
            lambda: [f"state.out.append({self.value(fr)})"],
            lambda: [f"state.log.append({self.integer(fr)})"],
            lambda: [f"state.d[{key}] = {self.value(fr)}"],
            lambda: [f"state.d.setdefault({key}, []).append({self.integer(fr)})"],
            lambda: [f"state.count = getattr(state, 'count', 0) + 1"],
            lambda: [f"state.box.v = {self.tensor(fr, 1)}"],
            lambda: [f"state.last = {self.value(fr)}"],
            lambda: [f"state.log.append(f\"n={{{self.integer(fr)}}} ok={{isinstance({self.tvar()}, torch.Tensor)}}\")"],
            lambda: [f"if state.out:", f"    state.log.append(state.out.pop())"],
        ]
        return r.choice(opts)()

    # --- containers
    def s_list(self, fr):
        name = self.fresh("l")
        items = [self.value(fr) for _ in range(self.r.randint(1, 3))]
        self.define(name, L, fr)
        return [f"{name} = [{', '.join(items)}]"]

    def s_list_ops(self, fr):
        ls = [v.name for v in self.visible(L)]
        if fr.fn == "f" and not fr.inner and self.profile != "pure":
            ls.append("g_list")
        if not ls:
            return None
        l = self.r.choice(ls)
        r = self.r
        opts = [
            lambda: [f"{l}.append({self.value(fr)})"],
            lambda: [f"{l}.extend([{self.integer(fr)}, {self.value(fr)}])"],
            lambda: [f"{l}.insert(0, {self.value(fr)})"],
            lambda: [f"if {l}:", f"    {l}[0] = {self.value(fr)}"],
            lambda: [f"if len({l}) > 1:", f"    {l}.pop()"],
            lambda: self._pop_into(fr, l),
            lambda: self._star_unpack(fr, l),
            lambda: [f"{l}[:] = {l}[::-1]"],
            lambda: [f"del {l}[0]"] if l != "g_list" else [f"{l}.clear()"],
            lambda: [f"{self.define(self.fresh('i'), I, fr)} = {l}.index({l}[-1]) if {l} else -1"],
        ]
        return r.choice(opts)()

    def _pop_into(self, fr, l):
        name = self.fresh("e")
        lines = [f"{name} = {l}.pop() if {l} else None"]
        if fr.has_state:
            lines.append(f"state.out.append({name})")
        return lines

    def _star_unpack(self, fr, l):
        if not self.rich():
            return None
        a, rest = self.fresh("a"), self.fresh("rest")
        self.scopes.append([])
        inner = [f"{a}, *{rest} = {l}", f"{self.define(self.fresh('i'), I, fr)} = len({rest})"]
        if fr.has_state:
            inner.append(f"state.out.append({rest})")
        self.scopes.pop()
        return [f"if {l}:"] + indent(inner)

    def s_tensor_list(self, fr):
        tls = self.visible(TL)
        if tls and self.chance(0.5):
            tl = self.r.choice(tls).name
            return self.r.choice([
                [f"{tl}.append({self.tensor(fr, 1)})"],
                [f"if len({tl}) > 1:", f"    {tl}.pop(0)"],
                [f"{tl}[0] = {self.tensor(fr, 1)}"],
            ])
        name = self.fresh("tl")
        if self.chance(0.5) and self.rich():
            line = f"{name} = [{self.tvar()} * k for k in range({self.r.randint(1, 3)})]"
        else:
            line = f"{name} = [{self.tensor(fr, 1)}, {self.tvar()}]"
        self.define(name, TL, fr)
        return [line]

    def s_dict(self, fr):
        name = self.fresh("d")
        items = [f"'{k}': {self.value(fr)}" for k in self.r.sample(["a", "b", "k", "z"], self.r.randint(1, 3))]
        self.define(name, D, fr)
        return [f"{name} = {{{', '.join(items)}}}"]

    def s_dict_ops(self, fr):
        ds = [v.name for v in self.visible(D)]
        if fr.has_state:
            ds.append("state.d")
        if not ds:
            return None
        d = self.r.choice(ds)
        key = self.r.choice(["'a'", "'b'", "'k'", "'z'"])
        opts = [
            lambda: [f"{d}[{key}] = {self.value(fr)}"],
            lambda: [f"if {key} in {d}:", f"    del {d}[{key}]"],
            lambda: [f"{d}.update({{{key}: {self.value(fr)}}})"],
            lambda: [f"{d}.pop({key}, None)"],
            lambda: self._dict_iter(fr, d),
            lambda: [f"{self.define(self.fresh('d'), D, fr)} = {{k: v for k, v in {d}.items() if k != {key}}}"],
            lambda: [f"{self.define(self.fresh('l'), L, fr)} = list({d}.keys())"],
        ]
        return self.r.choice(opts)()

    def _dict_iter(self, fr, d):
        k = self.fresh("k")
        lines = [f"for {k} in list({d}):"]
        body = [f"if isinstance({d}[{k}], torch.Tensor):",
                f"    {d}[{k}] = {d}[{k}] * 2",
                "else:", f"    {d}[{k}] = ({d}[{k}], {k})"]
        return lines + indent(body)

    def s_tuple_unpack(self, fr):
        r = self.r
        if self.chance(0.5):
            a, b = self.fresh("t"), self.fresh("t")
            e1, e2 = self.tensor(fr, 1), self.tensor(fr, 1)
            self.define(a, T, fr)
            self.define(b, T, fr)
            if self.chance(0.3):
                return [f"{a}, {b} = {e1}, {e2}", f"{a}, {b} = {b}, {a}"]
            return [f"{a}, {b} = ({e1}, {e2})"]
        tu, h, rest = self.fresh("tu"), self.fresh("i"), self.fresh("rest")
        lines = [f"{tu} = ({self.integer(fr)}, {self.tensor(fr, 1)}, {self.integer(fr)})"]
        if self.rich():
            lines.append(f"{h}, *{rest} = {tu}")
            self.define(rest, L, fr)
        else:
            t2 = self.fresh("t")
            lines.append(f"{h}, {t2}, {rest} = {tu}")
            self.define(t2, T, fr)
            self.define(rest, I, fr)
        self.define(h, I, fr)
        return lines

    def s_comprehension(self, fr):
        r = self.r
        name = self.fresh("l")
        k = r.randint(1, 4)
        opts = [
            f"[i * i for i in range({k}) if i % 2 == 0]",
            f"sorted([{self.integer(fr)}, {self.integer(fr)}, {k}])",
            f"list(zip(range({k}), 'abcd'))",
        ]
        if self.rich():   # comprehensions over locals make them cell variables
            opts += [f"[{self.tvar()}[i].sum() for i in range(min({k}, 3))]",
                     f"[(i, {self.integer(fr)}) for i in range({k})]"]
        self.define(name, L, fr)
        return [f"{name} = {r.choice(opts)}"]

    def s_closure(self, fr):
        if fr.inner or fr.depth > 1:
            return None
        r = self.r
        cnt, fn = self.fresh("cnt"), self.fresh("inner")
        lines = [f"{cnt} = {r.randint(0, 2)}", f"def {fn}(t):", f"    nonlocal {cnt}", f"    {cnt} += 1"]
        # the inner function's own scope: t, plus read-only captured variables of f
        captured = self.tvar()
        self.scopes.append([Var("t", T, fn)])
        ifr = Frame(fn, has_state=False, in_loop=False, depth=fr.depth + 1, inner=True)
        body = []
        for _ in range(r.randint(0, 2)):
            body += self.statement(ifr)
        self.scopes.pop()
        lines += indent(body)
        lines.append(f"    return t * {cnt} + {captured}")
        self.define(fn, FN, fr, assignable=False)
        self.define(cnt, I, fr, assignable=False)
        out = self.fresh("t")
        lines.append(f"{out} = {fn}({self.tvar()})")
        self.define(out, T, fr)
        if fr.has_state and self.chance(0.5):
            lines.append(f"state.log.append({cnt})")
        if self.chance(0.3):
            lam = self.fresh("lam")
            self.define(lam, FN, fr, assignable=False)
            lines.append(f"{lam} = lambda t: t.relu() + {self.tvar()}")
        return lines

    def s_global(self, fr):
        if fr.fn != "f" or fr.inner or self.profile == "pure":
            return None
        r = self.r
        opts = [
            lambda: ["g_n += 1"],
            lambda: [f"g_n = g_n + {self.integer(fr)}"],
            lambda: [f"g_list.append({self.integer(fr)})"],
            lambda: [f"g_t = {self.tensor(fr, 1)}"],
            lambda: self._read_g_t(fr),
            lambda: ["g_list.append(g_n)"],
        ]
        return r.choice(opts)()

    def _read_g_t(self, fr):
        a = self.tvar()
        name = self.fresh("t")
        self.define(name, T, fr)
        # g_t may hold a tensor of an earlier call's shape
        return [f"{name} = g_t + 1 if g_t is not None and g_t.shape == {a}.shape else {a}"]

    # --- graph breaks
    def s_print(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        r = self.r
        a = self.tvar()
        what = r.choice([
            f"'p', {self.integer(fr)}",
            f"round({self.scalar(fr)}.item(), 3)",
            f"tuple({a}.shape)",
            f"{a}.shape",
            f"'len', len(state.out)",
            f"[round(v, 2) for v in {a}[0].tolist()]",
            f"{a}.dtype, {a}.requires_grad",
        ])
        return [f"print({what}, file=state.buf)"]

    def s_tolist(self, fr):
        if not self.brk(fr):
            return None
        name = self.fresh("l")
        a = self.tvar()
        self.define(name, L, fr)
        return [self.r.choice([f"{name} = {a}.tolist()", f"{name} = {a}[0].tolist()",
                               f"{name} = [{a}.sum().item(), len({a}.tolist())]",
                               f"{name} = list({a}.shape)"])]

    def s_track(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        cands = self.visible(O) + self.visible(R) + self.visible(T) + self.visible(P)
        if not cands:
            return None
        v = self.r.choice(cands).name
        return [f"state.track('{v}', {v})"]

    def s_del(self, fr):
        # Only names of this block: deleting in a nested block would leave the name unbound after it.
        mine = [v for v in self.scopes[-1] if v.fn == fr.fn and v.assignable
                and v.name not in ("x", "y", "n", "a", "b", "t")]
        if not mine:
            return None
        v = self.r.choice(mine)
        self.scopes[-1].remove(v)
        if self.chance(0.3) and v.kind in (O, R, P, L, D):
            # drop the object and bind the name to a new one
            self.scopes[-1].append(v)
            return [f"{v.name} = {self._rebuild(v, fr)}"]
        return [f"del {v.name}"]

    def s_maybe_unbound(self, fr):
        """A local bound on one branch only, then read or deleted: UnboundLocalError (caught)."""
        u = self.fresh("u")
        use = self.r.choice([f"del {u}", f"{self.fresh('i')} = {u} + 1"])
        handler = f"state.log.append('unbound {u}')" if fr.has_state else "pass"
        return [f"if {self.cond(fr)}:", f"    {u} = {self.integer(fr)}",
                "try:", f"    {use}", "except UnboundLocalError:", f"    {handler}"]

    def _rebuild(self, v, fr):
        return {O: f"Box({self.integer(fr)})", R: f"Rec({self.integer(fr)})", P: "Spy(0)",
                L: "[]", D: "{}"}[v.kind]

    def s_error_prone(self, fr):
        if not self.brk(fr):
            return None
        r = self.r
        name = self.fresh("i")
        opts = [
            f"{name} = [1, 2, 3][{self.integer(fr)}]",
            f"{name} = {{'a': 1, 'b': 2}}[{r.choice(['a', 'b', 'c'])!r}]",
            f"{name} = 12 // ({self.integer(fr)} - {r.randint(0, 3)})",
            f"{name} = int({self.tvar()}[{r.choice([2, 3, 4])}, 0] > 0)",
        ]
        self.define(name, I, fr)
        return [r.choice(opts)]

    # --- control flow
    def s_if(self, fr):
        c = self.cond(fr)
        body = self.block(fr.child(), self.nstmts(fr))
        lines = [f"if {c}:"] + indent(body)
        if self.chance(0.5):
            lines += ["else:"] + indent(self.block(fr.child(), self.nstmts(fr)))
        return lines

    def s_for(self, fr):
        r = self.r
        i = self.fresh("i")
        k = r.randint(1, 4)
        self.scopes.append([Var(i, I, fr.fn, assignable=False)])
        it = r.choice([f"range({k})", f"range({k})", f"range(1, {k + 1})"])
        body = self.block(fr.child(in_loop=True), self.nstmts(fr))
        self.scopes.pop()
        lines = [f"for {i} in {it}:"] + indent(body)
        if self.chance(0.15):
            lines += ["else:"] + indent(self.block(fr.child(), 1))
        if self.chance(0.3):
            # a loop over a container
            e = self.fresh("e")
            tl = self.pick(TL)
            src = tl if tl else f"[{self.tvar()}, {self.tvar()}]"
            self.scopes.append([Var(e, T, fr.fn, assignable=False)])
            body2 = self.block(fr.child(in_loop=True), 1)
            self.scopes.pop()
            lines += [f"for {e} in list({src}):"] + indent(body2)
        return lines

    def s_while(self, fr):
        w = self.fresh("w")
        k = self.r.randint(1, 3)
        self.scopes.append([Var(w, I, fr.fn, assignable=False)])
        body = self.block(fr.child(in_loop=True), self.nstmts(fr))
        self.scopes.pop()
        return [f"{w} = 0", f"while {w} < {k}:", f"    {w} += 1"] + indent(body)

    def s_break_continue(self, fr):
        return [f"if {self.cond(fr)}:", "    " + self.r.choice(["break", "continue"])]

    def s_try(self, fr):
        r = self.r
        lines = ["try:"] + indent(self.block(fr.child(), self.nstmts(fr) + 1))
        handlers = 0
        if self.chance(0.8):
            e = self.fresh("e")
            self.scopes.append([])
            body = []
            if fr.has_state:
                body.append(f"state.log.append(('caught', {e}.code, str({e})))")
            body += self.block(fr.child(), r.randint(0, 1)) if self.chance(0.5) else []
            self.scopes.pop()
            lines += [f"except MyError as {e}:"] + indent(body or ["pass"])
            handlers += 1
        if self.chance(0.5):
            e = self.fresh("e")
            body = [f"state.log.append(type({e}).__name__)"] if fr.has_state else ["pass"]
            lines += [f"except (IndexError, KeyError, ZeroDivisionError) as {e}:"] + indent(body)
            handlers += 1
        if self.chance(0.15):
            e = self.fresh("e")
            body = [f"state.log.append(('exc', type({e}).__name__))"] if fr.has_state else ["pass"]
            if self.chance(0.3):
                body.append("raise")
            lines += [f"except Exception as {e}:"] + indent(body)
            handlers += 1
        if handlers and self.chance(0.3):
            lines += ["else:"] + indent(self.block(fr.child(), 1))
        if not handlers or self.chance(0.4):
            lines += ["finally:"] + indent(self.block(fr.child(), self.nstmts(fr)))
        return lines

    def s_raise(self, fr):
        r = self.r
        exc = r.choice([f"MyError({self.integer(fr)})", f"MyError({r.randint(0, 9)}, 'bad')",
                        "ValueError('v')", f"KeyError({r.choice(['a', 'b'])!r})"])
        if self.chance(0.8):
            return [f"if {self.cond(fr)}:", f"    raise {exc}"]
        if fr.depth == 0:
            return [f"if {self.cond(fr)}:", f"    raise {exc}"]
        return [f"raise {exc}"]

    def s_return(self, fr):
        return [f"if {self.cond(fr)}:", f"    return {self.ret_expr(fr)}"]

    def s_with(self, fr):
        name = self.fresh("w")
        if not fr.has_state:
            return None
        swallow = self.chance(0.3)
        head = f"with Ctx(state, '{name}'{', swallow=True' if swallow else ''}) as {name}:"
        self.scopes.append([Var(name, "CTX", fr.fn, assignable=False)])
        body = self.block(fr.child(), self.nstmts(fr))
        self.scopes.pop()
        return [head] + indent(body)

    def s_no_grad(self, fr):
        body = self.block(fr.child(), self.nstmts(fr))
        return ["with torch.no_grad():"] + indent(body)

    # ------------------------------------------------------------------ functions
    def ret_expr(self, fr):
        cands = []
        for kind in (T, T, S, I, F, L, D, O, R, B, TL):
            v = self.pick(kind)
            if v:
                cands.append(v)
        self.r.shuffle(cands)
        k = self.r.randint(1, 4)
        chosen = cands[:k] or [self.tvar()]
        if len(chosen) == 1 and self.chance(0.5):
            return chosen[0]
        return "(" + ", ".join(chosen) + ",)"

    def helper(self, idx):
        name = f"h{idx}"
        fr = Frame(name, has_state=self.profile != "pure", depth=0)
        self.scopes = [[Var("a", T, name), Var("b", T, name)]]
        self.budget = self.r.randint(2, 6)
        body = []
        while self.budget > 0:
            body += self.statement(fr)
        ret = self.tensor(fr, 1)
        self.scopes = []
        return [f"def {name}(a, b, state):"] + indent(body + [f"return {ret}"])

    def function_f(self):
        fr = Frame("f", has_state=self.profile != "pure", depth=0, is_f=True)
        self.scopes = [[Var("x", T, "f"), Var("y", T, "f"), Var("n", I, "f")]]
        self.budget = self.max_stmts
        body = ["global g_n, g_list, g_t", "n = x.shape[0]"]
        while self.budget > 0:
            body += self.statement(fr)
        body.append(f"return {self.ret_expr(fr)}")
        self.scopes = []
        return ["def f(x, y, state):"] + indent(body)

    def generate(self):
        parts = [PRELUDE]
        nh = self.r.randint(0, 2)
        helper_src = []
        for i in range(nh):
            helper_src.append("\n".join(self.helper(i)))
            self.helpers.append(f"h{i}")
        parts += helper_src
        parts.append("\n".join(self.function_f()))
        return "\n\n\n".join(parts) + "\n"


def generate(seed, max_stmts=None):
    """The source text of the program of `seed` (deterministic)."""
    return ProgramGenerator(seed, max_stmts).generate()


if __name__ == "__main__":
    import sys
    print(generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
