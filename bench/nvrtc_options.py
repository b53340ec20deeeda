#!/usr/bin/env python3
"""What NVRTC's options cost and give, per kernel (issue 20's compile-time target: a median compile
per kernel of at most 10 ms).

    python3 bench/nvrtc_options.py [--out DIR] [--variants "A;B;..."]

On a GPU machine: compiles the kernels of bench/gpu_kernels.py's cases and of a tiny Llama's
decode step (bench/gpu_decode.py's model, static cache) through fastdyn, then compiles every one
of those kernel sources again, one at a time on this thread, to a CUBIN with the backend's own
options plus each variant's (runtime/cuda/cuda_api.h: nvrtc_options), and prints per variant the
median, mean and 90th percentile per kernel. The kernels' speed under a variant is
bench/gpu_kernels.py's job: run it with FASTDYN_NVRTC_OPTIONS set to the variant.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

os.environ.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fastdyn-nvrtc-"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fastdyn  # noqa: E402

DEFAULT_VARIANTS = ";--Ofast-compile=min;--Ofast-compile=mid;--Ofast-compile=max;--ptxas-options=-O1"


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="';'-separated option sets (words split on spaces)")
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
          f"(several at once: wall time per kernel is higher than below)\n")
    rows = []
    print("| extra options | kernels | median ms | mean ms | p90 ms | to PTX, median ms |\n|---|---:|---:|---:|---:|---:|")
    for variant in opts.variants.split(";"):
        extra = variant.split()
        try:
            t = fastdyn._C.cuda_route_timings(extra)
        except Exception as e:  # noqa: BLE001 - an option this NVRTC refuses
            print(f"| {variant or '(none)'} | refused: {str(e).splitlines()[0]} |")
            continue
        cubin = sorted(r[0] for r in t)
        ptx = [r[1] for r in t]
        row = {"variant": variant, "kernels": len(cubin), "median": statistics.median(cubin), "mean": statistics.mean(cubin),
               "p90": cubin[int(0.9 * (len(cubin) - 1))], "ptx_median": statistics.median(ptx), "each": cubin}
        rows.append(row)
        print(f"| {variant or '(none)'} | {row['kernels']} | {row['median']:.1f} | {row['mean']:.1f} | {row['p90']:.1f} | "
              f"{row['ptx_median']:.1f} |", flush=True)
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "nvrtc_options.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
