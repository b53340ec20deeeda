"""Batch norm (issue 21). Outside training, F.batch_norm is recorded as eager's CPU kernel computes
it (per channel alpha = weight / sqrt(running_var + eps), beta = bias - running_mean * alpha,
then x * alpha + beta), so that it fuses with the ReLU and residual add around it into one kernel
instead of a pass of its own on ATen. Values and strides are eager's (within float rounding),
across layouts, ranks, dtypes and missing weight/bias; training mode, low-precision inputs and
inputs that require grad keep ATen's batch_norm (running statistics updated as in eager)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import check, fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not importable")


def params(c, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(c, generator=g) * s + o).to(dtype) for s, o in ((0.5, 1.0), (0.1, 0.0), (0.1, 0.0), (0.0, 0.0))]


def bn_relu_residual(x, w, b, m, v):
    return F.relu(F.batch_norm(x, m, v + 0.5, w, b, False, 0.1, 1e-5) + x)


def bn_plain(x, m, v):
    return F.batch_norm(x, m, v + 0.5, None, None, False, 0.1, 1e-3)


@pytest.mark.parametrize("shape,channels_last", [((2, 8, 5, 7), False), ((2, 8, 5, 7), True), ((6, 8), False), ((2, 8, 9), False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eval_batch_norm_matches_eager(shape, channels_last, dtype):
    x = torch.randn(*shape).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w, b, m, v = params(shape[1], dtype)
    check(bn_relu_residual, x, w, b, m, v, rtol=1e-5, atol=1e-6)
    check(bn_plain, x, m, v, rtol=1e-5, atol=1e-6)


def test_eval_batch_norm_runs_in_the_kernel_after_the_convolution():
    fastdyn.set_background_compile(False)
    try:
        w, b, m, v = params(8)
        conv = torch.randn(8, 3, 3, 3)

        def f(x):
            return bn_relu_residual(F.conv2d(x, conv, padding=1), w, b, m, v)

        x = torch.randn(2, 3, 10, 10)
        j = fastdyn.jit(f)
        torch.testing.assert_close(j(x), f(x), rtol=1e-5, atol=1e-5)
        code = fastdyn._C.code_text(j)
        if code.startswith("backend llvm_cpu"):
            assert "aten::conv2d" in code and "aten::batch_norm" not in code, code
            assert code.count("\nkernel ") == 2, code  # the [C] alpha, then conv output * alpha + beta, relu, + x
    finally:
        fastdyn.set_background_compile(True)


def test_training_mode_keeps_atens_batch_norm_and_updates_running_stats():
    torch.manual_seed(0)
    ref, mod = nn.BatchNorm2d(4).train(), nn.BatchNorm2d(4).train()
    x = torch.randn(3, 4, 5, 5)
    with torch.no_grad():
        want = F.relu(ref(x))
        got = fastdyn.jit(lambda t: F.relu(mod(t)))(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mod.running_mean, ref.running_mean)
    torch.testing.assert_close(mod.running_var, ref.running_var)
    assert mod.num_batches_tracked.item() == ref.num_batches_tracked.item() == 1


def test_bfloat16_and_grad_keep_atens_batch_norm():
    x = torch.randn(2, 8, 4, 4)
    w, b, m, v = params(8)
    check(bn_relu_residual, x.bfloat16(), *[p.bfloat16() for p in (w, b, m, v)], rtol=2e-2, atol=2e-2)
    wg = w.clone().requires_grad_()
    out = fastdyn.jit(bn_relu_residual)(x, wg, b, m, v)
    want = bn_relu_residual(x, w.clone().requires_grad_(), b, m, v)
    torch.testing.assert_close(out, want)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    assert wg.grad is not None
