"""Straight-line themes again, briefly: arithmetic and broadcasting, views and indexing,
reductions, factories and shape arithmetic. Each function is one graph without breaks."""
import math

import torch
import torch.nn.functional as F

from .cases import Cases, ints, pos, r

CASES = Cases()
SCALE = 0.25


# --------------------------------------------------------------------------- arithmetic

@CASES(lambda: (r(4, 8), r(8)))
def broadcast_add_row(x, b):
    return x + b


@CASES(lambda: (r(4, 1), r(1, 8)))
def broadcast_outer_product(a, b):
    return a * b


@CASES(lambda: (r(2, 1, 8), r(4, 1)))
def broadcast_three_ranks(a, b):
    return a - b


@CASES(lambda: (r(4, 8),))
def scalar_arithmetic_both_sides(x):
    return (2 - x) * 3 + x / 4 - 1 / (x.abs() + 1)


@CASES(lambda: (r(4, 8),))
def global_python_constant(x):
    return x * SCALE + math.pi


@CASES(lambda: (ints(4, 8, low=-9, high=9), ints(4, 8, low=1, high=5)))
def integer_floordiv_remainder(a, b):
    return a // b, a % b, a * 3 - b


@CASES(lambda: (ints(4, 8), r(4, 8)))
def int_float_promotion(a, x):
    return a + x, a * 0.5, a / 2


@CASES(lambda: (pos(4, 8),))
def pointwise_math(x):
    return torch.exp(-x) + torch.log(x) + x.sqrt() - torch.rsqrt(x) + x.sin().cos()


@CASES(lambda: (r(4, 8),))
def activations_functional(x):
    return F.relu(x), F.gelu(x), torch.sigmoid(x), torch.tanh(x), F.silu(x), F.softplus(x)


@CASES(lambda: (r(4, 8), r(4, 8)))
def where_and_clamp(x, y):
    return torch.where(x > y, x, y), x.clamp(-0.5, 0.5), torch.maximum(x, y)


@CASES(lambda: (r(4, 8), r(8, 3)))
def matmul_and_linear(x, w):
    return x @ w, F.linear(x, w.t())


@CASES(lambda: (r(4, 8),))
def dtype_conversions(x):
    return x.to(torch.float64), x.half().float(), (x > 0).int(), x.long()


@CASES(lambda: (r(4, 8),))
def narrowing_cast_round_trip_rounds(x):
    # The round trip through a narrower float type must round, exactly as eager does.
    return x.half().float(), x.to(torch.bfloat16).to(torch.float32) * 3 + 1


@CASES(lambda: (r(4, 8), r(4, 8)))
def inplace_on_local_temporary(x, y):
    z = x.clone()
    z.mul_(2).add_(y)
    z += 1
    return z


# --------------------------------------------------------------------------- views and indexing

@CASES(lambda: (r(4, 8),))
def view_reshape_flatten(x):
    return x.view(2, 16), x.reshape(-1, 4), x.flatten(), x.view(32)


@CASES(lambda: (r(4, 8),))
def view_aliases_input(x):
    return x.view(8, 4)


@CASES(lambda: (r(2, 4, 8),))
def permute_transpose_contiguous(x):
    return x.permute(2, 0, 1), x.transpose(1, 2).contiguous(), x.mT


@CASES(lambda: (r(4, 1, 8),))
def squeeze_unsqueeze_expand(x):
    return x.squeeze(1), x.unsqueeze(0), x.expand(4, 3, 8)


@CASES(lambda: (r(4, 8),))
def basic_slicing(x):
    return x[1:3], x[:, ::2], x[..., -1], x[None, 2], x[-1]


@CASES(lambda: (r(4, 8), torch.tensor([2, 0, 3])))
def advanced_index_gather(x, idx):
    return x[idx], x[:, idx], torch.gather(x, 1, idx.view(1, 3).expand(4, 3))


# Dynamo traces this as one graph (its symbolic shapes); fastdyn has no data-dependent shapes,
# so the mask indexing breaks: graph (x > 0), break, the indexing runs in the continuation.
@CASES(lambda: (r(4, 8),), graphs=1, breaks=1)
def boolean_mask_select(x):
    return x[x > 0]


@CASES(lambda: (r(4, 8),))
def split_chunk_unbind(x):
    a, b = x.chunk(2, dim=1)
    c, d, e = x.split([1, 1, 2])
    return a + b, c, d, e, x.unbind(0)[2]


@CASES(lambda: (r(4, 8), r(4, 8)))
def cat_stack(x, y):
    return torch.cat([x, y]), torch.stack((x, y), dim=1), torch.cat([x, y], dim=-1)


@CASES(lambda: (r(4, 8),))
def shape_arithmetic(x):
    n, d = x.shape
    return x.view(n * 2, d // 2), x.reshape(x.size(0), -1, 2), x.new_zeros(n, d + 1)


@CASES(lambda: (r(2, 4, 8),))
def shape_attributes_as_numbers(x):
    return x * x.shape[-1] + x.dim() + x.numel() + len(x)


# --------------------------------------------------------------------------- reductions

@CASES(lambda: (r(4, 8),))
def sum_mean_over_dims(x):
    return x.sum(), x.sum(1), x.mean(0, keepdim=True), x.sum((0, 1))


@CASES(lambda: (r(4, 8),))
def max_min_argmax(x):
    values, indices = x.max(dim=1)
    return values, indices, x.amin(0), x.argmax(), x.max()


@CASES(lambda: (r(4, 8),))
def var_std_norm(x):
    return x.var(1), x.std(0, unbiased=False), x.norm(dim=1), torch.linalg.vector_norm(x)


@CASES(lambda: (r(4, 8),))
def softmax_logsumexp(x):
    return x.softmax(-1), F.log_softmax(x, dim=0), torch.logsumexp(x, 1)


@CASES(lambda: (r(4, 8),))
def cumsum_prod(x):
    return x.cumsum(1), x.prod(0), torch.cumprod(x, dim=0)


@CASES(lambda: (r(4, 8),))
def any_all_count(x):
    return (x > 0).any(), (x > -5).all(1), (x > 0).sum()


@CASES(lambda: (r(4, 8),))
def layer_norm_by_hand(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5)


# --------------------------------------------------------------------------- factories

@CASES(lambda: (r(4, 8),))
def factories_like(x):
    return torch.zeros_like(x), torch.ones_like(x) * 2, torch.full_like(x, 3.0), torch.empty_like(x).shape


@CASES(lambda: (r(4, 8),))
def factories_from_shape(x):
    return x + torch.arange(8), torch.ones(x.shape[0], 1), torch.zeros(2, 3, dtype=torch.int64)


@CASES(lambda: (r(4, 8),))
def dtype_and_device_attributes(x):
    return torch.zeros(3, dtype=x.dtype, device=x.device), x.to(x.dtype), x.new_ones(2)


@CASES(lambda: (r(4, 8),))
def tensor_from_python_constants(x):
    return x + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])


@CASES(lambda: (r(4, 8),))
def tensor_from_nested_python_constants(x):
    # dtypes as torch.tensor infers them (int64, bool, the default float), explicit ones, sizes
    # read from the input, and a fresh tensor per call when it is returned as it is.
    return (torch.tensor([[1, 2], [3, 4]]) * x.shape[0], torch.tensor([True, False]),
            torch.tensor([[1.5], [2]], dtype=torch.float64), torch.tensor((x.shape[1], 3)), torch.tensor([0.5, 1]) + x[0, :2])


@CASES(lambda: (r(4, 8),), graphs=0)
def tensor_from_ragged_python_lists_raises(x):
    return x + torch.tensor([[1, 2], [3]])


@CASES(lambda: (r(4, 8),))
def triu_tril_mask(x):
    mask = torch.ones(4, 8).tril().bool()
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


@CASES(lambda: (r(8, 8),))
def eye_and_diagonal(x):
    return x + torch.eye(8), x.diagonal(), torch.diag(x)


@CASES(lambda: (r(4, 8),), seed=0)
def randn_like_same_stream(x):
    return x + torch.randn_like(x)


@CASES(lambda: (r(4, 8),), graphs=0)  # no op: no graph
def returns_input_unchanged_and_python_values(x):
    return x, x.shape, x.dtype, 3


# --------------------------------------------------------------------------- what model code does with shapes

@CASES(lambda: (r(2, 4, 8),))
def math_on_shape_constants(x):
    return x / math.sqrt(x.shape[-1]) + math.log(2.0) * math.floor(2.7) + math.pi


@CASES(lambda: (r(2, 4, 8),))
def view_with_unpacked_shape_prefix(x):
    heads = x.view(*x.shape[:-1], 2, -1).transpose(1, 2)
    return heads.reshape(x.size(0), -1, x.size()[-1])


@CASES(lambda: (r(2, 4, 8),))
def finfo_min_for_masking(x):
    mask = torch.ones(4, 8).tril() == 0
    return x.masked_fill(mask, torch.finfo(x.dtype).min).softmax(-1)


@CASES(lambda: (r(4, 8), r(4, 8).double()))
def to_dtype_device_and_other(x, y):
    return x.to(torch.float64), x.to("cpu"), x.to(y), x.to(device=x.device, dtype=torch.float16)


@CASES(lambda: (r(4, 8),))
def device_and_dtype_tests_as_values(x):
    on_cpu = x.device.type == "cpu"
    return x * on_cpu + x.is_floating_point() + (x.dtype == torch.float32)


@CASES(lambda: (r(2, 2, 4, 8), r(2, 2, 4, 8), r(2, 2, 4, 8)), atol=1e-5, rtol=1e-5)
def scaled_dot_product_attention_causal(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


@CASES(lambda: (r(2, 4, 8), r(8, 3)))
def einsum_forms(x, w):
    return torch.einsum("bsd,de->bse", x, w), torch.einsum("bsd->bd", x)


@CASES(lambda: (r(2, 3, 4), r(5, 2, 3, 4)))
def einsum_one_operand_permutes_and_sums(x, y):
    """Eager's layouts: a permuted view where nothing is summed, a contiguous sum otherwise."""
    return (torch.einsum("bsd->db", x), torch.einsum("bsd->dsb", x), torch.einsum("bsd", x),
            torch.einsum("bsd->", x), torch.einsum("...sd->...ds", y), torch.einsum("a...d->da...", y),
            torch.einsum("...d->d", y))


@CASES(lambda: (r(3, 5), r(2, 4).long()))
def diag_embed_of_floats_and_ints(x, i):
    return torch.diag_embed(x) * 2, i.diag_embed()


@CASES(lambda: (torch.tensor([[1.0, float("nan"), float("inf")]]),))
def diag_embed_keeps_nan_and_inf_on_the_diagonal(x):
    return torch.diag_embed(x)


CASES.define_tests(globals())
