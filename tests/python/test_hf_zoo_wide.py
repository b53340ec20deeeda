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
from hf_zoo import WIDE as ZOO, build_wide

transformers = pytest.importorskip("transformers")
TOL = dict(rtol=1e-4, atol=1e-5)


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
    model, inputs = build_wide(name)
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
