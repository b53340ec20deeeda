"""Pooling (issue 21): F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d and
their 1-d forms (max, avg, adaptive avg) are captured (one graph,
no break: torch.nn.functional's __torch_function__ probes are answered at trace time, and the ops
are in the op table, run by ATen between the kernels), with eager's values, shapes and strides
(channels-last stays channels-last) across kernel/stride/padding/dilation/ceil_mode, 3-d inputs,
bfloat16, and eager's errors for bad arguments. A small CNN of nn modules is one graph."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import check, fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not importable")


def x4(*shape, channels_last=False, dtype=torch.float32):
    t = torch.randn(*shape).to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


MAX = {
    "k2": lambda x: F.max_pool2d(x, 2),
    "k3s2p1": lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
    "ceil": lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
    "dilation": lambda x: F.max_pool2d(x, 2, stride=1, dilation=2),
    "rect": lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2)),
    "then_relu": lambda x: F.max_pool2d(x * 2, 2).relu() + 1,
}
AVG = {
    "k2": lambda x: F.avg_pool2d(x, 2),
    "k3s2p1_ceil_nopad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
}
ADAPTIVE = {
    "one": lambda x: F.adaptive_avg_pool2d(x, 1),
    "rect": lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    "none": lambda x: F.adaptive_avg_pool2d(x, (None, 4)),
    "flatten": lambda x: torch.flatten(F.adaptive_avg_pool2d(x.relu(), 1), 1),
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
@pytest.mark.parametrize("name", sorted(MAX))
def test_max_pool2d(name, layout):
    x = torch.randn(3, 9, 11) if layout == "3d" else x4(2, 3, 9, 11, channels_last=layout == "channels_last")
    check(MAX[name], x)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
@pytest.mark.parametrize("name", sorted(AVG))
def test_avg_pool2d(name, layout):
    x = torch.randn(3, 9, 11) if layout == "3d" else x4(2, 3, 9, 11, channels_last=layout == "channels_last")
    check(AVG[name], x)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_avg_pool2d(name, layout):
    x = torch.randn(3, 9, 11) if layout == "3d" else x4(2, 3, 9, 11, channels_last=layout == "channels_last")
    check(ADAPTIVE[name], x)


POOL1D = {
    "avg": lambda x: F.avg_pool1d(x, 3, stride=2, padding=1),
    "avg_ceil_nopad": lambda x: F.avg_pool1d(x, 2, ceil_mode=True, count_include_pad=False),
    "max": lambda x: F.max_pool1d(x, 3, stride=2, padding=1),
    "max_dilation": lambda x: F.max_pool1d(x, 2, dilation=2),
    "adaptive": lambda x: F.adaptive_avg_pool1d(x, 4),
    "adaptive_one": lambda x: F.adaptive_avg_pool1d(x * 2, 1).squeeze(-1),
}


@pytest.mark.parametrize("layout", ["contiguous", "2d"])
@pytest.mark.parametrize("name", sorted(POOL1D))
def test_pool1d(name, layout):
    x = torch.randn(3, 11) if layout == "2d" else torch.randn(2, 3, 11)
    check(POOL1D[name], x)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
def test_adaptive_max_pool2d(layout):
    x = torch.randn(3, 9, 11) if layout == "3d" else x4(2, 3, 9, 11, channels_last=layout == "channels_last")
    check(lambda x: F.adaptive_max_pool2d(x, (3, 4)) * 2, x)
    check(lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True), x)


def test_bfloat16():
    x = x4(2, 4, 8, 8, dtype=torch.bfloat16)
    check(lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)), x)


def test_bad_arguments_raise_eagers_errors():
    x = torch.randn(1, 2, 4, 4)
    check(lambda x: F.max_pool2d(x, 9), x, graphs=0)            # kernel larger than the input
    check(lambda x: F.avg_pool2d(x, 2, padding=2), x, graphs=0)  # padding over half the kernel
    check(lambda x: F.max_pool2d(x.long(), 2), x, graphs=1, breaks=1)  # not implemented for Long


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.avg = nn.AvgPool2d(2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv1(x))))
        x = self.avg(F.relu(self.conv2(x)))
        return self.head(x)


def test_a_small_cnn_is_one_graph():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    def forward(x):
        return model(x)

    with torch.no_grad():
        check(forward, torch.randn(2, 3, 16, 16), rtol=1e-4, atol=1e-5)
