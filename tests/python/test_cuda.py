"""The cuda backend on a GPU (skipped on a machine without one; scripts/device_test.sh runs it on
the accelerator machine): fused kernels against eager for pointwise chains, reductions and
normalisations in float32, float16 and bfloat16, integer and bool results, gathers; one kernel
for every length of a dynamic dim; PyTorch's current stream; CPU scalars beside GPU tensors (read by value);
an out-of-range gather failing as eager's does; a small GPT-2. The same sources compile to PTX
without a GPU in tests/cpp/cuda/test_emit_cuda.cpp."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not torch.cuda.is_available(), reason="needs a CUDA GPU")

TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2), torch.float64: (1e-10, 1e-10)}


def compiled_code(fn, *args):
    report = fastdyn.explain(fn, *args)
    return "\n".join(report.code)


def check(fn, *args, dtype=torch.float32, tol=None):
    want = fn(*args)
    jf = fastdyn.jit(fn, backend="cuda")
    got = jf(*args)
    got = jf(*args)  # the compiled call (background compiles are off in the suite)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.device == w.device and g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if g.is_floating_point():
            rtol, atol = tol or TOL[dtype]
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(g, w), (g, w)
    code = compiled_code(fn, *args)
    assert code.startswith("backend cuda"), code
    return code


UNARY = {
    "exp": torch.exp, "log": lambda x: torch.log(x.abs() + 0.5), "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1), "pow_frac": lambda x: x.abs().pow(1.7), "relu": F.relu,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.7), "round": torch.round, "hardswish": F.hardswish,
    "where": lambda x: torch.where(x > 0, x, x * 0.1), "max_nan": lambda x: torch.maximum(x, x.flip(-1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_pointwise(name, dtype):
    x = torch.randn(33, 130, device="cuda").to(dtype)
    check(lambda x: UNARY[name](x * 1.5 + 0.25), x, dtype=dtype)


@pytest.mark.parametrize("shape", [(1024, 1024), (3, 5, 7), (7,), ()])
def test_pointwise_shapes_broadcast_and_layouts(shape):
    x = torch.randn(shape, device="cuda")
    b = torch.randn(shape[-1:] if shape else (), device="cuda")
    check(lambda x, b: (x + b).relu() * 2 - b.sigmoid(), x, b)
    if len(shape) == 2:
        check(lambda x, b: torch.tanh(x.t()) + b, x, b)  # a transposed read: the scalar path


def test_a_factory_on_cuda_without_an_index_keeps_the_graph_on_the_cuda_backend():
    # device="cuda" is the current device: its metadata says cuda:0, as the other values' do, so
    # the graph is on one device (it ran wholly on aten, op by op, when it said "cuda").
    x = torch.randn(64, device="cuda")
    check(lambda x: x * 2 + torch.arange(64, device="cuda"), x)
    check(lambda x: x.relu() + torch.ones(64, device=torch.device("cuda")), x)


def test_vector_path_and_misaligned_views():
    x = torch.randn(4096 + 1, device="cuda")
    check(lambda x: (x[1:] * 3).exp(), x)   # a view 4 bytes past the allocation: no vector loads
    check(lambda x: (x[:4096] * 3).exp(), x)


REDUCTIONS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    "sum": lambda x: x.sum(-1), "mean0": lambda x: x.mean(0), "var": lambda x: x.var(-1),
    "amax": lambda x: x.amax(-1, keepdim=True), "argmax": lambda x: x.argmax(-1), "argmin": lambda x: x.argmin(0),
    "sum_all": lambda x: x.sum(), "prod": lambda x: (x * 0.01 + 1).prod(-1), "min": lambda x: x.amin(-1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", [7, 300, 4096, 8192])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name, cols, dtype):
    x = torch.randn(19, cols, device="cuda").to(dtype)
    tol = (1e-4, 1e-4) if dtype == torch.float32 else None  # summation order differs from ATen's
    check(REDUCTIONS[name], x, dtype=dtype, tol=tol)


COLUMN_REDUCTIONS = {
    "sum0": lambda x: x.sum(0), "var0": lambda x: x.var(0), "softmax0": lambda x: torch.softmax(x, 0),
    "amax0": lambda x: x.amax(0), "weight_grad": lambda x: (x * torch.tanh(x)).sum(0),
    "mean_middle": lambda x: x.view(x.shape[0], -1, 3 if x.shape[1] % 3 == 0 else 1).mean(1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 33), (1000, 300), (1024, 2048), (3, 4095), (4096, 64)])
@pytest.mark.parametrize("name", sorted(COLUMN_REDUCTIONS))
def test_reductions_over_strided_rows_take_the_column_shape(name, shape, dtype):
    x = torch.randn(*shape, device="cuda").to(dtype)
    tol = (1e-4, 1e-4) if dtype == torch.float32 else None
    check(COLUMN_REDUCTIONS[name], x, dtype=dtype, tol=tol)  # the shape's choice: tests/cpp/cuda/test_emit_cuda.cpp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_few_long_rows_split_across_blocks(dtype):
    x = torch.randn(3, 300_001, device="cuda").to(dtype)
    tol = (1e-4, 1e-3) if dtype == torch.float32 else None
    check(lambda x: (x.sum(), x.mean(-1), x.amax(-1), (x * x).sum(-1).sqrt(), x.amin(-1)), x, dtype=dtype, tol=tol)
    v = torch.randn(1 << 22, device="cuda")
    check(lambda v: (v.sum(), v.abs().max(), v.double().sum()), v, tol=(1e-4, 1e-3))
    f = fastdyn.jit(lambda v: v.sum(), backend="cuda")
    for _ in range(3):  # the workspace's counters start at zero on every launch
        torch.testing.assert_close(f(v), v.sum(), rtol=1e-4, atol=1e-3)


def test_softmax_and_layer_norm_are_one_kernel_each():
    x = torch.randn(64, 768, device="cuda")
    code = check(lambda x: torch.softmax(F.layer_norm(x, (768,)), -1), x, tol=(1e-4, 1e-4))
    assert sum(l.startswith("kernel ") for l in code.splitlines()) <= 2, code


def test_integer_bool_and_gather():
    i = torch.randint(-5, 5, (6, 9), device="cuda")
    check(lambda i: (i * 3 + 1, i > 0, (i % 4 == 1) & (i < 3), i.abs().sum(-1)), i)
    table = torch.randn(50, 16, device="cuda")
    idx = torch.randint(0, 50, (4, 7), device="cuda")
    check(lambda t, i: F.embedding(i, t) * 2 + 1, table, idx)


def test_matmul_stays_extern_with_fused_epilogue():
    x, w, b = (torch.randn(64, 128, device="cuda"), torch.randn(128, 256, device="cuda"), torch.randn(256, device="cuda"))
    code = check(lambda x, w, b: F.gelu(x @ w + b).sum(-1), x, w, b, tol=(1e-4, 1e-4))
    assert any(l.startswith("extern ") for l in code.splitlines()), code


def test_index_copy_writes_a_cache_in_place_between_the_kernels():
    """A static KV cache's update (codegen/loop/functionalize.cpp): ATen's index_copy_ on the
    caller's tensor, then kernels reading the new rows; each step equal to eager, one entry."""
    def step(cache, pos, new, q):
        cache.index_copy_(2, pos, new)
        return torch.softmax(q @ cache.transpose(-1, -2) * 0.3, -1) @ cache

    jf = fastdyn.jit(step, backend="cuda")
    cache, ref = torch.zeros(1, 4, 32, 16, device="cuda"), torch.zeros(1, 4, 32, 16, device="cuda")
    before = fastdyn.stats()["graphs"]
    for t in range(6):
        pos = torch.tensor([t], device="cuda")
        new, q = torch.randn(1, 4, 1, 16, device="cuda"), torch.randn(1, 4, 1, 16, device="cuda")
        torch.testing.assert_close(jf(cache, pos, new, q), step(ref, pos, new, q), rtol=1e-5, atol=1e-5)
        assert torch.equal(cache, ref) and cache._version == ref._version
    assert fastdyn.stats()["graphs"] - before == 1
    code = compiled_code(step, cache.clone(), pos, new, q)
    assert code.startswith("backend cuda") and "aten::index_copy_(%0" in code, code


def test_dynamic_lengths_share_their_kernels():
    fastdyn.reset()
    f = fastdyn.jit(lambda x: torch.softmax(x * 2, -1).sum(-1) + x.mean(-1), backend="cuda", dynamic=True)
    before = fastdyn._C.cuda_info()["kernels_compiled"]
    for n in [5, 9, 17, 100, 333, 1000, 64, 7, 250, 12]:
        x = torch.randn(n, 96, device="cuda")
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1).sum(-1) + x.mean(-1), rtol=1e-5, atol=1e-5)
    compiled = fastdyn._C.cuda_info()["kernels_compiled"] - before
    assert compiled <= 4, compiled  # kernels of the first size only, whatever the lengths


def test_a_kernel_repeated_across_layers_is_built_once():
    # The layers of a model make kernels of one source: the graph looks each source up (memory,
    # disk) and compiles it once, not once per layer (a 4-layer Llama's decode graph compiled 45
    # kernels for 12 sources, the copies of one racing each other in NVRTC). Four layers with a
    # scale each are four sources: four kernels built; with one scale, one.
    w = torch.randn(64, 64, device="cuda") * 0.1
    b = torch.randn(64, device="cuda")
    x = torch.randn(32, 64, device="cuda")

    def built_for(scales):
        def layers(x):
            for s in scales:
                x = torch.tanh(x @ w + b) * s
            return x

        fastdyn.reset()
        jf = fastdyn.jit(layers, backend="cuda")
        before = fastdyn._C.cuda_info()
        torch.testing.assert_close(jf(x), layers(x), rtol=1e-5, atol=1e-5)
        after = fastdyn._C.cuda_info()
        return sum(after[k] - before[k] for k in ("kernels_compiled", "disk_hits", "memory_hits"))

    assert built_for([1.25, 1.5, 1.75, 2.25]) == 4
    assert built_for([1.125] * 4) == 1


def test_runs_on_the_current_stream():
    s = torch.cuda.Stream()
    x = torch.randn(1 << 20, device="cuda")
    f = fastdyn.jit(lambda x: (x * 2).exp().sum(), backend="cuda")
    f(x)
    f(x)
    with torch.cuda.stream(s):
        y = torch.empty_like(x)
        torch.cuda._sleep(10_000_000)  # the stream is busy; work on it must wait
        y.copy_(x)
        got = f(y)
    s.synchronize()
    torch.testing.assert_close(got, (x * 2).exp().sum(), rtol=1e-4, atol=1e-4)


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@two_gpus
def test_each_graph_runs_on_its_own_gpu_whatever_the_current_device():
    # Kernels are built and launched for the tensors' device (its primary context, its current
    # stream), not the current device; the kernel cache holds them per architecture.
    fn = lambda x, w: torch.softmax(x * w, -1) + x.sin().sum(-1, keepdim=True)  # noqa: E731
    f = fastdyn.jit(fn, backend="cuda")
    for current in (0, 1):
        with torch.cuda.device(current):
            for dev in ("cuda:0", "cuda:1"):
                x, w = torch.randn(33, 500, device=dev), torch.randn(500, device=dev)
                got = f(x, w)
                assert got.device == x.device, (got.device, dev)
                torch.testing.assert_close(got, fn(x, w), rtol=1e-5, atol=1e-5)
    assert compiled_code(fn, x, w).startswith("backend cuda")


@two_gpus
def test_the_second_gpus_current_stream_is_used():
    s = torch.cuda.Stream(device="cuda:1")
    x = torch.randn(1 << 20, device="cuda:1")
    f = fastdyn.jit(lambda x: (x * 2).exp().sum(), backend="cuda")
    f(x)
    f(x)
    with torch.cuda.stream(s):
        y = torch.empty_like(x)
        torch.cuda._sleep(10_000_000)
        y.copy_(x)
        got = f(y)
    s.synchronize()
    torch.testing.assert_close(got, (x * 2).exp().sum(), rtol=1e-4, atol=1e-4)


def test_cpu_scalars_beside_gpu_tensors_are_read_at_each_launch():
    # A CPU scalar (an optimizer's step count) stays on the CPU: its increment runs on the host
    # (an interpreted kernel) after the GPU kernel that reads the old count by value, and the next
    # call reads the new one: nothing is baked into the compiled program.
    def step(x, c):
        y = x * (1 - 0.9 ** c) + 1
        c.add_(1)
        return y, x / c

    x = torch.randn(8, 8, device="cuda")
    c_f, c_e = torch.tensor(2.0), torch.tensor(2.0)
    f = fastdyn.jit(step, backend="cuda")
    for _ in range(4):
        got, want = f(x, c_f), step(x, c_e)
        torch.testing.assert_close(got, want)
        assert c_f.device.type == "cpu" and c_f.item() == c_e.item()
    fastdyn.synchronize()
    for _ in range(2):
        torch.testing.assert_close(f(x, c_f), step(x, c_e))
    code = fastdyn._C.code_text(step)
    assert code is not None and code.startswith("backend cuda\n"), code
    # A CPU tensor of more than one element beside GPU tensors: the graph runs on ATen, which
    # raises eager's error.
    v = torch.randn(8)
    with pytest.raises(RuntimeError, match="same device"):
        x * v + 1
    with pytest.raises(RuntimeError, match="same device"):
        fastdyn.jit(lambda x, v: x * v + 1, backend="cuda")(x, v)


def test_out_of_range_gather_fails_like_eager():
    # A device-side assertion breaks the process's CUDA context: each mode runs in a process of its own.
    script = textwrap.dedent("""
        import sys, torch, fastdyn, torch.nn.functional as F
        fastdyn.set_background_compile(False)
        fn = lambda t, i: F.embedding(i, t) * 2
        f = fastdyn.jit(fn, backend="cuda") if sys.argv[1] == "fastdyn" else fn
        t = torch.randn(10, 4, device="cuda")
        f(t, torch.zeros(3, dtype=torch.long, device="cuda"))
        try:
            f(t, torch.full((3,), 10, device="cuda"))
            torch.cuda.synchronize()
            print("no error")
        except Exception as e:
            print("raised", type(e).__name__, isinstance(e, RuntimeError))
    """)
    out = {}
    for mode in ("eager", "fastdyn"):
        r = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120)
        out[mode] = r.stdout.strip()
    assert out["fastdyn"] == out["eager"] and out["eager"].startswith("raised"), out


def test_gpt2_on_the_gpu_equals_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 1000, (2, 40), device="cuda")
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        fastdyn.reset()
        fastdyn.enable(backend="cuda")
        try:
            got = model(ids, use_cache=False).logits
            got = model(ids, use_cache=False).logits
        finally:
            fastdyn.disable()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert fastdyn._C.cuda_info()["kernels_compiled"] + fastdyn._C.cuda_info()["memory_hits"] > 0


def test_conv_chain_on_the_gpu_equals_eager_and_keeps_nchw():
    # codegen/passes/channels_last.h is for CPU graphs for now: on the GPU the activations stay
    # NCHW (the cuda kernels would store NHWC with strides), and results match eager's.
    torch.manual_seed(0)
    w1, w2, w3 = (torch.randn(16, 3, 3, 3, device="cuda") / 4, torch.randn(16, 4, 3, 3, device="cuda") / 4,
                  torch.randn(8, 16, 1, 1, device="cuda") / 4)
    scale = torch.rand(16, 1, 1, device="cuda") + 0.5

    def f(x):
        a = F.relu(F.conv2d(x, w1, padding=1) * scale)
        b = F.hardswish(F.conv2d(a, w2, padding=1, groups=4))
        return F.relu(F.conv2d(F.max_pool2d(b, 2), w3)), b.flatten(2)

    x = torch.randn(2, 3, 20, 20, device="cuda")
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # NCHW and NHWC convs round TF32 differently
    try:
        code = check(f, x)
        got, want = fastdyn.jit(f, backend="cuda")(x), f(x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert "{6400, 1, 320, 16}" not in code and "{6400, 400, 20, 1}" in code, code  # a and b NCHW
    assert [t.stride() for t in got] == [t.stride() for t in want]


@pytest.mark.parametrize("dtype,mask", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False),
                                        (torch.float16, False)])
@pytest.mark.parametrize("query_layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_output_is_laid_out_as_eagers(dtype, mask, query_layout, causal):
    """The memory-efficient kernel (float32, or a mask) returns [B, S, H, D]-major output whatever
    the query's layout; flash (half types, no mask) returns the query's. The capture rule guessed
    the query's for both: fastdyn's float32 result had other strides than eager's, and the runtime
    copied it into them (attention 0.95x eager on an H200). Checked on an H200: these 14 cases match;
    half types with a mask do not yet (eager's choice among kernels is not mirrored)."""
    if mask and causal:
        pytest.skip("a mask and is_causal are exclusive")
    B, H, S, D = 2, 4, 128, 64

    def make():
        if query_layout == "bshd":
            return torch.randn(B, S, H, D, device="cuda", dtype=dtype).transpose(1, 2)
        return torch.randn(B, H, S, D, device="cuda", dtype=dtype)

    q, k, v = make(), make(), make()
    m = torch.randn(B, 1, S, S, device="cuda", dtype=dtype) if mask else None
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)  # noqa: E731
    want = f(q, k, v, m)
    got = fastdyn.jit(f)(q, k, v, m)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
