"""Convolution graphs in channels-last layout (codegen/passes/channels_last.h): the activations
between convs are NHWC inside the graph, the conv weights are held in channels-last while
unchanged (codegen/aten/channels_last_conv.h), and the caller sees eager's values and strides."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="needs llvm_cpu")


def net():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.Hardswish(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 8, 1), nn.ReLU())
    with torch.no_grad():
        m[1].running_mean.uniform_(-1, 1)
        m[1].running_var.uniform_(0.5, 2)
    return m.eval()


def same(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.stride() == want.stride()


@pytest.fixture(autouse=True)
def compile_on_the_calling_thread():
    fastdyn.set_background_compile(False)
    yield
    fastdyn.set_background_compile(True)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_conv_chain_matches_eager_values_and_strides(layout):
    m = net()
    x = torch.randn(2, 3, 20, 20)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    f = fastdyn.jit(m)
    with torch.no_grad():
        want = m(x)
        for _ in range(4):  # the weights' first calls, then held
            same(f(x), want)
        code = fastdyn.explain(m, x).code[0]
    if code.startswith("backend llvm_cpu") and layout == "nchw":
        # The input is copied into NHWC once; every conv runs on NHWC with a held weight.
        assert code.count("weight reordered once") + code.count("weight held in channels-last") == 3, code
        assert "f32[2, 3, 20, 20]{1200, 1, 60, 3}" in code, code  # the input's NHWC copy


class Block(nn.Module):
    """torchvision's BasicBlock: ReLU(inplace=True) and `out += identity`, in-place ops between convs."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


def test_in_place_relu_and_residual_add_stay_in_nhwc():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2), Block(8), Block(8),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    for b in (m[3], m[4]):
        for bn in (b.bn1, b.bn2):
            with torch.no_grad():
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 16, 16)
    f = fastdyn.jit(m)
    with torch.no_grad():
        want = m(x)
        for _ in range(3):
            same(f(x), want)
        code = fastdyn.explain(m, x).code[0]
    if code.startswith("backend llvm_cpu"):
        # Every 4-d value but the input is NHWC: the in-place ReLUs and adds between the convs
        # read and write NHWC (before, each relu_ wrote NCHW and a copy took it back to NHWC).
        values = re.findall(r"v\d+: f32\[\d+, \d+, \d+, \d+\]\{\d+, (\d+), .*\} (\w+)", code)
        assert len(values) >= 10, code
        assert all(stride_c == "1" for stride_c, kind in values if kind != "input"), code
        assert code.count("weight reordered once") + code.count("weight held in channels-last") == 5, code


def test_intermediates_the_caller_sees_keep_eagers_layout():
    m = net()

    def f(x):
        a = m[2](m[1](m[0](x)))
        b = m[4](m[3](a))
        return a, m[7](m[6](m[5](b))), b.flatten(2)

    x = torch.randn(1, 3, 16, 16)
    j = fastdyn.jit(f)
    with torch.no_grad():
        want = f(x)
        for _ in range(3):
            for g, w in zip(j(x), want):
                same(g, w)


def test_every_weight_update_is_seen():
    m = net()
    x = torch.randn(2, 3, 12, 12)
    f = fastdyn.jit(m)
    with torch.no_grad():
        for _ in range(3):
            f(x)  # the channels-last weights are held by now
        m[3].weight.mul_(-2)  # in place: the version counter
        same(f(x), m(x))
        same(f(x), m(x))
        m[6].weight.data = torch.randn_like(m[6].weight)  # new storage, same tensor object
        same(f(x), m(x))
        m[0].weight.data.mul_(0.5)  # through .data: no version bump, the sample of bits sees it
        same(f(x), m(x))
        same(f(x), m(x))


def test_training_mode_convs_keep_autograd():
    m = net().train()
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    f = fastdyn.jit(m)
    out = f(x)
    out.sum().backward()
    g = x.grad.clone()
    x.grad = None
    m(x).sum().backward()
    torch.testing.assert_close(g, x.grad, rtol=1e-4, atol=1e-4)


def test_same_padding_convs_hold_a_channels_last_weight():
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 3, 3, 3), torch.randn(8, 8, 5, 5) / 8

    def f(x):
        return F.conv2d(F.relu(F.conv2d(x, w1, padding="same")), w2, padding="same").relu() + 1

    x = torch.randn(2, 3, 11, 11)
    j = fastdyn.jit(f)
    for _ in range(4):
        same(j(x), f(x))
    code = fastdyn.explain(f, x).code[0]
    if code.startswith("backend llvm_cpu"):
        assert code.count("weight held in channels-last") == 2, code
