"""Eighteen more Hugging Face architectures under fastdyn.enable(), against eager.

Each is built tiny from a config in code (2 layers, hidden 64, random weights from a fixed seed,
eval mode, nothing downloaded) and called three times on transformers' default path: causal LMs
make and fill a KV cache per call, encoders take a padded attention mask, vision models take
pixels. Every call must return eager's outputs. This sweep first found a continuation that read
its graph's outputs without calling it (Mistral's sliding-window cache) and per-call cache
objects recompiling every call (OPT at 0.81x eager); the bounds asserted are what must hold
whatever symbolic/ can capture: outputs equal, at least one graph compiled.
"""
import pytest
import torch

from fdcheck import assert_same, fastdyn

transformers = pytest.importorskip("transformers")

H, L, NH, V, B, S = 64, 2, 4, 128, 2, 8
TOL = dict(rtol=1e-4, atol=1e-5)


def text():
    ids = torch.randint(0, V, (B, S))
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, S - 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def pixels():
    return {"pixel_values": torch.randn(B, 3, 32, 32)}


COMMON = dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V, intermediate_size=2 * H)
SEQ2SEQ = dict(encoder_layers=L, decoder_layers=L, d_model=H, encoder_attention_heads=NH, decoder_attention_heads=NH,
               vocab_size=V, encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H)

# name: (config class, model class, config kwargs, inputs)
ZOO = {
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, num_key_value_heads=2, sliding_window=4), text),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, num_key_value_heads=2), text),
    "phi": ("PhiConfig", "PhiForCausalLM", COMMON, text),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(COMMON, num_key_value_heads=2, head_dim=16), text),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", COMMON, text),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V, ffn_dim=2 * H,
                 word_embed_proj_dim=H), text),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V), text),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(n_layer=L, hidden_size=H, n_head=NH, vocab_size=V), text),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(n_layer=L, n_embd=H, n_head=NH, vocab_size=V, rotary_dim=8), text),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   dict(n_layers=L, dim=H, n_heads=NH, vocab_size=V, hidden_dim=2 * H), text),
    "roberta": ("RobertaConfig", "RobertaModel", COMMON, text),
    "albert": ("AlbertConfig", "AlbertModel", dict(COMMON, embedding_size=32), text),
    "electra": ("ElectraConfig", "ElectraModel", dict(COMMON, embedding_size=32), text),
    "bart": ("BartConfig", "BartModel", SEQ2SEQ, text),
    "clip_text": ("CLIPTextConfig", "CLIPTextModel", COMMON, text),
    "resnet": ("ResNetConfig", "ResNetModel", dict(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16), pixels),
    "convnext": ("ConvNextConfig", "ConvNextModel", dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2), pixels),
    "swin": ("SwinConfig", "SwinModel",
             dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4), pixels),
}


def outputs(out):
    """The tensors of a ModelOutput, caches included, in a stable order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if hasattr(out, "layers"):  # a transformers Cache: its keys and values, layer by layer
        return [t for layer in out.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if isinstance(t, torch.Tensor)]
    if isinstance(out, (tuple, list)):
        return [t for item in out if item is not None for t in outputs(item)]
    return []


@pytest.mark.parametrize("name", list(ZOO))
def test_model_under_enable_matches_eager(name):
    config_cls, model_cls, kwargs, make_inputs = ZOO[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config).eval()
    inputs = make_inputs()
    with torch.no_grad():
        want = outputs(model(**inputs))
        assert want, f"{name}: no tensor in the output"
        fastdyn.enable()
        try:
            got = [outputs(model(**inputs)) for _ in range(3)]
        finally:
            fastdyn.disable()
    for call, out in enumerate(got):
        assert len(out) == len(want), f"{name} call {call}: {len(out)} tensors, eager {len(want)}"
        for i, (g, w) in enumerate(zip(out, want)):
            assert_same(g, w, f"{name} call {call}: output {i}", **TOL)
    assert fastdyn.stats()["graphs"] >= 1, f"{name}: nothing compiled: {fastdyn.stats()}"
