#!/usr/bin/env python3
"""Batch-1 greedy decoding of a tiny Llama on a GPU (issue 20's decode case), in tokens/s.

    python3 bench/gpu_decode.py [--tokens 64] [--modes eager,fastdyn,fastdyn_ro,inductor,inductor_ro]

The model (random weights, 4 layers, hidden 512, grouped-query attention) runs transformers'
generate() with do_sample=False, once with its default cache (DynamicCache: the KV length grows by
one per token, so no two decode steps of a generate have the same shapes) and once with
cache_implementation="static" (a fixed-size KV buffer: the same shapes at every step, what CUDA
graphs need). Modes: eager; fastdyn.jit(model.forward) (default mode, and mode="reduce-overhead":
CUDA graphs, one per KV length met up to its bound); torch.compile(model.forward) (default, and
mode="reduce-overhead"). generate() gets disable_compile=True: with a static cache on a GPU,
transformers otherwise wraps the forward in torch.compile itself (so "eager" was inductor, and
the other modes ran under it). Each mode runs in a fresh process: a first generate (compiles included),
then --generates more (3), timed with a synchronize at the end; tokens/s is the new tokens over the
median of those (each one's time is in the JSON line). --profile prints a cProfile of one more
generate per mode; --timeline, after each generate of a fastdyn mode, how far its compiles are. Every mode's tokens are compared with eager's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, statistics, sys, time, tempfile
os.environ.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fastdyn-decode-"))
import torch, transformers
mode, tokens, cache, generates, profile, timeline = (sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                                     sys.argv[5] == "1", sys.argv[6] == "1")
cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                               num_key_value_heads=4, vocab_size=8192, max_position_embeddings=1024)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).cuda().eval()
ids = torch.randint(0, 8192, (1, 16), device="cuda")
if mode.startswith("fastdyn"):
    import fastdyn
    model.forward = fastdyn.jit(model.forward, mode="reduce-overhead" if mode.endswith("_ro") else None)
elif mode.startswith("inductor"):
    model.forward = torch.compile(model.forward, mode="reduce-overhead" if mode.endswith("_ro") else None)

def generate():
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0,
                             disable_compile=True, **({} if cache == "dynamic" else {"cache_implementation": cache}))
    torch.cuda.synchronize()
    return out

t0 = time.perf_counter(); out = generate(); first = time.perf_counter() - t0
def progress(label, seconds):  # --timeline: where the compiles stand after each generate (stderr)
    if not (timeline and mode.startswith("fastdyn")):
        return
    s, c = fastdyn.stats(), fastdyn._C.cuda_info()
    print(f"{mode} generate {label}: {seconds:.3f} s, sizes planned {s['sizes_compiled']}, background done "
          f"{s['background_compiles']} pending {s['background_pending']} ({s['background_compile_seconds']:.2f} s), "
          f"NVRTC kernels {c['kernels_compiled']} ({c['compile_ms']:.0f} ms), memory hits {c['memory_hits']}",
          file=sys.stderr, flush=True)

progress("first", first)
times = []
for i in range(generates):
    t0 = time.perf_counter(); out = generate(); times.append(time.perf_counter() - t0)
    progress(str(i + 2), times[-1])
res = {"mode": mode, "first_s": first, "generate_s": statistics.median(times), "times": times,
       "tokens": out[0, ids.shape[1]:].tolist()}
if profile:  # where one more generate's host time goes (stderr)
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable(); generate(); pr.disable()
    print(f"## {mode}", file=sys.stderr)
    pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(25)
if mode.startswith("fastdyn"):
    s = fastdyn.stats()
    res["graphs"] = s["graphs"]; res["cuda_graph_captures"] = s.get("cuda_graph_captures", 0)
print("RESULT " + json.dumps(res))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--modes", default="eager,fastdyn,fastdyn_ro,inductor,inductor_ro")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--generates", type=int, default=3, help="timed generates after the first (the median is reported)")
    ap.add_argument("--profile", action="store_true", help="cProfile one more generate per mode (to stderr)")
    ap.add_argument("--timeline", action="store_true",
                    help="fastdyn modes: after each generate, the sizes planned, background tasks and NVRTC compiles (stderr)")
    ap.add_argument("--cache", default="dynamic,static",
                    help="KV caches: dynamic (transformers' default, grows by a token per step) and static "
                         "(a fixed-size buffer: the shapes CUDA graphs need)")
    opts = ap.parse_args()
    for cache in opts.cache.split(","):
        print(f"\n## {cache} cache")
        table(opts, cache)


def table(opts, cache):
    rows = []
    for mode in opts.modes.split(","):
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, mode, str(opts.tokens), cache, str(opts.generates),
                                str(int(opts.profile)), str(int(opts.timeline))], capture_output=True, text=True,
                               timeout=opts.timeout)
            if opts.profile or opts.timeline:
                sys.stderr.write(r.stderr)
            line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                rows.append({"mode": mode, "error": (r.stderr or r.stdout).strip().splitlines()[-1:]})
                continue
            rows.append(json.loads(line[len("RESULT "):]))
        except subprocess.TimeoutExpired:
            rows.append({"mode": mode, "error": f"timed out after {opts.timeout} s"})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "tokens"}), flush=True)
    eager = next((r for r in rows if r["mode"] == "eager" and "error" not in r), None)
    print(f"\n| mode | tokens/s | x eager | first generate (s) | tokens equal eager | notes |\n|---|---:|---:|---:|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['mode']} | - | - | - | - | {r['error']} |")
            continue
        tps = opts.tokens / r["generate_s"]
        x = eager["generate_s"] / r["generate_s"] if eager else float("nan")
        same = "-" if not eager else "yes" if r["tokens"] == eager["tokens"] else "NO"
        notes = f"graphs {r['graphs']}, CUDA graph captures {r['cuda_graph_captures']}" if "graphs" in r else ""
        print(f"| {r['mode']} | {tps:.0f} | {x:.2f} | {r['first_s']:.2f} | {same} | {notes} |")


if __name__ == "__main__":
    sys.exit(main())
