"""torch.nn.Module calls: `module(x)` inlines __call__ and forward into the caller's graph; the
standard layers; user modules with submodules; parameters and buffers read at call time (not
frozen: mutating them between calls must be seen); training flag; hooks. Each function here is
ONE graph."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import assert_same, check, fastdyn

from .cases import Cases, ints, r

CASES = Cases()


def seeded(make):
    """Module factories run under a fixed seed so that every fresh copy has the same weights."""
    def build():
        torch.manual_seed(1)
        return make()
    return build


# --------------------------------------------------------------------------- standard layers

@CASES(lambda: (nn.Linear(8, 4), r(4, 8)))
def linear_module_called(m, x):
    return m(x)


@CASES(lambda: (nn.Linear(8, 4, bias=False), r(2, 4, 8)))
def linear_without_bias_on_3d_input(m, x):
    return m(x)


@CASES(lambda: (nn.Conv1d(4, 6, 3, padding=1), r(2, 4, 8)))
def conv1d_module(m, x):
    return m(x)


@CASES(lambda: (nn.Conv2d(3, 4, 3), r(2, 3, 8, 8)))
def conv2d_module(m, x):
    return m(x)


@CASES(lambda: (nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2), r(1, 4, 8, 8)))
def conv2d_strided_padded_grouped(m, x):
    return m(x)


@CASES(lambda: (nn.LayerNorm(8), r(4, 8)))
def layer_norm_module(m, x):
    return m(x)


@CASES(lambda: (nn.LayerNorm(8, elementwise_affine=False), r(2, 4, 8)))
def layer_norm_without_affine(m, x):
    return m(x)


@CASES(lambda: (nn.GroupNorm(2, 4), r(2, 4, 8)))
def group_norm_module(m, x):
    return m(x)


@CASES(lambda: (nn.BatchNorm1d(8).eval(), r(4, 8)))
def batch_norm_eval_uses_running_stats(m, x):
    return m(x)


@CASES(lambda: (nn.Embedding(10, 8), ints(2, 5)))
def embedding_module(m, idx):
    return m(idx)


@CASES(lambda: (nn.Embedding(10, 8, padding_idx=0), ints(2, 5)))
def embedding_with_padding_idx(m, idx):
    return m(idx) * 2


@CASES(lambda: (nn.Dropout(0.5).eval(), r(4, 8)))
def dropout_module_eval_is_identity(m, x):
    return m(x) + 1


@CASES(lambda: (nn.Dropout(0.5).train(), r(4, 8)), seed=0)
def dropout_module_train_same_rng(m, x):
    return m(x) + 1


@CASES(lambda: (r(4, 8),), seed=0)
def functional_dropout_train_same_rng(x):
    return F.dropout(x, p=0.25, training=True) * 2


@CASES(lambda: (r(4, 8),), seed=0)
def functional_dropout_eval_identity(x):
    return F.dropout(x, p=0.25, training=False) * 2


@CASES(lambda: (r(4, 8),))
def activation_modules(x):
    acts = [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.LeakyReLU(0.1),
            nn.ELU(), nn.Softplus(), nn.Hardtanh(), nn.Mish()]
    return [a(x) for a in acts]


@CASES(lambda: (nn.GELU(approximate="tanh"), nn.Softmax(dim=-1), r(4, 8)))
def gelu_tanh_and_softmax_modules(gelu, softmax, x):
    return softmax(gelu(x))


@CASES(lambda: (nn.Identity(), nn.Flatten(), r(2, 4, 8)))
def identity_and_flatten_modules(ident, flat, x):
    return flat(ident(x))


@CASES(lambda: (nn.MultiheadAttention(8, 2, batch_first=True).eval(), r(2, 4, 8)),
       atol=1e-5, rtol=1e-5)
def multihead_self_attention(mha, x):
    out, _ = mha(x, x, x, need_weights=False)
    return out


@CASES(lambda: (nn.MultiheadAttention(8, 2).eval(), r(4, 2, 8), r(3, 2, 8)),
       atol=1e-5, rtol=1e-5)
def multihead_cross_attention_with_weights(mha, q, kv):
    return mha(q, kv, kv)


@CASES(lambda: (nn.MultiheadAttention(8, 2, batch_first=True).eval(), r(2, 4, 8)),
       atol=1e-5, rtol=1e-5)
def multihead_attention_causal_mask(mha, x):
    mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    return out


# --------------------------------------------------------------------------- user modules

class MLP(nn.Module):
    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = MLP(d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.drop(self.proj(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))
        self.register_buffer("offset", torch.arange(8.0))
        self.register_buffer("unused", None)
        self.temperature = 2.0

    def forward(self, x, *, scale=None):
        y = x * self.weight + self.offset
        if scale is not None:
            y = y * scale
        return y / self.temperature


class SharedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(torch.relu(self.lin(x)))


class CallsMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def _project(self, x):
        return self.lin(x) * 0.5

    def forward(self, x):
        return self._project(x) + self._project(-x)


GLOBAL_MLP = MLP()


@CASES(lambda: (MLP(), r(4, 8)))
def user_module_with_submodules(m, x):
    return m(x)


@CASES(lambda: (Block().eval(), r(2, 4, 8)))
def user_module_two_levels_eval(m, x):
    return m(x)


@CASES(lambda: (Block().train(), r(2, 4, 8)), seed=0)
def user_module_two_levels_train_dropout(m, x):
    return m(x)


@CASES(lambda: (Scaled(), r(4, 8)))
def user_module_parameter_and_buffer(m, x):
    return m(x)


@CASES(lambda: (Scaled(), r(4, 8)))
def user_module_keyword_argument(m, x):
    return m(x, scale=3.0)


@CASES(lambda: (Scaled(), r(4, 8)))
def parameter_read_directly(m, x):
    return x @ torch.diag_embed(m.weight) + m.offset.sum()


@CASES(lambda: (SharedTwice(), r(4, 8)))
def shared_submodule_called_twice(m, x):
    return m(x)


@CASES(lambda: (CallsMethod(), r(4, 8)))
def module_forward_calls_own_method(m, x):
    return m(x)


@CASES(lambda: (r(4, 8),))
def module_read_from_global(x):
    return GLOBAL_MLP(x) + x


@CASES(lambda: (MLP(), r(4, 8)))
def module_forward_called_directly(m, x):
    return m.forward(x)


@CASES(lambda: (MLP(), r(4, 8)))
def module_attribute_loop_over_parameters(m, x):
    total = x.sum() * 0
    for p in m.parameters():
        total = total + p.sum()
    return total


@CASES(seeded(lambda: (nn.BatchNorm1d(8).train(), r(4, 8))), fresh=True)
def batch_norm_train_updates_running_stats(m, x):
    return m(x)


class ChildrenStage(nn.Module):
    """Iterates its own children (timm's RegStage): a child registered twice runs once, a None
    slot is skipped, named_children gives the names."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.b = nn.Linear(8, 8)
        self.again = self.a
        self.empty = None

    def forward(self, x):
        for m in self.children():
            x = m(x)
        names = [name for name, _ in self.named_children()]
        return x, names


@CASES(seeded(lambda: (ChildrenStage(), r(4, 8))))
def module_children_and_named_children_unrolled(m, x):
    return m(x)


def test_children_of_a_module_whose_children_became_one_object():
    m = ChildrenStage()
    x = r(4, 8)
    jitted = fastdyn.jit(m)
    assert_same(jitted(x)[0], m(x)[0])
    m.b = m.a  # now a, b and again are one module: children() yields it once
    got, names = jitted(x)
    want, want_names = m(x)
    assert_same(got, want)
    assert names == want_names == ["a", "act"]


CASES.define_tests(globals())


# --------------------------------------------------------------------------- state read at call time

def call_module(m, x):
    return m(x)


def test_parameter_mutated_in_place_between_calls_is_seen():
    m = nn.Linear(8, 4)
    x = r(4, 8)
    jitted = fastdyn.jit(call_module)
    assert_same(jitted(m, x), m(x))
    with torch.no_grad():
        m.weight.mul_(-2.0)
        m.bias.add_(1.0)
    assert_same(jitted(m, x), m(x))
    report = fastdyn.explain(call_module, m, x)
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_parameter_replaced_between_calls_is_seen():
    m = nn.Linear(8, 4)
    x = r(4, 8)
    jitted = fastdyn.jit(call_module)
    assert_same(jitted(m, x), m(x))
    m.weight = nn.Parameter(torch.randn(4, 8))
    assert_same(jitted(m, x), m(x))


def test_buffer_mutated_between_calls_is_seen():
    m = Scaled()
    x = r(4, 8)
    jitted = fastdyn.jit(call_module)
    assert_same(jitted(m, x), m(x))
    m.offset.fill_(5.0)
    m.temperature = 0.5
    assert_same(jitted(m, x), m(x))


def test_forward_hook_registered_after_first_call_is_seen():
    m = MLP()
    x = r(4, 8)
    jitted = fastdyn.jit(call_module)
    assert_same(jitted(m, x), m(x))
    handle = m.fc1.register_forward_hook(lambda mod, inp, out: out * 10)
    try:
        expected = m(x)
        assert_same(jitted(m, x), expected)
        assert_same(jitted(m, x), expected)
    finally:
        handle.remove()
    assert_same(jitted(m, x), m(x))


def test_forward_pre_hook_is_applied():
    m = nn.Linear(8, 4)
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    check(call_module, m, r(4, 8), graphs=1)


def test_forward_hooks_in_order_and_registered_or_removed_later():
    """Pre-hooks (a tuple, a bare value, None) and forward hooks (a new result, None) run in
    registration order inside the graph; a hook added or removed after the compile is seen."""
    m = nn.Linear(8, 4)
    m.register_forward_pre_hook(lambda mod, args: args[0] + 1)          # a bare value: the new args
    m.register_forward_pre_hook(lambda mod, args: None)                 # leaves them
    m.register_forward_hook(lambda mod, args, out: out * args[0].sum())  # a new result
    check(call_module, m, r(4, 8), graphs=1)
    jitted = fastdyn.jit(call_module)
    x = r(4, 8)
    assert_same(jitted(m, x), m(x))
    late = m.register_forward_hook(lambda mod, args, out: out - 3)
    assert_same(jitted(m, x), m(x))
    late.remove()
    assert_same(jitted(m, x), m(x))


def test_forward_hook_with_side_effect_runs_every_call():
    m = nn.Linear(8, 4)
    seen = []
    m.register_forward_hook(lambda mod, inp, out: seen.append(tuple(out.shape)))
    jitted = fastdyn.jit(call_module)
    x = r(4, 8)
    for _ in range(3):
        assert_same(jitted(m, x), m(x))
    assert seen == [(4, 8 // 2)] * 6, seen


def test_train_eval_switch_changes_dropout():
    m = Block()
    x = r(2, 4, 8)
    jitted = fastdyn.jit(call_module)
    for mode in (False, True, False):
        m.train(mode)
        torch.manual_seed(3)
        expected = m(x)
        torch.manual_seed(3)
        assert_same(jitted(m, x), expected)


def test_jit_of_module_object():
    m = MLP()
    x = r(4, 8)
    jm = fastdyn.jit(m)
    for _ in range(2):
        assert_same(jm(x), m(x))
    report = fastdyn.explain(m, x)
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_backward_through_module_gives_eager_grads():
    m = MLP()
    x = r(4, 8).requires_grad_()
    out = m(x).pow(2).sum()
    out.backward()
    expected = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    got_out = fastdyn.jit(call_module)(m, x).pow(2).sum()
    got_out.backward()
    got = [p.grad for p in m.parameters()] + [x.grad]
    assert_same(got_out, out)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_module_instances_of_same_class_not_confused():
    a, b = MLP(), MLP()
    x = r(4, 8)
    jitted = fastdyn.jit(call_module)
    for m in (a, b, a, b):
        assert_same(jitted(m, x), m(x))


class ScaledBy(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


def through_partial(m, x):
    import functools
    return functools.partial(ScaledBy.forward, m)(x) + 1  # what HF's gradient checkpointing does


def through_id(m, x):
    return x + (id(m) - id(m)) + len(str(type(m)))  # folded calls of the module: type-only is fine


def test_calls_folded_on_a_module_do_not_fix_the_instance():
    # Modules are guarded by type (one entry serves every instance of a class), so a call that
    # captured or observed the instance at trace time (partial(forward, self)) would serve the
    # first instance to all: HF BERT with gradient checkpointing ran layer 0's forward twice.
    jitted = fastdyn.jit(through_partial)
    x = r(4)
    for m in (ScaledBy(2.0), ScaledBy(3.0), ScaledBy(5.0)):
        assert_same(jitted(m, x), x * m.k + 1, f"k={m.k}")
    jitted = fastdyn.jit(through_id)
    for m in (ScaledBy(2.0), ScaledBy(3.0)):
        assert_same(jitted(m, x), through_id(m, x))


def test_a_module_made_in_the_frame_that_outlives_it_runs_the_frame_as_written():
    # Eager makes a new Softmax per call; the compiled code would hand out one object.
    def f(x):
        m = nn.Softmax(dim=-1)
        return m(x), m

    jf = fastdyn.jit(f)
    x = r(4, 8)
    a, b = jf(x)[1], jf(x)[1]
    assert a is not b and isinstance(a, nn.Softmax)
    assert "outlives it" in str(fastdyn.explain(f, x))


def test_a_module_with_parameters_made_in_the_frame_is_not_folded():
    # nn.Linear draws its weights from the generator at every call: never made at trace time, and
    # the generator is where eager leaves it.
    def f(x):
        return nn.Linear(8, 8)(x)

    x = r(4, 8)
    torch.manual_seed(0)
    want = f(x)
    state = torch.get_rng_state()
    torch.manual_seed(0)
    got = fastdyn.jit(f)(x)
    assert torch.equal(got, want) and torch.equal(torch.get_rng_state(), state)
