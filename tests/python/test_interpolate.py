"""F.interpolate (issue 21): every mode that ends in one of torch._C._nn's upsample ops (nearest,
nearest-exact, linear, bilinear, bicubic, trilinear) is captured in one graph, by size or by scale
factor (integer, fractional, per dim, recompute_scale_factor), with align_corners, on 3-, 4- and
5-d inputs, channels-last kept, and fused with the ops around it; values and strides are eager's.
Bad arguments raise eager's errors (the call is left to eager)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import check, fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not importable")


def x4(*shape, channels_last=False, dtype=torch.float32):
    t = torch.randn(*shape).to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


UPSAMPLE = nn.Upsample(scale_factor=2, mode="nearest")
CASES_2D = {
    "nearest_x2": lambda x: F.interpolate(x, scale_factor=2),
    "nearest_size": lambda x: F.interpolate(x, size=(5, 13)),
    "nearest_frac": lambda x: F.interpolate(x, scale_factor=1.7) * 2 + 1,
    "nearest_per_dim": lambda x: F.interpolate(x, scale_factor=(0.5, 3.0)),
    "nearest_exact": lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest-exact"),
    "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear").relu(),
    "bilinear_align": lambda x: F.interpolate(x, size=(10, 4), mode="bilinear", align_corners=True),
    "bilinear_recompute": lambda x: F.interpolate(x, scale_factor=1.3, mode="bilinear", recompute_scale_factor=True),
    "bicubic": lambda x: F.interpolate(x, scale_factor=2.5, mode="bicubic"),
    "upsample_module": lambda x: UPSAMPLE(x) + x.sum(),
}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", sorted(CASES_2D))
def test_interpolate_2d(name, channels_last):
    check(CASES_2D[name], x4(2, 3, 6, 7, channels_last=channels_last), rtol=1e-5, atol=1e-5)


def test_interpolate_1d_and_3d():
    x3 = torch.randn(2, 3, 9)
    check(lambda x: F.interpolate(x, scale_factor=2.5), x3)
    check(lambda x: F.interpolate(x, size=4, mode="linear"), x3, rtol=1e-5, atol=1e-5)
    check(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest-exact"), x3)
    x5 = torch.randn(1, 2, 3, 4, 5)
    check(lambda x: F.interpolate(x, scale_factor=2), x5)
    check(lambda x: F.interpolate(x, size=(4, 6, 3), mode="trilinear", align_corners=False), x5, rtol=1e-5, atol=1e-5)


def test_interpolate_bfloat16():
    check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), x4(1, 2, 5, 5, dtype=torch.bfloat16),
          rtol=2e-2, atol=2e-2)


def test_bad_arguments_raise_eagers_errors():
    x = torch.randn(1, 2, 4, 4)
    check(lambda x: F.interpolate(x, scale_factor=0.1), x, graphs=0)      # output size 0
    check(lambda x: F.interpolate(x, size=(2, 2, 2)), x, graphs=0)        # wrong number of sizes
    check(lambda x: F.interpolate(x, mode="bilinear"), x, graphs=0)       # neither size nor scale
