"""Control flow resolved at trace time: branches on constants, shapes, `is None`, isinstance,
`training`, config flags and globals; static loops unrolled (range, list, tuple, enumerate, zip,
dict.items, reversed, nested, break/continue, ModuleList/Sequential). Each such function is ONE
graph: the branch or loop vanishes into guards. The written-out tests at the end check that the
guards notice a change (another constant, shape, flag) and that the result follows eager."""
import enum

import torch
import torch.nn as nn

from fdcheck import assert_same, call_with_stats, fastdyn

from .cases import Cases, ints, r

CASES = Cases()
BRANCH = "control flow on trace-time constants"

USE_RELU = True
NUM_STEPS = 3


class Config:
    scale = 2.0
    use_bias = False
    mode = "gelu"


CONFIG = Config()


# --------------------------------------------------------------------------- branches on constants

@CASES(lambda: (r(4, 8), 3))
def branch_on_int_argument(x, n):
    if n > 2:
        return x * n
    return x - n


@CASES(lambda: (r(4, 8), False))
def branch_on_bool_argument_false(x, flag):
    if flag:
        x = x + 1
    return x * 2


@CASES(lambda: (r(4, 8), "relu"))
def branch_on_string_argument(x, act):
    if act == "relu":
        return torch.relu(x)
    elif act == "tanh":
        return torch.tanh(x)
    return x


@CASES(lambda: (r(4, 8),))
def branch_on_global_flag(x):
    if USE_RELU:
        x = torch.relu(x)
    return x + 1


@CASES(lambda: (r(4, 8),))
def branch_on_config_attributes(x):
    if CONFIG.use_bias:
        x = x + 1
    if CONFIG.mode == "gelu":
        x = torch.nn.functional.gelu(x)
    return x * CONFIG.scale


@CASES(lambda: (r(4, 8), 2, 5))
def boolean_operators_on_constants(x, a, b):
    if a > 1 and not b < 3 or a == 0:
        x = x + a
    return x * b


@CASES(lambda: (r(4, 8), 1))
def conditional_expression_on_constant(x, k):
    y = x + 1 if k else x - 1
    return y * (2 if k > 5 else 3)


@CASES(lambda: (r(4, 8), 4))
def early_return_on_constant(x, n):
    if n == 4:
        return x.sum(0)
    x = x * 2
    return x.sum(1)


@CASES(lambda: (r(4, 8), 7))
def builtin_min_max_abs_on_numbers(x, n):
    k = min(n, 5) + max(n, 2) + abs(-n)
    if k > 10:
        return x * k
    return x


# --------------------------------------------------------------------------- branches on shapes

@CASES(lambda: (r(4, 8),))
def branch_on_shape_dimension(x):
    if x.shape[0] == 4:
        return x + 1
    return x - 1


@CASES(lambda: (r(2, 4, 8),))
def branch_on_ndim(x):
    if x.dim() == 3:
        x = x.flatten(0, 1)
    return x.sum(-1)


@CASES(lambda: (r(4, 8),))
def elif_chain_on_size(x):
    n = x.size(-1)
    if n < 4:
        return x
    elif n < 16:
        return x * 2
    else:
        return x * 3


@CASES(lambda: (r(4, 8),))
def chained_comparison_on_shape(x):
    if 2 < x.shape[0] <= 8:
        return x.t()
    return x


@CASES(lambda: (r(4, 8),))
def branch_on_numel_and_len(x):
    if x.numel() > 16 and len(x) == 4:
        return x.mean()
    return x.sum()


@CASES(lambda: (r(4, 8),))
def assert_on_shape_passes(x):
    assert x.dim() == 2, "expected a matrix"
    assert x.shape[1] % 2 == 0
    return x.view(4, 4, 2)


# --------------------------------------------------------------------------- is None, isinstance, dtype, grad

@CASES(lambda: (r(4, 8), None))
def branch_on_is_none(x, bias):
    if bias is None:
        return x * 2
    return x + bias


@CASES(lambda: (r(4, 8), r(8)))
def branch_on_is_not_none(x, bias):
    if bias is not None:
        x = x + bias
    return x.relu()


@CASES(lambda: (r(4, 8), 2.5))
def isinstance_number_or_tensor(x, other):
    if isinstance(other, torch.Tensor):
        return x * other.mean()
    return x * other


@CASES(lambda: (r(4, 8), (2, 3)))
def isinstance_tuple_argument(x, size):
    if isinstance(size, (tuple, list)):
        return x.sum() * size[0] + size[1]
    return x * size


@CASES(lambda: (ints(4, 8),))
def branch_on_dtype(x):
    if x.dtype == torch.int64:
        x = x.float()
    if x.is_floating_point():
        x = x / 2
    return x


@CASES(lambda: (r(4, 8).requires_grad_(),))
def branch_on_requires_grad(x):
    if x.requires_grad:
        return x * 2
    return x


@CASES(lambda: (r(4, 8),))
def branch_on_grad_enabled(x):
    if torch.is_grad_enabled():
        return x + 1
    return x - 1


# --------------------------------------------------------------------------- self.training

class TrainingSwitch(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 2
        return x + 1


@CASES(lambda: (TrainingSwitch().eval(), r(4, 8)))
def branch_on_training_eval(m, x):
    return m(x) * 3


@CASES(lambda: (TrainingSwitch().train(), r(4, 8)))
def branch_on_training_train(m, x):
    return m(x) * 3


# --------------------------------------------------------------------------- static loops

@CASES(lambda: (r(4, 8),))
def loop_over_range_unrolled(x):
    for i in range(3):
        x = x * 2 + i
    return x


@CASES(lambda: (r(4, 8),))
def loop_over_range_with_start_stop_step(x):
    acc = x
    for i in range(10, 1, -3):
        acc = acc + i
    return acc


@CASES(lambda: (r(4, 8),))
def loop_over_range_of_shape(x):
    total = x[0]
    for i in range(1, x.shape[0]):
        total = total + x[i]
    return total


@CASES(lambda: (r(4, 8), 2))
def loop_over_range_of_argument(x, n):
    for _ in range(n):
        x = torch.sin(x)
    return x


@CASES(lambda: (r(4, 8),))
def loop_over_list_of_constants(x):
    for scale in [0.5, 2.0, -1.0]:
        x = x * scale
    return x


@CASES(lambda: ((r(4, 8), r(4, 8), r(4, 8)),))
def loop_over_tuple_of_tensors(xs):
    total = 0
    for t in xs:
        total = total + t
    return total


@CASES(lambda: ([r(4, 8), r(4, 8)],))
def loop_over_enumerate_unrolled(xs):
    out = xs[0] * 0
    for i, t in enumerate(xs):
        out = out + t * (i + 1)
    return out


@CASES(lambda: ([r(4, 8), r(4, 8)],))
def loop_over_enumerate_with_start(xs):
    out = []
    for i, t in enumerate(xs, start=5):
        out.append(t + i)
    return out


@CASES(lambda: ([r(4, 8), r(4, 8)], [1.0, -1.0]))
def loop_over_zip_unrolled(xs, weights):
    out = 0
    for t, w in zip(xs, weights):
        out = out + t * w
    return out


@CASES(lambda: (r(4, 8), {"a": 2.0, "b": -1.0, "c": 0.5}))
def loop_over_dict_items_unrolled(x, scales):
    for name, s in scales.items():
        x = x * s if name != "b" else x + s
    return x


@CASES(lambda: (r(4, 8), {"a": 2.0, "b": -1.0}))
def loop_over_dict_keys_and_values(x, d):
    for k in d:
        x = x + d[k]
    for v in d.values():
        x = x * v
    return x


@CASES(lambda: ([r(4, 8), r(4, 8), r(4, 8)],))
def loop_over_reversed_unrolled(xs):
    out = xs[-1]
    for t in reversed(xs):
        out = out * 0.5 + t
    return out


@CASES(lambda: (r(4, 8),))
def nested_loops_unrolled(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


@CASES(lambda: (r(4, 8),))
def break_inside_static_loop(x):
    for i in range(10):
        if i == 3:
            break
        x = x * 2
    return x


@CASES(lambda: (r(4, 8),))
def continue_inside_static_loop(x):
    for i in range(5):
        if i % 2:
            continue
        x = x + i
    return x


@CASES(lambda: (r(4, 8),))
def for_else_runs_without_break(x):
    for i in range(2):
        x = x + i
    else:
        x = x * 10
    return x


@CASES(lambda: (r(4, 8),))
def while_loop_with_python_counter(x):
    i = 0
    while i < 3:
        x = x.cos()
        i += 1
    return x


@CASES(lambda: (r(3, 8),))
def loop_over_tensor_rows(x):
    out = []
    for row in x:
        out.append(row.sum())
    return torch.stack(out)


@CASES(lambda: (r(4, 8),))
def list_comprehension_over_range(x):
    parts = [x * i for i in range(3)]
    return torch.cat(parts)


@CASES(lambda: (r(4, 8),))
def dict_comprehension_over_list(x):
    d = {name: x + i for i, name in enumerate(["a", "b"])}
    return d["a"] - d["b"]


@CASES(lambda: (r(4, 8),))
def loop_accumulates_list_then_cat(x):
    pieces = []
    for i in range(x.shape[0]):
        pieces.append(x[i:i + 1] * i)
    return torch.cat(pieces, dim=0)


@CASES(lambda: (nn.ModuleList([nn.Linear(8, 8) for _ in range(3)]), r(4, 8)))
def loop_over_module_list(layers, x):
    for layer in layers:
        x = torch.relu(layer(x))
    return x


@CASES(lambda: (nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)]), r(4, 8)))
def loop_over_module_list_enumerate_and_index(layers, x):
    for i, layer in enumerate(layers):
        x = layer(x) + layers[i](x) * i
    return x


@CASES(lambda: (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), r(4, 8)))
def sequential_called(seq, x):
    return seq(x)


@CASES(lambda: (nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)), r(4, 8)))
def loop_over_sequential_children(seq, x):
    for layer in seq:
        x = layer(x) + x
    return x


@CASES(lambda: (nn.ModuleDict({"a": nn.Linear(8, 8), "b": nn.Linear(8, 8)}), r(4, 8)))
def loop_over_module_dict_items(layers, x):
    for name, layer in layers.items():
        x = layer(x) if name == "a" else x - layer(x)
    return x


class Layout(str, enum.Enum):
    """timm's Format: a str enum whose members Python 3.11 reads through the class dict (the
    metaclass's __getattr__ is never asked)."""
    NCHW = "NCHW"
    NHWC = "NHWC"


@CASES(lambda: (r(1, 2, 3, 4), Layout.NHWC))
def branch_on_a_str_enum_member(x, fmt):
    if fmt == Layout.NHWC:
        return x.permute(0, 2, 3, 1) * 2
    return x * 2


CASES.define_tests(globals())


# --------------------------------------------------------------------------- guards on what was branched on

def _two_calls(fn, first, second):
    """Run fn on `first` then `second` arguments, eagerly and jitted; both must agree."""
    jitted = fastdyn.jit(fn)
    for args in (first, second, first):
        assert_same(jitted(*args), fn(*args))


def test_branch_guard_sees_other_constant():
    def f(x, n):
        if n > 2:
            return x * n
        return x - n
    x = r(4, 8)
    _two_calls(f, (x, 3), (x, 1))
    report = fastdyn.explain(f, x, 1)
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_shape_branch_guard_sees_new_shape():
    def f(x):
        if x.shape[0] > 3:
            return x.sum(0)
        return x.sum(1)
    _two_calls(f, (r(4, 8),), (r(2, 8),))
    assert fastdyn.explain(f, r(2, 8)).graph_count == 1


def test_is_none_guard_sees_tensor_then_none():
    def f(x, b):
        return x if b is None else x + b
    _two_calls(f, (r(4, 8), r(8)), (r(4, 8), None))
    report = fastdyn.explain(f, r(4, 8), r(8))
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_global_flag_change_is_seen():
    global USE_RELU
    jitted = fastdyn.jit(branch_on_global_flag)
    x = r(4, 8)
    try:
        for flag in (True, False, True):
            USE_RELU = flag
            assert_same(jitted(x), branch_on_global_flag(x))
    finally:
        USE_RELU = True


def test_config_attribute_change_is_seen():
    jitted = fastdyn.jit(branch_on_config_attributes)
    x = r(4, 8)
    try:
        for use_bias, mode, scale in ((False, "gelu", 2.0), (True, "gelu", 2.0),
                                      (True, "none", 2.0), (True, "none", -1.5)):
            CONFIG.use_bias, CONFIG.mode, CONFIG.scale = use_bias, mode, scale
            assert_same(jitted(x), branch_on_config_attributes(x))
    finally:
        CONFIG.use_bias, CONFIG.mode, CONFIG.scale = False, "gelu", 2.0


def test_training_toggle_is_seen():
    m = TrainingSwitch()
    jitted = fastdyn.jit(branch_on_training_eval)
    x = r(4, 8)
    for mode in (False, True, False):
        m.train(mode)
        assert_same(jitted(m, x), branch_on_training_eval(m, x))


def test_loop_trip_count_guard_sees_new_length():
    jitted = fastdyn.jit(loop_over_tuple_of_tensors)
    for n in (2, 3, 2):
        xs = tuple(r(4, 8) for _ in range(n))
        assert_same(jitted(xs), loop_over_tuple_of_tensors(xs))
    _, delta = call_with_stats(jitted, (r(4, 8), r(4, 8)))
    assert delta["frames_compiled"] == 0 and delta["cache_hits"] == 1, delta
    assert fastdyn.explain(loop_over_tuple_of_tensors, (r(4, 8),) * 3).graph_count == 1


def test_module_list_appended_between_calls_is_seen():
    layers = nn.ModuleList([nn.Linear(8, 8)])
    jitted = fastdyn.jit(loop_over_module_list)
    x = r(4, 8)
    assert_same(jitted(layers, x), loop_over_module_list(layers, x))
    layers.append(nn.Linear(8, 8))
    assert_same(jitted(layers, x), loop_over_module_list(layers, x))
