"""Graphs and graph breaks of the five Hugging Face models: fastdyn next to torch._dynamo.explain.

    python bench/models_explain.py [--models gpt2,bert,llama,t5,vit] [--attn default|eager|sdpa]
                                   [--no-mask] [--top 3] [--json out.json]

For each model (tests/python/hf_zoo.py: tiny config, random weights, eval, no_grad), two fresh
subprocesses (neither hook nor cache state leaks between tools or models):
  - fastdyn: one eager warm-up call, then the first call under fastdyn.enable() with
    FASTDYN_LOG=graph_breaks; reports the graphs and graph breaks that call produced
    (fastdyn.stats() deltas), fastdyn's own compile time (stats' compile_seconds), the wall time
    of the call, whether its output equals eager's (1e-5), and the break reasons from the log.
  - dynamo: one eager warm-up call (torch._dynamo imported beforehand), then
    torch._dynamo.explain(model)(**inputs); reports graph_count, graph_break_count and the wall
    time of that first call (Dynamo tracing + graph capture, no backend compile).
Prints one markdown row per model (the README table) and then fastdyn's most frequent break
reasons per model.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

BREAK_LINE = re.compile(r"\[fastdyn\] graph_break: (?P<where>.*?) at (?P<file>\S+?):(?P<line>\d+): (?P<reason>.*)$")


def _build(args):
    import torch
    import hf_zoo
    model, inputs = hf_zoo.build(args.model, None if args.attn == "default" else args.attn, not args.no_mask)
    with torch.no_grad():
        expected = model(**inputs)  # warm-up (lazy init, allocator) and the reference output
    return torch, hf_zoo, model, inputs, expected


def worker_fastdyn(args):
    torch, hf_zoo, model, inputs, expected = _build(args)
    import fastdyn
    fastdyn.reset()
    before = fastdyn.stats()
    fastdyn.enable()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model(**inputs)
        wall = time.perf_counter() - start
    finally:
        fastdyn.disable()
    after = fastdyn.stats()
    got, want = hf_zoo.output_tensors(out), hf_zoo.output_tensors(expected)
    correct = len(got) == len(want) and all(
        g.shape == w.shape and torch.allclose(g, w, rtol=1e-5, atol=1e-5) for g, w in zip(got, want))
    return {"graphs": after["graphs"] - before["graphs"],
            "breaks": after["graph_breaks"] - before["graph_breaks"],
            "compile_ms": 1000 * (after["compile_seconds"] - before["compile_seconds"]),
            "first_call_ms": 1000 * wall, "correct": correct,
            "attn": model.config._attn_implementation}


def worker_dynamo(args):
    import torch._dynamo  # noqa: F401 - imported before timing: the import is not tracing cost
    torch, _, model, inputs, _ = _build(args)
    start = time.perf_counter()
    with torch.no_grad():
        report = torch._dynamo.explain(model)(**inputs)
    wall = time.perf_counter() - start
    return {"graphs": report.graph_count, "breaks": report.graph_break_count, "first_call_ms": 1000 * wall,
            "reasons": [r.reason.splitlines()[0][:160] for r in report.break_reasons]}


def normalise_reason(reason):
    reason = re.sub(r" at 0x[0-9a-f]+", "", reason)
    return reason.replace(" (the frame runs eagerly)", "")


def run_worker(tool, model, args):
    env = dict(os.environ)
    if tool == "fastdyn":
        env["FASTDYN_LOG"] = "graph_breaks"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, "--model", model, "--attn", args.attn]
    if args.no_mask:
        cmd.append("--no-mask")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"{tool} worker exit {proc.returncode}: " + " | ".join(tail)}
    result = json.loads(lines[-1][len("RESULT "):])
    if tool == "fastdyn":
        breaks = [m.groupdict() for m in map(BREAK_LINE.match, proc.stderr.splitlines()) if m]
        result["break_log"] = breaks
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2,bert,llama,t5,vit")
    ap.add_argument("--attn", default="default", choices=["default", "eager", "sdpa"])
    ap.add_argument("--no-mask", action="store_true", help="text models without attention_mask")
    ap.add_argument("--top", type=int, default=3, help="break reasons shown per model")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--worker", choices=["fastdyn", "dynamo"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        result = (worker_fastdyn if args.worker == "fastdyn" else worker_dynamo)(args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    results = {}
    print("| model | attn | fastdyn graphs | fastdyn breaks | dynamo graphs | dynamo breaks | "
          "fastdyn compile ms | fastdyn first call ms | dynamo first call ms | fastdyn correct |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for model in args.models.split(","):
        fd, dy = run_worker("fastdyn", model, args), run_worker("dynamo", model, args)
        results[model] = {"fastdyn": fd, "dynamo": dy}

        def cell(r, key, fmt="{}"):
            return "error" if "error" in r else fmt.format(r[key])
        print(f"| {model} | {fd.get('attn', args.attn)} | {cell(fd, 'graphs')} | {cell(fd, 'breaks')} | "
              f"{cell(dy, 'graphs')} | {cell(dy, 'breaks')} | {cell(fd, 'compile_ms', '{:.1f}')} | "
              f"{cell(fd, 'first_call_ms', '{:.0f}')} | {cell(dy, 'first_call_ms', '{:.0f}')} | "
              f"{cell(fd, 'correct')} |", flush=True)
    print()
    for model, r in results.items():
        for tool in ("fastdyn", "dynamo"):
            if "error" in r[tool]:
                print(f"{model}: {r[tool]['error']}")
        log = r["fastdyn"].get("break_log", [])
        if not log:
            continue
        counts = collections.Counter(normalise_reason(b["reason"]) for b in log)
        first_site = {}
        for b in log:
            first_site.setdefault(normalise_reason(b["reason"]), f"{b['where']} ({os.path.basename(b['file'])}:{b['line']})")
        print(f"{model}: top fastdyn break reasons ({len(log)} logged):")
        for reason, n in counts.most_common(args.top):
            print(f"  {n:3d} x {reason}  e.g. {first_site[reason]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
