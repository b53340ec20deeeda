#!/usr/bin/env python3
"""What one NVRTC compile per kernel costs, cold, and what NVRTC's options and a batched program
change (issue 20's compile-time target: a median compile per kernel of at most 10 ms).

    python3 bench/nvrtc_options.py [--out DIR] [--variants "A;B;..."] [--rounds N]

On a GPU machine: compiles the kernels of bench/gpu_kernels.py's cases and of a tiny Llama's
decode step (bench/gpu_decode.py's model, static cache) through fastdyn, then compiles every one
of those kernel sources again on this thread, to a CUBIN with the backend's own options
(runtime/cuda/cuda_api.h: nvrtc_options) plus each variant's, variants interleaved kernel by
kernel over --rounds rounds, and prints per variant the median, mean and 90th percentile per kernel.

Cold means cold: NVRTC 12.9 and later keep a cache of their own (a source compiled again with the
same options skips most of the work: about 11 ms instead of about 100 on an H200 host), so every
timed compile here gets a source no compile of this process saw (a unique unused global appended)
and `--no-cache` where NVRTC takes it; the driver's JIT cache is off (CUDA_CACHE_DISABLE) for the
PTX route. The kernels' speed under a variant is bench/gpu_kernels.py's job: run it with
FASTDYN_NVRTC_OPTIONS set to the variant and a fresh FASTDYN_CACHE_DIR.
"""
import argparse
import csv
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fastdyn-nvrtc-"))
os.environ["CUDA_CACHE_DISABLE"] = "1"  # the driver's PTX JIT cache (route 2's timing)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fastdyn  # noqa: E402

DEFAULT_VARIANTS = ";--Ofast-compile=min;-Xptxas=-O2;-Xptxas=-O1"
KERNEL_HEAD = 'extern "C" __global__'
_unique = itertools.count()
_RUN = os.urandom(4).hex()  # NVRTC's cache outlives the process


def decode_kernels():
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=8192, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).cuda().eval()
    model.forward = fastdyn.jit(model.forward)
    ids = torch.randint(0, 8192, (1, 16), device="cuda")
    with torch.no_grad():
        for _ in range(2):
            model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0,
                           disable_compile=True, cache_implementation="static")
            fastdyn.synchronize()


def fresh(source):
    """`source` made new to NVRTC's cache: one unused global of a name no compile here used."""
    return f"{source}\nextern \"C\" __device__ int fd_measure_{_RUN}_{next(_unique)} = 1;\n"


def arch():
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def timed_compile(source, extra, cubin=True):
    """(milliseconds, image) of one NVRTC compile of `source` as it is, the backend's options then `extra`."""
    t0 = time.perf_counter()
    image = fastdyn._C.cuda_nvrtc_compile(source, arch(), cubin, extra)
    return (time.perf_counter() - t0) * 1e3, image


def compile_ms(source, extra, cubin=True):
    return timed_compile(fresh(source), extra, cubin)[0]


def nvjitlink_ms(sources, no_cache):
    """Per kernel: NVRTC's PTX (the backend's options, cold) assembled to a CUBIN by nvJitLink,
    timed; empty when libnvJitLink is not found (the nvidia-nvjitlink wheel, or beside NVRTC)."""
    import ctypes
    import glob
    nvrtc_dir = os.path.dirname(fastdyn._C.cuda_info()["nvrtc_origin"].split()[0])
    found = [p for d in sys.path for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvJitLink.so*"))]
    found += glob.glob(os.path.join(nvrtc_dir, "libnvJitLink.so*"))
    if not found:
        return []
    link = ctypes.CDLL(found[0])
    out = []
    for src in sources:
        ptx = timed_compile(fresh(src), no_cache, cubin=False)[1]
        handle = ctypes.c_void_p()
        opts = (ctypes.c_char_p * 1)(f"-arch=sm_{arch()}".encode())
        t0 = time.perf_counter()
        ok = (link.nvJitLinkCreate(ctypes.byref(handle), 1, opts) == 0 and
              link.nvJitLinkAddData(handle, 2, ptx, ctypes.c_size_t(len(ptx)), b"k.ptx") == 0 and  # 2: PTX
              link.nvJitLinkComplete(handle) == 0)
        ms = (time.perf_counter() - t0) * 1e3
        link.nvJitLinkDestroy(ctypes.byref(handle))
        if not ok:
            return []
        out.append(ms)
    return out


def summary(times):
    times = sorted(times)
    return {"kernels": len(times), "median": statistics.median(times), "mean": statistics.mean(times),
            "p90": times[int(0.9 * (len(times) - 1))]}


def batched(sources):
    """One program holding every kernel of `sources` (one prelude, symbols renamed)."""
    head = sources[0][:sources[0].index(KERNEL_HEAD)]
    bodies = [s[s.index(KERNEL_HEAD):].replace("fastdyn_kernel(", f"fastdyn_kernel_{i}(", 1) for i, s in enumerate(sources)]
    return head + "\n".join(bodies)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="';'-separated option sets (words split on spaces)")
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    import gpu_kernels
    with torch.no_grad():
        for name, entry in gpu_kernels.cases().items():
            fn, args = entry() if callable(entry) and not isinstance(entry, tuple) else entry
            fastdyn.jit(fn)(*args)
            fastdyn.synchronize()
    decode_kernels()
    info = fastdyn._C.cuda_info()
    print(f"# NVRTC {info['nvrtc_version']} on {torch.cuda.get_device_name()}; backend options {fastdyn._C.cuda_nvrtc_options()}")
    print(f"kernels compiled by the runs above: {info['kernels_compiled']}, NVRTC {info['compile_ms']:.0f} ms in all "
          f"(several at once, on background threads)\n")
    sources = list(dict.fromkeys(s for s, _ in fastdyn._C.cuda_compiled_sources()))
    empty = f"{KERNEL_HEAD} void fastdyn_kernel() {{}}\n"
    prelude = sources[0][:sources[0].index(KERNEL_HEAD)] + empty
    no_cache = []
    try:
        timed_compile(empty, ["--no-cache"])
        no_cache = ["--no-cache"]
    except Exception:  # noqa: BLE001 - an NVRTC without its own cache, or without the option
        pass
    results = {"nvrtc": info["nvrtc_version"], "no_cache_option": bool(no_cache)}

    # NVRTC's own cache: the same source twice, with the backend's options alone.
    probe = fresh(sources[0])
    first = timed_compile(probe, [])[0]
    again = timed_compile(probe, [])[0]
    results["nvrtc_cache"] = {"first_ms": first, "again_ms": again}
    print(f"NVRTC's own cache: one kernel {first:.1f} ms, the same source again {again:.1f} ms "
          f"(`--no-cache` {'taken' if no_cache else 'refused'}); every time below is a cold compile\n")

    variants = [v.split() for v in opts.variants.split(";")]
    each = {i: [] for i in range(len(variants))}
    probes = {"empty kernel": empty, "prelude + empty kernel": prelude}
    probe_ms = {k: [] for k in probes}
    for _ in range(opts.rounds):
        for k, src in probes.items():
            probe_ms[k].append(compile_ms(src, no_cache))
        for src in sources:
            for i, v in enumerate(variants):
                try:
                    each[i].append(compile_ms(src, no_cache + v))
                except Exception as e:  # noqa: BLE001 - an option this NVRTC refuses
                    each[i] = str(e).splitlines()[0]
    print(f"{len(sources)} kernel sources, {opts.rounds} rounds, variants interleaved kernel by kernel\n")
    print("| extra options | compiles | median ms | mean ms | p90 ms |\n|---|---:|---:|---:|---:|")
    results["variants"] = []
    for i, v in enumerate(variants):
        name = " ".join(v) or "(none: the backend's options)"
        if isinstance(each[i], str):
            print(f"| {name} | refused: {each[i]} |")
            continue
        row = summary(each[i]) | {"variant": " ".join(v), "each": each[i]}
        results["variants"].append(row)
        print(f"| {name} | {row['kernels']} | {row['median']:.1f} | {row['mean']:.1f} | {row['p90']:.1f} |", flush=True)
    for k, t in probe_ms.items():
        print(f"| {k} | {len(t)} | {statistics.median(t):.1f} | {statistics.mean(t):.1f} | |")
    results["probes"] = probe_ms

    # Where a cold compile's time goes: NVRTC's own phase timer.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "phases.csv")
        for src in sources:
            compile_ms(src, no_cache + [f"--time={path}"])
        phases = {}
        try:
            with open(path) as f:
                for row in csv.reader(f, skipinitialspace=True):
                    if len(row) >= 3 and row[2].replace(".", "").isdigit():
                        phases.setdefault(row[1], []).append(float(row[2]))
        except OSError:
            pass
    results["phases"] = phases
    print("\nphases (NVRTC --time, median ms per kernel): " +
          ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in phases.items()))

    # Route 2's floor: the PTX NVRTC gives, assembled by the driver (its JIT cache off).
    ptx = [compile_ms(src, no_cache, cubin=False) for src in sources]
    routes = fastdyn._C.cuda_route_timings(no_cache)
    load_ptx = [r[2] for r in routes]
    print(f"to PTX only: median {statistics.median(ptx):.1f} ms; the driver's assembly of that PTX (route 2's back "
          f"half, its JIT cache off): median {statistics.median(load_ptx):.1f} ms; a CUBIN's load "
          f"{statistics.median(r[3] for r in routes):.2f} ms")
    results["to_ptx"] = ptx
    results["driver_ptx_load"] = load_ptx

    # Route 2's back half through nvJitLink: NVRTC's PTX of each kernel assembled to a CUBIN.
    link = nvjitlink_ms(sources, no_cache)
    if link:
        print(f"nvJitLink, PTX to CUBIN: median {statistics.median(link):.1f} ms, mean {statistics.mean(link):.1f} ms")
        results["nvjitlink_ptx_to_cubin"] = link
    else:
        print("nvJitLink: not found next to NVRTC or in the nvidia wheels")

    # One program for many kernels: NVRTC's fixed cost per program paid once.
    for n in (4, len(sources)):
        groups = [sources[i:i + n] for i in range(0, len(sources), n)]
        per = [compile_ms(batched(g), no_cache) / len(g) for g in groups]
        print(f"batched {n} kernels per program: {statistics.median(per):.1f} ms per kernel (median over {len(groups)} programs)")
        results[f"batched_{n}"] = per

    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "nvrtc_options.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
