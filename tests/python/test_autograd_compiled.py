"""Compiled graphs whose outputs require grad: what autograd users rely on behaves as in eager.

The forward and backward are compiled (codegen/autograd/joint.h) and joined by one C++ autograd
node (runtime/autograd_function.h). These tests hold the contract of that node: gradients,
accumulation, hooks, retain_graph, eager's errors, double backward, unused outputs, and the
ATen fallback of graphs with an op that has no derivative row.
"""
import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fastdyn
from cpu_memory import peak_bytes

COMPILED = "CompiledFunctionBackward"
pytestmark = [pytest.mark.skipif(not fastdyn._C.has_llvm_cpu, reason="needs fastdyn with the llvm_cpu backend"),
              pytest.mark.usefixtures("synchronous_compile")]


def mlp_step(x, w1, b1, w2):
    h = F.gelu(F.linear(x, w1, b1))
    return (h @ w2).tanh().sum()


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 8, generator=g, requires_grad=True), torch.randn(16, generator=g, requires_grad=True),
            torch.randn(16, 4, generator=g, requires_grad=True)]


def test_outputs_get_the_compiled_node_and_backward_accumulates_into_grad_like_eager():
    x = torch.randn(5, 8)
    ps, ref = params(), params()
    f = fastdyn.jit(mlp_step)
    for _ in range(2):  # the second call accumulates into .grad
        out = f(x, *ps)
        assert out.grad_fn.name() == COMPILED
        out.backward()
        mlp_step(x, *ref).backward()
    for p, r in zip(ps, ref):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-5, atol=1e-5)


def test_inference_in_grad_mode_runs_compiled_and_never_calls_the_backward():
    x = torch.randn(5, 8)
    f = fastdyn.jit(mlp_step)
    out = f(x, *params())
    assert out.requires_grad and out.grad_fn.name() == COMPILED
    torch.testing.assert_close(out, mlp_step(x, *params()), rtol=1e-5, atol=1e-5)


def test_a_second_backward_without_retain_graph_raises_eagers_error_and_retain_graph_allows_it():
    x = torch.randn(5, 8)
    f = fastdyn.jit(mlp_step)
    out = f(x, *params())
    out.backward(retain_graph=True)
    out.backward()  # retained: allowed
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()


@pytest.mark.parametrize("retain", [False, True])
def test_the_backward_frees_each_saved_activation_after_its_last_reader_as_eager_does(retain):
    # Six 4 MiB activations saved by the forward: eager frees each layer's as its node runs, so its
    # step peaks with the activations and one layer's gradients. The compiled backward is one node:
    # holding every saved value to its end put the peak 8 MiB (28%) above eager's.
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(512, 512, generator=g, requires_grad=True) for _ in range(6)]
    x = torch.randn(2048, 512, generator=g)

    def model(x):
        for w in ws:
            x = (x @ w).tanh()
        return x.sum()

    compiled = fastdyn.jit(model)
    peaks = {}
    for name, f in [("eager", model), ("fastdyn", compiled)] * 2:  # the second round: warm
        def step():
            loss = f(x)
            loss.backward(retain_graph=retain)
        peaks[name] = peak_bytes(step)
        grads = [w.grad for w in ws]
        for w in ws:
            w.grad = None
    assert peaks["fastdyn"] <= peaks["eager"], peaks  # with retain_graph both keep them all to the end
    assert all(gr is not None for gr in grads)


def test_a_backward_never_runs_the_node_of_an_input_that_no_output_depends_on():
    # Difftest seed 36176: the continuation's graph gets `kept` (x * w, which requires grad) as an
    # input that its loss does not depend on. Its node had a next edge to the node that made it, so
    # the backward ran that node, whose saved x the in-place add had changed: eager's "modified by
    # an inplace operation" error, where eager's autograd graph never reaches that node.
    def step(x, y, w):
        kept = [x * w, y]
        print(end="")  # a break: the rest is a continuation with `kept` among its inputs
        x.add_(5)
        (y * w).sum().backward()
        return kept

    for f in (step, fastdyn.jit(step)):
        x, y = torch.randn(4, 4), torch.randn(4, 4)
        w = torch.tensor(0.5, requires_grad=True)
        f(x, y, w)
        torch.testing.assert_close(w.grad, y.sum())


def test_a_view_of_an_input_from_a_graph_that_needs_autograd_takes_an_in_place_update_as_in_eager():
    # Difftest seed 36564: the graph before the break returns x[1:, 1], a view of an input that
    # needs no grad, beside t (which requires grad). Its forward runs under no_grad, which made the
    # view one "created in no_grad mode": the `+=` of a value requiring grad then raised, where
    # eager's view (made in grad mode) takes it and x joins the autograd graph.
    w = torch.tensor(0.5, requires_grad=True)

    def f(x):
        t = x * w
        x[1:, 1] += t[0, 0]  # breaks: the in-place add makes x require grad
        return x

    for fn in (f, fastdyn.jit(f)):
        x = torch.ones(4, 4)
        out = fn(x)
        assert out.requires_grad and type(out.grad_fn).__name__ == "CopySlices"
        torch.testing.assert_close(out[1:, 1], torch.full((3,), 1.5))


def test_an_input_the_graph_never_reads_does_not_outlive_the_call_through_its_node():
    # Difftest seed 37752: the continuation's graph takes t (a live local) without reading it, and
    # its node (x now requires grad through the in-place add) kept every graph input for
    # create_graph's replay: t lived as long as x. Eager frees it when the frame returns.
    import gc
    import weakref
    w = torch.tensor(0.5, requires_grad=True)

    def f(x, y, refs):
        t = x * w
        refs.append(weakref.ref(t))  # a break: the rest is a continuation
        x.add_(y * w)

    for fn in (f, fastdyn.jit(f)):
        x, y, refs = torch.randn(4), torch.randn(4), []
        fn(x, y, refs)
        gc.collect()
        assert x.requires_grad and refs[0]() is None


def _scaled_sum_plus_square(a, w):
    return (a * 3).sum() + (w * w).sum()  # the backward reads w, never a


def test_the_node_keeps_only_the_inputs_its_backward_reads_and_create_graph_still_works():
    # Difftest seed 69644: the node kept every input it read for create_graph's replay, so a
    # temporary passed in (here `base * 2`) lived as long as the output's graph, where eager's
    # nodes (a * 3: a scalar product; sum) keep nothing of it. It is watched now; the replay gives
    # the dead one a stand-in of its shape, and the gradients and second derivatives are eager's.
    import gc
    import weakref
    g = fastdyn.jit(_scaled_sum_plus_square)
    g(torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True))  # compiled from here
    for fn in (_scaled_sum_plus_square, g):
        base = torch.randn(4, dtype=torch.float64, requires_grad=True)
        w = torch.randn(4, dtype=torch.float64, requires_grad=True)
        a = base * 2
        dead = weakref.ref(a)
        out = fn(a, w)
        del a
        gc.collect()
        assert dead() is None, fn
        if fn is g:
            assert out.grad_fn.name() == COMPILED
        ga, gw = torch.autograd.grad(out, [base, w], create_graph=True)
        torch.testing.assert_close(ga, torch.full_like(base, 6.0))
        torch.testing.assert_close(gw, 2 * w)
        (gw * w).sum().backward()  # d/dw sum(2 w * w) = 4 w
        torch.testing.assert_close(w.grad, 4 * w.detach())
    # Alive, the input itself is replayed.
    base = torch.randn(4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    a = base * 2
    ga, gw = torch.autograd.grad(g(a, w), [a, w], create_graph=True)
    torch.testing.assert_close(ga, torch.full_like(a, 3.0))
    torch.testing.assert_close(gw, 2 * w)


def test_modifying_a_saved_input_in_place_raises_eagers_error():
    def f(x, w):
        return (x * w).sum()  # saves x and w
    x = torch.randn(4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    out = fastdyn.jit(f)(x, w)
    assert out.grad_fn.name() == COMPILED
    with torch.no_grad():
        w.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_hooks_on_inputs_and_outputs_run_and_can_change_the_gradient():
    def f(x):
        y = x.sin() * 2
        return y, y.sum()
    x = torch.randn(6, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(("x", g.clone())))
    y, s = fastdyn.jit(f)(x)
    assert s.grad_fn.name() == COMPILED
    y.register_hook(lambda g: g * 0)  # y's own gradient is dropped
    (s + y.sum()).backward()
    xr = x.detach().clone().requires_grad_(True)
    yr = xr.sin() * 2
    yr.register_hook(lambda g: g * 0)
    (yr.sum() + yr.sum()).backward()
    assert seen and seen[0][0] == "x"
    torch.testing.assert_close(x.grad, xr.grad)


def test_autograd_grad_with_an_unused_output_and_an_output_returned_twice():
    def f(x, w):
        a = x @ w
        b = a.relu()
        return a, b, b
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    a, b, b2 = fastdyn.jit(f)(x, w)
    assert b is b2 and a.grad_fn.name() == COMPILED
    gx, gw = torch.autograd.grad(b.sum(), [x, w])  # `a` gets no gradient: zeros reach the node
    xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    gxr, gwr = torch.autograd.grad((xr @ wr).relu().sum(), [xr, wr])
    torch.testing.assert_close(gx, gxr)
    torch.testing.assert_close(gw, gwr)


def test_double_backward_with_create_graph_is_eagers():
    def f(x):
        return (x.tanh() * x).sum()
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    out = fastdyn.jit(f)(x)
    assert out.grad_fn.name() == COMPILED
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    xr = x.detach().clone().requires_grad_(True)
    (gr,) = torch.autograd.grad(f(xr), xr, create_graph=True)
    (ggr,) = torch.autograd.grad(gr.sum(), xr)
    torch.testing.assert_close(g, gr)
    torch.testing.assert_close(gg, ggr)


def test_inputs_without_grad_get_none_and_non_leaf_inputs_pass_the_gradient_on():
    def f(x, w):
        return (x * w).exp().sum()
    w0 = torch.randn(4, requires_grad=True)
    w = w0 * 3  # not a leaf: the gradient flows on to w0
    x = torch.randn(4)
    out = fastdyn.jit(f)(x, w)
    out.backward()
    w0r = w0.detach().clone().requires_grad_(True)
    f(x, w0r * 3).backward()
    torch.testing.assert_close(w0.grad, w0r.grad)
    assert x.grad is None


def test_an_op_without_a_derivative_row_keeps_atens_autograd_and_trains_correctly():
    def f(x, w):
        return torch.cumsum(x * w, 0).sum()  # cumsum has no row
    x = torch.randn(6)
    w = torch.randn(6, requires_grad=True)
    out = fastdyn.jit(f)(x, w)
    assert out.grad_fn.name() != COMPILED
    out.backward()
    wr = w.detach().clone().requires_grad_(True)
    f(x, wr).backward()
    torch.testing.assert_close(w.grad, wr.grad)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)
        self.norm = nn.LayerNorm(64)

    def forward(self, x, y):
        h = F.relu(self.l1(x))
        h = self.norm(F.silu(self.l2(h)) + h)
        return F.mse_loss(self.l3(h), y)


def train_like_eager(model, ref, make_opt, batches):
    """Train steps of fastdyn.jit(model) and of ref (same weights) give the same losses, and the
    same parameters and buffers (running statistics included) after them."""
    o1, o2 = make_opt(model.parameters()), make_opt(ref.parameters())
    compiled = fastdyn.jit(model)
    for batch in batches:
        loss = compiled(*batch)
        assert loss.grad_fn.name() == COMPILED
        o1.zero_grad()
        loss.backward()
        o1.step()
        loss_ref = ref(*batch)
        o2.zero_grad()
        loss_ref.backward()
        o2.step()
        torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-5)
    for (n, p), r in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(p, r, rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("opt", ["sgd", "adam", "adamw"])
def test_train_steps_give_eagers_losses_and_parameters(opt):
    torch.manual_seed(0)
    model, ref = Mlp(), Mlp()
    ref.load_state_dict(model.state_dict())
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
            "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3)}[opt]
    train_like_eager(model, ref, make, [(torch.randn(16, 32), torch.randn(16, 10)) for _ in range(4)])


def test_an_output_computed_from_another_output_takes_its_gradient_through_that_outputs_edge():
    # y and s = f(y) both returned: s's gradient reaches y's edge (its hooks, retain_grad and
    # autograd.grad(s, y) see it), as in eager; the graph gets one node per level.
    def f(x):
        y = x.exp()
        return y, (y * y).sum()
    x = torch.randn(5, requires_grad=True)
    y, s = fastdyn.jit(f)(x)
    assert s.grad_fn.name() == COMPILED and y.grad_fn.name() == COMPILED and s.grad_fn is not y.grad_fn
    (gy,) = torch.autograd.grad(s, y, retain_graph=True)
    torch.testing.assert_close(gy, 2 * y.detach())
    y.retain_grad()
    s.backward()
    torch.testing.assert_close(y.grad, 2 * y.detach())
    torch.testing.assert_close(x.grad, 2 * y.detach() * y.detach())


@pytest.mark.parametrize("case", ["view_of_input", "view_of_output"])
def test_outputs_that_are_views_of_inputs_or_outputs_are_views_to_autograd_as_in_eager(case):
    def view_of_input(x):
        return x.view(6), (x * 2).sum()

    def view_of_output(x):
        y = x * 2
        return y, y.view(6)
    f = {"view_of_input": view_of_input, "view_of_output": view_of_output}[case]
    x = torch.randn(2, 3, requires_grad=True)
    outs = fastdyn.jit(f)(x)
    xr = x.detach().clone().requires_grad_(True)
    ref = f(xr)
    assert outs[0]._base is (x if case == "view_of_input" else None)
    if case == "view_of_output":
        assert outs[1]._base is outs[0] and outs[0].grad_fn.name() == COMPILED
        outs[1].mul_(3)  # an in-place update through the view reaches the base, for autograd too
        ref[1].mul_(3)
        torch.testing.assert_close(outs[0], ref[0])
    (outs[0].sum() + outs[1].sum()).backward()
    (ref[0].sum() + ref[1].sum()).backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_what_the_graph_computes_from_a_returned_view_reaches_the_views_hooks():
    def f(x):
        y = x.exp()
        v = y[0]
        return y, v, (v * 2).sum()
    x = torch.randn(2, 3, requires_grad=True)
    y, v, s = fastdyn.jit(f)(x)
    assert s.grad_fn.name() == COMPILED and v._base is y
    seen = []
    v.register_hook(lambda g: seen.append(g.clone()))
    s.backward()
    torch.testing.assert_close(seen[0], torch.full((3,), 2.0))  # s's gradient passed through v's edge
    xr = x.detach().clone().requires_grad_(True)
    f(xr)[2].backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_dropout_in_training_draws_eagers_mask_and_the_backward_uses_it():
    def f(x, w):
        h = F.dropout(F.linear(x, w), 0.4, training=True)
        return F.dropout(h.tanh(), 0.2, training=True).sum()
    x = torch.randn(8, 16)
    w = torch.randn(12, 16, requires_grad=True)
    wr = w.detach().clone().requires_grad_(True)
    jf = fastdyn.jit(f)
    for seed in (1, 2):
        torch.manual_seed(seed)
        out = jf(x, w)
        assert out.grad_fn.name() == COMPILED
        (g,) = torch.autograd.grad(out, w, create_graph=True)  # the replay uses this call's masks
        (gg,) = torch.autograd.grad(g.sum(), w)
        after = torch.rand(3)  # the generator is where eager leaves it
        torch.manual_seed(seed)
        ref = f(x, wr)
        (gr,) = torch.autograd.grad(ref, wr, create_graph=True)
        (ggr,) = torch.autograd.grad(gr.sum(), wr)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g, gr)
        torch.testing.assert_close(gg, ggr)
        torch.testing.assert_close(after, torch.rand(3))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x, y):
        h = self.stem(x)
        out = self.relu(self.bn1(self.conv1(h)))
        out = self.relu(self.bn2(self.conv2(out)) + h)
        return F.cross_entropy(self.head(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)), y)


def test_a_cnn_with_train_mode_batch_norm_trains_like_eager_running_statistics_included():
    torch.manual_seed(0)
    model, ref = SmallResNet(), SmallResNet()
    ref.load_state_dict(model.state_dict())
    train_like_eager(model, ref, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                     [(torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))) for _ in range(3)])


def test_sizes_that_vary_get_a_compiled_backward_at_each_size():
    def f(x, w):
        return (F.gelu(x @ w) * 2).sum(-1)
    w = torch.randn(8, 16, requires_grad=True)
    wr = w.detach().clone().requires_grad_(True)
    jf = fastdyn.jit(f)
    for n in (3, 5, 7, 9):  # automatic dynamic makes the batch a size symbol after the second
        x = torch.randn(n, 8)
        out = jf(x, w)
        assert out.grad_fn.name() == COMPILED, n
        out.sum().backward()
        f(x, wr).sum().backward()
        torch.testing.assert_close(w.grad, wr.grad)


def test_a_mobilenet_style_cnn_trains_like_eager():
    # depthwise and pointwise convs, train-mode batch norm, hardswish, a global mean
    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                             nn.Hardswish(), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), block(8, 16, 1), block(16, 16, 2))
            self.head = nn.Linear(16, 5)

        def forward(self, x, y):
            return F.cross_entropy(self.head(self.body(x).mean((2, 3))), y)

    torch.manual_seed(0)
    model, ref = Net(), Net()
    ref.load_state_dict(model.state_dict())
    train_like_eager(model, ref, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                     [(torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))) for _ in range(3)])


def _three_steps_like_eager(step):
    """Three calls of step(model, x) eagerly and under fastdyn.jit on twin models: losses, the
    gradients returned and the flags returned equal; returns the breaks the compiled calls made."""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))

    x = torch.randn(5, 4)
    eager, compiled = make(), make()
    g = fastdyn.jit(step)
    breaks = fastdyn.stats()["graph_breaks"]
    for _ in range(3):
        want, got = step(eager, x), g(compiled, x)
        torch.testing.assert_close(got[0], want[0])
        for a, b in zip(got[1], want[1]):
            torch.testing.assert_close(a, b)
        assert got[2] == want[2]
        assert [p.grad is None for p in compiled.parameters()] == [p.grad is None for p in eager.parameters()]
    return fastdyn.stats()["graph_breaks"] - breaks


def test_parameter_gradients_are_read_in_the_trace():
    """`p.grad` of a leaf input (a parameter) is read at call time through its source: None before
    the first backward, the accumulated gradient after; the only break is backward() itself."""
    def step(model, x):
        before = [p.grad is None for p in model.parameters()]
        loss = model(x).sum()
        loss.backward()
        return loss, [p.grad * 2 for p in model.parameters()], before

    # backward, once per entry traced (the first call's .grad were None, the next ones' set)
    assert _three_steps_like_eager(step) == 2


def test_zero_grad_set_to_none_is_traced():
    """zero_grad(set_to_none=True) stores None into each parameter's .grad: replayed after the
    graph (before the break at backward), and later reads in the trace see None."""
    def step(model, x):
        model.zero_grad(set_to_none=True)
        none = [p.grad is None for p in model.parameters()]
        loss = model(x).sum()
        loss.backward()
        return loss, [p.grad.clone() for p in model.parameters()], none

    assert _three_steps_like_eager(step) == 2


# ---- grad-mode blocks inside a frame that tracks gradients

def _grads_like_eager(fn, make_inputs, steps=2):
    """fn's outputs, and the gradients a backward of their sum gives every input, eager then
    compiled (fresh inputs each step): the same values, requires_grad flags and gradients."""
    jitted = fastdyn.jit(fn)
    for _ in range(steps):
        torch.manual_seed(3)
        eager_in = make_inputs()
        torch.manual_seed(3)
        comp_in = make_inputs()
        want, got = fn(*eager_in), jitted(*comp_in)
        for w, g in zip(want, got):
            assert w.requires_grad == g.requires_grad
            torch.testing.assert_close(g, w)
        sum(o.sum() for o in want if o.requires_grad).backward()
        sum(o.sum() for o in got if o.requires_grad).backward()
        for a, b in zip(eager_in, comp_in):
            if a.requires_grad:
                torch.testing.assert_close(b.grad, a.grad)


def test_a_no_grad_block_is_a_constant_for_the_backward():
    def f(w, x):
        with torch.no_grad():
            scale = w.abs().amax()  # no gradient flows through the scale
        y = x * w / scale
        return y, scale

    _grads_like_eager(f, lambda: (torch.randn(8).requires_grad_(), torch.randn(4, 8).requires_grad_()))
    assert fastdyn.stats()["graph_breaks"] == 0


def test_a_parameter_updated_in_place_under_no_grad_then_used_gets_eagers_gradient():
    # The in-place write into a leaf that requires grad keeps ATen's autograd (eager's version
    # counters); its node runs with grad off, as in eager, and the product after it with grad on.
    def f(w, x):
        with torch.no_grad():
            w.mul_(0.5)
        return (x * w,)

    _grads_like_eager(f, lambda: (nn.Parameter(torch.randn(8)), torch.randn(4, 8)))
    assert fastdyn.stats()["graphs"] == 1 and fastdyn.stats()["graph_breaks"] == 0


def test_set_grad_enabled_made_in_the_frame_and_enable_grad_inside_no_grad():
    def f(x):
        torch.set_grad_enabled(False)
        a = x * 2
        torch.set_grad_enabled(True)
        with torch.no_grad():
            with torch.enable_grad():
                b = x.exp()
            c = b + a
        return a, b, c

    _grads_like_eager(f, lambda: (torch.randn(4, 8).requires_grad_(),))
    assert torch.is_grad_enabled()
    assert fastdyn.stats()["graph_breaks"] == 0


@contextlib.contextmanager
def _compiled_at_once():
    """Kernels compiled on the calling thread: the compiled path from the first call."""
    fastdyn.set_background_compile(False)
    try:
        yield
    finally:
        fastdyn.set_background_compile(True)


def _weights():
    """The same 0-d weight that requires grad, for an eager run and a compiled one."""
    return torch.tensor(0.5, requires_grad=True), torch.tensor(0.5, requires_grad=True)


def _rounds(f, n):
    """f compiled at once, then per round: (the compiled f, x, y, eager's weight, the compiled one's)."""
    with _compiled_at_once():
        jitted = fastdyn.jit(f)
        for _ in range(n):
            yield (jitted, torch.randn(4, 4), torch.randn(4, 4), *_weights())


def test_an_input_written_in_place_is_not_read_again_by_the_compiled_backward():
    # x.sub_(m) on an input that needs no gradient, then a product with a parameter: the backward
    # needs the subtracted x. It was recomputed from x, which by then held the subtracted values
    # (the forward's write-back), so the gradient saw the subtraction twice (difftest seed 896).
    def f(x, w, m):
        x.sub_(m)
        return ((x * w).sum(),)

    for n in (4, 3, 5):
        x = torch.randn(n, n)
        w_eager, w_comp = _weights()
        x_eager, x_comp = x.clone(), x.clone()
        m = float(x.mean())
        want, got = f(x_eager, w_eager, m)[0], fastdyn.jit(f)(x_comp, w_comp, m)[0]
        fastdyn.synchronize()
        torch.testing.assert_close(got, want)
        want.backward()
        got.backward()
        torch.testing.assert_close(x_comp, x_eager)
        torch.testing.assert_close(w_comp.grad, w_eager.grad)
    # the forward saves the subtracted values for the backward (no recompute from the input)
    x = torch.randn(4, 4)
    w = torch.tensor(0.5, requires_grad=True)
    with _compiled_at_once():
        jitted = fastdyn.jit(f)
        out = jitted(x.clone(), w, 0.25)[0]
        out.backward()
        assert out.grad_fn.name() == COMPILED
        torch.testing.assert_close(w.grad, (x - 0.25).sum())


def test_a_view_beside_its_base_written_in_place_reads_the_written_values(capsys):
    # After the print, the continuation gets t (a view of y, made before the break) and y as two
    # inputs sharing memory; y.mul_ writes y, then t.cos() must read the written values, as in
    # eager. The compiled forward reads every input first: such a call runs the graph on ATen
    # (difftest seed 20796 returned cos of the old values).
    def f(x, y, w):
        t = y.t()
        print("break")
        y.mul_(0.5)
        return t.cos(), (x * w).sum()

    for jitted, x, y, w_eager, w_comp in _rounds(f, 3):
        y_eager, y_comp = y.clone(), y.clone()
        want, got = f(x, y_eager, w_eager), jitted(x, y_comp, w_comp)
        for a, b in zip(want, got):
            torch.testing.assert_close(b, a)
        torch.testing.assert_close(y_comp, y_eager)
        want[1].backward()
        got[1].backward()
        torch.testing.assert_close(w_comp.grad, w_eager.grad)


def test_writing_a_value_that_requires_grad_into_an_input_puts_the_input_in_the_graph():
    # Eager: x.sub_(y * w) with w requiring grad makes x require grad, with a grad_fn (difftest
    # seed 26900: the functional graph read as traced without grad and lowered the write natively,
    # leaving x a plain tensor).
    def f(x, y, w):
        x.sub_(y * w)

    for jitted, x, y, w_eager, w_comp in _rounds(f, 2):
        x_eager, x_comp = x.clone(), x.clone()
        f(x_eager, y, w_eager)
        jitted(x_comp, y, w_comp)
        assert x_comp.requires_grad and x_comp.grad_fn is not None
        torch.testing.assert_close(x_comp, x_eager)
        x_eager.sum().backward()
        x_comp.sum().backward()
        torch.testing.assert_close(w_comp.grad, w_eager.grad)


def test_a_continuation_that_leaves_a_no_grad_block_gives_its_outputs_a_grad_fn():
    # The break (tolist) is inside `with torch.no_grad():`; the continuation resumes there, leaves
    # the block, and computes x * w: eager's result has a grad_fn, so must the compiled one's,
    # although the graph is called where grad mode is still off (difftest seed 26888).
    def f(x, y, w):
        with torch.no_grad():
            first = y[0].tolist()
        return x * w, len(first)

    with _compiled_at_once():
        jitted = fastdyn.jit(f)
        for _ in range(3):
            x, y = torch.randn(4), torch.randn(4, 4)
            w_eager, w_comp = _weights()
            want, got = f(x, y, w_eager), jitted(x, y, w_comp)
            assert got[0].requires_grad and got[0].grad_fn is not None and torch.is_grad_enabled()
            torch.testing.assert_close(got[0], want[0])
            want[0].sum().backward()
            got[0].sum().backward()
            torch.testing.assert_close(w_comp.grad, w_eager.grad)


def test_an_in_place_op_that_makes_an_input_require_grad_is_seen_by_the_code_after_it():
    # Eager: x.mul_(y * w) makes x require grad, so the branch on t.requires_grad is taken
    # (difftest seed 6795: the trace's x kept its input meta, the branch was not, relu_ was lost).
    def f(x, y, w):
        x.mul_(y * w)
        t = x + torch.zeros_like(y)
        if t.requires_grad:
            x.relu_()

    for jitted, x, y, w_eager, w_comp in _rounds(f, 2):
        x_eager, x_comp = x.clone(), x.clone()
        f(x_eager, y, w_eager)
        jitted(x_comp, y, w_comp)
        assert x_comp.requires_grad
        torch.testing.assert_close(x_comp, x_eager)


def test_a_returned_output_changed_in_place_before_the_backward_leaves_the_gradient_as_eager():
    # The backward reads exp's result w; eager saves w. A cut that saved the returned `out` instead
    # (cheap: the caller holds it) and recomputed w from it would read the caller's change to out.
    def f(x):
        out = x * 2
        w = (out + 1).exp()
        return out, w.sum()

    grads = []
    for fn in (f, fastdyn.jit(f)):
        for _ in range(2):  # the second call: compiled kernels
            x = torch.linspace(-1, 1, 64).reshape(8, 8).requires_grad_()
            out, s = fn(x)
            with torch.no_grad():
                out.add_(5)
            s.backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])  # a read of the changed out: e^10 times larger, or an error


def test_an_input_the_graph_writes_and_saves_raises_eagers_error_when_written_again():
    # difftest seed 232131: `x[1] = ...; t = x * w` saves x for w's gradient. The compiled graph
    # writes x and saves its new contents; the node must save x itself, so that writing x again
    # before the backward raises eager's error instead of differentiating the old contents.
    def f(x, w):
        x[1] = 2.0
        t = x * w
        x.add_(t.clone())
        (x * w).sum().backward()

    w = torch.tensor(0.5, requires_grad=True)
    g = fastdyn.jit(f)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            f(torch.randn(4, 4), w)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            g(torch.randn(4, 4), w)
        fastdyn.synchronize()
    assert fastdyn.stats()["graphs"] >= 1
