"""torch.autocast regions (codegen/capture/autocast.h): a trace under autocast records eager's
casts, its entry serves only calls under the same autocast state, and results equal eager's
(dtypes and values) on the CPU with bfloat16. The GPU cases run on the accelerator machine."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not built")

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _fresh():
    fastdyn.reset()
    yield
    fastdyn.reset()


def same(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        # Fused kernels round half-precision results once per op as eager does, but may compute
        # them in another order: half-precision tolerance, float32 where the result is float32.
        tol = (1.6e-2, 1e-3) if g.dtype in (torch.bfloat16, torch.float16) else (1e-5, 1e-5)
        torch.testing.assert_close(g, w, rtol=tol[0], atol=tol[1])


def run_under(device, dtype, fn, *args, calls=3):
    """fn eagerly and compiled under autocast; returns (eager result, compiled results, stats delta)."""
    g = fastdyn.jit(fn)
    before = fastdyn.stats()
    with torch.autocast(device, dtype=dtype):
        want = fn(*args)
        got = [g(*args) for _ in range(calls)]
    after = fastdyn.stats()
    return want, got, {k: after[k] - before[k] for k in ("graphs", "graph_breaks")}


def mlp(x, w1, b1, w2):
    h = F.gelu(F.linear(x, w1, b1))
    y = torch.softmax(h @ w2, -1)
    return y, y.sum(-1), torch.cat([x, h[:, :16]], 1)


def attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2


def conv_block(x, w, b):
    return F.relu(F.conv2d(x, w, b, padding=1)).mean((2, 3))


def losses(a, b):
    return F.mse_loss(a @ b, b.t() @ a.t() * 0.5), torch.prod(a[:2, :3] * 0.9, 1)


def mixed(x, w):
    # bf16 @ f32 under autocast: both cast; the join promotes to float32.
    h = x.to(torch.bfloat16) @ w
    return torch.cat([h, x], 0), torch.stack([x, x * 2])


CASES = {
    "mlp": (mlp, lambda: (torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(32, 32))),
    "attention": (attention, lambda: (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8),
                                      torch.randn(1, 1, 5, 7))),
    "conv_block": (conv_block, lambda: (torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4))),
    "losses": (losses, lambda: (torch.randn(6, 6), torch.randn(6, 6))),
    "mixed": (mixed, lambda: (torch.randn(4, 4), torch.randn(4, 4))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_bfloat16_autocast_matches_eager_in_one_graph(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    want, got, d = run_under("cpu", torch.bfloat16, fn, *args)
    for g in got:
        same(g, want)
    assert d == {"graphs": 1, "graph_breaks": 0}, d


def test_the_graph_records_eagers_casts():
    x, w1, b1, w2 = CASES["mlp"][1]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        code = "\n".join(fastdyn.explain(mlp, x, w1, b1, w2).code)
    assert "bf16[8, 32]{32, 1} = aten::linear(" in code, code


def test_an_entry_serves_only_its_autocast_state():
    x, w1, b1, w2 = CASES["mlp"][1]()
    g = fastdyn.jit(mlp)
    plain = g(x, w1, b1, w2)
    same(plain, mlp(x, w1, b1, w2))
    assert plain[0].dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(g(x, w1, b1, w2), mlp(x, w1, b1, w2))
    with torch.autocast("cpu", dtype=torch.float16):
        same(g(x, w1, b1, w2), mlp(x, w1, b1, w2))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        same(g(x, w1, b1, w2), mlp(x, w1, b1, w2))
    assert fastdyn.stats()["graphs"] == 3


def test_autocast_probes_read_the_traced_state():
    def f(x):
        return x * 2 if torch.is_autocast_enabled("cpu") else x - 1

    g = fastdyn.jit(f)
    x = torch.ones(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(g(x), f(x))
    same(g(x), f(x))


def test_ops_autocast_casts_without_a_rule_break_and_run_eagerly():
    # On the CPU einsum has no autocast kernel but calls bmm, which casts: fastdyn refuses it.
    def f(a, b):
        a = a * 2  # an op before the refused one: the break ends a graph, so it is counted
        return torch.einsum("ij,jk->ik", a, b) + 1

    a, b = torch.randn(3, 4), torch.randn(4, 5)
    want, got, d = run_under("cpu", torch.bfloat16, f, a, b)
    for g in got:
        same(g, want)
    assert d["graph_breaks"] >= 1


def test_a_model_under_autocast_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10), nn.LayerNorm(10)).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want, got, d = run_under("cpu", torch.bfloat16, model, x)
    for g in got:
        same(g, want)
    assert d["graph_breaks"] == 0, d


def test_a_train_step_under_autocast_matches_eager():
    torch.manual_seed(0)

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

    def step(model, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        return loss

    x, y = torch.randn(8, 16), torch.randn(8, 4)
    eager, compiled = make(), make()
    want = step(eager, x, y)
    fastdyn.enable()
    try:
        got = step(compiled, x, y)
    finally:
        fastdyn.disable()
    same(got, want)
    for p, q in zip(compiled.parameters(), eager.parameters()):
        assert p.grad.dtype == q.grad.dtype
        torch.testing.assert_close(p.grad, q.grad, rtol=1.6e-2, atol=1e-3)


def test_the_table_agrees_with_atens_registrations():
    """Each plain row is an op ATen gives no autocast kernel on that device type (a composite op
    whose callees autocast leaves alone). A casting row whose op has none in the torch in use (an
    older torch: rms_norm on CUDA before 2.13) casts nothing there: autocast.cpp follows ATen.
    This torch (the CPU build CI uses) registers every casting row of the table."""
    rows = fastdyn._C.autocast_policies()
    assert len(rows) > 40
    drift = []
    for name, cpu, cuda in rows:
        for device, policy in (("AutocastCPU", cpu), ("AutocastCUDA", cuda)):
            if not policy:
                continue
            has = torch._C._dispatch_has_kernel_for_dispatch_key(name, device)
            if policy == "plain":
                assert not has, f"{name}: ATen casts it on {device}, the table says plain"
            elif not has:
                drift.append(f"{name} ({policy} on {device})")
    if torch.__version__.startswith("2.13"):
        assert not drift, drift
    print("casting rows this torch does not register:", drift)


def test_prod_of_bfloat16_runs_in_float32_under_cpu_autocast():
    # aten::prod.dim_int is one of the CPU's float32 ops: a bfloat16 input gives a float32 result.
    def f(x):
        return torch.prod(x, 1) * 2

    x = torch.rand(4, 5) + 0.5
    want, got, d = run_under("cpu", torch.bfloat16, f, x.to(torch.bfloat16))
    for g in got:
        same(g, want)
    assert want.dtype == torch.float32


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_matches_eager(dtype):
    torch.manual_seed(0)

    def f(x, w, b, ln_w):
        h = F.linear(x, w, b)
        y = torch.softmax(h, -1) + F.layer_norm(h, (h.shape[-1],), ln_w) + h.exp().sum(-1, keepdim=True)
        return y, h

    args = (torch.randn(8, 64, device="cuda"), torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda"),
            torch.randn(64, device="cuda"))
    want, got, d = run_under("cuda", dtype, f, *args)
    for g in got:
        for a, e in zip(g, want):
            assert a.dtype == e.dtype
            torch.testing.assert_close(a, e, rtol=2e-3, atol=2e-3)
    assert d["graph_breaks"] == 0, d


def test_an_autocast_block_inside_the_frame_is_traced():
    def f(x, w):
        h = x @ w
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.relu(h @ w)
            inside = torch.is_autocast_enabled("cpu")
        return y + 1, h, inside, torch.is_autocast_enabled("cpu")

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    g = fastdyn.jit(f)
    want = f(x, w)
    for _ in range(2):
        got = g(x, w)
        same(got[:2], want[:2])
        assert got[2:] == want[2:] == (True, False)
    assert not torch.is_autocast_enabled("cpu")
    assert fastdyn.stats()["graphs"] == 1 and fastdyn.stats()["graph_breaks"] == 0


def _autocast_nesting():
    n = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return n - 1


def test_a_break_inside_an_autocast_block_resumes_inside_it():
    """The continuation goes on inside the block (a torch.autocast entered for real at the break,
    exited for real after the continuation's graph): eager's values and casts, and the autocast
    state, nesting and dtype restored after each call, through two breaks in the block."""
    seen = []

    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            seen.append(torch.is_autocast_enabled("cpu"))  # a list the caller sees
            print(end="")  # not traced: a break inside the block
            z = y @ w
            print(end="")  # a second one, in the continuation
            q = z @ w
        return y, z, q, q.float() + 1, torch.is_autocast_enabled("cpu")

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    want = f(x, w)
    g = fastdyn.jit(f)
    for _ in range(3):
        seen.clear()
        got = g(x, w)
        same(got[:4], want[:4])
        assert got[4] is False and got[0].dtype == torch.bfloat16 and seen == [True]
        assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert _autocast_nesting() == 0
    assert fastdyn.stats()["graphs"] == 3 and fastdyn.stats()["graph_breaks"] == 2


def test_an_exception_after_a_break_inside_an_autocast_block_restores_the_state():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.float16):
            y = x @ w
            print(end="")
            if y.dtype == torch.float16:
                raise ValueError("inside the block")
        return y

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    g = fastdyn.jit(f)
    for fn in (f, g, g):
        with pytest.raises(ValueError, match="inside the block"):
            fn(x, w)
        assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert _autocast_nesting() == 0


def test_autocast_without_a_dtype_reads_the_guarded_default():
    def f(x, w):
        with torch.autocast("cpu"):  # the CPU's autocast dtype, a setting the guards check
            return x @ w

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    g = fastdyn.jit(f)
    same(g(x, w), f(x, w))
    assert f(x, w).dtype == torch.bfloat16
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        assert f(x, w).dtype == torch.float16
        same(g(x, w), f(x, w))
    finally:
        torch.set_autocast_dtype("cpu", torch.bfloat16)
    same(g(x, w), f(x, w))
    assert fastdyn.stats()["graphs"] == 2 and fastdyn.stats()["graph_breaks"] == 0
