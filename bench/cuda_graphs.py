#!/usr/bin/env python3
"""mode="reduce-overhead" on a GPU: eager, fastdyn (default and reduce-overhead) and torch.compile
(default and reduce-overhead) on launch-bound cases, interleaved in one process.

    python3 bench/cuda_graphs.py --out DIR [--quick]

Per case and mode: the steady-state time per call (wall clock over batches of calls, then one
synchronize: what a program issuing these calls waits for, launch overhead included; median of
interleaved batches), every output compared with eager's, and the GPU memory the mode holds after
its warm-up and capture beyond what eager's call needs (torch.cuda.memory_reserved() after the
mode's first calls, from an emptied cache, minus eager's peak reservation for one call).
Writes DIR/cuda_graphs.md and DIR/cuda_graphs.json. --quick skips torch.compile.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

os.environ.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fastdyn-cudagraph-bench-"))
import fastdyn  # noqa: E402


def gpt2_decode_step():
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_embd=768, n_head=12, vocab_size=8192, n_positions=1024)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 8192, (1, 4), device="cuda")
    return (lambda ids: model(ids, use_cache=False).logits), (ids,)


def small_mlp():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256),
                            torch.nn.LayerNorm(256), torch.nn.Linear(256, 256), torch.nn.SiLU()).cuda().eval()
    return (lambda x: m(x)), (torch.randn(8, 256, device="cuda"),)


def norm_chain():
    w, b = torch.randn(512, device="cuda"), torch.randn(512, device="cuda")

    def f(x):
        for _ in range(4):
            x = F.gelu(F.layer_norm(x, (512,), w, b)) + x
        return x
    return f, (torch.randn(16, 512, device="cuda"),)


CASES = {"gpt2_decode_step": gpt2_decode_step, "small_mlp": small_mlp, "norm_chain": norm_chain}


def close(a, b):
    return torch.allclose(a.float(), b.float(), rtol=2e-3, atol=2e-3)


def batch_s(fn, args, reps):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batches", type=int, default=15)
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    fastdyn.set_background_compile(False)  # steady state is what is measured; first calls aside
    modes = ["eager", "fastdyn", "fastdyn_ro"] + ([] if opts.quick else ["inductor", "inductor_ro"])
    rows = []
    with torch.no_grad():
        for name, make in CASES.items():
            fn, args = make()
            torch._dynamo.reset()
            fastdyn.reset()
            want = fn(*args)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_reserved()
            fn(*args)
            eager_extra = torch.cuda.max_memory_reserved() - base
            make_runner = {
                "eager": lambda: fn,
                "fastdyn": lambda: fastdyn.jit(fn),
                "fastdyn_ro": lambda: fastdyn.jit(fn, mode="reduce-overhead"),
                "inductor": lambda: torch.compile(fn),
                "inductor_ro": lambda: torch.compile(fn, mode="reduce-overhead"),
            }
            runners, row = {}, {"case": name}
            for m in modes:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                before = torch.cuda.memory_reserved()
                runners[m] = make_runner[m]()
                # Warm-up and capture, each output checked before the next call (inductor's
                # reduce-overhead outputs are overwritten by its next replay).
                row[m + "_correct"] = all([close(runners[m](*args), want) for _ in range(5)])
                torch.cuda.synchronize()
                row[m + "_mem_mb"] = (torch.cuda.memory_reserved() - before - eager_extra) / 2**20
            reps = {m: max(5, min(2000, int(0.02 / max(batch_s(runners[m], args, 5), 1e-6)))) for m in modes}
            samples = {m: [] for m in modes}
            for _ in range(opts.batches):
                for m in modes:
                    samples[m].append(batch_s(runners[m], args, reps[m]))
            for m in modes:
                row[m + "_us"] = statistics.median(samples[m]) * 1e6
                row[m + "_speedup"] = row["eager_us"] / row[m + "_us"]
            row["graphs"] = fastdyn.stats()["cuda_graph_captures"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    device = torch.cuda.get_device_name()
    with open(os.path.join(opts.out, "cuda_graphs.json"), "w") as f:
        json.dump({"device": device, "torch": torch.__version__, "rows": rows}, f, indent=1)
    head = "| case | " + " | ".join(f"{m} us (x)" for m in modes) + " | extra MB vs eager: " + ", ".join(modes[1:]) + " | correct |"
    lines = [f"# reduce-overhead on {device} (torch {torch.__version__})", "", head, "|" + "---|" * (len(modes) + 3)]
    for r in rows:
        cells = " | ".join(f"{r[m + '_us']:.1f} ({r[m + '_speedup']:.2f})" for m in modes)
        mem = ", ".join(f"{r[m + '_mem_mb']:.1f}" for m in modes[1:])
        ok = "yes" if all(r[m + "_correct"] for m in modes) else "NO"
        lines.append(f"| {r['case']} | {cells} | {mem} | {ok} |")
    with open(os.path.join(opts.out, "cuda_graphs.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
