"""Benchmark cases: one small factory per case, listed in CASES.

A factory builds the callable and its inputs from a fixed seed, so that every process (eager,
inductor, fastdyn) sees bit-identical inputs and weights. It returns (fn_or_module, args).
Nothing here imports fastdyn or torch.compile; bench/run.py decides how each case is run.

Case fields:
  factory         () -> (callable, tuple of args)
  whole_process   fastdyn mode uses fastdyn.enable() for the process instead of fastdyn.jit(fn)
                  (the way users run real models, and the only way to measure the hook's cost
                  on code that fastdyn must leave alone)
  outputs         result -> list of values to compare with eager (default: flatten tensors)
  bytes_moved     bytes an ideal (fused) implementation reads plus writes per call; run.py reports
                  achieved bandwidth (GB/s) for these cases, against copy_16m's as the machine's
"""
import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F

SEED = 0


def _seeded(seed: int = SEED) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g) * scale


# --- the functions under test (module level, so that inductor and fastdyn see plain code) -------

def overhead16(x, y):
    return (x + y) * 2 - 1


def pointwise_1m(x, y):
    a = (x * 2 + 1).sin() * x
    b = a.relu() - y * 0.5
    return (b.tanh() + x).exp() * 0.25


def gelu_bias(x, b):
    return F.gelu(x + b)


def layernorm_softmax(x, w, b):
    h = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    return torch.softmax(h, dim=-1)


def mlp(x, w1, b1, w2, b2):
    h = F.gelu(F.linear(x, w1, b1))
    return F.linear(h, w2, b2)


def attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)


def pointwise_16m(x, y):
    return (x * 2 + y).relu() * 0.5


def copy_16m(out, x):
    return out.copy_(x)


def reductions(x):
    return x.sum(0), x.mean(), (x * x).sum(-1)


from pure_python_work import pure_python  # noqa: E402  (shared with bench/pure_python_script.py)


# --- factories ---------------------------------------------------------------------------------

def make_overhead16():
    g = _seeded()
    return overhead16, (_randn(g, 16), _randn(g, 16))


def make_pointwise_1m():
    g = _seeded()
    n = 1 << 20
    return pointwise_1m, (_randn(g, n), _randn(g, n))


N16M = 1 << 24


def make_pointwise_16m():
    g = _seeded()
    return pointwise_16m, (_randn(g, N16M), _randn(g, N16M))


def make_copy_16m():
    g = _seeded()
    return copy_16m, (torch.empty(N16M), _randn(g, N16M))


def make_reductions():
    g = _seeded()
    # NB: offset from zero: two valid summation orders of 2048 standard normals differ by ~1e-5
    # near a zero sum, which is run.py's atol; with the offset the comparison is relative.
    return reductions, (_randn(g, 2048, 2048) + 1,)


def make_gelu_bias():
    g = _seeded()
    return gelu_bias, (_randn(g, 1024, 1024), _randn(g, 1024))


def make_layernorm_softmax():
    g = _seeded()
    return layernorm_softmax, (_randn(g, 256, 1024), 1 + _randn(g, 1024, scale=0.1),
                               _randn(g, 1024, scale=0.1))


def make_mlp():
    g = _seeded()
    d, hidden = 1024, 4096
    return mlp, (_randn(g, 64, d),
                 _randn(g, hidden, d, scale=d ** -0.5), _randn(g, hidden, scale=0.02),
                 _randn(g, d, hidden, scale=hidden ** -0.5), _randn(g, d, scale=0.02))


def make_attention():
    g = _seeded()
    return attention, tuple(_randn(g, 1, 8, 128, 64) for _ in range(3))


def make_gpt2_2layer():
    from transformers import GPT2Config, GPT2LMHeadModel  # imported here: it is slow
    _seeded()
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128,
                        bos_token_id=999, eos_token_id=999,  # inside the small vocabulary
                        use_cache=False)  # NB: a KV cache object in the output is not a tensor
    model = GPT2LMHeadModel(config).eval()  # random weights from the seed: no download
    input_ids = torch.randint(0, config.vocab_size, (1, 64),
                              generator=torch.Generator().manual_seed(SEED))
    return model, (input_ids,)


def make_llama_kvcache():
    from transformers import LlamaConfig, LlamaForCausalLM  # imported here: it is slow
    _seeded()
    config = LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=256, vocab_size=1000,
                         max_position_embeddings=128, bos_token_id=999, eos_token_id=999)
    # use_cache left as it is (True): each forward makes a DynamicCache and returns it filled
    model = LlamaForCausalLM(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, 64),
                              generator=torch.Generator().manual_seed(SEED))
    return model, (input_ids,)


def make_pure_python():
    return pure_python, (300,)


def _logits(out) -> List[Any]:
    return [out.logits]


def _logits_and_cache(out) -> List[Any]:
    return [out.logits] + [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]


@dataclass(frozen=True)
class Case:
    name: str
    factory: Callable[[], Tuple[Any, tuple]]
    description: str
    whole_process: bool = False
    outputs: Optional[Callable[[Any], List[Any]]] = None
    bytes_moved: Optional[int] = None


CASES = {c.name: c for c in [
    Case("overhead16", make_overhead16, "(x + y) * 2 - 1 on 16 floats: per-call overhead"),
    Case("pointwise_1m", make_pointwise_1m, "chain of 10 pointwise ops on 1M floats"),
    Case("pointwise_16m", make_pointwise_16m,
         "(x * 2 + y).relu() * 0.5 on 16M floats: memory bandwidth of a fused chain",
         bytes_moved=3 * 4 * N16M),  # reads x and y, writes the result
    Case("copy_16m", make_copy_16m, "out.copy_(x), 16M floats, out preallocated: the machine's "
         "bandwidth reference", bytes_moved=2 * 4 * N16M),
    Case("reductions", make_reductions, "x.sum(0), x.mean(), (x * x).sum(-1), x [2048, 2048]: "
         "over rows, over everything, over columns"),
    Case("gelu_bias", make_gelu_bias, "gelu(x + b), x [1024, 1024]"),
    Case("layernorm_softmax", make_layernorm_softmax, "softmax(layer_norm(x)), x [256, 1024]"),
    Case("mlp", make_mlp, "linear 1024->4096, gelu, linear 4096->1024, batch 64"),
    Case("attention", make_attention, "softmax(q @ k^T / sqrt(d)) @ v, [1, 8, 128, 64]"),
    Case("gpt2_2layer", make_gpt2_2layer,
         "transformers GPT2LMHeadModel, 2 layers, n_embd 128, input_ids [1, 64]; logits",
         whole_process=True, outputs=_logits),
    Case("llama_kvcache", make_llama_kvcache,
         "transformers LlamaForCausalLM, 2 layers, hidden 128, GQA, input_ids [1, 64], on its "
         "default path: a new KV cache per call; logits and the filled cache",
         whole_process=True, outputs=_logits_and_cache),
    Case("pure_python", make_pure_python,
         "tensor-free loops, dicts and calls (~600 frames per call)", whole_process=True),
]}


def flatten_outputs(value) -> List[Any]:
    """Tensors and plain Python values of a result, in a stable order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [x for k in value for x in flatten_outputs(value[k])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten_outputs(v)]
    return [value]
