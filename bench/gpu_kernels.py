#!/usr/bin/env python3
"""GPU benchmark: eager, torch.compile (inductor) and fastdyn's cuda backend on the same cases, in
one process, on the accelerator machine (scripts/device_test.sh runs it).

    python3 bench/gpu_kernels.py --out DIR [--cases softmax,layer_norm] [--quick] [--ro]

Per case and mode: the first call (compilation included; fastdyn's first calls run on ATen while
its kernels compile in the background, so "ready" is the time until its kernels run), and the
steady-state time per call (median of CUDA-event timed batches after warm-up). The modes' steady
states are measured interleaved, batch after batch, so that they see the same GPU clocks.
Every mode's output is compared with eager's. Also: NVRTC's compile time per kernel and the two
compile routes of issue 20 timed on the same kernels (codegen/cuda/backend.h's cuda_route_timings);
the roofline (the fused pointwise chain's bytes per second against a device-to-device copy_ of the
same size, in the same run); and the host time per call of a launch-bound graph (chain_16: one
kernel), against eager's per op. --ro adds both modes' mode="reduce-overhead" (CUDA graphs).
FASTDYN_CACHE_DIR set to a directory of an earlier run gives warm-cache first calls (default: a
cold cache). Writes DIR/cuda.md and DIR/cuda.json.
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

os.environ.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fastdyn-cuda-bench-"))  # a cold kernel cache
import fastdyn  # noqa: E402


def gpt2(n_layer=2):
    import transformers
    cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=768, n_head=12, vocab_size=8192, n_positions=1024)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 8192, (8, 256), device="cuda")
    return (lambda ids: model(ids, use_cache=False).logits), (ids,)


def mlp_2layer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda().eval()
    return (lambda x: model(x)), (torch.randn(4096, 1024, device="cuda"),)


def attention():
    q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda") for _ in range(3))
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), (q, k, v)


def cases():
    d = "cuda"
    big = torch.randn(8192, 4096, device=d)
    w = torch.randn(4096, device=d)
    b = torch.randn(4096, device=d)
    return {
        "chain_16": (lambda x: (x * 2 + 1).relu(), (torch.randn(16, device=d),)),  # launch-bound: 3 ops on 16 elements
        "pointwise_chain": (lambda x: ((x * 1.5 + 0.25).sigmoid() * x).tanh() + 1, (torch.randn(1 << 24, device=d),)),
        "bias_gelu": (lambda x, b: F.gelu(x + b), (big, b)),
        "bias_gelu_bf16": (lambda x, b: F.gelu(x + b), (big.bfloat16(), b.bfloat16())),
        "softmax": (lambda x: torch.softmax(x, -1), (big,)),
        "softmax_bf16": (lambda x: torch.softmax(x, -1), (big.bfloat16(),)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (4096,), w, b), (big, w, b)),
        "ln_softmax": (lambda x, w, b: torch.softmax(F.layer_norm(x, (4096,), w, b), -1), (big, w, b)),
        "ln_softmax_bf16": (lambda x, w, b: torch.softmax(F.layer_norm(x, (4096,), w, b), -1),
                            (big.bfloat16(), w.bfloat16(), b.bfloat16())),
        "rms_norm_bf16": (lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w,
                          (big.bfloat16(), w.bfloat16())),
        "row_sum": (lambda x: x.sum(-1), (big,)),
        # Sums over dim 0 (a bias's gradient; a layer norm weight's, its pointwise work fused).
        "column_sum": (lambda x: x.sum(0), (big,)),
        "ln_weight_grad": (lambda g, x: (g * x).sum(0), (big, big.flip(0))),
        "sum_all": (lambda x: (x * x).sum(), (big,)),
        "mlp_epilogue": (lambda x, w1, b1: F.silu(x @ w1 + b1) * 2,
                         (torch.randn(4096, 1024, device=d), torch.randn(1024, 4096, device=d), torch.randn(4096, device=d))),
        "mlp_2layer": mlp_2layer,
        "attention": attention,
        "gpt2_2layer": gpt2,
    }


def sync():
    torch.cuda.synchronize()


def first_call(fn, args):
    sync()
    t0 = time.perf_counter()
    out = fn(*args)
    sync()
    return out, time.perf_counter() - t0


def batch_ms(fn, args, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def host_us(fn, args, n=2000):
    for _ in range(50):
        fn(*args)
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        sync()
    return best


def close(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    for x, y in zip(a, b):
        tol = 2e-2 if x.dtype in (torch.float16, torch.bfloat16) else 2e-3
        if not torch.allclose(x.float(), y.float(), rtol=tol, atol=tol):
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--cases", default="")
    ap.add_argument("--quick", action="store_true", help="skip inductor")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--ro", action="store_true", help="add fastdyn's and inductor's reduce-overhead modes")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    all_cases = cases()
    names = [c for c in opts.cases.split(",") if c] or list(all_cases)
    modes = ["eager", "fastdyn"] + ([] if opts.quick else ["inductor"])
    modes += ["fastdyn_ro"] + ([] if opts.quick else ["inductor_ro"]) if opts.ro else []
    rows = []
    with torch.no_grad():
        for name in names:
            entry = all_cases[name]
            fn, args = entry() if callable(entry) and not isinstance(entry, tuple) else entry
            torch._dynamo.reset()
            fastdyn.reset()
            info0 = fastdyn._C.cuda_info()
            runners = {"eager": fn, "fastdyn": fastdyn.jit(fn), "inductor": torch.compile(fn),
                       "fastdyn_ro": fastdyn.jit(fn, mode="reduce-overhead"),
                       "inductor_ro": torch.compile(fn, mode="reduce-overhead")}
            row = {"case": name}
            want, row["eager_first_s"] = first_call(fn, args)
            for m in modes[1:]:
                out, row[m + "_first_s"] = first_call(runners[m], args)
                row[m + "_correct"] = close(out, want)
                if m == "fastdyn_ro":
                    fastdyn.synchronize()  # its kernels (capture waits for them)
                if m == "fastdyn":
                    t0 = time.perf_counter()
                    fastdyn.synchronize()
                    row["fastdyn_ready_s"] = row["fastdyn_first_s"] + time.perf_counter() - t0
                    out = runners[m](*args)
                    row["fastdyn_correct"] = row["fastdyn_correct"] and close(out, want)
                    report = fastdyn.explain(fn, *args)
                    code = "\n".join(report.code)
                    row["fastdyn_backend"] = code.split("\n", 1)[0]
                    row["fastdyn_kernels"] = sum(l.startswith("kernel ") for l in code.splitlines())
            info = fastdyn._C.cuda_info()
            row["nvrtc_kernels"] = info["kernels_compiled"] - info0["kernels_compiled"]
            row["nvrtc_ms"] = info["compile_ms"] - info0["compile_ms"]
            # Steady state, interleaved: warm-up, then batches of ~20 ms per mode in turn.
            reps = {}
            for m in modes:
                for _ in range(3):
                    runners[m](*args)
                sync()
                t = batch_ms(runners[m], args, 3)
                reps[m] = max(1, min(200, int(20.0 / max(t, 1e-3))))
            samples = {m: [] for m in modes}
            for _ in range(opts.batches):
                for m in modes:
                    samples[m].append(batch_ms(runners[m], args, reps[m]))
            for m in modes:
                row[m + "_ms"] = statistics.median(samples[m])
            for m in modes[1:]:
                row[m + "_speedup"] = row["eager_ms"] / row[m + "_ms"]
            if name == "chain_16":  # host time per call, launch-bound: no synchronize inside the loop
                row["host_us"] = {m: host_us(runners[m], args) for m in ("eager", "fastdyn")}
                row["host_us"]["eager_one_op"] = host_us(lambda x: x.relu(), args)
            if name == "pointwise_chain":  # the roofline: one read and one write of 16M float32
                src = args[0]
                dst = torch.empty_like(src)
                copy = statistics.median(batch_ms(lambda: dst.copy_(src), (), 50) for _ in range(opts.batches))
                row["copy_ms"] = copy
                row["roofline"] = copy / row["fastdyn_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        routes = fastdyn._C.cuda_route_timings()
    device = torch.cuda.get_device_name()
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    summary = {
        "device": device, "torch": torch.__version__, "nvrtc": fastdyn._C.cuda_info()["nvrtc_version"],
        "kernels_timed": len(routes),
        "route1_nvrtc_cubin_ms": med([r[0] for r in routes]), "nvrtc_ptx_ms": med([r[1] for r in routes]),
        "route2_driver_ptx_load_ms": med([r[2] for r in routes]), "cubin_load_ms": med([r[3] for r in routes]),
    }
    with open(os.path.join(opts.out, "cuda.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    lines = [f"# cuda backend vs eager and inductor on {device} (torch {torch.__version__}, NVRTC {summary['nvrtc']})", "",
             "| case | eager ms | fastdyn ms | inductor ms | fastdyn x | inductor x | fastdyn first s / ready s | inductor first s | kernels | NVRTC ms (kernels) | correct |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| {case} | {e:.3f} | {f:.3f} | {i} | {fx:.2f} | {ix} | {ff:.3f} / {fr:.3f} | {if_} | {k} | {nm:.0f} ({nk}) | {ok} |".format(
            case=r["case"], e=r["eager_ms"], f=r["fastdyn_ms"], i=f"{r['inductor_ms']:.3f}" if "inductor_ms" in r else "-",
            fx=r["fastdyn_speedup"], ix=f"{r['inductor_speedup']:.2f}" if "inductor_speedup" in r else "-",
            ff=r["fastdyn_first_s"], fr=r["fastdyn_ready_s"], if_=f"{r['inductor_first_s']:.2f}" if "inductor_first_s" in r else "-",
            k=r.get("fastdyn_kernels", 0), nm=r["nvrtc_ms"], nk=r["nvrtc_kernels"],
            ok="yes" if all(r.get(m + "_correct", True) for m in modes[1:]) else "NO"))
    geo = lambda m: statistics.geometric_mean([r[m + "_speedup"] for r in rows if m + "_speedup" in r])
    lines += ["", "Geomean speed-up over eager: fastdyn {:.2f}x".format(geo("fastdyn")) +
              ("" if opts.quick else ", inductor {:.2f}x (fastdyn / inductor {:.2f})".format(geo("inductor"), geo("fastdyn") / geo("inductor")))]
    for m in ("fastdyn_ro", "inductor_ro"):
        if m in modes:
            lines += ["", f"{m} (CUDA graphs) speed-up over eager: " + ", ".join(
                f"{r['case']} {r[m + '_speedup']:.2f}x" + ("" if r.get(m + "_correct", True) else " (WRONG)") for r in rows)
                + f"; geomean {geo(m):.2f}x"]
    for r in rows:
        if "roofline" in r:
            lines += ["", "Roofline: the fused pointwise chain moves 2 x 64 MiB in {:.3f} ms, a device-to-device copy_ of the same "
                      "size takes {:.3f} ms: {:.0%} of copy_'s bandwidth.".format(r["fastdyn_ms"], r["copy_ms"], r["roofline"])]
        if "host_us" in r:
            h = r["host_us"]
            lines += ["", "Host time per call, chain_16 (launch-bound, no synchronize between calls, best of 5 x 2000): "
                      "fastdyn {:.1f} us (guards, one kernel launch), eager {:.1f} us (3 ops), eager's one op (x.relu()) "
                      "{:.1f} us.".format(h["fastdyn"], h["eager"], h["eager_one_op"])]
    lines += ["", "Compile routes, median per kernel over {} kernels: NVRTC to CUBIN {:.1f} ms (route 1); NVRTC to PTX {:.1f} ms, "
              "then the driver's PTX load {:.1f} ms (route 2 costs at least this load); CUBIN load {:.2f} ms.".format(
                  summary["kernels_timed"], summary["route1_nvrtc_cubin_ms"], summary["nvrtc_ptx_ms"],
                  summary["route2_driver_ptx_load_ms"], summary["cubin_load_ms"])]
    with open(os.path.join(opts.out, "cuda.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
