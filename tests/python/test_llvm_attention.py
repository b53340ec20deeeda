"""Small scaled_dot_product_attention calls on llvm_cpu (codegen/passes/attention_decompose.h): written out
as matmul -> fused scale/mask/softmax -> matmul, with eager's results and output layout; large
ones, causal ones and others stay ATen's fused kernel."""
import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")


def attend(q, k, v, mask=None, scale=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def heads_last(q, k, v, mask=None, scale=None):  # the output transposed back, as models do
    return attend(q, k, v, mask, scale).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def qkv(b=2, h=4, lq=16, lk=16, e=8):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, n, e, generator=g) for n in (lq, lk, lk)]


def causal_bool(lq, lk):
    return torch.ones(lq, lk, dtype=torch.bool).tril()


CASES = {
    "no_mask": lambda: (*qkv(), None, None),
    "bool_mask": lambda: (*qkv(), causal_bool(16, 16), None),
    "float_mask": lambda: (*qkv(lq=8, lk=16), torch.randn(1, 1, 8, 16), 0.3),
    "scale": lambda: (*qkv(e=32), None, 0.05),
    "from_fused_qkv": lambda: tuple(t.transpose(1, 2) for t in torch.randn(2, 16, 3, 4, 8).unbind(2)) + (None, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fn", [attend, heads_last])
def test_small_attention_is_written_out_and_matches_eager(name, fn):
    args = CASES[name]()
    code = fastdyn.explain(fn, *args).code[0]
    assert "scaled_dot_product_attention" not in code and "matmul" in code, code
    got, want = fastdyn.jit(fn)(*args), fn(*args)
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_large_and_causal_attention_stay_on_the_fused_kernel():
    big = qkv(b=1, h=8, lq=512, lk=512, e=16)  # 2M scores
    assert "scaled_dot_product_attention" in fastdyn.explain(attend, *big).code[0]
    causal = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    small = qkv()
    assert "scaled_dot_product_attention" in fastdyn.explain(causal, *small).code[0]
    torch.testing.assert_close(fastdyn.jit(causal)(*small), causal(*small))


def test_a_fully_masked_row_gives_zeros_as_eager():
    q, k, v = qkv(lq=4, lk=4)
    bool_mask = torch.ones(4, 4, dtype=torch.bool)
    bool_mask[1] = False
    float_mask = torch.zeros(4, 4)
    float_mask[2] = float("-inf")
    for mask in (bool_mask, float_mask):
        want = attend(q, k, v, mask)
        assert torch.equal(want[:, :, 1 if mask.dtype == torch.bool else 2], torch.zeros(2, 4, 8))
        torch.testing.assert_close(fastdyn.jit(attend)(q, k, v, mask), want)


def test_a_one_dimensional_mask_raises_as_in_eager():
    # ATen rejects a 1-d attn_mask; the decomposition must not accept it by broadcasting.
    def f(q, m):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m)
    q, m = torch.ones(1, 2, 4, 8), torch.zeros(4)
    with pytest.raises(IndexError):
        f(q, m)
    with pytest.raises(IndexError):
        fastdyn.jit(f)(q, m)


@pytest.mark.parametrize("embed,heads,need_weights,captured", [(64, 4, False, True), (48, 4, False, False), (64, 4, True, False)])
def test_multihead_attention_fast_path_is_captured_where_aten_takes_sdpa(embed, heads, need_weights, captured):
    # nn.MultiheadAttention in eval under no_grad calls torch._native_multi_head_attention
    # (torchvision's ViT). Where ATen's own kernel takes its SDPA route (head size % 8 == 0, no
    # weights wanted) it is captured as that route's ops; elsewhere the call runs as written.
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(embed, heads, batch_first=True).eval()

    def f(x):
        y, w = m(x, x, x, need_weights=need_weights)
        return y.relu(), w

    x = torch.randn(2, 10, embed)
    with torch.no_grad():
        want = f(x)
        report = fastdyn.explain(f, x)
        got = [fastdyn.jit(f)(x) for _ in range(3)]
    ran_as_written = any("_native_multi_head_attention" in line for line in str(report).splitlines() if "break" in line)
    assert ran_as_written != captured, str(report)
    assert ("scaled_dot_product_attention" in str(report)) == captured, str(report)
    for y, w in got:
        torch.testing.assert_close(y, want[0], rtol=1e-5, atol=1e-6)
        assert (w is None) == (want[1] is None)
        if w is not None:
            torch.testing.assert_close(w, want[1])
