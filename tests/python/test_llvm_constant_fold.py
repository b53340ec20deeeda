"""Constant folding on the llvm_cpu backend (codegen/passes/constant_fold.h): values computed from no input
data (a causal mask from arange, zeros_like) are evaluated once at compile time, and calls still
behave as eager's: fresh outputs, nothing shared between calls."""
import pytest
import torch

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")


def masked_scores(x):
    n = x.shape[-1]
    pos = torch.arange(n)
    causal = pos.unsqueeze(0) > pos.unsqueeze(1)
    bias = torch.zeros_like(x).masked_fill(causal, float("-inf"))
    return torch.softmax(x + bias, dim=-1)


def test_a_mask_from_factories_is_folded_and_results_match_eager():
    x = torch.randn(8, 8)
    report = fastdyn.explain(masked_scores, x)
    code = report.code[0]
    assert code.startswith("backend llvm_cpu"), code
    assert "arange" not in code and "zeros_like" not in code, code  # computed at compile time
    f = fastdyn.jit(masked_scores)
    for _ in range(3):
        x = torch.randn(8, 8)
        torch.testing.assert_close(f(x), masked_scores(x))


def test_outputs_are_fresh_each_call_when_inputs_fold():
    def plus_ones(x):
        return x + torch.ones(4), torch.arange(4) * 2
    f = fastdyn.jit(plus_ones)
    a, r = f(torch.zeros(4))
    a.add_(100)
    r.add_(100)  # the caller owns what it got: the next call must not see this
    a2, r2 = f(torch.zeros(4))
    assert torch.equal(a2, torch.ones(4)) and torch.equal(r2, torch.arange(4) * 2)
    assert r2.data_ptr() != r.data_ptr()


def test_a_returned_view_of_a_factory_is_fresh_each_call():
    f = fastdyn.jit(lambda x: (x + 1, torch.arange(4.0).view(2, 2)))
    _, v = f(torch.zeros(3))
    v.add_(100)
    _, v2 = f(torch.zeros(3))
    assert torch.equal(v2, torch.arange(4.0).view(2, 2))
