"""Python functions and methods called from traced code are inlined into the caller's graph:
positional and keyword arguments, defaults, *args/**kwargs, closures, nested functions, lambdas,
functools.partial, super(), staticmethod, classmethod, properties, recursion (bounded) and
methods of user classes. Each function here is ONE graph (the callees are in it)."""
import functools
import operator

import torch
import torch.nn.functional as F

from fdcheck import fastdyn

from .cases import Cases, r

CASES = Cases()


def helper_add(a, b):
    return a + b


def helper_scale(x, factor=2.0, *, shift=0.0):
    return x * factor + shift


def helper_varargs(*tensors):
    out = tensors[0]
    for t in tensors[1:]:
        out = out + t
    return out


def helper_kwargs(x, **options):
    if options.get("square"):
        x = x * x
    return x + options.get("bias", 0.0)


def helper_everything(a, b=1.0, *rest, c, d=2.0, **extra):
    out = a * b + c * d
    for t in rest:
        out = out - t
    for k in sorted(extra):
        out = out + extra[k]
    return out


def helper_level3(x):
    return x.sin()


def helper_level2(x):
    return helper_level3(x) * 2


def helper_level1(x):
    return helper_level2(x) + 1


def helper_returns_tuple(x):
    return x + 1, x - 1


def factorial(n):
    return 1 if n <= 1 else n * factorial(n - 1)


def tree_sum(x, depth):
    if depth == 0:
        return x
    return tree_sum(x * 0.5, depth - 1) + tree_sum(x + 1, depth - 1)


def make_adder(k):
    def add(x):
        return x + k
    return add


ADD_THREE = make_adder(3.0)


# --------------------------------------------------------------------------- arguments

@CASES(lambda: (r(4, 8), r(4, 8)))
def call_with_positional_args(x, y):
    return helper_add(x, y) * 2


@CASES(lambda: (r(4, 8), r(4, 8)))
def call_with_keyword_args(x, y):
    return helper_add(b=y, a=x)


@CASES(lambda: (r(4, 8),))
def call_using_defaults(x):
    return helper_scale(x)


@CASES(lambda: (r(4, 8),))
def call_overriding_default_and_keyword_only(x):
    return helper_scale(x, 0.5, shift=1.0)


@CASES(lambda: (r(4, 8), r(4, 8), r(4, 8)))
def call_star_args_callee(x, y, z):
    return helper_varargs(x, y, z)


@CASES(lambda: (r(4, 8), r(4, 8)))
def call_with_unpacked_tuple(x, y):
    args = (x, y)
    return helper_varargs(*args)


@CASES(lambda: (r(4, 8),))
def call_kwargs_callee(x):
    return helper_kwargs(x, square=True, bias=0.5)


@CASES(lambda: (r(4, 8),))
def call_with_unpacked_dict(x):
    opts = {"bias": -1.0}
    return helper_kwargs(x, **opts)


@CASES(lambda: (r(4, 8), r(4, 8)))
def call_with_every_kind_of_parameter(x, y):
    return helper_everything(x, 3.0, y, y, c=x, e=1.0, f=2.0)


@CASES(lambda: (r(4, 8),))
def call_chain_three_deep(x):
    return helper_level1(x)


@CASES(lambda: (r(4, 8),))
def call_returning_tuple_unpacked(x):
    a, b = helper_returns_tuple(x)
    return a * b


@CASES(lambda: (r(4, 8),))
def recursion_on_constant_bounded(x):
    return x * factorial(5)


@CASES(lambda: (r(4, 8),))
def recursion_building_graph(x):
    return tree_sum(x, 3)


# --------------------------------------------------------------------------- closures, lambdas, partial

@CASES(lambda: (r(4, 8),))
def nested_function_defined_and_called(x):
    def inner(t):
        return t * 3 - 1
    return inner(x) + inner(x * 2)


@CASES(lambda: (r(4, 8), r(4, 8)))
def closure_reads_tensor_of_enclosing_frame(x, y):
    def inner(t):
        return t + y
    return inner(x)


@CASES(lambda: (r(4, 8),))
def closure_writes_nonlocal(x):
    total = x

    def bump(t):
        nonlocal total
        total = total + t
    bump(x)
    bump(x * 2)
    return total


@CASES(lambda: (r(4, 8),))
def closure_from_global_factory(x):
    return ADD_THREE(x)


@CASES(lambda: (r(4, 8),))
def closure_made_in_frame(x):
    add = make_adder(1.5)
    return add(x) * 2


@CASES(lambda: (r(4, 8),))
def lambda_called(x):
    f = lambda t, k=2: t * k + 1  # noqa: E731
    return f(x) + f(x, k=3)


@CASES(lambda: (r(4, 8),))
def lambda_passed_to_helper(x):
    def apply(fn, t):
        return fn(t)
    return apply(lambda t: t.relu(), x)


@CASES(lambda: (r(4, 8),))
def functools_partial_of_python_function(x):
    half = functools.partial(helper_scale, factor=0.5)
    return half(x, shift=2.0)


@CASES(lambda: (r(4, 8),))
def functools_partial_of_torch_function(x):
    sm = functools.partial(F.softmax, dim=-1)
    return sm(x)


# torch.nn.functional's and torch._assert's __torch_function__ probes are answered at trace time
# (torch._C._has_torch_function*): no break in front of every F call, and a Python bool asserted.
@CASES(lambda: (r(4, 8),))
def functional_behind_torch_function_probes(x):
    torch._assert(x.dim() == 2, "x must be 2-d")
    return F.softsign(x), F.tanhshrink(x), F.softmin(x, -1), F.normalize(x)


class TorchFunctionBox:
    """Not a tensor, but torch functions defer to it (torch.overrides): its override must run."""

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda a: a.t if isinstance(a, TorchFunctionBox) else a  # noqa: E731
        return func(*[unwrap(a) for a in args], **(kwargs or {})) * 10


# The probe says yes for an argument with __torch_function__: the override runs as in eager
# (the box, made in the trace, is built before the break that calls the override). Dynamo: (1, 0);
# fastdyn's second graph is the continuation's `+ 1`, and the break before any op is not counted.
@CASES(lambda: (r(4, 8),), graphs=2, breaks=0)
def functional_on_an_object_with_torch_function(x):
    return F.softsign(TorchFunctionBox(x)) + 1


# list[int] in torch.jit.annotate (torch.nn.functional's pooling): a builtin generic alias.
@CASES(lambda: (r(4, 8),))
def builtin_generic_alias_annotation(x):
    sizes = torch.jit.annotate(list[int], [])
    return x + len(sizes)


@CASES(lambda: (r(4, 8), r(4, 8)))
def operator_module_functions(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.getitem(x, 0), operator.neg(y)


@CASES(lambda: (r(4, 8), r(4, 8)))
def functools_reduce_over_list(x, y):
    return functools.reduce(operator.add, [x, y, x * y])


# --------------------------------------------------------------------------- user classes

class Scaler:
    factor = 3.0

    def __init__(self, bias):
        self.bias = bias

    def apply(self, x):
        return x * self.factor + self.bias

    @staticmethod
    def twice(x):
        return x * 2

    @classmethod
    def with_class_factor(cls, x):
        return x * cls.factor

    @property
    def doubled_bias(self):
        return self.bias * 2


class Shifter(Scaler):
    factor = -1.0

    def apply(self, x):
        return super().apply(x) + 100.0


class Pair:
    def __init__(self, a, b):
        self.a = a
        self.b = b

    def total(self):
        return self.a + self.b


@CASES(lambda: (r(4, 8),))
def method_of_user_object_argument_made_in_frame(x):
    return Scaler(0.5).apply(x)


@CASES(lambda: (Scaler(1.5), r(4, 8)))
def method_of_user_object_argument(s, x):
    return s.apply(x)


@CASES(lambda: (r(4, 8),))
def staticmethod_called_on_class_and_instance(x):
    return Scaler.twice(x) + Scaler(0.0).twice(x)


@CASES(lambda: (r(4, 8),))
def classmethod_called(x):
    return Scaler.with_class_factor(x) + Shifter.with_class_factor(x)


@CASES(lambda: (Scaler(2.0), r(4, 8)))
def property_read(s, x):
    return x + s.doubled_bias


@CASES(lambda: (Shifter(1.0), r(4, 8)))
def super_call_in_overridden_method(s, x):
    return s.apply(x)


@CASES(lambda: (r(4, 8), r(4, 8)))
def object_holding_tensors_made_in_frame(x, y):
    p = Pair(x, y * 2)
    return p.total()


@CASES(lambda: (Pair(r(4, 8), r(4, 8)),))
def object_holding_tensors_argument(p):
    return p.total() * p.a


@CASES(lambda: (Scaler(1.0), r(4, 8)))
def bound_method_stored_then_called(s, x):
    fn = s.apply
    return fn(x) + fn(x * 2)


@CASES(lambda: (r(4, 8),))
def getattr_hasattr_on_user_object(x):
    s = Scaler(0.25)
    if hasattr(s, "bias") and not hasattr(s, "missing"):
        x = x + getattr(s, "bias")
    return x * getattr(s, "missing", 2.0)


class Callable:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


@CASES(lambda: (Callable(4.0), r(4, 8)))
def dunder_call_of_user_object(c, x):
    return c(x) + 1


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + other.t)

    def __len__(self):
        return self.t.shape[0]


@CASES(lambda: (r(4, 8), r(4, 8)))
def user_dunder_operators(x, y):
    v = Vec(x) + Vec(y)
    return v.t * len(v)


class Scaled(Vec):
    def __radd__(self, other):
        return Scaled(self.t * 2 + (other.t if isinstance(other, Vec) else other))

    def __mul__(self, k):
        return NotImplemented if isinstance(k, Vec) else Scaled(self.t * k)

    def __rmul__(self, k):
        return Scaled(self.t * -k)


@CASES(lambda: (r(4, 8), r(4, 8)))
def user_dunder_reflected_subclass_first_and_identity(x, y):
    """1 + v takes v.__radd__; Vec + Scaled takes Scaled.__radd__ first (a subclass);
    NotImplemented passes on to the reflected method; == without __eq__ is identity."""
    v, s = Vec(x), Scaled(y)
    a = 1 + s
    b = v + s
    c = 3 * s
    d = s * 2
    return a.t, b.t, c.t, d.t, v == v, v == s, v != s


@CASES(lambda: (r(4, 8),))
def sorted_and_reduce_forms(x):
    names = sorted(["b", "a", "c"], reverse=True)
    pairs = sorted([(2, "x"), (1, "y"), (2, "a")])
    total = functools.reduce(lambda acc, k: acc + len(k), names, 0)
    return x * total, names, pairs, functools.reduce(operator.mul, [x, x, 2.0])


def bump_in_place(t):
    t.add_(1)
    return t


def count_options(x, **options):
    options["extra"] = True
    return x * len(options)


def pair_list(x):
    return [x + 1, x * 2]


@CASES(lambda: (r(4, 8),))
def inlined_callee_mutates_input_in_place(x):
    return bump_in_place(x) * 2


@CASES(lambda: (r(4, 8),))
def kwargs_dict_mutated_in_callee(x):
    return count_options(x, a=1, b=2)


@CASES(lambda: (r(4, 8),))
def callee_returns_list_returned_by_caller(x):
    return pair_list(x)


@CASES(lambda: (r(4, 8),))
def callee_returns_list_indexed_by_caller(x):
    return pair_list(x)[1] - 1


CASES.define_tests(globals())


# --------------------------------------------------------------------------- the depth bound

def deep_recursion(x, n):
    if n == 0:
        return x
    return deep_recursion(x + 1, n - 1)


def test_recursion_past_depth_bound_still_right():
    """Deeper than any sane inlining bound: fastdyn must stop inlining (a break or an eager call
    of the deep part), never crash, and give eager's value."""
    import sys
    x = r(4, 8)
    n = min(300, sys.getrecursionlimit() // 4)
    jitted = fastdyn.jit(deep_recursion)
    for _ in range(2):
        torch.testing.assert_close(jitted(x, n), deep_recursion(x, n))


def test_inlined_callee_is_guarded_when_global_function_replaced():
    global helper_level3
    original = helper_level3
    jitted = fastdyn.jit(call_chain_three_deep)
    x = r(4, 8)
    try:
        torch.testing.assert_close(jitted(x), call_chain_three_deep(x))
        helper_level3 = lambda t: t.cos()  # noqa: E731
        torch.testing.assert_close(jitted(x), call_chain_three_deep(x))
    finally:
        helper_level3 = original
    report = fastdyn.explain(call_chain_three_deep, x)
    assert report.graph_count == 1 and report.graph_break_count == 0, report
