"""The model suite (issue 21): timm and torchvision vision models, one detection model, and
Hugging Face encoders and causal LMs (forward and generate()), each under fastdyn.enable()
against eager and torch.compile, in one fresh process per model.

    bash scripts/suite_env.sh                      # once: the venv timm/torchvision need
    .suite/venv/bin/python bench/model_suite.py [--only a,b] [--group timm|tv|hf] [--json out.json]

Every model is built with random weights (a fixed seed), in eval mode, batch 1 at its default
input size (the tiny configs of tests/python/hf_zoo.py for transformers), under torch.no_grad.
Its process, with fresh fastdyn and inductor caches and 2 threads:
  1. eager: one warm-up call, whose output is the reference;
  2. fastdyn: the first call under fastdyn.enable() (cold: trace, compile, ATen while kernels
     compile), timed; graphs and breaks are that call's fastdyn.stats() deltas; then
     fastdyn.synchronize() and a call on the kernels, compared with eager;
  3. torch._dynamo.explain: Dynamo's graphs and breaks for the same call (for generate(), the
     graphs torch.compile makes of the forward it calls, which is what inductor's column compiles;
     fastdyn's row then shows the graphs fastdyn.jit makes of that forward beside those of the
     whole generate() under enable(), and the summary compares the forward's);
  4. torch.compile (inductor, default mode): the first call, timed, and compared with eager;
  5. steady state: eager, fastdyn and inductor interleaved in rounds (median per call of each).
"equal" is max|got - eager| <= 1e-3 * max(1, max|eager|) over every output tensor (generate():
the tokens, exactly); the largest relative error is printed for both compilers.
Prints one markdown row per model and a summary (geomeans over all and over the CNNs).
"""
import argparse
import collections
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import re
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# scripts/suite_env.sh builds fastdyn against the venv's torch here (the editable install's _C is
# built against the project's torch).
SUITE_PKG = os.path.join(ROOT, ".suite", "pkg")

# name -> (group, kind, builder args). Group "timm": timm.create_model(name); "tv":
# torchvision.models.get_model(name); "hf": tests/python/hf_zoo.py (MODELS, CACHED_MODELS, WIDE);
# "hf-gen": generate() of a hf_zoo causal LM. Kind: "cnn", "vit" (attention or MLP-mixer
# vision models), "det", "text".
TIMM_CNN = ["resnet18", "resnet50", "resnet26d", "resnext26ts", "seresnext26d_32x4d", "ecaresnet26t",
            "skresnet18", "res2net50_14w_8s", "efficientnet_b0", "tf_efficientnet_lite0", "efficientnetv2_rw_t",
            "mobilenetv2_100", "mobilenetv3_large_100", "mnasnet_100", "spnasnet_100", "ghostnet_100",
            "rexnet_100", "lcnet_050", "tinynet_a", "mixnet_s", "regnetx_004", "regnety_004", "densenet121",
            "dla34", "hrnet_w18_small", "repvgg_a0", "gernet_s", "selecsls42b", "convnext_atto",
            "convnextv2_atto", "edgenext_xx_small", "nf_resnet26", "cspresnet50", "dpn48b", "xception41"]
TIMM_VIT = ["vit_tiny_patch16_224", "deit_tiny_patch16_224", "swin_tiny_patch4_window7_224",
            "levit_128s", "mobilevit_xxs", "poolformer_s12", "resmlp_12_224", "convit_tiny", "pit_ti_224",
            "efficientformer_l1", "fastvit_t8", "coat_lite_tiny"]
TV_CNN = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
          "efficientnet_b0", "regnet_y_400mf", "regnet_x_400mf", "shufflenet_v2_x1_0", "squeezenet1_1",
          "densenet121", "mnasnet0_5", "googlenet", "alexnet", "convnext_tiny", "inception_v3"]
TV_VIT = ["vit_b_16", "swin_t"]
HF_FORWARD = ["gpt2", "bert", "llama", "t5", "vit", "llama_cache", "mistral", "qwen2", "phi", "gemma", "opt",
              "distilbert", "roberta", "bart"]
HF_GENERATE = ["gpt2", "llama_cache"]

MODELS = {}
MODELS.update({f"timm/{n}": ("timm", "cnn", n) for n in TIMM_CNN})
MODELS.update({f"timm/{n}": ("timm", "vit", n) for n in TIMM_VIT})
MODELS.update({f"tv/{n}": ("tv", "cnn", n) for n in TV_CNN})
MODELS.update({f"tv/{n}": ("tv", "vit", n) for n in TV_VIT})
MODELS["tv/fasterrcnn_mobilenet_v3_large_320_fpn"] = ("tv", "det", "fasterrcnn_mobilenet_v3_large_320_fpn")
MODELS.update({f"hf/{n}": ("hf", "text", n) for n in HF_FORWARD})
MODELS.update({f"hf/{n}.generate": ("hf-gen", "text", n) for n in HF_GENERATE})

GEN_TOKENS = 16  # the tiny configs hold 32 positions: 8 prompt + 16 new tokens


def build(name):
    """(model, call): call(model) runs one inference as a user would."""
    import torch
    group, kind, arg = MODELS[name]
    torch.manual_seed(0)
    if group == "timm":
        import timm
        model = timm.create_model(arg, pretrained=False).eval()
        size = model.pretrained_cfg.get("input_size", (3, 224, 224))
        x = torch.randn(1, *size)
        return model, lambda m: m(x)
    if group == "tv":
        import torchvision
        extra = {"aux_logits": False, "init_weights": True} if arg in ("inception_v3", "googlenet") else {}
        if kind == "det":
            extra["weights_backbone"] = None  # its default downloads ImageNet weights
        model = torchvision.models.get_model(arg, weights=None, **extra).eval()
        if kind == "det":
            imgs = [torch.rand(3, 320, 320)]
            return model, lambda m: m(imgs)
        x = torch.randn(1, 3, 299 if arg == "inception_v3" else 224, 299 if arg == "inception_v3" else 224)
        return model, lambda m: m(x)
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import hf_zoo
    if arg in hf_zoo.MODELS:
        model, inputs = hf_zoo.build(arg)
    elif arg in hf_zoo.CACHED_MODELS:
        model, inputs = hf_zoo.CACHED_MODELS[arg]()
    else:
        model, inputs = hf_zoo.build_wide(arg)
    if group == "hf-gen":
        ids = inputs["input_ids"][:1]
        model.generation_config.pad_token_id = 0
        return model, lambda m: m.generate(ids, max_new_tokens=GEN_TOKENS, do_sample=False, min_new_tokens=GEN_TOKENS)
    return model, lambda m: m(**inputs)


def tensors(out):
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if hasattr(out, "layers"):  # a transformers Cache
        return [t for layer in out.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if isinstance(t, torch.Tensor)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in tensors(out[k])]
    if isinstance(out, (tuple, list)):
        return [t for item in out if item is not None for t in tensors(item)]
    return []


def error(got, want):
    """The largest error relative to max(1, max|eager|) over the outputs (inf: outputs differ in
    number, shape or dtype; exact comparison for integer outputs such as generated tokens)."""
    import torch
    g, w = tensors(got), tensors(want)
    if len(g) != len(w) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(g, w)):
        return math.inf
    worst = 0.0
    for a, b in zip(g, w):
        if not b.is_floating_point():
            if not torch.equal(a, b):
                return math.inf
            continue
        if b.numel():
            scale = max(1.0, b.abs().max().item())
            worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def child(name, rounds):
    import torch
    torch.set_num_threads(2)
    import torch._dynamo  # noqa: F401 - imported before any timing
    import fastdyn
    model, call = build(name)
    res = {}
    with torch.no_grad():
        want = call(model)  # warm-up and reference

        fastdyn.reset()
        before = fastdyn.stats()
        fastdyn.enable()
        try:
            t = time.perf_counter()
            call(model)
            res["fastdyn_first_s"] = time.perf_counter() - t
            after = fastdyn.stats()
            fastdyn.synchronize()
            res["fastdyn_err"] = error(call(model), want)
        finally:
            fastdyn.disable()
        res["fastdyn_graphs"] = after["graphs"] - before["graphs"]
        res["fastdyn_breaks"] = after["graph_breaks"] - before["graph_breaks"]
        res["fastdyn_compile_s"] = after["compile_seconds"] - before["compile_seconds"]

        if MODELS[name][0] == "hf-gen":
            # What Dynamo's count is (explain_counts): the graphs of the forward that generate() calls,
            # here under fastdyn.jit as there under torch.compile. The row shows both counts.
            import copy
            fastdyn.reset()
            before = fastdyn.stats()
            m = copy.copy(model)
            m.forward = fastdyn.jit(model.forward)
            call(m)
            res["fastdyn_forward_graphs"] = fastdyn.stats()["graphs"] - before["graphs"]
            fastdyn.reset()

        dyn = explain_counts(name, model, call)
        res.update(dyn)

        compiled = compile_inductor(name, model)
        t = time.perf_counter()
        got = call(compiled)
        res["inductor_first_s"] = time.perf_counter() - t
        res["inductor_err"] = error(got, want)

        def eager():
            return call(model)

        def fd():
            fastdyn.enable()
            try:
                return call(model)
            finally:
                fastdyn.disable()

        def ind():
            return call(compiled)

        modes = {"eager": eager, "fastdyn": fd, "inductor": ind}
        for f in modes.values():  # warm: allocator, lazily made objects
            f()
        per = {m: [] for m in modes}
        for _ in range(rounds):
            for m, f in modes.items():
                n, t0 = 0, time.perf_counter()
                while True:
                    f()
                    n += 1
                    el = time.perf_counter() - t0
                    if el > 0.2 or n >= 50:
                        break
                per[m].append(el / n)
        for m, v in per.items():
            res[f"{m}_ms"] = 1e3 * sorted(v)[len(v) // 2]
    return res


def compile_inductor(name, model):
    import torch
    if MODELS[name][0] == "hf-gen":
        # generate()'s loop stays Python (as torch.compile users write it): the forward compiles.
        import copy
        m = copy.copy(model)
        m.forward = torch.compile(model.forward)
        return m
    return torch.compile(model)


def explain_counts(name, model, call):
    """Dynamo's graphs and breaks for one call (torch._dynamo.explain of the model's forward;
    for generate(), of the forward that generate() calls)."""
    import torch
    import copy
    counts = {"graphs": 0, "breaks": 0}

    def counting_backend(gm, example_inputs):
        counts["graphs"] += 1
        return gm.forward

    torch._dynamo.reset()
    if MODELS[name][0] == "hf-gen":
        m = copy.copy(model)
        m.forward = torch._dynamo.optimize(counting_backend)(model.forward)
        call(m)
        # Dynamo compiles per recompile; breaks are counted from its explain of one forward below.
        out = {"dynamo_graphs": counts["graphs"], "dynamo_breaks": None}
        torch._dynamo.reset()
        return out
    rep = torch._dynamo.explain(lambda: call(model))()
    torch._dynamo.reset()
    return {"dynamo_graphs": rep.graph_count, "dynamo_breaks": rep.graph_break_count}


def run_child(name, args):
    env = dict(os.environ, FASTDYN_CACHE_DIR=tempfile.mkdtemp(prefix="fd_suite_"),
               TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="ind_suite_"), OMP_NUM_THREADS="2",
               FASTDYN_LOG="graph_breaks")
    if os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".suite", "venv")):
        env["PYTHONPATH"] = SUITE_PKG + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--rounds", str(args.rounds)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {args.timeout} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        tail = [l for l in (p.stderr or p.stdout).strip().splitlines() if l.strip()][-2:]
        return {"error": f"exit {p.returncode}: " + " | ".join(tail)[:300]}
    res = json.loads(lines[-1][len("RESULT "):])
    reasons = collections.Counter(re.sub(r" at 0x[0-9a-f]+", "", m.group("reason"))  # one reason, whatever the object
                                  for m in map(BREAK_LINE.search, p.stderr.splitlines()) if m)
    res["break_reasons"] = reasons.most_common(5)
    return res


# A FASTDYN_LOG=graph_breaks line (the same pattern as bench/models_explain.py).
BREAK_LINE = re.compile(r"\[fastdyn\] graph_break: .*? at \S+?:\d+: (?P<reason>.*)$")


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated model names (as printed)")
    ap.add_argument("--group", choices=["timm", "tv", "hf"], help="one group only")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--jobs", type=int, default=1,
                    help="models run side by side (each process uses 2 threads; for a many-core machine)")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "model_suite.json"))
    ap.add_argument("--table", action="store_true", help="print the table of the --json results; run nothing")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.rounds)), flush=True)
        return 0
    if args.table:
        with open(args.json) as f:
            results = json.load(f)
        print(HEADER)
        for name, r in results.items():
            print(row(name, r))
        print()
        print(summary(results))
        return 0
    names = list(MODELS)
    if args.only:
        names = [n for n in args.only.split(",")]
    elif args.group:
        names = [n for n in names if MODELS[n][0].split("-")[0] == args.group]
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    results = {}
    if os.path.exists(args.json):
        with open(args.json) as f:
            results = json.load(f)
    print(HEADER)
    lock = threading.Lock()

    def one(name):
        r = run_child(name, args)
        with lock:
            results[name] = r
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
            print(row(name, r), flush=True)

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(one, names))
    reasons = collections.Counter()
    for n in names:
        for reason, count in results.get(n, {}).get("break_reasons", []):
            reasons[reason] += count
    if reasons:
        print("\nfastdyn's most frequent break reasons (first call, all models):")
        for reason, count in reasons.most_common(15):
            print(f"  {count:4d}  {reason}")
    print()
    print(summary({n: results[n] for n in names if n in results}))
    return 0


HEADER = ("| model | kind | equal (fastdyn err / inductor err) | fastdyn graphs / breaks | dynamo graphs / breaks | "
          "eager ms | fastdyn x | inductor x | fastdyn first call s | inductor first call s |\n"
          "|---|---|---|---|---|---:|---:|---:|---:|---:|")


def row(name, r):
    kind = MODELS[name][1]
    if "error" in r:
        return f"| {name} | {kind} | error: {r['error']} | | | | | | | |"
    eq = "yes" if r["fastdyn_err"] <= 1e-3 else "**no**"
    db = "-" if r["dynamo_breaks"] is None else r["dynamo_breaks"]
    graphs = f"{r['fastdyn_graphs']} / {r['fastdyn_breaks']}"
    if "fastdyn_forward_graphs" in r:
        graphs = f"{r['fastdyn_forward_graphs']} (forward; generate() whole: {graphs})"
    return (f"| {name} | {kind} | {eq} ({r['fastdyn_err']:.1e} / {r['inductor_err']:.1e}) | "
            f"{graphs} | {r['dynamo_graphs']} / {db} | {r['eager_ms']:.2f} | "
            f"{r['eager_ms'] / r['fastdyn_ms']:.2f} | {r['eager_ms'] / r['inductor_ms']:.2f} | "
            f"{r['fastdyn_first_s']:.2f} | {r['inductor_first_s']:.1f} |")


def summary(results):
    ok = {n: r for n, r in results.items() if "error" not in r}
    lines = [f"models: {len(results)}, ran: {len(ok)}, errors: {len(results) - len(ok)}"]
    lines.append(f"equal to eager: {sum(r['fastdyn_err'] <= 1e-3 for r in ok.values())}/{len(ok)}")
    # Like for like: for generate(), the forward's graphs (Dynamo's count is the forward's).
    graphs = {n: r.get("fastdyn_forward_graphs", r["fastdyn_graphs"]) for n, r in ok.items()}
    above = [n for n, r in ok.items() if graphs[n] > r["dynamo_graphs"]]
    lines.append(f"graphs: fastdyn {sum(graphs.values())}, dynamo "
                 f"{sum(r['dynamo_graphs'] for r in ok.values())}; models above dynamo: {len(above)} ({', '.join(above)})")
    for label, sel in (("all", ok), ("cnn", {n: r for n, r in ok.items() if MODELS[n][1] == "cnn"})):
        if not sel:
            continue
        fd = geomean([r["eager_ms"] / r["fastdyn_ms"] for r in sel.values()])
        ind = geomean([r["eager_ms"] / r["inductor_ms"] for r in sel.values()])
        lines.append(f"geomean speed-up over eager ({label}, {len(sel)}): fastdyn {fd:.2f}x, inductor {ind:.2f}x")
    below = [n for n, r in ok.items() if r["eager_ms"] / r["fastdyn_ms"] < 1.0]
    lines.append(f"fastdyn below 1.0x eager: {len(below)} ({', '.join(below)})")
    ratio = geomean([r["inductor_first_s"] / r["fastdyn_first_s"] for r in ok.values()])
    lines.append(f"first call: inductor / fastdyn geomean {ratio:.0f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
