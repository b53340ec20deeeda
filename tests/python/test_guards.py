"""Guards: whatever the compiled code assumed must be checked on every call.

Each test compiles a function, changes one thing the trace depended on (an input's shape, dtype,
strides or requires_grad, a global, a module attribute, grad mode), and demands a recompile and a
result equal to eager's — never a stale one. Going back to what was compiled first must hit the
cache again.
"""
import types

import pytest
import torch
import torch.nn.functional as F

from fdcheck import assert_same, call_with_stats, clone_tree, fastdyn

SCALE = 2.0
ACTIVATION = torch.relu
TABLE = torch.arange(6.0)
cfg = types.ModuleType("cfg")
cfg.scale = 3.0


def pointwise(x):
    return x * 2 + 1


def expect_compile(delta, what):
    assert delta["cache_misses"] == 1 and delta["frames_compiled"] == 1, (
        f"{what}: expected a recompile, stats delta {delta}")
    assert delta["recompiles"] == 1, f"{what}: stats()['recompiles'] did not grow: {delta}"


def expect_hit(delta, what):
    assert delta["cache_hits"] == 1 and delta["cache_misses"] == 0 and \
        delta["frames_compiled"] == 0, f"{what}: expected a cache hit, stats delta {delta}"


def test_shape_change_recompiles_and_first_shape_still_hits():
    f = fastdyn.jit(pointwise)
    a, b = torch.randn(4, 6), torch.randn(5, 6)
    out, d = call_with_stats(f, a)
    assert d["frames_compiled"] == 1 and d["recompiles"] == 0, d
    assert_same(out, pointwise(a))
    out, d = call_with_stats(f, b)
    expect_compile(d, "shape (4, 6) -> (5, 6)")
    assert_same(out, pointwise(b))
    out, d = call_with_stats(f, a.clone())
    expect_hit(d, "back to shape (4, 6)")
    assert_same(out, pointwise(a))
    out, d = call_with_stats(f, b.clone())
    expect_hit(d, "back to shape (5, 6)")
    assert_same(out, pointwise(b))


def test_rank_change_recompiles():
    f = fastdyn.jit(pointwise)
    f(torch.randn(6))
    x = torch.randn(2, 3)
    out, d = call_with_stats(f, x)
    expect_compile(d, "rank 1 -> rank 2")
    assert_same(out, pointwise(x))


def test_dtype_change_recompiles():
    f = fastdyn.jit(pointwise)
    f(torch.randn(3, 4))
    for dtype in (torch.float64, torch.int64, torch.bfloat16):
        x = torch.randn(3, 4).mul(4).to(dtype)
        out, d = call_with_stats(f, x)
        expect_compile(d, f"float32 -> {dtype}")
        assert_same(out, pointwise(x))


def test_stride_change_recompiles():
    f = fastdyn.jit(pointwise)
    f(torch.randn(4, 6))
    x = torch.randn(6, 4).t()  # same shape (4, 6), transposed strides
    out, d = call_with_stats(f, x)
    expect_compile(d, "contiguous -> transposed input")
    assert_same(out, pointwise(x))  # strides of the output included


def test_stride_of_a_size_one_dim_is_checked_only_where_an_output_depends_on_it():
    # x[:, -1:] of a growing [1, n, 64] tensor: shape [1, 1, 64], stride [64 n, 64, 1] (a decode
    # loop's last token). A dim of size 1 addresses nothing, so a graph whose outputs cannot show
    # its stride (a contiguous copy, a matmul) keeps one entry for every n. One that returns a view
    # of it, or copies it preserving strides, shows that stride: it recompiles, equal to eager
    # (strides included).
    def blind(x):
        return x.clone(memory_format=torch.contiguous_format) * 2, x[..., :8] @ torch.ones(8, 3)

    def shows(x):
        return x.transpose(0, 1), x.clone() + 0

    for fn, compiles in ((blind, 1), (shows, 3)):
        f = fastdyn.jit(fn)
        before = fastdyn.stats()["frames_compiled"]
        for n in (5, 9, 13):
            x = torch.randn(1, n, 64)[:, -1:]
            assert_same(f(x), fn(x), f"{fn.__name__}, n={n}")
        assert fastdyn.stats()["frames_compiled"] - before == compiles, fn.__name__


def test_non_tensor_argument_change_is_not_stale():
    def scale_and_view(x, k, s):
        return x.view(k, -1) * s

    f = fastdyn.jit(scale_and_view)
    x = torch.randn(6, 4)
    for k, s in ((2, 1.5), (3, 1.5), (3, -2.0), (2, 0.25)):
        assert_same(f(x, k, s), scale_and_view(x, k, s), f"k={k}, s={s}")


def use_global_constant(x):
    return x * SCALE


def test_rebinding_a_global_constant_recompiles(monkeypatch):
    f = fastdyn.jit(use_global_constant)
    x = torch.randn(3, 4)
    assert_same(f(x), x * 2.0)
    monkeypatch.setitem(globals(), "SCALE", 5.0)
    out, d = call_with_stats(f, x)
    expect_compile(d, "SCALE 2.0 -> 5.0")
    assert_same(out, x * 5.0)


def use_global_function(x):
    return ACTIVATION(x)


def test_rebinding_a_global_torch_function_recompiles(monkeypatch):
    f = fastdyn.jit(use_global_function)
    x = torch.randn(3, 4)
    assert_same(f(x), torch.relu(x))
    monkeypatch.setitem(globals(), "ACTIVATION", torch.tanh)
    out, d = call_with_stats(f, x)
    expect_compile(d, "ACTIVATION relu -> tanh")
    assert_same(out, torch.tanh(x))


def use_module_attribute(x):
    return x * cfg.scale


def test_changing_a_module_attribute_recompiles(monkeypatch):
    f = fastdyn.jit(use_module_attribute)
    x = torch.randn(3, 4)
    assert_same(f(x), x * 3.0)
    monkeypatch.setattr(cfg, "scale", 0.5)
    out, d = call_with_stats(f, x)
    expect_compile(d, "cfg.scale 3.0 -> 0.5")
    assert_same(out, x * 0.5)


def use_global_tensor(x):
    return x + TABLE


def test_rebinding_a_global_tensor_is_not_stale(monkeypatch):
    f = fastdyn.jit(use_global_tensor)
    x = torch.randn(6)
    assert_same(f(x), x + TABLE)
    monkeypatch.setitem(globals(), "TABLE", torch.full((6,), -4.0))
    assert_same(f(x), x - 4.0, "same-shape global tensor rebound")
    monkeypatch.setitem(globals(), "TABLE", torch.ones(2, 6, dtype=torch.float64))
    assert_same(f(x), x + torch.ones(2, 6, dtype=torch.float64), "global rebound to a new shape")


def test_mutating_a_global_tensor_in_place_is_seen(monkeypatch):
    monkeypatch.setitem(globals(), "TABLE", torch.arange(6.0))
    f = fastdyn.jit(use_global_tensor)
    x = torch.randn(6)
    f(x)
    TABLE.add_(10)  # no rebinding: a graph that baked the old values in would be stale
    assert_same(f(x), x + torch.arange(6.0) + 10)


def test_grad_mode_is_guarded():
    f = fastdyn.jit(pointwise)
    x = torch.randn(3, 4, requires_grad=True)
    out, d = call_with_stats(f, x)
    assert out.requires_grad and out.grad_fn is not None, "enabled grad mode: output needs a grad_fn"
    with torch.no_grad():
        out, d = call_with_stats(f, x)
    assert not out.requires_grad, "no_grad: the output must not require grad"
    assert d["cache_misses"] == 1 and d["frames_compiled"] == 1, f"grad mode change: {d}"
    with torch.no_grad():
        expected = pointwise(x)
    assert_same(out, expected)
    out, d = call_with_stats(f, x)
    expect_hit(d, "back to grad mode enabled")
    assert out.requires_grad


def test_inference_mode_output_is_not_stale():
    f = fastdyn.jit(pointwise)
    x = torch.randn(3, 4, requires_grad=True)
    f(x)
    with torch.inference_mode():
        y = torch.randn(3, 4)
        out = f(y)
        expected = pointwise(y)
    assert_same(out, expected)
    assert out.is_inference() == expected.is_inference()


def test_requires_grad_change_of_an_input_recompiles():
    def layer(x, w):
        return F.linear(x, w).relu()

    f = fastdyn.jit(layer)
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    assert not f(x, w).requires_grad
    w.requires_grad_(True)
    out, d = call_with_stats(f, x, w)
    expect_compile(d, "w.requires_grad False -> True")
    assert_same(out, layer(x, w))
    assert out.requires_grad


def test_backward_through_a_compiled_graph_matches_eager():
    def loss_fn(x, w, b):
        return F.gelu(F.linear(x, w, b)).softmax(-1).pow(2).sum()

    args = (torch.randn(4, 8), torch.randn(6, 8, requires_grad=True), torch.randn(6, requires_grad=True))
    eager_args = clone_tree(args)
    loss_fn(*eager_args).backward()
    f = fastdyn.jit(loss_fn)
    for _ in range(2):  # compile call, then cached call
        run_args = clone_tree(args)
        loss = f(*run_args)
        assert loss.requires_grad
        loss.backward()
        assert_same(run_args[1].grad, eager_args[1].grad, "grad of w")
        assert_same(run_args[2].grad, eager_args[2].grad, "grad of b")


def test_aliased_inputs_are_not_treated_as_distinct():
    def accumulate(x, y):
        x.add_(y)
        return x * y

    f = fastdyn.jit(accumulate)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    f(a.clone(), b.clone())  # compiled for two distinct tensors
    a1, a2 = a.clone(), a.clone()
    expected = accumulate(a1, a1)
    got = f(a2, a2)  # the same tensor twice
    assert_same(got, expected)
    assert_same(a2, a1, "the aliased input after the call")


def test_view_of_same_storage_inputs_are_not_stale():
    def add_into(x, y):
        x.mul_(2)
        return x + y

    f = fastdyn.jit(add_into)
    f(torch.randn(4), torch.randn(4))
    base_e, base_g = torch.arange(8.0), torch.arange(8.0)
    expected = add_into(base_e[:4], base_e[2:6])  # overlapping views of one storage
    got = f(base_g[:4], base_g[2:6])
    assert_same(got, expected)
    assert_same(base_g, base_e, "the shared storage after the call")


def test_default_dtype_change_is_not_stale():
    def make(x):
        return torch.zeros(3) + torch.ones(3) * 2

    f = fastdyn.jit(make)
    x = torch.randn(3)
    assert f(x).dtype == torch.float32
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert_same(f(x), make(x))
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("order", ["ABAB", "AABBA", "BAAB"])
def test_alternating_inputs_always_get_their_own_entry(order):
    def body(x, y):
        return (x @ y).softmax(-1)

    inputs = {
        "A": (torch.randn(3, 4), torch.randn(4, 5)),
        "B": (torch.randn(2, 4, dtype=torch.float64), torch.randn(4, 7, dtype=torch.float64)),
    }
    f = fastdyn.jit(body)
    for key in order:
        assert_same(f(*inputs[key]), body(*inputs[key]), f"inputs {key}")
    assert fastdyn.stats()["frames_compiled"] == 2, fastdyn.stats()


def make_scaler(scale, offset):
    def scaler(x):
        return x * scale + offset
    return scaler


def test_closures_sharing_one_code_object_are_not_stale():
    double, triple = make_scaler(2.0, torch.zeros(3)), make_scaler(3.0, torch.ones(3))
    assert double.__code__ is triple.__code__
    f2, f3 = fastdyn.jit(double), fastdyn.jit(triple)
    x = torch.randn(3)
    for _ in range(2):
        assert_same(f2(x), x * 2.0, "first closure")
        assert_same(f3(x), x * 3.0 + 1, "second closure (same code, other cells)")


class Affine:
    """A plain object whose attributes a traced method reads."""

    def __init__(self):
        self.w = torch.randn(4, 3)
        self.scale = 2.0

    def apply(self, x):
        return (x @ self.w) * self.scale


def test_plain_object_attributes_are_not_stale():
    obj = Affine()
    f = fastdyn.jit(obj.apply)
    x = torch.randn(2, 4)
    assert_same(f(x), (x @ obj.w) * 2.0)
    obj.scale = -1.0
    assert_same(f(x), (x @ obj.w) * -1.0, "after changing a float attribute")
    obj.w = torch.randn(4, 3)
    assert_same(f(x), (x @ obj.w) * -1.0, "after rebinding a tensor attribute")
    obj.w = torch.randn(4, 5, dtype=torch.float64)
    assert_same(f(x.double()), (x.double() @ obj.w) * -1.0, "after a new shape and dtype")
    other = Affine()
    assert_same(fastdyn.jit(other.apply)(x), (x @ other.w) * 2.0, "another instance")


def test_varargs_and_kwargs_functions_are_not_stale():
    def total(*xs, **named):
        a, b = xs
        return a + b * named["k"]

    f = fastdyn.jit(total)
    a, b = torch.randn(3), torch.randn(3)
    assert_same(f(a, b, k=2.0), a + b * 2.0)
    assert_same(f(a, b, k=-1.0), a - b)
    assert_same(f(b, a, k=2.0), b + a * 2.0)
    with pytest.raises(ValueError):  # the eager error: three values to unpack into two
        f(a, b, a, k=1.0)


def test_parameter_and_plain_tensor_inputs():
    f = fastdyn.jit(pointwise)
    p = torch.nn.Parameter(torch.randn(3))
    out = f(p)
    assert_same(out, pointwise(p))
    t = torch.randn(3)
    assert_same(f(t), pointwise(t))
    assert not f(t).requires_grad


INT_SCALE = 2


def scale_ints(a, k):
    return a * k


@pytest.mark.parametrize("first, then", [(2, 2.0), (2.0, 2), (1, True), (True, 1.0)])
def test_python_scalar_type_is_guarded_not_just_its_value(first, then):
    # 2 == 2.0 == True in Python, but int64 * 2 is int64 and int64 * 2.0 is float32.
    f = fastdyn.jit(scale_ints)
    a = torch.arange(6).view(2, 3)
    assert_same(f(a, first), scale_ints(a, first), f"k={first!r}")
    assert_same(f(a, then), scale_ints(a, then), f"k={then!r} after k={first!r}")


def scale_by_global(a):
    return a * INT_SCALE


def test_global_rebound_to_an_equal_value_of_another_type(monkeypatch):
    f = fastdyn.jit(scale_by_global)
    a = torch.arange(4)
    assert f(a).dtype == torch.int64
    monkeypatch.setitem(globals(), "INT_SCALE", 2.0)
    assert_same(f(a), a * 2.0, "INT_SCALE 2 -> 2.0")


def test_none_versus_tensor_argument():
    def affine(x, w, b):
        return F.linear(x, w, b)

    f = fastdyn.jit(affine)
    x, w, b = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    assert_same(f(x, w, b), affine(x, w, b), "with a bias")
    assert_same(f(x, w, None), affine(x, w, None), "bias None")
    assert_same(f(x, w, b), affine(x, w, b), "with a bias again")


def test_tuple_dtype_and_string_arguments():
    def configurable(x, dims, dtype, mode):
        return F.gelu(x.permute(dims), approximate=mode).to(dtype)

    f = fastdyn.jit(configurable)
    x = torch.randn(2, 3, 4)
    for args in (((0, 1, 2), torch.float32, "none"), ((2, 0, 1), torch.float32, "none"),
                 ((2, 0, 1), torch.float64, "none"), ((2, 0, 1), torch.float64, "tanh"),
                 ((0, 1, 2), torch.float32, "none")):
        # NB: gelu runs in float32 before the cast; the native backend's erf is within a float32
        # ulp of ATen's, not bit-identical, so compare at float32 precision.
        assert_same(f(x, *args), configurable(x, *args), f"arguments {args}", rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- module instances

class _ScaledLinear(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, 4))
        self.register_buffer("shift", torch.randn(5))
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight) * self.scale + self.shift


def test_module_instances_share_one_entry_and_read_their_own_parameters():
    from fastdyn import _C
    a, b = _ScaledLinear(2.0), _ScaledLinear(2.0)
    ja, jb = fastdyn.jit(a), fastdyn.jit(b)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(ja(x), a(x))
        torch.testing.assert_close(jb(x), b(x))
        # One entry serves both instances: guards check the class, not the object.
        assert _C.cache_size(_ScaledLinear.forward) == 1
        # Parameters are graph inputs read at call time, not constants.
        a.weight = torch.nn.Parameter(torch.randn(5, 4))
        b.shift.add_(1.0)
        torch.testing.assert_close(ja(x), a(x))
        torch.testing.assert_close(jb(x), b(x))
        # A changed Python attribute is guarded: recompile, never stale.
        b.scale = 3.0
        torch.testing.assert_close(jb(x), b(x))
        assert _C.cache_size(_ScaledLinear.forward) == 2


def _double_and_its_grad(x):
    return x * 2, x.grad


def test_a_guard_on_grad_fails_for_a_non_leaf_without_the_warning_eagers_read_gives():
    # The entry compiled for a leaf guards `L['x'].grad`. Checking it against a non-leaf must not
    # read the attribute (its getter warns): the call warns once, from the frame's own read, as
    # in eager, where the guard's read made it twice (and raised under -W error).
    import warnings
    jf = fastdyn.jit(_double_and_its_grad)
    p = torch.randn(3, requires_grad=True)
    p.grad = torch.ones(3)
    assert jf(p)[1] is p.grad
    q = torch.randn(3, requires_grad=True) * 1
    for fn in (_double_and_its_grad, jf, jf):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y, g = fn(q)
        assert g is None
        assert len(caught) == 1 and "not a leaf" in str(caught[0].message), [str(w.message) for w in caught]
        assert_same(y, q * 2)


def test_guard_check_seconds_times_the_entry_whose_guards_hold():
    # bench/dynamic_overhead.py reads the guard check alone through this diagnostic: it must time
    # the entry that serves these arguments and refuse arguments no entry serves.
    def ten(a, b, c, d, e, f, g, h, i, j):
        return a + b + c + d + e + f + g + h + i + j

    xs = tuple(torch.randn(4, 2) for _ in range(10))
    assert fastdyn._C.guard_check_seconds(ten, xs, 10) is None  # nothing compiled yet
    fastdyn.jit(ten, dynamic=False)(*xs)
    per_check = fastdyn._C.guard_check_seconds(ten, xs, 100)
    assert per_check is not None and 0 < per_check < 1e-3
    assert fastdyn._C.guard_check_seconds(ten, tuple(torch.randn(3, 2) for _ in range(10)), 10) is None
    assert fastdyn._C.guard_check_seconds(ten, xs[:9] + (torch.randn(4, 2, dtype=torch.float64),), 10) is None


def test_aliasing_among_many_inputs_is_seen():
    # More than 16 tensors take the sorted distinctness check (runtime/guards.cpp): two of them
    # becoming one object must still miss the entry compiled for distinct ones.
    def accumulate(ts):
        for t in ts[1:]:
            ts[0].add_(t)
        return ts[0] * ts[-1]

    f = fastdyn.jit(accumulate)
    base = [torch.randn(3) for _ in range(20)]
    f([t.clone() for t in base])
    alias = [t.clone() for t in base]
    alias[19] = alias[0]
    expected_in = [t.clone() for t in base]
    expected_in[19] = expected_in[0]
    expected = accumulate(expected_in)
    got = f(alias)
    assert_same(got, expected)
    assert_same(alias[0], expected_in[0], "the aliased input after the call")
