"""Capture of what vision and HF code does around the tensor ops (issue 21): each of these was a
graph break and is now part of the graph, with eager's results and errors. torch.nn.functional's
probes and pooling are in test_pooling.py and the conformance suite."""
import collections

import pytest
import torch
import torch.nn as nn

from fdcheck import check, fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not importable")


def test_sequential_of_named_modules():
    torch.manual_seed(0)
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(8, 8)), ("act", nn.GELU()), ("out", nn.Linear(8, 4))]))

    def forward(x):
        return seq(x), seq[0](x), seq[-1](x[:, :8] * 2)

    with torch.no_grad():
        check(forward, torch.randn(3, 8))


def test_log_api_usage_once():
    def f(x):
        torch._C._log_api_usage_once("fastdyn.test")
        return x + 1

    check(f, torch.randn(4))


def test_abs_and_max_of_python_ints():
    def f(x):
        n = x.shape[-1]
        return x * abs(1 - n) + max(n, 3) - abs(-2.5)

    check(f, torch.randn(2, 5))


def test_starred_unpacking():
    def f(x):
        b, *rest = x.shape
        *lead, last = x.shape
        first, *mid, end = (x, x * 2, x * 3, x * 4)
        return x * b + rest[0] + last + len(lead), first + end + mid[1]

    check(f, torch.randn(2, 3, 4))


def test_starred_unpacking_of_too_few_values_raises_as_eager():
    def f(x):
        a, b, *rest = x.shape
        return x * a

    check(f, torch.randn(4), graphs=0)


@pytest.mark.parametrize("training", [False, True])
def test_inplace_dropout(training):
    drop = nn.Dropout(0.3, inplace=True).train(training)

    def f(x):
        return drop(x * 2) + 1

    if training:  # random and in place: runs as written (a break, also in the inlined forward), eager's stream
        check(f, torch.randn(8, 8), graphs=2, breaks=2, seed=0)
    else:  # the identity: eager returns the input itself
        check(f, torch.randn(8, 8))
