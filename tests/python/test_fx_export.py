"""fastdyn's graphs exported as torch.fx GraphModules (explain(...).graph_modules(),
python/fastdyn/fx_export.py): ATen overloads as the graph names them, keyword-only arguments by
name, multi-output ops through getitem, meta["val"] and each input's source."""
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="needs fastdyn")


def ops_of(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_graph_runs_as_an_fx_module_with_eagers_results_and_strides():
    def f(x, y):
        a = F.gelu(x @ y, approximate="tanh")      # a keyword-only string argument
        v, i = a.max(-1)                           # two outputs
        z = torch.cat([a, a * 2], 1).sum(1, keepdim=True)  # a tensor list
        return v.to(torch.float16), i, z.view(-1), a[:, 1:3]  # a dtype argument, a view with an offset

    x, y = torch.randn(4, 8), torch.randn(8, 6)
    report = fastdyn.explain(f, x, y)
    (gm,) = report.graph_modules()
    assert isinstance(gm, torch.fx.GraphModule)
    targets = ops_of(gm)
    assert torch.ops.aten.gelu.default in targets and torch.ops.aten.max.dim in targets, gm.code
    assert operator.getitem in targets, gm.code
    assert all(isinstance(t, torch._ops.OpOverload) for t in targets if t is not operator.getitem), gm.code
    got, want = gm(x, y), f(x, y)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride() and g.dtype == w.dtype
    # meta["val"]: every value's dtype, sizes and strides, as meta tensors.
    out = [n for n in gm.graph.nodes if n.op == "output"][0]
    for node, w in zip(out.args[0], want):
        v = node.meta["val"]
        assert v.device.type == "meta" and v.shape == w.shape and v.stride() == w.stride() and v.dtype == w.dtype


def test_a_modules_parameters_are_placeholders_named_by_their_source():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
    x = torch.randn(2, 8)
    (gm,) = fastdyn.explain(m, x).graph_modules()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources = [n.meta["source"] for n in placeholders]
    assert sources == ["L['input']", "L['self']._modules['0']._parameters['weight']",
                       "L['self']._modules['0']._parameters['bias']"], sources
    with torch.no_grad():
        (got,) = gm(x, m[0].weight, m[0].bias)
        torch.testing.assert_close(got, m(x))


def test_a_graph_break_exports_one_module_per_graph():
    def f(x):
        y = x.sin()
        print("break", end="")
        return y.cos()

    report = fastdyn.explain(f, torch.randn(3))
    gms = report.graph_modules()
    assert len(gms) == report.graph_count == 2
    assert ops_of(gms[0]) == [torch.ops.aten.sin.default] and ops_of(gms[1]) == [torch.ops.aten.cos.default]
