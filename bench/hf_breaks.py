"""Prints, per Hugging Face model of tests/python/hf_zoo.py, the graphs and graph breaks fastdyn.explain
finds (with the most frequent break reasons): python3 bench/hf_breaks.py [gpt2 bert llama t5 vit
llama_cache mistral_cache opt_cache] (the *_cache models make a DynamicCache per call)."""
import sys, collections, torch, fastdyn
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "tests", "python"))
import hf_zoo
names = sys.argv[1:] or ["gpt2", "bert", "llama", "t5", "vit", *hf_zoo.CACHED_MODELS]
for n in names:
    model, inputs = hf_zoo.CACHED_MODELS[n]() if n in hf_zoo.CACHED_MODELS else getattr(hf_zoo, n)()
    with torch.no_grad():
        r = fastdyn.explain(model, **inputs)
    print(f"== {n}: {r.graph_count} graphs, {r.graph_break_count} breaks")
    c = collections.Counter((b.reason[:150], b.filename.split('/')[-1], b.lineno) for b in r.break_reasons)
    for (reason, f, l), k in c.most_common(12):
        print(f"  {k}x {f}:{l}: {reason}")
