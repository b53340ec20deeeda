"""Varying shapes on real models (issue 19's targets): GPT-2 over 50 sequence lengths, and
generate() with the default KV cache, under eager, torch.compile and fastdyn.

    python3 bench/dynamic_models.py [--lengths 50] [--tokens 64] [--skip-inductor]

gpt2 sweep   GPT-2 (2 layers, hidden 128, random weights) called once at each of 50 random
             sequence lengths in 1..256 (fixed seed), each mode in its own fresh process (cold
             compile caches): the total wall time of the 50 calls, compiles included, the number
             of graphs compiled (fastdyn: stats()["graphs"], in how many compiled entries (frames and
             continuations, some without a graph), "+N sizes" its dynamic entries
             specialised kernels to; inductor: Dynamo's unique graphs), and whether every output
             equals eager's.
             Then, in the fastdyn process, steady state at every length, interleaved in that one
             process (the VM's memory bandwidth differs between processes): eager, the dynamic
             entry, and a static entry per length (jit(dynamic=False)); geomean speed-up over
             eager of each, and their ratio (the target: dynamic >= 95% of static).
generate     greedy generate(max_new_tokens=64) of a tiny Llama and of GPT-2 (random weights, the
             default DynamicCache), each mode in a fresh process: tokens equal to eager's, graphs
             compiled, end-to-end time of the first generate() (compiles included) and of a second
             one. Modes: eager; inductor = torch.compile(model.forward) (what `torch.compile(model)`
             compiles); fastdyn = fastdyn.jit(model.forward); fastdyn-enable = fastdyn.enable()
             around the whole generate() (every Python frame of the loop a candidate).
             --cache static: the same with cache_implementation="static" (a preallocated cache
             written in place by index_copy_ at each step: the shapes stay fixed).
"""
import argparse
import json
import statistics
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, math, random, statistics, sys, time
import torch
torch.set_num_threads(2)
import transformers
transformers.logging.set_verbosity_error()
task, mode, n_lengths, n_tokens, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
out = {}

def gpt2(positions):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=positions,
                                  bos_token_id=999, eos_token_id=999)
    return transformers.GPT2LMHeadModel(cfg).eval()

def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=256, vocab_size=1000, max_position_embeddings=256,
                                   bos_token_id=999, eos_token_id=999)
    return transformers.LlamaForCausalLM(cfg).eval()

def compiles():
    if mode.startswith("fastdyn"):
        s = fastdyn.stats()
        return f"{s['graphs']} in {s['frames_compiled']} entries (+{s['sizes_compiled']} sizes)"
    if mode == "inductor":
        from torch._dynamo.utils import counters
        return str(counters["stats"]["unique_graphs"])
    return "0"

if mode.startswith("fastdyn"):
    import fastdyn

if task == "gpt2":
    model = gpt2(256)
    rng = random.Random(0)
    lengths = [rng.randint(1, 256) for _ in range(n_lengths)]
    inputs = {n: torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n)) for n in set(lengths)}
    with torch.no_grad():
        ref = {n: model(inputs[n], use_cache=False).logits for n in set(lengths)}
        run = model
        if mode == "inductor":
            run = torch.compile(model)
        elif mode == "fastdyn":
            run = fastdyn.jit(model)
        equal = True
        t = time.perf_counter()
        for n in lengths:
            y = run(inputs[n], use_cache=False).logits
            equal = equal and torch.allclose(y, ref[n], atol=1e-4, rtol=1e-4)
        out["sweep_s"] = time.perf_counter() - t
        out["compiles"] = compiles()
        out["equal"] = equal
        if mode == "fastdyn":
            fastdyn.synchronize()
            fastdyn.set_recompile_limit(10 * n_lengths)
            static = fastdyn.jit(model, dynamic=False)
            fastdyn.set_background_compile(False)
            distinct = sorted(set(lengths))
            for n in distinct:
                static(inputs[n], use_cache=False)
                run(inputs[n], use_cache=False)
            fastdyn.synchronize()
            ratios = {"dynamic": [], "static": []}
            for n in distinct:
                samples = {"eager": [], "dynamic": [], "static": []}
                fns = {"eager": model, "dynamic": run, "static": static}
                for _ in range(7):  # interleaved rounds
                    for k, f in fns.items():
                        t = time.perf_counter()
                        for _ in range(5):
                            f(inputs[n], use_cache=False)
                        samples[k].append((time.perf_counter() - t) / 5)
                med = {k: statistics.median(v) for k, v in samples.items()}
                ratios["dynamic"].append(med["eager"] / med["dynamic"])
                ratios["static"].append(med["eager"] / med["static"])
            geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items()}
            out["geomean_dynamic"] = geo["dynamic"]
            out["geomean_static"] = geo["static"]
else:
    model = llama() if task == "llama" else gpt2(256)
    ids = torch.randint(0, 1000, (1, 8), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=n_tokens, do_sample=False, pad_token_id=999, eos_token_id=None)
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        if mode == "inductor":
            model.forward = torch.compile(model.forward)
        elif mode == "fastdyn":
            model.forward = fastdyn.jit(model.forward)
        elif mode == "fastdyn-enable":
            fastdyn.enable()
        t = time.perf_counter()
        first = model.generate(ids, **kw)
        out["first_s"] = time.perf_counter() - t
        t = time.perf_counter()
        second = model.generate(ids, **kw)
        out["second_s"] = time.perf_counter() - t
        third = []
        for _ in range(5):  # steady state: the median of five more
            t = time.perf_counter()
            model.generate(ids, **kw)
            third.append(time.perf_counter() - t)
        out["steady_s"] = statistics.median(third)
        if mode == "fastdyn-enable":
            fastdyn.disable()
        out["equal"] = bool(torch.equal(first, ref) and torch.equal(second, ref))
        out["compiles"] = compiles()
print("RESULT " + json.dumps(out))
"""


def run_child(task, mode, lengths, tokens, cache="dynamic"):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["FASTDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="fd_dyn_models_")
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_dyn_models_")
    p = subprocess.run([sys.executable, "-c", CHILD, task, mode, str(lengths), str(tokens), cache],
                       capture_output=True, text=True, env=env, timeout=3000)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{task}/{mode}: " + "\n".join(p.stderr.strip().splitlines()[-5:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--skip-inductor", action="store_true")
    ap.add_argument("--only", default="gpt2,llama,gpt2-generate")
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic", help="generate()'s KV cache")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per generate mode (medians shown, then each run)")
    args = ap.parse_args()
    tasks = args.only.split(",")
    modes = ["eager"] + ([] if args.skip_inductor else ["inductor"]) + ["fastdyn"]
    if "gpt2" in tasks:
        print(f"GPT-2 2-layer, {args.lengths} random lengths in 1..256 (fresh process per mode)\n")
        print("| mode | 50 calls, compiles included (s) | graphs compiled | equal to eager | geomean over eager: dynamic / static kernels |")
        print("|---|---:|---|---|---|")
        for m in modes:
            r = run_child("gpt2", m, args.lengths, args.tokens)
            geo = (f"{r['geomean_dynamic']:.2f}x / {r['geomean_static']:.2f}x ({r['geomean_dynamic'] / r['geomean_static']:.0%})"
                   if "geomean_dynamic" in r else "-")
            print(f"| {m} | {r['sweep_s']:.2f} | {r['compiles']} | {r['equal']} | {geo} |", flush=True)
    gen_tasks = [t for t in tasks if t in ("llama", "gpt2-generate")]
    if gen_tasks:
        print(f"\ngenerate(max_new_tokens={args.tokens}), greedy, {args.cache} cache ({args.repeat} fresh processes "
              "per mode, taken in turn: the median, then each run)\n")
        print("| model | mode | first generate, compiles included (ms) | second generate (ms) | steady generate (ms) | graphs compiled | tokens equal |")
        print("|---|---|---:|---:|---:|---|---|")
        gen_modes = modes + ["fastdyn-enable"]
        for t in gen_tasks:
            runs = {m: [] for m in gen_modes}
            for _ in range(args.repeat):  # the modes in turn: a slow spell of the VM hits each alike
                for m in gen_modes:
                    runs[m].append(run_child("llama" if t == "llama" else "gpt2-generate", m, args.lengths, args.tokens, args.cache))
            for m in gen_modes:
                rs = runs[m]
                cell = lambda k: f"{statistics.median(r[k] for r in rs) * 1e3:.1f} ({' '.join(f'{r[k] * 1e3:.1f}' for r in rs)})"
                print(f"| {t} | {m} | {cell('first_s')} | {cell('second_s')} | {cell('steady_s')} | {rs[0]['compiles']} | "
                      f"{all(r['equal'] for r in rs)} |", flush=True)


if __name__ == "__main__":
    main()
