"""A sweep of ops x input layouts x dtypes: fastdyn's C++ metadata rules against real ATen.

The straight-line table covers the ops; this sweep covers what their rules must get right on
every input: broadcasting, type promotion (0-dim tensors included, which promote differently from
dimensioned ones), and eager-compatible output strides for transposed, permuted, sliced and
expanded inputs. Each case is a one-line straight-line function, checked like the table's
(fdcheck.check: values, dtype, shape, strides, aliasing, one graph).
"""
import pytest
import torch
import torch.nn.functional as F

from fdcheck import check

NAMESPACE = {"torch": torch, "F": F}


def make_fn(name, params, expr):
    """A module-level function `def name(params): return expr` (no closure: straight-line)."""
    src = f"def {name}({params}):\n    return {expr}\n"
    exec(compile(src, f"<sweep {name}>", "exec"), NAMESPACE)
    return NAMESPACE[name]


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def ints(*shape, dtype=torch.int64):
    return torch.randint(-5, 6, shape).to(dtype)


BINARY_OPS = {
    "add": "x + y",
    "sub_alpha": "torch.sub(x, y, alpha=2)",
    "mul": "x * y",
    "div": "x / y",
    "maximum": "torch.maximum(x, y)",
    "gt": "x > y",
    "where": "torch.where(x > y, x, y)",
    "add_then_relu": "torch.relu(x + y)",
}

BINARY_LAYOUTS = {
    "contiguous": lambda: (r(3, 4), r(3, 4)),
    "both_transposed": lambda: (r(4, 3).t(), r(4, 3).t()),
    "one_transposed": lambda: (r(4, 3).t(), r(3, 4)),
    "row_broadcast": lambda: (r(3, 4), r(4)),
    "outer_broadcast": lambda: (r(3, 1), r(1, 4)),
    "permuted_3d": lambda: (r(2, 3, 4).permute(2, 0, 1), r(4, 2, 3)),
    "permuted_broadcast": lambda: (r(2, 3, 4).permute(2, 0, 1), r(3)),
    "expanded": lambda: (r(1, 4).expand(3, 4), r(3, 4)),
    "strided_slice": lambda: (r(3, 8)[:, ::2], r(3, 4)),
    "zero_dim_right": lambda: (r(3, 4), torch.tensor(2.5)),
    "zero_dim_both": lambda: (torch.tensor(1.5), torch.tensor(-0.5)),
}

PROMOTIONS = {
    "int64_with_float32": lambda: (ints(3, 4), r(3, 4)),
    "int64_with_0dim_float64": lambda: (ints(3, 4), torch.tensor(1.5, dtype=torch.float64)),
    "float32_with_0dim_float64": lambda: (r(3, 4), torch.tensor(1.5, dtype=torch.float64)),
    "bfloat16_with_0dim_float32": lambda: (r(3, 4, dtype=torch.bfloat16), torch.tensor(0.25)),
    "bfloat16_with_float16": lambda: (r(3, 4, dtype=torch.bfloat16), r(3, 4, dtype=torch.float16)),
    "int32_with_0dim_int64": lambda: (ints(3, 4, dtype=torch.int32), torch.tensor(3)),
    "bool_with_int64": lambda: (torch.rand(3, 4) > 0.5, ints(3, 4)),
    "float64_with_bool": lambda: (r(3, 4, dtype=torch.float64), torch.rand(4) > 0.5),
}

UNARY_OPS = {
    "neg": "-x",
    "exp": "torch.exp(x)",
    "relu": "torch.relu(x)",
    "sigmoid": "x.sigmoid()",
    "to_float64": "x.to(torch.float64)",
    "clone": "x.clone()",
    "contiguous": "x.contiguous()",
    "scale": "x * 2",
    "sum_last": "x.sum(-1)",
    "sum_first_keepdim": "x.sum(0, keepdim=True)",
    "mean_all": "x.mean()",
    "amax_last": "x.amax(-1)",
    "softmax_last": "x.softmax(-1)",
    "cumsum_first": "x.cumsum(0)",
    "unsqueeze": "x.unsqueeze(1)",
    "reshape_flat": "x.reshape(-1)",
    "transpose_ends": "x.transpose(0, -1)",
    "slice_last": "x[..., 1:]",
}

UNARY_LAYOUTS = {
    "contiguous": lambda dt: r(3, 4, dtype=dt),
    "transposed": lambda dt: r(4, 3, dtype=dt).t(),
    "permuted_3d": lambda dt: r(2, 3, 4, dtype=dt).permute(1, 2, 0),
    "strided_slice": lambda dt: r(3, 8, dtype=dt)[:, 1::2],
    "expanded": lambda dt: r(1, 4, dtype=dt).expand(3, 4),
}


# Eager rejects these (subtraction with a bool tensor): fastdyn must raise the same error, and
# capture none. And where eager returns its input itself, no graph is left to compile.
NO_GRAPH = {("sub_alpha", "bool_with_int64"), ("sub_alpha", "float64_with_bool"),
            ("contiguous", "contiguous")}


def binary_cases():
    cases = []
    for op, expr in BINARY_OPS.items():
        for layout, make in {**BINARY_LAYOUTS, **PROMOTIONS}.items():
            name = f"bin_{op}_{layout}"
            graphs = 0 if (op, layout) in NO_GRAPH else 1
            cases.append(pytest.param(make_fn(name, "x, y", expr), make, graphs, id=name))
    return cases


def unary_cases():
    cases = []
    for op, expr in UNARY_OPS.items():
        for layout, make in UNARY_LAYOUTS.items():
            for dtype in (torch.float32, torch.bfloat16):
                dname = str(dtype).replace("torch.", "")
                name = f"un_{op}_{layout}_{dname}"
                graphs = 0 if (op, layout) in NO_GRAPH else 1
                cases.append(pytest.param(make_fn(name, "x", expr),
                                          (lambda make=make, dtype=dtype: (make(dtype),)), graphs,
                                          id=name))
    return cases


@pytest.mark.parametrize("fn, make_args, graphs", binary_cases())
def test_binary_rule_matches_aten(fn, make_args, graphs):
    check(fn, *make_args(), graphs=graphs)


@pytest.mark.parametrize("fn, make_args, graphs", unary_cases())
def test_unary_rule_matches_aten(fn, make_args, graphs):
    check(fn, *make_args(), graphs=graphs)


# --------------------------------------------------------------------------- attention
# ATen's CPU scaled_dot_product_attention returns its fused kernel's layout (dense in the query's
# dimension order) or its math path's (contiguous), by the gates of sdp::use_flash_attention_cpp.
# Each case ends in what HF attention does, transpose(1, 2).contiguous().view(...), and returns
# the output's strides too.

def _qkv(heads_kv=4, e_v=16, dtype=torch.float32, dim=4, q_grad=False):
    """q, k, v of 2 batches, 4 query heads, 8 positions, head size 16, the way HF makes them:
    (B, L, H*E) projections viewed as (B, L, H, E) and transposed to (B, H, L, E)."""
    def proj(h, e):
        t = r(2, 8, h * e, dtype=dtype).view(2, 8, h, e).transpose(1, 2)
        return t if dim == 4 else t.reshape(8, 8, e)
    q, k, v = proj(4, 16), proj(heads_kv, 16), proj(heads_kv, e_v)
    return q.detach().requires_grad_(q_grad), k, v


SDPA_CASES = {
    # name: (expr over q, k, v, m, inputs, seed)
    "no_mask": ("F.scaled_dot_product_attention(q, k, v)", lambda: (*_qkv(), None), None),
    "no_mask_bf16": ("F.scaled_dot_product_attention(q, k, v)", lambda: (*_qkv(dtype=torch.bfloat16), None), None),
    "dropout": ("F.scaled_dot_product_attention(q, k, v, dropout_p=0.25)", lambda: (*_qkv(), None), 0),
    "dropout_grad": ("F.scaled_dot_product_attention(q, k, v, dropout_p=0.25)",
                     lambda: (*_qkv(q_grad=True), None), 0),
    "mask_2d": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)", lambda: (*_qkv(), r(8, 8)), None),
    "mask_4d_b1ls": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)", lambda: (*_qkv(), r(2, 1, 8, 8)), None),
    "mask_4d_1h1s": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)", lambda: (*_qkv(), r(1, 4, 1, 8)), None),
    "mask_3d": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)", lambda: (*_qkv(), r(1, 8, 8)), None),
    "mask_bool": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)",
                  lambda: (*_qkv(), torch.rand(2, 1, 8, 8) > 0.2), None),
    "mask_transposed": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)", lambda: (*_qkv(), r(8, 8).t()), None),
    "mask_requires_grad": ("F.scaled_dot_product_attention(q, k, v, attn_mask=m)",
                           lambda: (*_qkv(), r(2, 1, 8, 8).requires_grad_()), None),
    "gqa": ("F.scaled_dot_product_attention(q, k, v, enable_gqa=True)", lambda: (*_qkv(heads_kv=2), None), None),
    "value_head_size_differs": ("F.scaled_dot_product_attention(q, k, v)", lambda: (*_qkv(e_v=8), None), None),
}


def sdpa_fn(name, expr):
    """`o = expr`, then HF's ending; returns it and o.stride(), which the trace answers from the
    rule (a constant) and eager from the real tensor."""
    src = (f"def sdpa_{name}(q, k, v, m):\n    o = {expr}\n"
           "    return o.transpose(1, 2).contiguous().view(2, 8, -1), o.stride()\n")
    exec(compile(src, f"<sweep sdpa_{name}>", "exec"), NAMESPACE)
    return NAMESPACE[f"sdpa_{name}"]


@pytest.mark.parametrize("name", list(SDPA_CASES))
def test_sdpa_output_layout_matches_aten(name):
    expr, make, seed = SDPA_CASES[name]
    check(sdpa_fn(name, expr), *make(), seed=seed)


def test_sdpa_output_layout_of_three_dim_inputs_matches_aten():
    fn = make_fn("sdpa_3d", "q, k, v", "F.scaled_dot_product_attention(q, k, v).transpose(0, 1)")
    check(fn, *_qkv(dim=4 - 1))


def test_sdpa_output_layout_with_flash_disabled_matches_aten():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    fn = make_fn("sdpa_math_only", "q, k, v", "F.scaled_dot_product_attention(q, k, v).transpose(1, 2)")
    with sdpa_kernel(SDPBackend.MATH):
        check(fn, *_qkv())
