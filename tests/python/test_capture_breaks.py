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

    if training:  # random and in place: runs as written (a break; the inlined forward's, before any op, is not counted), eager's stream
        check(f, torch.randn(8, 8), graphs=2, breaks=1, seed=0)
    else:  # the identity: eager returns the input itself
        check(f, torch.randn(8, 8))


def test_detach_is_a_view_outside_autograd():
    def f(x):
        y = x.detach()
        z = torch.detach(x * 2)
        return y * 3, z + 1, y.requires_grad, z.requires_grad

    check(f, torch.randn(4, 6, requires_grad=True))

    def writes_through(x):
        y = x.detach()
        y.add_(1)  # the input changes, as in eager
        return x * 2

    check(writes_through, torch.randn(4, 6))


@pytest.mark.parametrize("value", [2, 2.7, True, "tensor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_fill_and_zero_in_place(value, dtype):
    def f(x, v):
        y = x * 1
        y.fill_(v)
        z = x * 1
        z.zero_()
        return y, z, y + z

    v = torch.tensor(3.5) if value == "tensor" else value
    check(f, (torch.randn(3, 5) * 4).to(dtype), v)


def test_fill_with_a_tensor_of_more_than_one_element_raises_like_eager():
    def f(x, v):
        y = x * 1
        y.fill_(v)
        return y

    check(f, torch.randn(3, 5), torch.ones(2), graphs=1, breaks=1)


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diag_of_a_matrix_is_its_diagonal_copied(offset):
    def f(x):
        d = torch.diag(x, offset)
        return d * 2, d.is_contiguous(), x.diag(offset).sum()

    check(f, torch.randn(5, 7))
    check(f, torch.randn(5, 7).t())


def test_diag_of_a_vector_runs_eagerly():
    check(lambda x: torch.diag(x + 1) * 2, torch.randn(4), graphs=2, breaks=1)


@pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")
def test_fill_and_zero_compile_to_kernels_with_the_write_back():
    # Functionalized as a copy of a 0-dim tensor (they ran the whole graph on aten before).
    def f(x, buf, acc):
        buf.fill_(0.5)
        acc.zero_()
        acc.add_(x)
        return x * 2 + buf

    check(f, torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 6))
    code = "\n".join(fastdyn.explain(f, torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 6)).code)
    assert code.startswith("backend llvm_cpu"), code


def test_issubclass_of_classes_is_answered_at_trace_time():
    class Base:
        pass

    class Child(Base):
        pass

    def f(x, cls):
        if issubclass(cls, Base):
            return x + 1
        return x - 1

    check(f, torch.randn(3), Child)
    check(f, torch.randn(3), int)


# ---- what torchvision's detection models do around their tensor ops (Faster R-CNN's breaks)

def test_ordered_dict_made_filled_and_returned_like_eager():
    def f(x, feats):
        out = collections.OrderedDict()
        for name, v in feats.items():
            out[name] = v * 2 + x
        out["sum"] = sum(out.values())
        copied = out.copy()
        return out, type(out) is collections.OrderedDict, isinstance(copied, collections.OrderedDict), list(copied)

    feats = collections.OrderedDict([("b", torch.randn(3)), ("a", torch.randn(3))])
    got = check(f, torch.randn(3), feats)
    assert type(got[0]) is collections.OrderedDict


def test_an_ordered_dict_input_is_guarded_by_its_type_and_keys():
    def f(feats):
        return [v + 1 for v in feats.values()], type(feats).__name__

    feats = collections.OrderedDict([("x", torch.randn(2)), ("y", torch.randn(2))])
    check(f, feats)
    g = fastdyn.jit(f)
    assert g(feats)[1] == "OrderedDict"
    assert g(dict(feats))[1] == "dict"  # another type: another entry, not the OrderedDict's
    before = fastdyn.stats()["graphs"]
    feats.move_to_end("x")
    got = g(feats)
    assert torch.equal(got[0][0], feats["y"] + 1)  # the order changed: the keys guard caught it
    assert fastdyn.stats()["graphs"] - before == 1


def test_as_tensor_of_numbers_and_of_tensors():
    def f(x, idx):
        mean = torch.as_tensor([0.485, 0.456, 0.406], dtype=x.dtype, device=x.device)
        same = torch.as_tensor(x)
        as_long = torch.as_tensor(idx, dtype=torch.int64)
        return (x - mean[:, None, None]), same is x, as_long * 2, torch.as_tensor(3.5) + x.sum()

    check(f, torch.randn(3, 4, 4), torch.arange(4, dtype=torch.int32))


def test_tensor_kind_flags_and_the_strided_layout():
    def f(x):
        kind = (x.is_quantized, x.is_sparse, x.is_mkldnn, x.is_nested, x.is_meta, x.is_cpu, x.layout)
        z = torch.zeros(2, 3, dtype=x.dtype, layout=torch.strided)
        return x * 2 if not x.is_quantized else x, kind, z + x.sum()

    check(f, torch.randn(2, 3))


def test_a_layout_other_than_strided_is_left_to_eager():
    def f(x):
        return torch.zeros(2, 2, layout=torch.sparse_coo) , x + 1

    got = fastdyn.jit(f)(torch.randn(2))
    assert got[0].layout == torch.sparse_coo


def test_deterministic_algorithms_flag_is_read_and_guarded():
    def f(x):
        if torch.are_deterministic_algorithms_enabled():
            return x + 1
        return x - 1

    g = fastdyn.jit(f)
    x = torch.randn(3)
    assert torch.equal(g(x), x - 1)
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.equal(g(x), x + 1)  # the guard fails: traced again with the flag on
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(g(x), x - 1)
    assert "deterministic_algorithms" in str(fastdyn.explain(f, x))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_and_indices(largest):
    def f(x, k):
        v, i = torch.topk(x, k, dim=1, largest=largest)
        last = x.topk(2, largest=largest)
        return v * 2, i, last.values, last.indices, type(last).__name__

    check(f, torch.randn(4, 9), 3)
    check(f, torch.randn(4, 9), 0)


def test_topk_of_too_large_k_raises_like_eager():
    def f(x):
        return torch.topk(x, 5)

    check(f, torch.randn(3), graphs=0)


def test_a_negative_index_into_a_tuple_attribute():
    class Transform(nn.Module):
        def __init__(self):
            super().__init__()
            self.min_size = (320, 256)

        def forward(self, x):
            return x * self.min_size[-1] + self.min_size[-2]

    m = Transform()

    def run(x):
        return m(x)

    check(run, torch.randn(3))
    g = fastdyn.jit(run)
    m.min_size = (1, 2)  # the tuple is guarded: a new value is traced again
    x = torch.randn(3)
    assert torch.equal(g(x), x * 2 + 1)


def test_an_object_with_a_python_call_method_is_inlined_and_guarded():
    class LevelMapper:
        def __init__(self, k):
            self.k = k

        def __call__(self, x, scale=1.0):
            return x * self.k * scale

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.mapper = LevelMapper(3)

        def forward(self, x):
            return self.mapper(x, scale=2.0) + 1

    m = Head()

    def run(x):
        return m(x)

    check(run, torch.randn(4))
    g, x = fastdyn.jit(run), torch.randn(4)
    m.mapper.k = 5
    assert torch.equal(g(x), x * 5 * 2.0 + 1)
    LevelMapper.__call__ = lambda self, x, scale=1.0: x - self.k
    assert torch.equal(g(x), x - 5 + 1)


def test_a_module_stores_a_plain_value_in_its_forward():
    class AnchorCache(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell_anchors = [torch.zeros(2)]

        def forward(self, x):
            self.cell_anchors = [a + x for a in self.cell_anchors]  # nn.Module.__setattr__
            self.count = len(self.cell_anchors)
            return self.cell_anchors[0] * 2

    def fresh():
        torch.manual_seed(0)
        return AnchorCache()

    eager, compiled = fresh(), fresh()
    g = fastdyn.jit(compiled.forward)
    x = torch.ones(2)
    before = fastdyn.stats()
    for _ in range(3):
        assert torch.equal(g(x), eager(x))
        assert type(compiled.cell_anchors) is list and torch.equal(compiled.cell_anchors[0], eager.cell_anchors[0])
        assert compiled.count == eager.count
    assert fastdyn.stats()["graph_breaks"] == before["graph_breaks"]
    for m in (compiled, eager):  # now a buffer's name: the guard misses, and the store raises as eager's
        del m.count
        m.register_buffer("count", torch.tensor(0))
    with pytest.raises(TypeError) as want:
        eager(x)
    with pytest.raises(TypeError) as got:
        g(x)
    assert str(got.value) == str(want.value)


def test_an_lru_cache_over_a_function_marked_constant_is_folded():
    # transformers marks its install and version probes so (torch._dynamo.assume_constant_result's
    # marker) under functools.lru_cache: called once for real, its answer part of the trace.
    import functools

    ran = []

    def marked(fn):
        fn._dynamo_marked_constant = True
        return fn

    @functools.lru_cache
    @marked
    def torch_at_least(major):
        ran.append(major)
        return int(torch.__version__.split(".")[0]) >= major

    @functools.lru_cache
    def unmarked(v):
        return v * 2

    def f(x):
        return x + 1 if torch_at_least(2) else x - 1

    def g(x):
        return x * unmarked(3)

    check(f, torch.ones(2))
    assert ran == [2]  # eager's call filled the cache; the trace's was a hit
    check(g, torch.ones(2), graphs=1, breaks=0)  # an unmarked cache stays a call as written (a break before any op)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_views_of_its_inputs(indexing):
    # torch.meshgrid reaches torch._VF.meshgrid (a module forwarding names): views, as eager's.
    def f(a, b, c):
        x, y = torch.meshgrid(a, b, indexing=indexing)
        p, q, r = torch.meshgrid(a, b, c, indexing=indexing)
        (s,) = torch.meshgrid(a, indexing=indexing)
        return x, y, x * 2 + y, p + q * r, s, torch.meshgrid(torch.tensor(5.0), b, indexing=indexing)

    check(f, torch.arange(3.0), torch.arange(4.0) * 10, torch.arange(2.0) * 100)


def test_meshgrid_without_indexing_warns_as_eager():
    def f(a, b):
        return torch.meshgrid(a, b)

    a, b = torch.arange(3.0), torch.arange(2.0)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = fastdyn.jit(f)(a, b), f(a, b)
        report = str(fastdyn.explain(f, a, b))
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert "indexing=None warns in eager" in report, report  # its C++ warning is eager's own


def test_a_property_of_the_metaclass_is_inlined_and_guarded():
    # torch.distributed's GroupMember.WORLD, which transformers' generate() reads.
    class Meta(type):
        @property
        def WORLD(cls):
            return cls.base * 2

    class Group(metaclass=Meta):
        base = 3

    def f(x):
        return x * Group.WORLD

    check(f, torch.ones(2))
    g, x = fastdyn.jit(f), torch.ones(2)
    Group.base = 5
    assert torch.equal(g(x), x * 10)
    Meta.WORLD = property(lambda cls: 7)
    assert torch.equal(g(x), x * 7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_torch_functions_that_are_metadata_methods(dtype):
    def f(x):
        y = x * 2 if torch.is_floating_point(x) else x + 1
        return y, torch.is_complex(x), torch.numel(x)

    check(f, torch.ones(2, 3, dtype=dtype))


def test_setattr_with_a_constant_name_is_a_store():
    class Config:
        def __init__(self):
            self.scale = 1.0

    cfg = Config()

    def f(x, updates):
        for k, v in updates.items():
            setattr(cfg, k, v)  # transformers' config.update does this
        obj = Config()
        setattr(obj, "scale", 3.0)
        return x * cfg.scale * obj.scale, getattr(cfg, "bias", None)

    check(f, torch.ones(2), {"scale": 2.0, "bias": 0.5})
    assert cfg.scale == 2.0 and cfg.bias == 0.5
