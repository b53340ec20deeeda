"""Whole models, end to end: a user-written transformer block under fastdyn.jit, and a small
GPT-2 from transformers under fastdyn.enable() (real library code: branches, loops, Python calls,
so most frames run eagerly and a few compile). Outputs and gradients must equal eager's.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import assert_same, clone_tree, fastdyn


class Block(nn.Module):
    """A pre-norm transformer block written the way users write them."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.qkv = nn.Parameter(torch.randn(3 * dim, dim) * dim ** -0.5)
        self.proj = nn.Parameter(torch.randn(dim, dim) * dim ** -0.5)
        self.fc1 = nn.Parameter(torch.randn(4 * dim, dim) * dim ** -0.5)
        self.fc2 = nn.Parameter(torch.randn(dim, 4 * dim) * (4 * dim) ** -0.5)

    def forward(self, x):
        b, t, c = x.shape
        h = F.layer_norm(x, (c,), self.ln1.weight, self.ln1.bias)
        q, k, v = F.linear(h, self.qkv).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(y.transpose(1, 2).reshape(b, t, c), self.proj)
        h = F.layer_norm(x, (c,), self.ln2.weight, self.ln2.bias)
        return x + F.linear(F.gelu(F.linear(h, self.fc1)), self.fc2)


def grads(module):
    return [p.grad.clone() for p in module.parameters()]


def test_user_block_under_jit_matches_eager_forward_and_backward():
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 5, 32)
    expected = block(x)
    expected.square().mean().backward()
    eager_grads = grads(block)
    block.zero_grad()

    jitted = fastdyn.jit(block)
    for call in ("compile call", "cached call"):
        out = jitted(x)
        assert_same(out, expected, f"{call}: output")
        out.square().mean().backward()
        assert_same(grads(block), eager_grads, f"{call}: parameter gradients")
        block.zero_grad()
    s = fastdyn.stats()
    assert s["graphs"] == 1 and s["cache_hits"] >= 1, f"the block's forward is straight-line: {s}"


@pytest.fixture(scope="module")
def gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_under_enable_matches_eager(gpt2):
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        expected = gpt2(ids).logits
    fastdyn.enable()
    try:
        with torch.no_grad():
            first = gpt2(ids).logits
            second = gpt2(ids).logits
    finally:
        fastdyn.disable()
    assert_same(first, expected, "first call")
    assert_same(second, expected, "second call")
    s = fastdyn.stats()
    assert s["frames_seen"] > 0, s
    assert s["frames_compiled"] >= 1, f"no frame of GPT-2 was compiled: {s}"


def test_gpt2_backward_under_enable_matches_eager(gpt2):
    ids = torch.randint(0, 100, (2, 8))
    gpt2.zero_grad()
    gpt2(ids, labels=clone_tree(ids)).loss.backward()
    eager_grads = grads(gpt2)
    gpt2.zero_grad()
    fastdyn.enable()
    try:
        loss = gpt2(ids, labels=clone_tree(ids)).loss
        loss.backward()
    finally:
        fastdyn.disable()
    assert_same(grads(gpt2), eager_grads, "parameter gradients")
    gpt2.zero_grad()
