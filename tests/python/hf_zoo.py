"""The five Hugging Face models of issue 3, built tiny and offline (shared by
tests/python/test_hf_models.py, bench/models_explain.py and bench/models_ops.py).

Each builder returns (model, inputs): a model built from a small config in code (2 layers,
hidden 64, 4 heads, a small vocabulary, random weights from a fixed seed, eval mode; nothing is
downloaded) and the keyword arguments of one forward call. `attn` picks the attention
implementation: None leaves transformers' default (what a user gets; "sdpa" for all five in
transformers 5.x), or "eager" / "sdpa" explicitly. `mask` adds an attention_mask with padding to
the text models (their general masking path); without it they take the no-mask shortcuts.
"""
import torch

HIDDEN, LAYERS, HEADS, VOCAB, BATCH, SEQ = 64, 2, 4, 128, 2, 8


def _kw(attn):
    return {} if attn is None else {"attn_implementation": attn}


def _text_inputs(mask, **extra):
    """input_ids, and with mask=True an attention_mask whose second row ends in padding (so the
    mask really masks: models take their general masking path, not the all-ones shortcut)."""
    inputs = {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ))}
    if mask:
        m = torch.ones(BATCH, SEQ, dtype=torch.long)
        m[1, SEQ - 3:] = 0
        inputs["attention_mask"] = m
    inputs.update(extra)
    return inputs


def gpt2(attn=None, mask=True):
    import transformers
    config = transformers.GPT2Config(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=VOCAB,
                                     n_positions=32, bos_token_id=0, eos_token_id=0, **_kw(attn))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, _text_inputs(mask, use_cache=False)


def bert(attn=None, mask=True):
    import transformers
    config = transformers.BertConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                                     intermediate_size=4 * HIDDEN, vocab_size=VOCAB, max_position_embeddings=32,
                                     **_kw(attn))
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    return model, _text_inputs(mask)


def llama(attn=None, mask=True):
    import transformers
    config = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                                      num_key_value_heads=2, intermediate_size=2 * HIDDEN, vocab_size=VOCAB,
                                      max_position_embeddings=32, **_kw(attn))
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model, _text_inputs(mask, use_cache=False)


def t5(attn=None, mask=True):
    import transformers
    config = transformers.T5Config(num_layers=LAYERS, num_decoder_layers=LAYERS, d_model=HIDDEN, d_kv=HIDDEN // HEADS,
                                   d_ff=2 * HIDDEN, num_heads=HEADS, vocab_size=VOCAB, relative_attention_num_buckets=8,
                                   relative_attention_max_distance=16, decoder_start_token_id=0, pad_token_id=0,
                                   **_kw(attn))
    torch.manual_seed(0)
    model = transformers.T5Model(config).eval()
    inputs = _text_inputs(mask)
    inputs.update(decoder_input_ids=torch.randint(0, VOCAB, (BATCH, SEQ // 2)), use_cache=False)
    return model, inputs


def vit(attn=None, mask=True):  # noqa: ARG001 - images have no mask
    import transformers
    config = transformers.ViTConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                                    intermediate_size=2 * HIDDEN, image_size=32, patch_size=8, num_channels=3,
                                    **_kw(attn))
    torch.manual_seed(0)
    model = transformers.ViTModel(config).eval()
    pixels = torch.randn(BATCH, 3, 32, 32)
    return model, {"pixel_values": pixels}


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5, "vit": vit}


def _causal_lm(config_name, model_name, **config):
    """A causal LM on transformers' default path: use_cache left as it is (True), so each forward
    call makes a DynamicCache (per-layer objects, lazily initialised) and returns it filled."""
    import transformers
    config = getattr(transformers, config_name)(num_hidden_layers=LAYERS, hidden_size=HIDDEN,
                                                num_attention_heads=HEADS, vocab_size=VOCAB,
                                                max_position_embeddings=32, **config)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    return model, _text_inputs(True)


# Models whose forward makes a KV cache per call (the default), kept apart from MODELS, whose
# tests demand one graph per model.
CACHED_MODELS = {
    "llama_cache": lambda: _causal_lm("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2,
                                      intermediate_size=2 * HIDDEN),
    # Sliding-window cache layers (their lazy_initialization once broke fastdyn's continuation).
    "mistral_cache": lambda: _causal_lm("MistralConfig", "MistralForCausalLM", num_key_value_heads=2,
                                        intermediate_size=2 * HIDDEN, sliding_window=4),
    "opt_cache": lambda: _causal_lm("OPTConfig", "OPTForCausalLM", ffn_dim=2 * HIDDEN,
                                    word_embed_proj_dim=HIDDEN),
}


def build(name, attn=None, mask=True):
    return MODELS[name](attn, mask)


def output_tensors(out):
    """The tensors of a ModelOutput (or tuple), in a stable order, for comparisons."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    result = []
    for item in out:
        if item is None:
            continue
        result.extend(output_tensors(item))
    return result


H, L, NH, V, B, S = HIDDEN, LAYERS, HEADS, VOCAB, BATCH, SEQ


def _wide_text():
    ids = torch.randint(0, V, (B, S))
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, S - 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _wide_pixels():
    return {"pixel_values": torch.randn(B, 3, 32, 32)}


COMMON = dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V, intermediate_size=2 * H)
SEQ2SEQ = dict(encoder_layers=L, decoder_layers=L, d_model=H, encoder_attention_heads=NH, decoder_attention_heads=NH,
               vocab_size=V, encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H)

# Eighteen more architectures (tests/python/test_hf_zoo_wide.py, bench/model_suite.py), built as
# tiny as MODELS. name: (config class, model class, config kwargs, inputs)
WIDE = {
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, num_key_value_heads=2, sliding_window=4), _wide_text),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, num_key_value_heads=2), _wide_text),
    "phi": ("PhiConfig", "PhiForCausalLM", COMMON, _wide_text),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(COMMON, num_key_value_heads=2, head_dim=16), _wide_text),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", COMMON, _wide_text),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V, ffn_dim=2 * H,
                 word_embed_proj_dim=H), _wide_text),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=NH, vocab_size=V), _wide_text),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(n_layer=L, hidden_size=H, n_head=NH, vocab_size=V), _wide_text),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(n_layer=L, n_embd=H, n_head=NH, vocab_size=V, rotary_dim=8), _wide_text),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   dict(n_layers=L, dim=H, n_heads=NH, vocab_size=V, hidden_dim=2 * H), _wide_text),
    "roberta": ("RobertaConfig", "RobertaModel", COMMON, _wide_text),
    "albert": ("AlbertConfig", "AlbertModel", dict(COMMON, embedding_size=32), _wide_text),
    "electra": ("ElectraConfig", "ElectraModel", dict(COMMON, embedding_size=32), _wide_text),
    "bart": ("BartConfig", "BartModel", SEQ2SEQ, _wide_text),
    "clip_text": ("CLIPTextConfig", "CLIPTextModel", COMMON, _wide_text),
    "resnet": ("ResNetConfig", "ResNetModel", dict(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16), _wide_pixels),
    "convnext": ("ConvNextConfig", "ConvNextModel", dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2), _wide_pixels),
    "swin": ("SwinConfig", "SwinModel",
             dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4), _wide_pixels),
}


def build_wide(name):
    """(model, inputs) of a WIDE architecture: random weights from a fixed seed, eval mode."""
    import transformers
    config_cls, model_cls, kwargs, make_inputs = WIDE[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**kwargs)
    return getattr(transformers, model_cls)(config).eval(), make_inputs()
